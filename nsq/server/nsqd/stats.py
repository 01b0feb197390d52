"""``/stats``: the JSON shapes and the text report of Go nsqd v1.2.

JSON shapes are Go nsqd 1.2.1's (nsqd/http.go ``doStats``, nsqd/stats.go): topics sorted by name, ``topics`` null
when a filter matches nothing, ``producers`` null when there are none.
``e2e_processing_latency`` is Go's quantile result (:func:`e2e_latency`,
https://nsq.io/components/nsqd.html#-e2e-processing-latency-percentile); the text report prints its values as Go's
``printStats`` does (``e2e%: 6.6s, 6.2s, 6.2s``). ``memory`` maps Go's
runtime figures to CPython's (:func:`memory_stats`); statsd pushes the same.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from nsq import NSQ_VERSION, __version__
from nsq._internal.durations import format_duration
from nsq.server.nsqd.quantile import WindowedQuantile, merged_result

if TYPE_CHECKING:
    from nsq.server.nsqd.channel import Channel
    from nsq.server.nsqd.client_v2 import ClientV2
    from nsq.server.nsqd.nsqd import NSQD
    from nsq.server.nsqd.topic import Topic

__all__ = ["get_stats", "render_text", "version_string", "e2e_latency", "nanoseconds_to_human", "memory_stats",
           "GC_PAUSES"]


def version_string() -> str:
    """The first line of the text report (Go: ``nsqd v1.2.1 (built w/go1.x)``)."""
    return f"nsqd v{NSQ_VERSION} (built w/nsq-python {__version__}, Python {sys.version.split()[0]})"


def _json_number(q: float) -> float | int:
    # Go's encoding/json writes 1.0 as 1
    return int(q) if q == int(q) else q


def e2e_latency(quantiles: list[WindowedQuantile], topic: str, channel: str, host: str) -> dict[str, Any]:
    """Go's e2e processing latency object for a channel (its quantile) or a
    topic (its channels' quantiles merged).

    Returns:
        ``{"count", "percentiles", "topic", "channel", "host"}``: ``count``
        values (FINs) in the window; ``percentiles`` a list of
        ``{"quantile": q, "value": ns}`` in the configured order (values 0
        while the window is empty), or None when no quantile applies
        (``--e2e-processing-latency-percentile`` not given, or a topic
        without channels).
    """
    if not quantiles:
        return {"count": 0, "percentiles": None, "topic": topic, "channel": channel, "host": host}
    count, values = merged_result(quantiles, quantiles[0].percentiles)
    return {
        "count": count,
        "percentiles": [{"quantile": _json_number(q), "value": int(v)} for q, v in values],
        "topic": topic,
        "channel": channel,
        "host": host,
    }


def nanoseconds_to_human(value: float) -> str:
    """A latency as Go's ``stringy.NanoSecondToHuman``: ``6.6s``, ``167.5ms``,
    ``12.0us``, ``0.0ns`` (one decimal; the unit chosen strictly above 1000)."""
    if value > 1e9:
        return f"{value / 1e9:.1f}s"
    if value > 1e6:
        return f"{value / 1e6:.1f}ms"
    if value > 1e3:
        return f"{value / 1e3:.1f}us"
    return f"{value:.1f}ns"


def _e2e_text(latency: dict[str, Any]) -> str:
    # Go's quantile.Result.String(): the values, comma separated ("" if none)
    return ", ".join(nanoseconds_to_human(p["value"]) for p in latency["percentiles"] or [])


def client_stats(client: ClientV2) -> dict[str, Any]:
    """One client's stats dict (Go ``ClientStats``)."""
    settings = client.negotiated
    features = client.features
    out: dict[str, Any] = {
        "client_id": settings.client_id,
        "hostname": settings.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,
        "ready_count": client.ready_count,
        "in_flight_count": client.in_flight_count,
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": settings.sample_rate,
        "deflate": features.deflate,
        "snappy": features.snappy,
        "user_agent": settings.user_agent,
        "tls": features.tls,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }
    ssl_object = features.ssl_object
    if ssl_object is not None:
        from nsq.server.tls import tls_version_name

        cipher = ssl_object.cipher()
        out["tls_cipher_suite"] = cipher[0] if cipher else ""
        out["tls_version"] = tls_version_name(ssl_object)
        out["tls_negotiated_protocol"] = ssl_object.selected_alpn_protocol() or ""
    state = features.auth_state
    if state is not None and state.authorizations:
        # Go: omitempty
        out["authed"] = True
        if state.identity:
            out["auth_identity"] = state.identity
        if state.identity_url:
            out["auth_identity_url"] = state.identity_url
    if client.pub_counts:
        out["pub_counts"] = [{"topic": t, "count": c} for t, c in sorted(client.pub_counts.items())]
    return out


def channel_stats(channel: Channel, host: str, include_clients: bool) -> dict[str, Any]:
    """One channel's stats dict (Go ``ChannelStats``)."""
    # Go: clients is null when not asked for, a (possibly empty) list otherwise
    clients = [client_stats(c) for c in channel.clients.values()] if include_clients else None
    out = {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": channel.backend.depth,
        "in_flight_count": len(channel.in_flight),
        "deferred_count": len(channel.deferred),
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        # beyond Go (a Go client ignores unknown keys)
        "dead_letter_count": channel.dead_letter_count,
        "max_attempts": channel.max_attempts,
        "client_count": len(channel.clients),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": e2e_latency([channel.e2e] if channel.e2e is not None else [],
                                              channel.topic.name, channel.name, host),
    }
    if channel.wal is not None:  # --storage=wal: the channel's position in the topic log
        out["offset"] = channel.wal.next
    return out


def topic_stats(topic: Topic, host: str, channel_filter: str, include_clients: bool) -> dict[str, Any]:
    """One topic's stats dict (Go ``TopicStats``)."""
    channels = [
        channel_stats(c, host, include_clients)
        for name, c in sorted(topic.channels.items())
        if not channel_filter or name == channel_filter
    ]
    out = {
        "topic_name": topic.name,
        "channels": channels,
        "depth": topic.depth,
        "backend_depth": topic.backend.depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        # Go: every channel's quantiles merged, whatever the channel filter
        "e2e_processing_latency": e2e_latency([c.e2e for c in topic.channels.values() if c.e2e is not None],
                                              topic.name, "", host),
    }
    if topic.log is not None:  # --storage=wal: the retained window of the topic log
        out.update(log_stats(topic))
    return out


def log_stats(topic: Topic) -> dict[str, Any]:
    """The topic log's figures for ``/stats``: ``head_offset`` (the next
    message's offset), ``first_offset`` (the oldest retained),
    ``retained_bytes``, ``oldest_timestamp`` (ns, 0 when empty) and the
    topic's retention (``retention_time`` as a Go duration,
    ``retention_bytes``)."""
    from nsq._internal.durations import format_duration

    tlog = topic.log
    assert tlog is not None
    oldest = tlog.timestamp_at(tlog.first) if tlog.first < tlog.head else None
    return {
        "head_offset": tlog.head,
        "first_offset": tlog.first,
        "retained_bytes": tlog.retained_bytes,
        "oldest_timestamp": oldest or 0,
        "retention_time": format_duration(topic.retention_time),
        "retention_bytes": topic.retention_bytes,
    }


class GCPauses:
    """Durations of CPython's last 256 garbage collections (Go keeps the last
    256 GC pauses in ``runtime.MemStats.PauseNs``).

    Installed as a :data:`gc.callbacks` hook while at least one nsqd runs
    (:meth:`acquire` / :meth:`release`, reference counted): two calls of a
    small function per collection, nothing per message.
    """

    SIZE = 256

    def __init__(self) -> None:
        self.pauses_ns: deque[int] = deque(maxlen=self.SIZE)
        self._started = 0
        self._users = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.pauses_ns.append(time.perf_counter_ns() - self._started)
            self._started = 0

    def acquire(self) -> None:
        """Start recording (first user installs the hook)."""
        self._users += 1
        if self._users == 1:
            gc.callbacks.append(self._callback)

    def release(self) -> None:
        """Stop recording (last user removes the hook)."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users == 0:
            try:
                gc.callbacks.remove(self._callback)
            except ValueError:
                pass
            self._started = 0

    def percentiles_usec(self) -> tuple[int, int, int]:
        """(100th, 99th, 95th) percentile of the recorded pauses in us, by
        Go statsd.go's ``percentile`` rule (sorted, index
        ``floor(p/100 * len + 0.5)`` capped at the last); zeros if none."""
        pauses = sorted(self.pauses_ns)
        length = len(pauses)
        if not length:
            return 0, 0, 0

        def pick(p: float) -> int:
            index = min(int(math.floor(p / 100.0 * length + 0.5)), length - 1)
            return pauses[index] // 1000

        return pick(100.0), pick(99.0), pick(95.0)


#: the process-wide GC pause recorder (nsqd acquires it while running)
GC_PAUSES = GCPauses()


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:  # no /proc (macOS, BSD): the peak RSS is the best cheap figure
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    except (ImportError, OSError, ValueError):
        return 0


def memory_stats() -> dict[str, int]:
    """Go's ``memStats`` keys (``/stats`` ``memory``, statsd ``mem.*``) mapped
    to what CPython can tell cheaply.

    ============================ ==============================================
    key                          CPython figure
    ============================ ==============================================
    heap_objects                 ``sys.getallocatedblocks()``: memory blocks
                                 allocated by the interpreter (Go: live heap
                                 objects)
    heap_idle_bytes              0 (Go: idle heap spans; not exposed)
    heap_in_use_bytes            resident set size, bytes (``/proc/self/statm``;
                                 elsewhere the peak RSS from ``getrusage``)
    heap_released_bytes          0 (Go: heap returned to the OS; not exposed)
    gc_pause_usec_100 / 99 / 95  percentiles of the last 256 garbage
                                 collections' durations, us (:data:`GC_PAUSES`;
                                 0 while no nsqd runs in the process)
    next_gc_bytes                0 (CPython collects by allocation counts,
                                 not heap bytes)
    gc_total_runs                collections so far, all generations
                                 (``gc.get_stats()``)
    ============================ ==============================================
    """
    p100, p99, p95 = GC_PAUSES.percentiles_usec()
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": _rss_bytes(),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": p100,
        "gc_pause_usec_99": p99,
        "gc_pause_usec_95": p95,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(s["collections"] for s in gc.get_stats()),
    }


def get_stats(
    nsqd: NSQD, topic: str = "", channel: str = "", include_clients: bool = True, include_mem: bool = True
) -> dict[str, Any]:
    """The ``/stats?format=json`` object.

    Returns:
        ``{version, health, start_time, topics, memory?, producers}``.
    """
    host = nsqd.options.broadcast_address
    topics = [
        topic_stats(t, host, channel, include_clients)
        for name, t in sorted(nsqd.topics.items())
        if (not topic or name == topic) and (not channel or channel in t.channels)
    ]
    producers: list[dict[str, Any]] = []
    if include_clients:
        for client in nsqd.clients.values():
            if client.pub_counts and (not topic or topic in client.pub_counts):
                stats = client_stats(client)
                if topic:
                    stats["pub_counts"] = [{"topic": topic, "count": client.pub_counts[topic]}]
                producers.append(stats)
    out: dict[str, Any] = {
        "version": NSQ_VERSION,
        "health": nsqd.health,
        "start_time": nsqd.start_time,
        # Go: null when the topic filter names no topic, else a list (a
        # channel filter drops the topics that lack that channel)
        "topics": None if topic and topic not in nsqd.topics else topics,
    }
    if include_mem:
        out["memory"] = memory_stats()
    out["producers"] = producers or None
    return out


def _duration_s(seconds: float) -> str:
    return format_duration(float(int(seconds)))


def render_text(nsqd: NSQD, stats: dict[str, Any]) -> str:
    """The plain-text ``/stats`` report, laid out as Go nsqd's."""
    now = time.time()
    lines = [
        version_string(),
        "start_time " + time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stats["start_time"])),
        "uptime " + format_duration(round(now - stats["start_time"], 6)),
        "",
        f"Health: {stats['health']}",
    ]
    mem = stats.get("memory")
    if mem:
        lines += ["", "Memory:"]
        for key, value in mem.items():
            lines.append(f"   {key:<25}\t{value}")
    topics = stats["topics"] or []
    out = "\n".join(lines) + "\n"
    out += "\nTopics: None\n" if not topics else "\nTopics:"
    for t in topics:
        prefix = "*P " if t["paused"] else "   "
        out += (
            f"\n{prefix}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: {t['backend_depth']:<5} "
            f"msgs: {t['message_count']:<8} e2e%: {_e2e_text(t['e2e_processing_latency'])}\n"
        )
        for c in t["channels"]:
            prefix = "   *P " if c["paused"] else "      "
            out += (
                f"{prefix}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: {c['backend_depth']:<5} "
                f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} "
                f"e2e%: {_e2e_text(c['e2e_processing_latency'])}\n"
            )
            for cl in c["clients"] or []:
                out += (
                    f"        [{cl['version']} {cl['client_id']:<21}] state: {cl['state']} "
                    f"inflt: {cl['in_flight_count']:<4} rdy: {cl['ready_count']:<4} fin: {cl['finish_count']:<8} "
                    f"re-q: {cl['requeue_count']:<8} msgs: {cl['message_count']:<8} "
                    f"connected: {_duration_s(now - cl['connect_ts'])}\n"
                )
    producers = stats["producers"] or []
    if not producers:
        out += "\nProducers: None\n"
    else:
        out += "\nProducers:"
        for p in producers:
            total = sum(pc["count"] for pc in p.get("pub_counts", []))
            out += (
                f"\n   [{p['version']} {p['client_id']:<21}] msgs: {total:<8} "
                f"connected: {_duration_s(now - p['connect_ts'])}\n"
            )
            for pc in p.get("pub_counts", []):
                out += f"      [{pc['topic']:<15}] msgs: {pc['count']:<8}\n"
    return out
