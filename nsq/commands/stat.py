"""``nsq stat``: poll ``/stats`` of a topic's producers and show one channel's totals (nsq_stat).

Plain, pipe-friendly output as Go nsq_stat v1.2 prints it (seed 000
"nsq_stat"): a header every 25 reports, then per interval the ingress and
egress rates (messages/s) and the channel's depth (total, memory, disk),
in-flight, deferred, requeued, timed out, messages and clients, summed
over every nsqd that has the topic. The first poll only sets the base for
the rates, so ``--count N`` prints N-1 rows, as Go's does; any error ends
the command (Go's ``log.Fatalf``).

When stdout is a terminal (and ``--plain`` is not given) the same figures
are shown live in a Textual TUI (:mod:`nsq.tui.stat`): per nsqd and in
total, with sparklines, errors shown in place. Textual is imported only
then, so ``nsq stat --help`` and piped runs stay fast.

:class:`StatPoller` does the polling for both.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

import click

from nsq.commands._go import GoCommand, GoDuration, fail, run_async, stop_event

__all__ = ["FIELDS", "NodeReport", "PlainWriter", "StatPoller", "StatReport", "stat"]

#: the channel counters of nsqd's ``/stats`` that nsq_stat sums
FIELDS = ("depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
          "timeout_count", "message_count", "client_count")


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", default="", help="NSQ topic")
@click.option("--channel", default="", help="NSQ channel")
@click.option("--count", "count", type=int, default=None, help="number of reports")
@click.option("--interval", type=GoDuration(), default=2.0,
              help="duration of time between polling/printing output (default 2s)")
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times)")
@click.option("--nsqd-http-address", "nsqd", multiple=True,
              help="nsqd HTTP address (may be given multiple times)")
@click.option("--http-client-connect-timeout", type=GoDuration(), default=2.0,
              help="timeout for HTTP connect (default 2s)")
@click.option("--http-client-request-timeout", type=GoDuration(), default=5.0,
              help="timeout for HTTP request (default 5s)")
@click.option("--plain", is_flag=True, default=False,
              help="print nsq_stat's plain lines even when stdout is a terminal (the default when piped)")
def stat(topic: str, channel: str, count: int | None, interval: float, lookupd: tuple[str, ...],
         nsqd: tuple[str, ...], http_client_connect_timeout: float, http_client_request_timeout: float,
         plain: bool) -> None:
    """Poll /stats of every nsqd with TOPIC and show CHANNEL's totals each --interval.

    A live TUI when stdout is a terminal; Go nsq_stat's plain lines when
    piped or with --plain.
    """
    if not topic or not channel:
        fail("--topic and --channel are required")
    if count is not None and count <= 0:
        fail("--count should be positive")
    if interval <= 0:
        fail("--interval should be positive")
    if not nsqd and not lookupd:
        fail("--nsqd-http-address or --lookupd-http-address required")
    if nsqd and lookupd:
        fail("use --nsqd-http-address or --lookupd-http-address not both")
    poller = StatPoller(topic, channel, lookupd=list(lookupd), nsqd=list(nsqd), interval=interval,
                        connect_timeout=http_client_connect_timeout,
                        request_timeout=http_client_request_timeout)
    if not plain and _isatty(sys.stdout):
        from nsq.tui.stat import run_stat_app

        sys.exit(run_stat_app(poller, count=count, out=sys.stdout))
    try:
        code = run_async(_plain_loop(poller, count))
    except _StatError as exc:
        fail(str(exc))
    sys.exit(code)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _StatError(Exception):
    pass


@dataclass
class NodeReport:
    """One nsqd's part of a :class:`StatReport`.

    Attributes:
        address: the nsqd's HTTP ``host:port``.
        counters: the channel's :data:`FIELDS` on this nsqd; None when the
            nsqd could not be read or does not have the channel.
        ingress, egress: messages/s since the previous poll of this nsqd;
            None on its first good poll.
        error: why ``counters`` is None (unreachable, bad answer, no channel).
        missing: True when the nsqd answered but has no such channel (the
            other nsqds are still summed, as Go does).
    """

    address: str
    counters: dict[str, int] | None = None
    ingress: int | None = None
    egress: int | None = None
    error: str | None = None
    missing: bool = False


@dataclass
class StatReport:
    """One poll of every nsqd with the topic.

    Attributes:
        number: 1 for the first poll, then 2, 3, ...
        time: wall-clock time of the poll (seconds since the epoch).
        totals: the channel's :data:`FIELDS` summed over the nsqds that have
            it; None when no nsqd has it (see ``error``).
        ingress, egress: cluster-wide messages/s since the previous good
            poll (nsq_stat's formula over the nominal interval); None on
            the first good poll.
        nodes: per nsqd, sorted by address.
        error: a poll-wide failure (every lookupd failed, the channel is on
            no nsqd), as nsq_stat words it; None if there is none.
    """

    number: int
    time: float
    totals: dict[str, int] | None = None
    ingress: int | None = None
    egress: int | None = None
    nodes: list[NodeReport] = field(default_factory=list)
    error: str | None = None

    @property
    def first_error(self) -> str | None:
        """The error that ends the plain report: poll-wide first, then the
        first failing nsqd's (not "no channel" on one nsqd: Go sums the others)."""
        if self.error:
            return self.error
        for node in self.nodes:
            if node.error and not node.missing:
                return f"failed to get nsqd stats - {node.error}"
        return None


def _rates(previous: dict[str, int], current: dict[str, int], interval: float) -> tuple[int, int]:
    """(ingress, egress) in messages/s as Go nsq_stat computes them (truncated)."""
    messages = current["message_count"] - previous["message_count"]
    ingress = int(messages / interval)
    egress = int((messages - (current["depth"] - previous["depth"])) / interval)
    return ingress, egress


class StatPoller:
    """Polls ``/stats`` of every nsqd that has ``topic`` for ``channel``.

    Args:
        topic, channel: what to watch.
        lookupd: lookupd HTTP addresses to find the topic's producers
            (each poll), or
        nsqd: nsqd HTTP addresses to ask directly (one of the two).
        interval: seconds between polls; the rates divide by it (Go).
        connect_timeout, request_timeout: seconds, per HTTP request.

    HTTP sessions are opened by the first :meth:`poll` (in the running
    loop) and closed by :meth:`close`.
    """

    def __init__(self, topic: str, channel: str, *, lookupd: list[str] | None = None,
                 nsqd: list[str] | None = None, interval: float = 2.0, connect_timeout: float = 2.0,
                 request_timeout: float = 5.0) -> None:
        self.topic = topic
        self.channel = channel
        self.lookupd = list(lookupd or [])
        self.nsqd = list(nsqd or [])
        self.interval = interval
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._session: Any = None
        self._lookupd_client: Any = None
        self._number = 0
        self._previous: dict[str, int] | None = None
        self._previous_nodes: dict[str, dict[str, int]] = {}

    @property
    def source(self) -> str:
        """Where the producers come from, for display (``lookupd a,b`` / ``nsqd a``)."""
        return ("lookupd " + ",".join(self.lookupd)) if self.lookupd else ("nsqd " + ",".join(self.nsqd))

    async def close(self) -> None:
        """Close the HTTP sessions (the poller can poll again afterwards)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._lookupd_client is not None:
            await self._lookupd_client.close()
            self._lookupd_client = None

    async def _producers(self) -> tuple[list[str], str | None]:
        from nsq.client.lookupd import LookupdHTTPClient

        if not self.lookupd:
            return list(self.nsqd), None
        if self._lookupd_client is None:
            self._lookupd_client = LookupdHTTPClient(self.connect_timeout, self.request_timeout)
        producers, errors = await self._lookupd_client.lookup_all(self.lookupd, self.topic)
        if errors and len(errors) == len(self.lookupd):
            return [], f"failed to get topic producers - {errors[0]}"
        addrs = []
        for p in producers:
            host = p.get("broadcast_address") or ""
            addrs.append(f"[{host}]:{p.get('http_port')}" if ":" in host else f"{host}:{p.get('http_port')}")
        return sorted(set(addrs)), None

    async def _fetch(self, addr: str) -> NodeReport:
        import aiohttp

        url = f"http://{addr}/stats"
        params = {"format": "json", "topic": self.topic, "channel": self.channel, "include_clients": "false"}
        try:
            async with self._session.get(url, params=params) as resp:
                if resp.status != 200:
                    return NodeReport(addr, error=f"{addr} answered {resp.status}")
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            return NodeReport(addr, error=f"{addr}: {exc or type(exc).__name__}")
        counters = None
        for t in (data or {}).get("topics") or []:
            if t.get("topic_name") != self.topic:
                continue
            for c in t.get("channels") or []:
                if c.get("channel_name") != self.channel:
                    continue
                counters = counters or dict.fromkeys(FIELDS, 0)
                for key in FIELDS:
                    counters[key] += int(c.get(key) or 0)
        if counters is None:
            return NodeReport(addr, error=f"no channel({self.channel}) for topic({self.topic})", missing=True)
        return NodeReport(addr, counters)

    async def poll(self) -> StatReport:
        """Ask every producer once; never raises for a network or nsqd
        failure (they are in the report)."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
                total=self.request_timeout, connect=self.connect_timeout))
        self._number += 1
        report = StatReport(self._number, time.time())
        addrs, report.error = await self._producers()
        if report.error:
            return report
        report.nodes = list(await asyncio.gather(*(self._fetch(a) for a in addrs)))
        totals = None
        previous_nodes: dict[str, dict[str, int]] = {}
        for node in report.nodes:
            if node.counters is None:
                continue
            before = self._previous_nodes.get(node.address)
            if before is not None:
                node.ingress, node.egress = _rates(before, node.counters, self.interval)
            previous_nodes[node.address] = node.counters
            totals = totals or dict.fromkeys(FIELDS, 0)
            for key in FIELDS:
                totals[key] += node.counters[key]
        self._previous_nodes = previous_nodes
        if totals is None:
            report.error = f"failed to find channel({self.channel}) in stats metadata for topic({self.topic})"
            return report
        report.totals = totals
        if self._previous is not None:
            report.ingress, report.egress = _rates(self._previous, totals, self.interval)
        self._previous = totals
        return report


class PlainWriter:
    """Writes Go nsq_stat's lines for successive reports.

    Args:
        out: a text stream.

    :meth:`write` prints the two-line header before the 1st, 26th, ...
    report and a row for every report that has rates (not the first).
    """

    HEADER = ("------rate------+----------------depth----------------+"
              "--------------metadata---------------\n"
              + "%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n" % (
                  "ingress", "egress", "total", "mem", "disk", "inflt", "def",
                  "req", "t-o", "msgs", "clients"))

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._i = 0

    @staticmethod
    def row(report: StatReport) -> str:
        """One report's row (``\\n``-terminated); needs totals and rates."""
        c = report.totals
        assert c is not None and report.ingress is not None and report.egress is not None
        return "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n" % (
            report.ingress, report.egress, c["depth"], c["depth"] - c["backend_depth"], c["backend_depth"],
            c["in_flight_count"], c["deferred_count"], c["requeue_count"], c["timeout_count"],
            c["message_count"], c["client_count"])

    def write(self, report: StatReport) -> None:
        """Write the header when due and the report's row (if it has rates)."""
        if self._i % 25 == 0:
            self.out.write(self.HEADER)
        if report.ingress is not None:
            self.out.write(self.row(report))
        self._i += 1


async def _plain_loop(poller: StatPoller, count: int | None) -> int:
    stop = stop_event()
    writer = PlainWriter(sys.stdout)
    try:
        i = 0
        while count is None or i < count:
            report = await poller.poll()
            error = report.first_error
            if error:
                raise _StatError(error)
            writer.write(report)
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                return 0
            i += 1
            if count is not None and i >= count:
                return 0
            try:
                await asyncio.wait_for(stop.wait(), poller.interval)
                return 0
            except TimeoutError:
                pass
    finally:
        await poller.close()
    return 0
