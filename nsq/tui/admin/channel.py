"""The Channel screen: one channel's nsqds and every consumer connection,
and the channel actions (nsqadmin's ``nsqadmin/static/html/channel.hbs``);
``m`` peeks at its next messages (:mod:`.peek`)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Label, Static

from nsq.cluster.model import ChannelStats, ClusterSnapshot
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
from nsq.tui.admin.navigation import ShowNode, ShowPeek
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
        set_columns(nodes, self.labels("channel-nodes", [("NSQd Host", "NSQd Host")] + CHANNEL_COLUMNS)
                     + [fmt.quantile_label(q) for q in quantiles])
        rows: list[tuple[str, list[Any]]] = [
            (n.node, [host_cell(n.hostname, n.node, paused=n.paused, wide=wide)] + channel_cells(n, wide)
             + e2e_cells(n.e2e, quantiles)) for n in ch.nodes]
        if ch.nodes:
            rows.append(("*", [Text("Total", style="bold")] + [num(c.plain, "bold") for c in channel_cells(ch, wide)]
                         + e2e_cells(ch.e2e, quantiles)))
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
