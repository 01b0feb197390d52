"""The plain-text ``/stats`` report (``/stats`` without ``format=json``).

:func:`render_text` lays out an :class:`~nsq.server.nsqd.stats.collect.NSQDStats` as
Go nsqd's ``printStats`` does (nsqd/http.go): the version line, start time,
uptime, health, memory, then each topic with its channels and their
clients, then the producers. E2e latencies print as Go's
``quantile.Result.String()``, each value as ``stringy.NanoSecondToHuman``
(:func:`nanoseconds_to_human`: ``e2e%: 6.6s, 6.2s, 6.2s``).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from nsq import NSQ_VERSION, __version__
from nsq._internal.durations import format_duration

if TYPE_CHECKING:
    from nsq.server.nsqd.stats.collect import E2ELatency, NSQDStats

__all__ = ["render_text", "version_string", "nanoseconds_to_human"]


def version_string() -> str:
    """The first line of the text report (Go: ``nsqd v1.2.1 (built w/go1.x)``)."""
    return f"nsqd v{NSQ_VERSION} (built w/nsq-python {__version__}, Python {sys.version.split()[0]})"


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


def _e2e_text(latency: E2ELatency) -> str:
    # Go's quantile.Result.String(): the values, comma separated ("" if none)
    return ", ".join(nanoseconds_to_human(p.value) for p in latency.percentiles or [])


def _duration_s(seconds: float) -> str:
    return format_duration(float(int(seconds)))


def _replication_text(rep: dict | None) -> list[str]:
    """Beyond Go (``--storage=wal``): the node's role, epoch and lag
    (docs/operations/replication.md); nothing without a topic log."""
    if rep is None:
        return []
    if rep["role"] == "replica":
        state = "connected" if rep.get("connected") else "not connected"
        out = ["", f"Replication: replica of {rep['leader']}, epoch {rep['epoch']}, {state}, "
                   f"lag: {rep['lag_messages']} msgs {rep['lag_seconds']:.1f}s"]
        for name, t in sorted((rep.get("topics") or {}).items()):
            out.append(f"   [{name:<21}] offset: {t['offset']} lag: {t['lag_messages']} msgs {t['lag_seconds']:.1f}s")
        return out
    out = ["", f"Replication: leader, epoch {rep['epoch']}, replica-acks {rep['replica_acks']}, "
               f"{len(rep['replicas'])} replicas"]
    for r in rep["replicas"]:
        out.append(f"   [{r['address']:<21}] lag: {r['lag_messages']} msgs {r['lag_seconds']:.1f}s")
    return out


def render_text(stats: NSQDStats) -> str:
    """The plain-text ``/stats`` report, laid out as Go nsqd's ``printStats``."""
    now = time.time()
    lines = [
        version_string(),
        "start_time " + time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stats.start_time)),
        "uptime " + format_duration(round(now - stats.start_time, 6)),
        "",
        f"Health: {stats.health}",
    ]
    lines += _replication_text(stats.replication)
    if stats.memory is not None:
        lines += ["", "Memory:"]
        for key, value in stats.memory.to_json().items():
            lines.append(f"   {key:<25}\t{value}")
    topics = stats.topics or []
    out = "\n".join(lines) + "\n"
    out += "\nTopics: None\n" if not topics else "\nTopics:"
    for t in topics:
        prefix = "*P " if t.paused else "   "
        out += (
            f"\n{prefix}[{t.topic_name:<15}] depth: {t.depth:<5} be-depth: {t.backend_depth:<5} "
            f"msgs: {t.message_count:<8} e2e%: {_e2e_text(t.e2e_processing_latency)}\n"
        )
        for c in t.channels:
            prefix = "   *P " if c.paused else "      "
            out += (
                f"{prefix}[{c.channel_name:<25}] depth: {c.depth:<5} be-depth: {c.backend_depth:<5} "
                f"inflt: {c.in_flight_count:<4} def: {c.deferred_count:<4} re-q: {c.requeue_count:<5} "
                f"timeout: {c.timeout_count:<5} msgs: {c.message_count:<8} "
                f"e2e%: {_e2e_text(c.e2e_processing_latency)}\n"
            )
            for cl in c.clients or []:
                out += (
                    f"        [{cl.version} {cl.client_id:<21}] state: {cl.state} "
                    f"inflt: {cl.in_flight_count:<4} rdy: {cl.ready_count:<4} fin: {cl.finish_count:<8} "
                    f"re-q: {cl.requeue_count:<8} msgs: {cl.message_count:<8} "
                    f"connected: {_duration_s(now - cl.connect_ts)}\n"
                )
    producers = stats.producers or []
    if not producers:
        out += "\nProducers: None\n"
    else:
        out += "\nProducers:"
        for p in producers:
            total = sum(pc.count for pc in p.pub_counts)
            out += (
                f"\n   [{p.version} {p.client_id:<21}] msgs: {total:<8} "
                f"connected: {_duration_s(now - p.connect_ts)}\n"
            )
            for pc in p.pub_counts:
                out += f"      [{pc.topic:<15}] msgs: {pc.count:<8}\n"
    return out
