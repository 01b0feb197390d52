"""The topic log's retained window on the admin screens, and the texts of
the rewind flow (nsqds started with ``--storage=wal``: their ``/stats`` as
:class:`~nsq.cluster.model.TopicLog` and ``ChannelStats.offset``; the
rewind itself is :meth:`nsq.cluster.actions.Admin.rewind_channel`).

Times are shown as RFC 3339 in UTC (``2026-11-25T10:00:00Z``), the form the
rewind dialog takes back, and as an age against the poll's ``taken_at``.
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text

from nsq.cluster.model import ChannelStats, ClusterSnapshot, TopicLog, TopicStats
from nsq.cluster.rewind import format_time, is_time, parse_since
from nsq.tui import fmt
from nsq.tui.admin.cells import host_cell
from nsq.tui.widgets import num

__all__ = ["TOPIC_LOG_COLUMNS", "node_name", "retention_text", "rewind_targets", "short_windows", "since_text",
           "topic_log_cells", "topic_log_rows", "window_text"]

#: the columns of the Topic screen's retained-window table, (full, short)
#: names: bytes of the log, messages in it (head - first offset), the
#: oldest one's publish time and age, the offsets, the topic's retention
TOPIC_LOG_COLUMNS = [("NSQd Host", "NSQd Host"), ("Retained", "Retained"), ("Messages", "Msgs"),
                     ("Oldest Message", "Oldest"), ("Age", "Age"), ("First Offset", "First"),
                     ("Head Offset", "Head"), ("Retention", "Retention")]


def retention_text(log: TopicLog) -> str:
    """The topic's retention settings: ``"24h"``, ``"24h, max 1.0 GiB"``,
    ``"max 1.0 GiB"``, ``"none"`` (finished messages are not kept), or
    ``"varies"`` for an aggregate whose nsqds differ."""
    if log.retention_time == "" or log.retention_bytes < 0:
        return "varies"
    parts = []
    if log.retention_time not in ("0s", "0"):
        parts.append(fmt.go_duration(log.retention_time))
    if log.retention_bytes > 0:
        parts.append(f"max {fmt.size(log.retention_bytes)}")
    return ", ".join(parts) or "none"


def topic_log_cells(log: TopicLog, now: float, bold: bool = False) -> list[Text]:
    """The :data:`TOPIC_LOG_COLUMNS` cells of ``log`` after the host;
    ``now`` (Unix s) dates the age."""
    style = "bold" if bold else ""
    oldest = log.oldest_timestamp
    return [num(fmt.size(log.retained_bytes), style), num(fmt.count(log.retained_messages), style),
            num(format_time(oldest) if oldest else "-", style),
            num(fmt.duration(now - oldest / 1e9) if oldest else "-", style),
            num("-" if log.nodes > 1 else fmt.count(log.first_offset), style),
            num(fmt.count(log.head_offset), style), Text(retention_text(log), style=style)]


def topic_log_rows(topic: TopicStats, now: float, wide: bool) -> list[tuple[str, list[Any]]]:
    """The retained window of ``topic``, one row per nsqd and a total (an
    nsqd without a log: a note and dashes); [] when no nsqd has a log."""
    if topic.log is None:
        return []
    rows: list[tuple[str, list[Any]]] = []
    for n in topic.nodes:
        if n.log is None:
            rows.append((n.node, [host_cell(n.hostname, n.node, note="no topic log", wide=wide)]
                         + [num("-")] * (len(TOPIC_LOG_COLUMNS) - 1)))
        else:
            rows.append((n.node, [host_cell(n.hostname, n.node, wide=wide)] + topic_log_cells(n.log, now)))
    rows.append(("*", [Text("Total", style="bold")] + topic_log_cells(topic.log, now, bold=True)))
    return rows


def node_name(n: ChannelStats | TopicStats) -> str:
    """How the rewind flow names one nsqd's row: ``hostname:port``, else its address."""
    return f"{n.hostname}:{n.node.rsplit(':', 1)[-1]}" if n.hostname else n.node


def rewind_targets(snapshot: ClusterSnapshot, channel: ChannelStats) -> list[tuple[str, str]]:
    """``(name, API address)`` of every nsqd of ``channel`` (the address
    it was given as, ``https://...``, when the snapshot knows it)."""
    out = []
    for n in channel.nodes:
        node = snapshot.node(n.node)
        out.append((node_name(n), node.api_address if node is not None else n.node))
    return out


def short_windows(topic: TopicStats | None, channel: ChannelStats, since_ns: int) -> list[tuple[str, int]]:
    """``(name, oldest retained message's time in Unix ns)`` of the nsqds of
    ``channel`` whose topic log (at the last poll) has dropped messages
    (``first_offset`` above 0) and starts after ``since_ns``: a rewind
    there can only go back to that oldest message, not to ``since_ns``."""
    logs = {n.node: n.log for n in topic.nodes} if topic is not None else {}
    out = []
    for n in channel.log_nodes:
        log = logs.get(n.node)
        if log is not None and log.first_offset > 0 and log.oldest_timestamp and since_ns < log.oldest_timestamp:
            out.append((node_name(n), log.oldest_timestamp))
    return out


def window_text(topic: TopicStats | None, now: float) -> str:
    """What each nsqd retains of ``topic``: ``"vm1:4151 retains 1,200
    messages since 2026-11-25T08:00:00Z (2h0m0s ago)"``, one line each."""
    lines = []
    for n in topic.nodes if topic is not None else []:
        log = n.log
        if log is None:
            lines.append(f"{node_name(n)} keeps no topic log")
        elif not log.oldest_timestamp:
            lines.append(f"{node_name(n)} retains no message")
        else:
            lines.append(f"{node_name(n)} retains {fmt.plural(log.retained_messages, 'message')} since "
                         f"{format_time(log.oldest_timestamp)} ({fmt.duration(now - log.oldest_timestamp / 1e9)} ago)")
    return "\n".join(lines)


def since_text(since: str, now_ns: int | None = None) -> str:
    """``since`` as the confirmation says it: ``"1h ago
    (2026-11-25T09:00:00Z)"`` for a duration, ``"2026-11-25T09:00:00Z
    (1h0m0s ago)"`` for a time; ``since`` itself when it does not parse."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    try:
        ns = parse_since(since, now_ns)
    except ValueError:
        return since
    if is_time(since):
        return f"{since} ({fmt.duration((now_ns - ns) / 1e9)} ago)"
    return f"{since} ago ({format_time(ns)})"
