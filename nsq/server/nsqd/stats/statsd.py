"""Pushing nsqd's stats to statsd over UDP (``--statsd-*``).

https://nsq.io/components/nsqd.html#statsd--graphite-integration; behaviour of Go nsqd v1.2.1's
``nsqd/statsd.go`` with ``internal/statsd`` (the text format) and
``internal/writers`` (packet batching and spreading):

* Every ``--statsd-interval`` (first push one interval after start) nsqd
  opens a UDP socket to ``--statsd-address``, builds one line per metric,
  ``<prefix><name>:<value>|c`` (counter) or ``|g`` (gauge), each ending in
  ``\\n``, and packs consecutive lines into datagrams of at most
  ``--statsd-udp-packet-size`` bytes (a single longer line goes alone).
  The datagrams are spread evenly over ``interval - 1s`` (all at once for
  intervals up to 1s); on shutdown the rest go out at once.
* The prefix is ``--statsd-prefix`` with ``%s`` replaced by the host key
  ``<broadcast-address>_<broadcast-http-port>`` ('.' and ':' replaced by
  '_'), and a '.' appended if missing (:func:`resolve_prefix`); an empty
  prefix sends bare names.
* Metrics per topic ``T`` and channel ``C`` (counters are the change since
  the previous push; a topic or channel new since then counts from 0)::

      topic.T.message_count            c
      topic.T.message_bytes            c
      topic.T.depth                    g
      topic.T.backend_depth            g
      topic.T.e2e_processing_latency_P g   (ns; per configured percentile,
                                            P = percentile*100 rounded: 0.99 -> 99)
      topic.T.channel.C.message_count  c
      topic.T.channel.C.depth          g
      topic.T.channel.C.backend_depth  g
      topic.T.channel.C.in_flight_count g
      topic.T.channel.C.deferred_count g
      topic.T.channel.C.requeue_count  c
      topic.T.channel.C.timeout_count  c
      topic.T.channel.C.dead_letter_count  c   (beyond Go; channels with max attempts)
      topic.T.channel.C.clients        g
      topic.T.channel.C.e2e_processing_latency_P g

  with ``--storage=wal`` (beyond Go; docs/operations/replication.md):
  ``replication.leader`` (1 / 0), ``replication.epoch``,
  ``replication.lag_messages`` and ``replication.lag_ms`` (the largest of
  the replicas on a leader, its own on a replica), all gauges;

  and with ``--statsd-mem-stats``: ``mem.heap_objects``,
  ``mem.heap_idle_bytes``, ``mem.heap_in_use_bytes``,
  ``mem.heap_released_bytes``, ``mem.gc_pause_usec_100``,
  ``mem.gc_pause_usec_99``, ``mem.gc_pause_usec_95``,
  ``mem.next_gc_bytes`` (gauges) and ``mem.gc_runs`` (counter). Their
  CPython meaning is :func:`nsq.server.nsqd.stats.memstats.memory_stats`'s. (The
  nsqd documentation lists ``mem.mem.next_gc_bytes``; Go's code sends
  ``mem.next_gc_bytes``, and so do we.)

Deliberate difference: a counter that went down (a topic deleted and made
again between pushes) sends its new value, not Go's negative difference.
A failed UDP socket (bad address, resolution failure) logs an error and
skips the push; the next push's counters then cover both intervals, as Go.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from nsq._internal.addresses import fmt_addr, split_host_port
from nsq.server.nsqd.stats.memstats import memory_stats
from nsq.server.nsqd.stats.collect import collect_stats

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.host import DaemonHost

__all__ = ["StatsdPusher", "resolve_prefix", "host_key", "pack_lines", "metric_line"]

log = logging.getLogger("nsq.nsqd")


def host_key(host_port: str) -> str:
    """Go ``statsd.HostKey``: '.' and ':' become '_' (``10.0.0.1:4151`` ->
    ``10_0_0_1_4151``)."""
    return host_port.replace(".", "_").replace(":", "_")


def resolve_prefix(template: str, broadcast_address: str, http_port: int) -> str:
    """The statsd key prefix for ``--statsd-prefix`` ``template`` (Go's New()).

    ``%s`` becomes :func:`host_key` of ``broadcast_address:http_port``
    (IPv6 hosts bracketed first, as Go's ``net.JoinHostPort``); a non-empty
    result ends in '.'. An empty template stays empty.
    """
    if not template:
        return ""
    prefix = template.replace("%s", host_key(fmt_addr(broadcast_address, http_port)))
    return prefix if prefix.endswith(".") else prefix + "."


def metric_line(prefix: str, name: str, value: int, kind: str) -> bytes:
    """One statsd line: ``<prefix><name>:<value>|<kind>\\n`` (kind ``c`` or ``g``)."""
    return f"{prefix}{name}:{value}|{kind}\n".encode()


def pack_lines(lines: list[bytes], size: int) -> list[bytes]:
    """Consecutive lines joined into datagrams of at most ``size`` bytes.

    A line is never split: one longer than ``size`` is a datagram alone (Go's
    ``BoundaryBufferedWriter`` over a ``bufio.Writer``).
    """
    packets: list[bytes] = []
    buf = bytearray()
    for line in lines:
        if len(line) > size - len(buf) and buf:
            packets.append(bytes(buf))
            buf.clear()
        if len(line) > size:
            packets.append(line)
            continue
        buf += line
    if buf:
        packets.append(bytes(buf))
    return packets


def _diff(now: int, before: int) -> int:
    # a counter that went down belongs to a new topic/channel: count from 0
    return now - before if now >= before else now


def _percentile_name(quantile: float) -> str:
    # Go: fmt.Sprintf("%.0f", quantile*100.0)
    return f"{quantile * 100.0:.0f}"


class _Datagrams(asyncio.DatagramProtocol):
    def error_received(self, exc: Exception) -> None:
        # e.g. ICMP port unreachable from a previous datagram: UDP is fire
        # and forget, as in Go
        log.debug("STATSD: %s", exc)


class StatsdPusher:
    """The periodic push for one nsqd (started and stopped by it).

    Args:
        nsqd: the daemon; its options give the address, interval, packet
            size, memory toggle and the (already resolved) prefix.

    Attributes:
        pushes: pushes done so far (tests wait on it).
    """

    def __init__(self, nsqd: DaemonHost) -> None:
        opts = nsqd.options
        self.nsqd = nsqd
        self.address = opts.statsd_address
        self.prefix = opts.statsd_prefix
        self.interval = opts.statsd_interval
        self.packet_size = opts.statsd_udp_packet_size
        self.mem_stats = opts.statsd_mem_stats
        self.pushes = 0
        # topic -> (message_count, message_bytes, {channel: (messages, requeues, timeouts, dead letters)})
        self._last: dict[str, tuple[int, int, dict[str, tuple[int, int, int, int]]]] = {}
        self._last_gc_runs = 0
        self._stopping = asyncio.Event()
        self._task: asyncio.Task | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the push loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """End the loop; a push under way sends its remaining datagrams at once."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(task, 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("STATSD: push loop failed")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.interval
        while not self._stopping.is_set():
            delay = next_at - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._stopping.wait(), delay)
                    break
                except asyncio.TimeoutError:
                    pass
            # as Go's ticker: a push that overran starts the next at once,
            # then the schedule resumes from there
            next_at = max(next_at + self.interval, loop.time())
            try:
                await self.push()
            except Exception:
                log.exception("STATSD: push failed")
        log.info("STATSD: closing")

    # -- one push --------------------------------------------------------------------

    async def push(self, spread: float | None = None) -> int:
        """Send one round of metrics now, the datagrams spread evenly over
        ``spread`` seconds (default ``interval - 1s``, at least 0). Returns
        the datagrams sent (0 if the UDP socket could not be made)."""
        loop = asyncio.get_running_loop()
        try:
            host, port = split_host_port(self.address)
            # Go: an empty host means the local system
            transport, _ = await loop.create_datagram_endpoint(_Datagrams, remote_addr=(host or "127.0.0.1", port))
        except (OSError, ValueError) as exc:
            log.error("failed to create UDP socket to statsd(%s) - %s", self.address, exc)
            return 0
        try:
            log.info("STATSD: pushing stats to %s", self.address)
            packets = pack_lines(self.metric_lines(), self.packet_size)
            if spread is None:
                spread = self.interval - 1.0  # Go: NewSpreadWriter(conn, interval-time.Second, ...)
            gap = max(spread, 0.0) / len(packets) if packets else 0.0
            for i, packet in enumerate(packets):
                transport.sendto(packet)
                if gap > 0 and i + 1 < len(packets) and not self._stopping.is_set():
                    try:
                        await asyncio.wait_for(self._stopping.wait(), gap)
                    except asyncio.TimeoutError:
                        pass
            self.pushes += 1
            return len(packets)
        finally:
            transport.close()

    def metric_lines(self) -> list[bytes]:
        """This push's statsd lines; remembers the counters for the next one."""
        stats = collect_stats(self.nsqd, include_clients=False, include_mem=False)
        prefix = self.prefix
        lines: list[bytes] = []

        def counter(name: str, value: int) -> None:
            lines.append(metric_line(prefix, name, value, "c"))

        def gauge(name: str, value: int) -> None:
            lines.append(metric_line(prefix, name, int(value), "g"))

        last_topics = self._last
        now_topics: dict[str, tuple[int, int, dict[str, tuple[int, int, int, int]]]] = {}
        for t in stats.topics or []:
            name = t.topic_name
            last_count, last_bytes, last_channels = last_topics.get(name, (0, 0, {}))
            key = f"topic.{name}"
            counter(f"{key}.message_count", _diff(t.message_count, last_count))
            counter(f"{key}.message_bytes", _diff(t.message_bytes, last_bytes))
            gauge(f"{key}.depth", t.depth)
            gauge(f"{key}.backend_depth", t.backend_depth)
            if t.log is not None:  # --storage=wal
                gauge(f"{key}.head_offset", t.log.head_offset)
                gauge(f"{key}.retained_bytes", t.log.retained_bytes)
            for q, value in t.e2e_processing_latency.percentiles or []:
                gauge(f"{key}.e2e_processing_latency_{_percentile_name(q)}", value)
            now_channels: dict[str, tuple[int, int, int, int]] = {}
            for c in t.channels:
                cname = c.channel_name
                last_msgs, last_requeues, last_timeouts, last_dead = last_channels.get(cname, (0, 0, 0, 0))
                ckey = f"{key}.channel.{cname}"
                counter(f"{ckey}.message_count", _diff(c.message_count, last_msgs))
                gauge(f"{ckey}.depth", c.depth)
                gauge(f"{ckey}.backend_depth", c.backend_depth)
                if c.offset is not None:  # --storage=wal
                    gauge(f"{ckey}.offset", c.offset)
                gauge(f"{ckey}.in_flight_count", c.in_flight_count)
                gauge(f"{ckey}.deferred_count", c.deferred_count)
                counter(f"{ckey}.requeue_count", _diff(c.requeue_count, last_requeues))
                counter(f"{ckey}.timeout_count", _diff(c.timeout_count, last_timeouts))
                if c.max_attempts or c.dead_letter_count:  # beyond Go: only where in use
                    counter(f"{ckey}.dead_letter_count", _diff(c.dead_letter_count, last_dead))
                gauge(f"{ckey}.clients", c.client_count)
                for q, value in c.e2e_processing_latency.percentiles or []:
                    gauge(f"{ckey}.e2e_processing_latency_{_percentile_name(q)}", value)
                now_channels[cname] = (c.message_count, c.requeue_count, c.timeout_count, c.dead_letter_count)
            now_topics[name] = (t.message_count, t.message_bytes, now_channels)
        self._last = now_topics

        rep = stats.replication
        if rep is not None:  # --storage=wal (docs/operations/replication.md)
            lag = rep["replicas"] if rep["role"] == "leader" else [rep]
            gauge("replication.leader", 1 if rep["role"] == "leader" else 0)
            gauge("replication.epoch", rep["epoch"])
            gauge("replication.lag_messages", max((r["lag_messages"] for r in lag), default=0))
            gauge("replication.lag_ms", int(1000 * max((r["lag_seconds"] for r in lag), default=0)))
        if self.mem_stats:
            ms = memory_stats()
            for key, value in (("heap_objects", ms.heap_objects), ("heap_idle_bytes", ms.heap_idle_bytes),
                               ("heap_in_use_bytes", ms.heap_in_use_bytes),
                               ("heap_released_bytes", ms.heap_released_bytes),
                               ("gc_pause_usec_100", ms.gc_pause_usec_100), ("gc_pause_usec_99", ms.gc_pause_usec_99),
                               ("gc_pause_usec_95", ms.gc_pause_usec_95), ("next_gc_bytes", ms.next_gc_bytes)):
                gauge(f"mem.{key}", value)
            counter("mem.gc_runs", _diff(ms.gc_total_runs, self._last_gc_runs))
            self._last_gc_runs = ms.gc_total_runs
        return lines
