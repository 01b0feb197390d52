"""The Topic screen: one topic's nsqds and channels, e2e percentiles,
sparklines, and the topic actions with their confirmations (nsqadmin's
``nsqadmin/static/html/topic.hbs``); ``m`` peeks at the messages the topic
holds itself when it has no channel (or holds some while paused). When its
nsqds keep a topic log (``--storage=wal``), the window retained for replay:
per nsqd and in total, bytes, messages, the oldest one's time and age, the
offsets and the retention settings (:mod:`.retention`)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Label, Static

from nsq.cluster.model import ClusterSnapshot, TopicStats
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.cells import (
    CHANNEL_COLUMNS,
    TOPIC_NODE_COLUMNS,
    channel_cells,
    e2e_cells,
    e2e_quantiles,
    host_cell,
    max_attempts_note,
    name_cell,
)
from nsq.tui.admin.confirmations import confirm_delete_topic, confirm_empty_topic, confirm_pause_topic
from nsq.tui.admin.navigation import ShowChannel, ShowNode, ShowPeek
from nsq.tui.admin.retention import TOPIC_LOG_COLUMNS, topic_log_rows
from nsq.tui.widgets import SparkRow, fill_table, num, set_columns

__all__ = ["TopicScreen"]


class TopicScreen(AdminScreen):
    """One topic: its nsqds and its channels."""

    AUTO_FOCUS = "#channels"
    BINDINGS: ClassVar = [
        Binding("c", "create", "New"),
        Binding("p", "pause", "Pause"),
        Binding("e", "empty", "Empty"),
        Binding("d", "delete", "Delete"),
        Binding("t", "tombstone", "Tombstone"),
        Binding("m", "peek", "Peek"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.topic = topic
        self._can_peek: bool | None = None

    def can_peek(self) -> bool:
        """Whether the topic's own queue is worth a peek: an nsqd has the
        topic and it has no channel (messages wait in the topic) or holds
        messages itself (paused)."""
        topic = self._stats()
        return topic is not None and bool(topic.nodes) and (not topic.channels or topic.depth > 0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "peek":
            return self.can_peek()
        return super().check_action(action, parameters)

    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        with Horizontal(id="sparks"):
            yield SparkRow("queued", id="depth")
            yield SparkRow("in/s", id="rate")
            yield SparkRow("out/s", id="egress")
        yield Label("NSQd hosts", classes="section")
        yield DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        yield Static("No nsqd has this topic (only lookupd knows it).", id="nonodes", classes="notice")
        yield Label("Retained for replay (topic log, nsqd --storage=wal)", classes="section", id="retention-label")
        yield DataTable(id="retention", cursor_type="row", zebra_stripes=True)
        yield Label("Channels", classes="section")
        yield DataTable(id="channels", cursor_type="row", zebra_stripes=True)
        yield Static("No channels exist for this topic. Messages will queue at the topic until a channel is "
                     "created.", id="nochannels", classes="notice")


    def _stats(self) -> TopicStats | None:
        snapshot = self.admin_app.snapshot
        return snapshot.topic(self.topic) if snapshot is not None else None

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        topic = snapshot.topic(self.topic)
        title = Text("Topic: ", style="dim")
        title.append(self.topic, style="bold")
        if topic is None:
            title.append("  not found (deleted?)", style="bold red")
            self.query_one("#title", Static).update(title)
            topic = TopicStats(name=self.topic)
        else:
            if topic.paused:
                title.append("  paused", style="bold yellow")
            title.append(f"  {topic.producers} nsqd · {fmt.plural(len(topic.channels), 'channel')} · "
                         f"{fmt.plural(topic.client_count, 'client')}", style="dim")
            self.query_one("#title", Static).update(title)
        queued = topic.depth + sum(c.depth for c in topic.channels)
        self.query_one("#depth", SparkRow).show(topic.depth_history, fmt.count(queued))
        self.query_one("#rate", SparkRow).show(topic.rate_history, fmt.rate(topic.rate))
        self.query_one("#egress", SparkRow).show(topic.egress_history, fmt.rate(topic.egress))
        self.query_one("#sparks").set_class(not self.wide("sparks"), "stacked")

        quantiles = e2e_quantiles([topic.e2e] + [n.e2e for n in topic.nodes])
        nodes = self.query_one("#nodes", DataTable)
        wide = self.wide("topic-nodes")
        # narrow: no Channels column (the title counts them), so 80 columns hold the rest
        keep = [i for i, (full, _) in enumerate(TOPIC_NODE_COLUMNS) if wide or full != "Channels"]
        labels = self.labels("topic-nodes", TOPIC_NODE_COLUMNS)
        set_columns(nodes, [labels[i] for i in keep] + [fmt.quantile_label(q) for q in quantiles])

        def row(cells: list[Any], e2e: list[Any]) -> list[Any]:
            return [cells[i] for i in keep] + e2e

        rows: list[tuple[str, list[Any]]] = []
        for n in topic.nodes:
            rows.append((n.node, row([host_cell(n.hostname, n.node, paused=n.paused,
                                                note="tombstoned" if n.tombstoned else "", wide=wide),
                                      num(fmt.count(n.depth)),
                                      num(fmt.mem_disk(n.memory_depth, n.backend_depth, not wide)),
                                      num(fmt.count(n.messages)), num(fmt.rate(n.rate)), num(fmt.rate(n.egress)),
                                      num(len(n.channels))], e2e_cells(n.e2e, quantiles))))
        seen = {n.node for n in topic.nodes}
        for node in snapshot.nodes:  # listed with the topic by lookupd, but its stats failed
            if node.error and node.http_address not in seen and any(t == self.topic for t, _ in node.topics):
                host = host_cell(node.hostname, node.http_address, note="✘ unreachable", wide=wide)
                rows.append((node.http_address, row([host] + [num("-")] * (len(TOPIC_NODE_COLUMNS) - 1),
                                                    [num("-")] * len(quantiles))))
        if topic.nodes:
            rows.append(("*", row([Text("Total", style="bold"), num(fmt.count(topic.depth), "bold"),
                                   num(fmt.mem_disk(topic.memory_depth, topic.backend_depth, not wide), "bold"),
                                   num(fmt.count(topic.messages), "bold"), num(fmt.rate(topic.rate), "bold"),
                                   num(fmt.rate(topic.egress), "bold"), num(len(topic.channels), "bold")],
                                  e2e_cells(topic.e2e, quantiles))))
        fill_table(nodes, rows)
        nodes.display = bool(rows)
        self.query_one("#nonodes", Static).display = not rows

        # the topic log's retained window, when its nsqds keep one
        retention = self.query_one("#retention", DataTable)
        keep = [i for i, (full, _) in enumerate(TOPIC_LOG_COLUMNS)
                if self.wide("topic-log-times") or full not in ("Oldest Message", "First Offset")]
        log_rows = [(key, [cells[i] for i in keep])
                    for key, cells in topic_log_rows(topic, snapshot.taken_at, self.wide("topic-log"))]
        if log_rows:
            labels = self.labels("topic-log", TOPIC_LOG_COLUMNS)
            set_columns(retention, [labels[i] for i in keep])
        fill_table(retention, log_rows)
        retention.display = bool(log_rows)
        self.query_one("#retention-label", Label).display = bool(log_rows)

        quantiles = e2e_quantiles([c.e2e for c in topic.channels])
        channels = self.query_one("#channels", DataTable)
        set_columns(channels, self.labels("channels", [("Channel", "Channel")] + CHANNEL_COLUMNS)
                     + [fmt.quantile_label(q) for q in quantiles])
        wide = self.wide("channels")
        # max attempts beside the name when there is room (the Channel screen's title always has it)
        fill_table(channels, [(c.name, [name_cell(c.name, paused=c.paused, note=max_attempts_note(c) if wide else "",
                                                  style="bold")]
                               + channel_cells(c, wide) + e2e_cells(c.e2e, quantiles)) for c in topic.channels])
        channels.display = bool(topic.channels)
        self.query_one("#nochannels", Static).display = not topic.channels
        if self.can_peek() != self._can_peek:  # show or hide "m Peek" in the footer
            self._can_peek = self.can_peek()
            self.refresh_bindings()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "channels":
            self.post_message(ShowChannel(self.topic, str(event.row_key.value)))
        elif event.data_table.id in ("nodes", "retention") and event.row_key.value != "*":
            self.post_message(ShowNode(str(event.row_key.value)))

    def action_create(self) -> None:
        self.create(self.topic)

    def action_peek(self) -> None:
        if self.can_peek():
            self.post_message(ShowPeek(self.topic))

    def action_pause(self) -> None:
        topic = self._stats()
        if topic is not None:
            confirm_pause_topic(self, topic)

    def action_empty(self) -> None:
        topic = self._stats()
        if topic is not None:
            confirm_empty_topic(self, topic)

    def action_delete(self) -> None:
        topic = self._stats()
        if topic is not None:
            confirm_delete_topic(self, topic, after=self._gone)

    def _gone(self) -> None:
        if self.app.screen is self:
            self.app.pop_screen()

    def action_tombstone(self) -> None:
        table = self.query_one("#nodes", DataTable)
        if not table.row_count:
            return
        node = str(table.ordered_rows[table.cursor_row].key.value)
        if node == "*":
            self.app.notify("select an nsqd row (not Total) to tombstone", severity="warning")
            return
        topic = self.topic
        self.confirm(f"Tombstone topic {topic} on nsqd {node}? The lookupds stop listing that nsqd for the "
                     "topic (for their --tombstone-lifetime) and the topic is deleted on it.", "Tombstone",
                     lambda a: a.tombstone(topic, node))
