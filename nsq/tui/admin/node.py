"""The Node screen: one nsqd, with its topics, their channels and every
client connected to it (nsqadmin's node page,
``nsqadmin/static/html/node.hbs``). Enter on a topic or channel row opens
it; ``t`` tombstones the topic under the cursor on this nsqd."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label, Static

from nsq.cluster.model import ClientStats, ClusterSnapshot, NodeInfo, TopicStats
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.cells import CHANNEL_COLUMNS, channel_cells, name_cell
from nsq.tui.admin.navigation import ShowChannel, ShowTopic
from nsq.tui.widgets import fill_table, num, set_columns

__all__ = ["NodeScreen", "node_topics"]


def node_topics(snapshot: ClusterSnapshot, http_address: str) -> list[TopicStats]:
    """The topics of the nsqd at ``http_address`` (its own figures, its own
    channels and clients), sorted by name."""
    out = []
    for topic in snapshot.topics:
        out += [n for n in topic.nodes if n.node == http_address]
    return sorted(out, key=lambda t: t.name)


class NodeScreen(AdminScreen):
    """One nsqd: its topics and channels (one table, channels under their
    topic) and its clients."""

    AUTO_FOCUS = "#queues"
    BINDINGS: ClassVar = [
        Binding("t", "tombstone", "Tombstone"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]

    def __init__(self, http_address: str) -> None:
        super().__init__()
        self.http_address = http_address

    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        yield Label("Topics and channels", classes="section")
        yield DataTable(id="queues", cursor_type="row", zebra_stripes=True)
        yield Static("No topics on this nsqd.", id="notopics", classes="notice")
        yield Label("Clients", classes="section")
        yield DataTable(id="clients", cursor_type="row", zebra_stripes=True)
        yield Static("No clients connected to this nsqd.", id="noclients", classes="notice")

    def node(self) -> NodeInfo | None:
        """The nsqd (None when the cluster no longer lists it)."""
        snapshot = self.admin_app.snapshot
        return snapshot.node(self.http_address) if snapshot is not None else None

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        node = snapshot.node(self.http_address)
        topics = node_topics(snapshot, self.http_address)
        clients = sorted(((f"{t.name}/{ch.name}", c) for t in topics for ch in t.channels for c in ch.clients),
                         key=lambda x: (x[1].hostname, x[1].remote_address, x[0]))
        title = Text("NSQd: ", style="dim")
        if node is None:
            title.append(self.http_address, style="bold")
            title.append("  not found (gone?)", style="bold red")
        else:
            title.append(f"{node.hostname}:{node.http_port} " if node.hostname else "", style="bold")
            title.append(f"({self.http_address})")
            if node.error:
                title.append("  ✘ unreachable", style="bold red")
            elif node.version:
                title.append(f"  v{node.version}", style="yellow" if node.out_of_date else "dim")
        title.append(f"  {fmt.plural(len(topics), 'topic')} · "
                     f"{fmt.plural(sum(t.messages for t in topics), 'message')} · "
                     f"{fmt.plural(len(clients), 'client')}", style="dim")
        self.query_one("#title", Static).update(title)

        wide = self.wide("channels")
        queues = self.query_one("#queues", DataTable)
        set_columns(queues, self.labels("channels", [("Topic / Channel", "Topic/Channel")] + CHANNEL_COLUMNS))
        rows: list[tuple[str, list[Any]]] = []
        for t in topics:
            rows.append((t.name, self._topic_cells(t, wide)))
            for ch in t.channels:
                rows.append((f"{t.name}/{ch.name}",
                             [name_cell(f"  {ch.name}", paused=ch.paused)] + channel_cells(ch, wide)))
        fill_table(queues, rows)
        queues.display = bool(rows)
        self.query_one("#notopics", Static).display = not rows

        table = self.query_one("#clients", DataTable)
        set_columns(table, self.labels("clients", [
            ("Client Host", "Client"), ("User-Agent", "User-Agent"), ("Attributes", "Attrs"),
            ("Topic / Channel", "Topic/Channel"), ("In-Flight", "InFlt"), ("Ready Count", "Rdy"),
            ("Requeued", "Req"), ("Finished", "Fin"), ("Messages", "Msgs"), ("Connected", "Conn")]))
        fill_table(table, [(f"{c.remote_address}/{c.client_id}/{where}", self._client_cells(c, where, snapshot.taken_at))
                           for where, c in clients])
        table.display = bool(clients)
        self.query_one("#noclients", Static).display = not clients

    @staticmethod
    def _topic_cells(t: TopicStats, wide: bool) -> list[Any]:
        """A topic row: its own queue's figures under the channel columns."""
        cells: list[Any] = [name_cell(t.name, paused=t.paused, style="bold",
                                      note="tombstoned" if t.tombstoned else "")]
        figures = {"Depth": fmt.count(t.depth), "Mem + Disk": fmt.mem_disk(t.memory_depth, t.backend_depth, not wide),
                   "Messages": fmt.count(t.messages), "In/s": fmt.rate(t.rate), "Out/s": fmt.rate(t.egress)}
        cells += [num(figures.get(full, ""), "bold") for full, _ in CHANNEL_COLUMNS]
        return cells

    @staticmethod
    def _client_cells(c: ClientStats, where: str, now: float) -> list[Any]:
        return [Text(c.host, style="bold"), c.user_agent, Text(" ".join(c.attributes), style="cyan"),
                where, num(fmt.count(c.in_flight)), num(fmt.count(c.ready)),
                num(fmt.count(c.requeued)), num(fmt.count(c.finished)), num(fmt.count(c.messages)),
                num(fmt.duration(now - c.connect_ts))]

    def _cursor_key(self) -> str | None:
        table = self.query_one("#queues", DataTable)
        if not table.row_count:
            return None
        return str(table.ordered_rows[table.cursor_row].key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id != "queues":
            return
        topic, _, channel = str(event.row_key.value).partition("/")
        self.post_message(ShowChannel(topic, channel) if channel else ShowTopic(topic))

    def action_tombstone(self) -> None:
        key = self._cursor_key()
        if key is None:
            return
        topic = key.partition("/")[0]
        node = self.http_address
        self.confirm(f"Tombstone topic {topic} on nsqd {node}? The lookupds stop listing that nsqd for the "
                     "topic (for their --tombstone-lifetime) and the topic is deleted on it.", "Tombstone",
                     lambda a: a.tombstone(topic, node))

