"""Table cells and column sets the admin screens share: e2e percentile
cells, names with their paused/note marks, nsqadmin's "NSQd Host" cell, a
channel's figures."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from nsq.cluster.model import ChannelStats, Percentile
from nsq.tui import fmt
from nsq.tui.widgets import num

__all__ = ["CHANNEL_COLUMNS", "TOPIC_NODE_COLUMNS", "channel_cells", "e2e_cells", "e2e_quantiles", "host_cell",
           "max_attempts_note", "name_cell"]


def e2e_quantiles(groups: Sequence[Sequence[Percentile]]) -> list[float]:
    """The quantiles any of ``groups`` has, highest first (one column each)."""
    return sorted({p.quantile for g in groups for p in g}, reverse=True)


def e2e_cells(e2e: Sequence[Percentile], quantiles: Sequence[float]) -> list[Text]:
    """The average latency of each quantile (``-`` where ``e2e`` lacks it)."""
    by_q = {p.quantile: p for p in e2e}
    return [num(fmt.latency(by_q[q].average) if q in by_q else "-") for q in quantiles]


def name_cell(text: str, *, paused: bool = False, note: str = "", style: str = "") -> Text:
    """A topic or channel name, marked ``paused`` and followed by ``note``."""
    out = Text(text, style=style)
    if paused:
        out.append(" paused", style="bold yellow")
    if note:
        out.append(f" {note}", style="italic dim")
    return out


def host_cell(hostname: str, address: str, *, paused: bool = False, note: str = "", wide: bool = True) -> Text:
    """nsqadmin's "NSQd Host": ``hostname:port (address)`` (narrow: ``hostname:port``)."""
    port = address.rsplit(":", 1)[-1]
    if not hostname:
        out = Text(address, style="bold")
    elif wide:
        out = Text(f"{hostname}:{port} ", style="bold")
        out.append(f"({address})", style="")
    else:
        out = Text(f"{hostname}:{port}", style="bold")
    if paused:
        out.append(" paused", style="bold yellow")
    if note:
        out.append(f" {note}", style="bold red")
    return out


#: the columns of a topic's per-nsqd rows, (full, short) names; "In/s" is
#: messages/s published, "Out/s" messages/s taken from its channels' queues
TOPIC_NODE_COLUMNS = [("NSQd Host", "NSQd Host"), ("Depth", "Depth"), ("Mem + Disk", "Mem+Disk"),
                      ("Messages", "Msgs"), ("In/s", "In"), ("Out/s", "Out"), ("Channels", "Chan")]

#: the figures of a channel row, (full, short) names; "Dead" is this
#: project's nsqd ``dead_letter_count`` (0 from a Go nsqd); "In/s" messages/s
#: put into the channel, "Out/s" taken from its queue (nsq_stat's ingress
#: and egress)
CHANNEL_COLUMNS = [("Depth", "Depth"), ("Mem + Disk", "Mem+Disk"), ("In-Flight", "InFlt"), ("Deferred", "Def"),
                   ("Requeued", "Req"), ("Timed Out", "T-O"), ("Dead", "Dead"), ("Messages", "Msgs"),
                   ("Connections", "Conns"), ("In/s", "In"), ("Out/s", "Out")]


def channel_cells(c: ChannelStats, wide: bool = True) -> list[Text]:
    """The :data:`CHANNEL_COLUMNS` cells of a channel (compact when not ``wide``)."""
    return [num(fmt.count(c.depth)), num(fmt.mem_disk(c.memory_depth, c.backend_depth, not wide)),
            num(fmt.count(c.in_flight)), num(fmt.count(c.deferred)), num(fmt.count(c.requeued)),
            num(fmt.count(c.timed_out)), num(fmt.count(c.dead_letters), "bold red" if c.dead_letters else ""),
            num(fmt.count(c.messages)), num(fmt.count(c.client_count)), num(fmt.rate(c.rate)),
            num(fmt.rate(c.egress))]


def max_attempts_note(c: ChannelStats) -> str:
    """``"max 5 attempts"`` when the channel's nsqds move a message to its
    dead-letter topic instead of delivering it a 6th time; ``"max 3-5
    attempts"`` when they differ, ``"... on 1 of 2 nsqd"`` when some have
    it off; "" when it is off everywhere."""
    values = [n.max_attempts for n in c.nodes] or [c.max_attempts]
    on = [v for v in values if v]
    if not on:
        return ""
    low, high = min(on), max(on)
    text = f"max {high} attempt{'s' if high > 1 else ''}" if low == high else f"max {low}-{high} attempts"
    if len(on) < len(values):
        text += f" on {len(on)} of {len(values)} nsqd"
    return text
