"""``/stats``: the JSON shapes and the text report of Go nsqd v1.2.

JSON shapes are WIRE-FACTS "HTTP": topics sorted by name, ``topics`` null
when a filter matches nothing, ``producers`` null when there are none.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from nsq import NSQ_VERSION, __version__
from nsq.server.durations import format_duration

if TYPE_CHECKING:
    from nsq.server.nsqd.channel import Channel
    from nsq.server.nsqd.client_v2 import ClientV2
    from nsq.server.nsqd.nsqd import NSQD
    from nsq.server.nsqd.topic import Topic

__all__ = ["get_stats", "render_text", "version_string"]


def version_string() -> str:
    """The first line of the text report (Go: ``nsqd v1.2.1 (built w/go1.x)``)."""
    return f"nsqd v{NSQ_VERSION} (built w/nsq-python {__version__}, Python {sys.version.split()[0]})"


def _e2e(topic: str, channel: str, host: str) -> dict[str, Any]:
    # e2e latency percentiles are computed by a later release: none configured
    return {"count": 0, "percentiles": None, "topic": topic, "channel": channel, "host": host}


def client_stats(client: ClientV2) -> dict[str, Any]:
    """One client's stats dict (Go ``ClientStats``)."""
    out: dict[str, Any] = {
        "client_id": client.client_id,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,
        "ready_count": client.ready_count,
        "in_flight_count": client.in_flight_count,
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate,
        "deflate": False,
        "snappy": False,
        "user_agent": client.user_agent,
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }
    if client.pub_counts:
        out["pub_counts"] = [{"topic": t, "count": c} for t, c in sorted(client.pub_counts.items())]
    return out


def channel_stats(channel: Channel, host: str, include_clients: bool) -> dict[str, Any]:
    """One channel's stats dict (Go ``ChannelStats``)."""
    # Go: clients is null when not asked for, a (possibly empty) list otherwise
    clients = [client_stats(c) for c in channel.clients.values()] if include_clients else None
    return {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": channel.backend.depth,
        "in_flight_count": len(channel.in_flight),
        "deferred_count": len(channel.deferred),
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(channel.clients),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": _e2e(channel.topic.name, channel.name, host),
    }


def topic_stats(topic: Topic, host: str, channel_filter: str, include_clients: bool) -> dict[str, Any]:
    """One topic's stats dict (Go ``TopicStats``)."""
    channels = [
        channel_stats(c, host, include_clients)
        for name, c in sorted(topic.channels.items())
        if not channel_filter or name == channel_filter
    ]
    return {
        "topic_name": topic.name,
        "channels": channels,
        "depth": topic.depth,
        "backend_depth": topic.backend.depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": _e2e(topic.name, "", host),
    }


def memory_stats() -> dict[str, int]:
    """Go's ``memStats`` keys mapped to what CPython can tell cheaply.

    heap_objects: allocated memory blocks; heap_in_use_bytes: resident set
    size; gc_total_runs: collections over all generations. Go-only figures
    (idle/released heap, GC pause percentiles, next GC) are 0.
    """
    rss = 0
    try:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": rss,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": 0,
        "gc_pause_usec_99": 0,
        "gc_pause_usec_95": 0,
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
            f"msgs: {t['message_count']:<8} e2e%: \n"
        )
        for c in t["channels"]:
            prefix = "   *P " if c["paused"] else "      "
            out += (
                f"{prefix}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: {c['backend_depth']:<5} "
                f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} e2e%: \n"
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
