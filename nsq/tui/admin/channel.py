"""The Channel screen: one channel's nsqds and every consumer connection,
and the channel actions (nsqadmin's ``nsqadmin/static/html/channel.hbs``);
``m`` peeks at its next messages (:mod:`.peek`). On nsqds that keep a topic
log (``--storage=wal``) an Offset column shows the channel's place in each
log, and ``R`` rewinds it: a time, a confirmation naming the nsqds, then
``POST /channel/rewind`` on each (:meth:`nsq.cluster.actions.Admin.rewind_channel`);
where a time is older than an nsqd retains, a second question offers that
nsqd's oldest retained message instead."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Label, Static

from nsq.cluster.actions import ActionResult, RewindResult
from nsq.cluster.model import ChannelStats, ClusterSnapshot
from nsq.cluster.rewind import NEEDS_STORAGE_WAL, format_time, parse_since
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.cells import (
    CHANNEL_COLUMNS,
    channel_cells,
    e2e_cells,
    e2e_quantiles,
    host_cell,
    max_attempts_note,
)
from nsq.tui.admin.dialogs import RewindScreen
from nsq.tui.admin.navigation import ShowNode, ShowPeek
from nsq.tui.admin.retention import node_name, rewind_targets, short_windows, since_text, window_text
from nsq.tui.widgets import SparkRow, fill_table, num, set_columns

__all__ = ["ChannelScreen"]


class ChannelScreen(AdminScreen):
    """One channel: its nsqds and its consumers."""

    AUTO_FOCUS = "#clients"
    BINDINGS: ClassVar = [
        Binding("p", "pause", "Pause"),
        Binding("e", "empty", "Empty"),
        Binding("d", "delete", "Delete"),
        Binding("m", "peek", "Peek"),
        Binding("R", "rewind", "Rewind"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]

    def __init__(self, topic: str, channel: str) -> None:
        super().__init__()
        self.topic = topic
        self.channel = channel

    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        with Horizontal(id="sparks"):
            yield SparkRow("depth", id="depth")
            yield SparkRow("in/s", id="rate")
            yield SparkRow("out/s", id="egress")
        yield Label("NSQd hosts", classes="section")
        yield DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        yield Label("Client connections", classes="section")
        yield DataTable(id="clients", cursor_type="row", zebra_stripes=True)
        yield Static("No clients connected to this channel", id="noclients", classes="notice")


    def _stats(self) -> ChannelStats | None:
        snapshot = self.admin_app.snapshot
        return snapshot.channel(self.topic, self.channel) if snapshot is not None else None

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        ch = snapshot.channel(self.topic, self.channel)
        title = Text("Topic: ", style="dim")
        title.append(self.topic, style="bold")
        title.append("  Channel: ", style="dim")
        title.append(self.channel, style="bold")
        if ch is None:
            title.append("  not found (deleted?)", style="bold red")
            ch = ChannelStats(topic=self.topic, name=self.channel)
        elif ch.paused:
            title.append("  paused", style="bold yellow")
        if note := max_attempts_note(ch):  # then the Dead column counts what went to the dead-letter topic
            title.append(f"  {note}", style="dim")
        self.query_one("#title", Static).update(title)
        self.query_one("#depth", SparkRow).show(ch.depth_history, fmt.count(ch.depth))
        self.query_one("#rate", SparkRow).show(ch.rate_history, fmt.rate(ch.rate))
        self.query_one("#egress", SparkRow).show(ch.egress_history, fmt.rate(ch.egress))
        self.query_one("#sparks").set_class(not self.wide("sparks"), "stacked")

        quantiles = e2e_quantiles([ch.e2e] + [n.e2e for n in ch.nodes])
        nodes = self.query_one("#nodes", DataTable)
        wide = self.wide("channel-nodes")
        # the channel's offset in each nsqd's topic log (--storage=wal), when one has it
        offsets = bool(ch.log_nodes)
        set_columns(nodes, self.labels("channel-nodes", [("NSQd Host", "NSQd Host")] + CHANNEL_COLUMNS)
                     + (["Offset"] if offsets else []) + [fmt.quantile_label(q) for q in quantiles])

        def offset(n: ChannelStats) -> list[Any]:
            if not offsets:
                return []
            return [num(fmt.count(n.offset) if n.offset is not None else ("" if n is ch else "-"))]

        rows: list[tuple[str, list[Any]]] = [
            (n.node, [host_cell(n.hostname, n.node, paused=n.paused, wide=wide)] + channel_cells(n, wide)
             + offset(n) + e2e_cells(n.e2e, quantiles)) for n in ch.nodes]
        if ch.nodes:
            rows.append(("*", [Text("Total", style="bold")] + [num(c.plain, "bold") for c in channel_cells(ch, wide)]
                         + offset(ch) + e2e_cells(ch.e2e, quantiles)))
        fill_table(nodes, rows)

        clients = self.query_one("#clients", DataTable)
        set_columns(clients, self.labels("clients", [
            ("Client Host", "Client"), ("User-Agent", "User-Agent"), ("Protocol", "Proto"), ("Attributes", "Attrs"),
            ("NSQd Host", "NSQd"), ("In-Flight", "InFlt"), ("Ready Count", "Rdy"), ("Finished", "Fin"),
            ("Requeued", "Req"), ("Messages", "Msgs"), ("Connected", "Conn")]))
        fill_table(clients, [
            (f"{c.node}/{c.remote_address}/{c.client_id}", [
                Text(c.host, style="bold"), c.user_agent, c.protocol,
                Text(" ".join(c.attributes), style="cyan"),
                f"{c.node_hostname}:{c.node.rsplit(':', 1)[-1]}" if c.node_hostname else c.node,
                num(fmt.count(c.in_flight)), num(fmt.count(c.ready)), num(fmt.count(c.finished)),
                num(fmt.count(c.requeued)), num(fmt.count(c.messages)),
                num(fmt.duration(snapshot.taken_at - c.connect_ts))])
            for c in ch.clients])
        clients.display = bool(ch.clients)
        self.query_one("#noclients", Static).display = not ch.clients

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "nodes" and event.row_key.value != "*":
            self.post_message(ShowNode(str(event.row_key.value)))

    def action_peek(self) -> None:
        self.post_message(ShowPeek(self.topic, self.channel))

    def action_rewind(self) -> None:
        """Ask for a time (:class:`~nsq.tui.admin.dialogs.RewindScreen`),
        then confirm, then rewind on every nsqd of the channel; on a
        channel none of whose nsqds keeps a topic log, say why not."""
        ch = self._stats()
        snapshot = self.admin_app.snapshot
        if ch is None or snapshot is None or self.admin_app.read_only:
            return
        if not ch.log_nodes:
            self.app.notify(f"rewind {self.topic}/{self.channel}: unavailable, {NEEDS_STORAGE_WAL} (no nsqd of "
                            "this channel keeps a topic log)", severity="warning", timeout=10)
            return
        window = window_text(snapshot.topic(self.topic), snapshot.taken_at)
        self.app.push_screen(RewindScreen(f"{self.topic}/{self.channel}", window), self._rewind_to)

    def _rewind_to(self, since: str | None) -> None:
        ch = self._stats()
        snapshot = self.admin_app.snapshot
        if not since or ch is None or snapshot is None:
            return
        topic, name = self.topic, self.channel
        targets = rewind_targets(snapshot, ch)
        question = (f"Rewind channel {topic}/{name} to {since_text(since)} on {len(targets)} nsqd "
                    f"({', '.join(t for t, _ in targets)})? Its consumers get every retained message published "
                    "since then again, in publish order (those in flight or deferred are not sent twice).")
        # nsqd takes a time before its oldest retained message as that message:
        # say so here, and ask for it (clamp) rather than have it refused
        short = short_windows(snapshot.topic(topic), ch, parse_since(since))
        for node, oldest in short:
            question += (f" {node} retains messages only since {format_time(oldest)} "
                         f"({fmt.duration(snapshot.taken_at - oldest / 1e9)} before the last poll): it goes back "
                         "to that one.")
        without = [node_name(n) for n in ch.nodes if n.offset is None]
        if without:
            question += f" {', '.join(without)} keep{'s' if len(without) == 1 else ''} no topic log: " \
                        f"{NEEDS_STORAGE_WAL}."
        clamp = bool(short)
        self.confirm(question, "Rewind", lambda a: a.rewind_channel(topic, name, since, targets, clamp=clamp),
                     then=self._offer_oldest)

    def _offer_oldest(self, results: list[ActionResult]) -> None:
        """After a rewind some nsqds refused (``OFFSET_NOT_RETAINED``: they
        no longer have messages that old, and the last poll did not show
        it), offer to rewind those to the oldest message each retains
        (``clamp``)."""
        refused = [r for r in results if isinstance(r, RewindResult) and r.not_retained]
        if not refused:
            return
        r = refused[0]
        topic, name, since, targets = r.topic, r.channel, r.since, list(r.not_retained)
        self.confirm(f"{', '.join(t for t, _ in targets)} no longer retain{'s' if len(targets) == 1 else ''} "
                     f"messages from {since_text(since)}. Rewind {topic}/{name} there to the oldest message each "
                     "retains instead?", "Rewind to oldest",
                     lambda a: a.rewind_channel(topic, name, since, targets, clamp=True))

    def action_pause(self) -> None:
        ch = self._stats()
        if ch is None:
            return
        topic, name, where = self.topic, self.channel, f"on {len(ch.nodes)} nsqd"
        if ch.paused:
            self.confirm(f"Unpause channel {topic}/{name} {where}? Its consumers get messages again.", "Unpause",
                         lambda a: a.unpause_channel(topic, name), destructive=False)
        else:
            self.confirm(f"Pause channel {topic}/{name} {where}? Messages queue up and its consumers get none.",
                         "Pause", lambda a: a.pause_channel(topic, name), destructive=False)

    def action_empty(self) -> None:
        ch = self._stats()
        if ch is None:
            return
        topic, name = self.topic, self.channel
        self.confirm(f"Empty channel {topic}/{name}? Its {fmt.plural(ch.depth, 'queued message')} on "
                     f"{len(ch.nodes)} nsqd {'is' if ch.depth == 1 else 'are'} lost.", "Empty",
                     lambda a: a.empty_channel(topic, name))

    def action_delete(self) -> None:
        ch = self._stats()
        if ch is None:
            return
        topic, name = self.topic, self.channel
        self.confirm(f"Delete channel {topic}/{name} from the lookupds and {len(ch.nodes)} nsqd? Its "
                     f"{fmt.plural(ch.depth, 'queued message')} {'is' if ch.depth == 1 else 'are'} lost and its "
                     f"{fmt.plural(ch.client_count, 'client')} disconnected.", "Delete", lambda a: a.delete_channel(topic, name), after=self._gone)

    def _gone(self) -> None:
        if self.app.screen is self:
            self.app.pop_screen()
