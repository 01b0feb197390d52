"""``nsq admin``: Go nsqadmin's pages as a Textual app.

Screens (each refreshed at every poll, every ``refresh_interval`` seconds):

- Topics: every topic with depth, memory + disk, in flight, deferred,
  messages, rate, channels and producers, cluster totals and a rate
  sparkline on top; sort and filter.
- Topic: per nsqd and per channel figures (e2e percentiles when nsqd
  records them), sparklines of the queued messages and the rate.
- Channel: per nsqd figures and every consumer connection.
- Nodes: the nsqds (version, ports, lookupd connections, topics and
  tombstones) and the lookupds.

Admin actions (create, pause/unpause, empty, delete, tombstone) ask for a
confirmation, run through :class:`~nsq.tui.actions.Admin` and report in a
toast; a read-only app shows and binds none of them. The data comes from a
*source*: anything with ``description`` and ``async poll() ->
ClusterSnapshot`` (:class:`~nsq.tui.cluster.Cluster`, or
:class:`FixedSource` for screenshots and tests).

CSS is inline (not a ``.tcss`` file) so the app runs from the zipapp
without package data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, ScreenStackError
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Label, Static

from nsq.tui import fmt
from nsq.tui.actions import ActionResult, Admin
from nsq.tui.model import ChannelStats, ClusterSnapshot, NodeInfo, Percentile, TopicStats
from nsq.tui.widgets import ConfirmScreen, CreateScreen, HelpScreen, SparkRow, fill_table, num, set_columns

__all__ = ["AdminApp", "FixedSource", "KEYS", "REFRESH_INTERVALS"]

#: the refresh intervals ``+`` and ``-`` step through, seconds
REFRESH_INTERVALS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0)

#: the keys, by screen: (keys, what, changes the cluster); the help screen
#: and the README show this table
KEYS: list[tuple[str, list[tuple[str, str, bool]]]] = [
    ("Everywhere", [
        ("?", "this help", False),
        ("1 / 2", "Topics / Nodes screen", False),
        ("escape, backspace", "back (up from channel to topic to topics)", False),
        ("up, down, pgup, pgdn", "move in the table; enter (or a second click) opens the row", False),
        ("tab", "next table or field", False),
        ("r", "refresh now", False),
        ("+ / -", "refresh less / more often (0.5s to 60s)", False),
        ("q", "quit", False),
    ]),
    ("Topics", [
        ("enter", "open the topic", False),
        ("/", "filter topics by name (escape clears)", False),
        ("s / S", "sort by the next column / reverse (or click a column header)", False),
        ("c", "create a topic and optionally a channel", True),
        ("p", "pause or unpause the topic", True),
        ("e", "empty the topic's own queue", True),
        ("d", "delete the topic", True),
    ]),
    ("Topic", [
        ("enter", "open the channel (channel table)", False),
        ("c", "create a channel in this topic", True),
        ("p / e / d", "pause or unpause / empty / delete the topic", True),
        ("t", "tombstone the topic on the selected nsqd (and delete it there)", True),
    ]),
    ("Channel", [
        ("p / e / d", "pause or unpause / empty / delete the channel", True),
    ]),
]

#: terminal width from which each table uses full column names
WIDE_FROM = {"topics": 100, "topic-nodes": 110, "channels": 140, "channel-nodes": 150, "clients": 160}

#: every action that changes the cluster (none of them in read-only mode)
ADMIN_ACTIONS = frozenset({"create", "pause", "empty", "delete", "tombstone"})


class FixedSource:
    """A source that answers every poll with the same snapshot (screenshots, tests)."""

    def __init__(self, snapshot: ClusterSnapshot, description: str = "lookupd 127.0.0.1:4161") -> None:
        self.snapshot = snapshot
        self.description = description

    async def poll(self) -> ClusterSnapshot:
        """The snapshot given."""
        return self.snapshot


def _e2e_quantiles(groups: Sequence[Sequence[Percentile]]) -> list[float]:
    return sorted({p.quantile for g in groups for p in g}, reverse=True)


def _e2e_cells(e2e: Sequence[Percentile], quantiles: Sequence[float]) -> list[Text]:
    by_q = {p.quantile: p for p in e2e}
    return [num(fmt.latency(by_q[q].average) if q in by_q else "-") for q in quantiles]


def _name(text: str, *, paused: bool = False, note: str = "", style: str = "") -> Text:
    out = Text(text, style=style)
    if paused:
        out.append(" paused", style="bold yellow")
    if note:
        out.append(f" {note}", style="italic dim")
    return out


class AdminScreen(Screen):
    """Header, status line, the screen's body, error lines, footer."""

    BINDINGS: ClassVar = [
        Binding("escape,backspace", "back", "Back"),
    ]

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        yield Static("", id="status")
        yield from self.compose_body()
        yield Static("", id="errors")
        yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        """The widgets between the status line and the errors."""
        return iter(())

    def wide(self, table: str) -> bool:
        """Room for ``table``'s full column names (else nsq_stat-like short
        ones and compact cells, so that 80 columns show the most)."""
        return self.app.size.width >= WIDE_FROM[table]

    def labels(self, table: str, columns: Sequence[tuple[str, str]]) -> list[str]:
        """The (full, short) column names that fit."""
        wide = self.wide(table)
        return [full if wide else short for full, short in columns]

    def on_resize(self) -> None:
        self.on_screen_resume()

    @property
    def admin_app(self) -> AdminApp:
        """The app (typed)."""
        return self.app  # type: ignore[return-value]

    def on_screen_resume(self) -> None:
        snapshot = self.admin_app.snapshot
        if snapshot is not None:
            self.show(snapshot)

    def on_mount(self) -> None:
        self.on_screen_resume()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ADMIN_ACTIONS:
            return not self.admin_app.read_only
        if action == "back":
            return len(self.app.screen_stack) > 1
        return True

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    def show(self, snapshot: ClusterSnapshot) -> None:
        """Render ``snapshot`` (status, errors, then :meth:`show_body`);
        nothing before the screen is composed (it renders itself at mount)."""
        if not self.query("#status"):
            return
        app = self.admin_app
        t = snapshot.totals
        parts = [f"refresh {fmt.interval(app.refresh_interval)}",
                 f"{t.topics} topics", f"{t.channels} channels", f"{t.nodes_up}/{t.nodes} nsqd",
                 f"{t.clients} clients"]
        status = Text(" · ".join(parts), style="dim")
        if app.read_only:
            status.append("  READ-ONLY", style="bold yellow")
            if app.read_only_reason:
                status.append(f" ({app.read_only_reason})", style="yellow")
        elif app.user:
            status.append(f"  user {app.user}", style="dim")
        self.query_one("#status", Static).update(status)
        errors = self.query_one("#errors", Static)
        lines = [f"✘ {e.message}" for e in snapshot.errors]
        if app.poll_error:
            lines.insert(0, f"✘ poll failed: {app.poll_error}")
        if len(lines) > 3:
            lines = lines[:2] + [f"✘ ... and {len(lines) - 2} more (Nodes screen: 2)"]
        errors.update(Text("\n".join(lines), style="bold red"))
        errors.display = bool(lines)
        self.show_body(snapshot)

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        """Render the screen's own widgets."""

    def confirm(self, question: str, verb: str, job: Callable[[Admin], Awaitable[Any]], *,
                destructive: bool = True, after: Callable[[], None] | None = None) -> None:
        """Ask ``question``; on yes run ``job(admin)`` (then ``after`` if every result is ok)."""
        if self.admin_app.read_only:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.admin_app.run_admin(job, after)

        self.app.push_screen(ConfirmScreen(question, verb, destructive), answered)

    def create(self, topic: str = "") -> None:
        """Open the create form, then create what it gives."""
        if self.admin_app.read_only:
            return

        def answered(value: tuple[str, str] | None) -> None:
            if value:
                topic_name, channel = value
                self.admin_app.run_admin(lambda admin: admin.create(topic_name, channel))

        self.app.push_screen(CreateScreen(topic), answered)


class TopicsScreen(AdminScreen):
    """Every topic of the cluster."""

    AUTO_FOCUS = "#topics"
    BINDINGS: ClassVar = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("c", "create", "New"),
        Binding("p", "pause", "Pause"),
        Binding("e", "empty", "Empty"),
        Binding("d", "delete", "Delete"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]
    #: (column label, short label, sort key); numbers sort largest first
    COLUMNS: ClassVar = [
        ("Topic", "Topic", lambda t: t.name),
        ("Depth", "Depth", lambda t: t.depth),
        ("Mem + Disk", "Mem+Disk", lambda t: t.backend_depth),
        ("In-Flight", "InFlt", lambda t: t.in_flight),
        ("Deferred", "Def", lambda t: t.deferred),
        ("Messages", "Msgs", lambda t: t.messages),
        ("Rate/s", "Rate", lambda t: t.rate or 0.0),
        ("Channels", "Chan", lambda t: len(t.channels)),
        ("Producers", "Prod", lambda t: t.producers),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_column = 0
        self.sort_reverse = False
        self.filter_text = ""

    def compose_body(self) -> ComposeResult:
        yield Static("", id="totals")
        yield SparkRow("cluster msg/s", id="rate")
        box = Input(placeholder="filter topics (escape clears)", id="filter")
        box.display = False
        yield box
        yield DataTable(id="topics", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self._columns()
        super().on_mount()

    def _columns(self) -> None:
        labels = []
        for i, label in enumerate(self.labels("topics", [(full, short) for full, short, _ in self.COLUMNS])):
            if i == self.sort_column:
                label += " ▲" if (i == 0) != self.sort_reverse else " ▼"
            labels.append(label)
        set_columns(self.query_one("#topics", DataTable), labels)

    def selected(self) -> TopicStats | None:
        """The topic under the cursor."""
        table = self.query_one("#topics", DataTable)
        snapshot = self.admin_app.snapshot
        if snapshot is None or not table.row_count:
            return None
        key = table.ordered_rows[table.cursor_row].key.value
        return snapshot.topic(str(key))

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        self._columns()
        t = snapshot.totals
        totals = Text()
        for label, value in (("depth", f"{fmt.count(t.depth)} ({fmt.mem_disk(t.memory_depth, t.backend_depth)})"),
                             ("channel depth", fmt.count(t.channel_depth)), ("in-flight", fmt.count(t.in_flight)),
                             ("deferred", fmt.count(t.deferred)), ("messages", fmt.count(t.messages)),
                             ("msg/s", fmt.rate(t.rate))):
            totals.append(f"{label} ", style="dim")
            totals.append(value + "  ", style="bold")
        self.query_one("#totals", Static).update(totals)
        self.query_one("#rate", SparkRow).show(snapshot.rate_history, fmt.rate(t.rate))
        topics = [x for x in snapshot.topics if self.filter_text.lower() in x.name.lower()]
        key = self.COLUMNS[self.sort_column][2]
        compact = not self.wide("topics")
        topics.sort(key=lambda x: x.name)
        topics.sort(key=key, reverse=(self.sort_column != 0) != self.sort_reverse)
        rows = []
        for x in topics:
            inactive = not x.nodes
            rows.append((x.name, [
                _name(x.name, paused=x.paused, note="(no nsqd)" if inactive else "", style="bold"),
                num(fmt.count(x.depth)), num(fmt.mem_disk(x.memory_depth, x.backend_depth, compact)),
                num(fmt.count(x.in_flight)), num(fmt.count(x.deferred)), num(fmt.count(x.messages)),
                num(fmt.rate(x.rate)), num(len(x.channels)), num(x.producers),
            ]))
        fill_table(self.query_one("#topics", DataTable), rows)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.push_screen(TopicScreen(str(event.row_key.value)))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        if event.column_index == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = event.column_index, False
        self._resort()

    def _resort(self) -> None:
        self._columns()
        if self.admin_app.snapshot is not None:
            self.show_body(self.admin_app.snapshot)

    def action_sort(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(self.COLUMNS)
        self.sort_reverse = False
        self._resort()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._resort()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()
        self.refresh_bindings()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        if self.admin_app.snapshot is not None:
            self.show_body(self.admin_app.snapshot)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#topics", DataTable).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            return self.query_one("#filter", Input).display or len(self.app.screen_stack) > 1
        return super().check_action(action, parameters)

    def action_back(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display:
            box.value = ""
            box.display = False
            self.query_one("#topics", DataTable).focus()
            self.refresh_bindings()
            return
        super().action_back()

    def action_create(self) -> None:
        self.create()

    def action_pause(self) -> None:
        topic = self.selected()
        if topic is not None:
            _pause_topic(self, topic)

    def action_empty(self) -> None:
        topic = self.selected()
        if topic is not None:
            _empty_topic(self, topic)

    def action_delete(self) -> None:
        topic = self.selected()
        if topic is not None:
            _delete_topic(self, topic)


def _pause_topic(screen: AdminScreen, topic: TopicStats) -> None:
    name = topic.name
    if topic.paused:
        screen.confirm(f"Unpause topic {name} on {topic.producers} nsqd? Messages flow to its channels again.",
                       "Unpause", lambda a: a.unpause_topic(name), destructive=False)
    else:
        screen.confirm(f"Pause topic {name} on {topic.producers} nsqd? Messages stay in the topic and stop "
                       "flowing to its channels.", "Pause", lambda a: a.pause_topic(name), destructive=False)


def _empty_topic(screen: AdminScreen, topic: TopicStats) -> None:
    name = topic.name
    screen.confirm(f"Empty topic {name}? The {fmt.count(topic.depth)} messages queued in the topic itself "
                   f"(not in its channels) on {topic.producers} nsqd are lost.", "Empty",
                   lambda a: a.empty_topic(name))


def _delete_topic(screen: AdminScreen, topic: TopicStats, after: Callable[[], None] | None = None) -> None:
    name = topic.name
    screen.confirm(f"Delete topic {name} with its {len(topic.channels)} channels from the lookupds and "
                   f"{topic.producers} nsqd? Every queued message is lost.", "Delete",
                   lambda a: a.delete_topic(name), after=after)


def _host_cell(hostname: str, address: str, *, paused: bool = False, note: str = "", wide: bool = True) -> Text:
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


class TopicScreen(AdminScreen):
    """One topic: its nsqds and its channels."""

    AUTO_FOCUS = "#channels"
    BINDINGS: ClassVar = [
        Binding("c", "create", "New"),
        Binding("p", "pause", "Pause"),
        Binding("e", "empty", "Empty"),
        Binding("d", "delete", "Delete"),
        Binding("t", "tombstone", "Tombstone"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.topic = topic

    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        with Horizontal(id="sparks"):
            yield SparkRow("queued", id="depth")
            yield SparkRow("msg/s", id="rate")
        yield Label("NSQd hosts", classes="section")
        yield DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        yield Static("No nsqd has this topic (only lookupd knows it).", id="nonodes", classes="notice")
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
            title.append(f"  {topic.producers} nsqd · {len(topic.channels)} channels · "
                         f"{fmt.count(topic.client_count)} clients", style="dim")
            self.query_one("#title", Static).update(title)
        queued = topic.depth + sum(c.depth for c in topic.channels)
        self.query_one("#depth", SparkRow).show(topic.depth_history, fmt.count(queued))
        self.query_one("#rate", SparkRow).show(topic.rate_history, fmt.rate(topic.rate))

        quantiles = _e2e_quantiles([topic.e2e] + [n.e2e for n in topic.nodes])
        nodes = self.query_one("#nodes", DataTable)
        wide = self.wide("topic-nodes")
        set_columns(nodes, self.labels("topic-nodes", TOPIC_NODE_COLUMNS) + [fmt.quantile_label(q) for q in quantiles])
        rows: list[tuple[str, list[Any]]] = []
        for n in topic.nodes:
            rows.append((n.node, [_host_cell(n.hostname, n.node, paused=n.paused,
                                             note="tombstoned" if n.tombstoned else "", wide=wide),
                                  num(fmt.count(n.depth)), num(fmt.mem_disk(n.memory_depth, n.backend_depth, not wide)),
                                  num(fmt.count(n.messages)), num(fmt.rate(n.rate)), num(len(n.channels))]
                         + _e2e_cells(n.e2e, quantiles)))
        seen = {n.node for n in topic.nodes}
        for node in snapshot.nodes:  # listed with the topic by lookupd, but its stats failed
            if node.error and node.http_address not in seen and any(t == self.topic for t, _ in node.topics):
                rows.append((node.http_address, [_host_cell(node.hostname, node.http_address, note="✘ unreachable",
                                                            wide=wide)]
                             + [num("-")] * (5 + len(quantiles))))
        if topic.nodes:
            rows.append(("*", [Text("Total", style="bold"), num(fmt.count(topic.depth), "bold"),
                               num(fmt.mem_disk(topic.memory_depth, topic.backend_depth, not wide), "bold"),
                               num(fmt.count(topic.messages), "bold"), num(fmt.rate(topic.rate), "bold"),
                               num(len(topic.channels), "bold")] + _e2e_cells(topic.e2e, quantiles)))
        fill_table(nodes, rows)
        nodes.display = bool(rows)
        self.query_one("#nonodes", Static).display = not rows

        quantiles = _e2e_quantiles([c.e2e for c in topic.channels])
        channels = self.query_one("#channels", DataTable)
        set_columns(channels, self.labels("channels", [("Channel", "Channel")] + CHANNEL_COLUMNS)
                     + [fmt.quantile_label(q) for q in quantiles])
        wide = self.wide("channels")
        fill_table(channels, [(c.name, [_name(c.name, paused=c.paused, style="bold")] + _channel_cells(c, wide)
                               + _e2e_cells(c.e2e, quantiles)) for c in topic.channels])
        channels.display = bool(topic.channels)
        self.query_one("#nochannels", Static).display = not topic.channels

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "channels":
            self.app.push_screen(ChannelScreen(self.topic, str(event.row_key.value)))

    def action_create(self) -> None:
        self.create(self.topic)

    def action_pause(self) -> None:
        topic = self._stats()
        if topic is not None:
            _pause_topic(self, topic)

    def action_empty(self) -> None:
        topic = self._stats()
        if topic is not None:
            _empty_topic(self, topic)

    def action_delete(self) -> None:
        topic = self._stats()
        if topic is not None:
            _delete_topic(self, topic, after=self._gone)

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


#: the columns of a topic's per-nsqd rows, (full, short) names
TOPIC_NODE_COLUMNS = [("NSQd Host", "NSQd Host"), ("Depth", "Depth"), ("Mem + Disk", "Mem+Disk"),
                      ("Messages", "Msgs"), ("Rate/s", "Rate"), ("Channels", "Chan")]

#: the figures of a channel row, (full, short) names
CHANNEL_COLUMNS = [("Depth", "Depth"), ("Mem + Disk", "Mem+Disk"), ("In-Flight", "InFlt"), ("Deferred", "Def"),
                   ("Requeued", "Req"), ("Timed Out", "T-O"), ("Messages", "Msgs"), ("Connections", "Conns"),
                   ("Rate/s", "Rate")]


def _channel_cells(c: ChannelStats, wide: bool = True) -> list[Text]:
    return [num(fmt.count(c.depth)), num(fmt.mem_disk(c.memory_depth, c.backend_depth, not wide)),
            num(fmt.count(c.in_flight)), num(fmt.count(c.deferred)), num(fmt.count(c.requeued)),
            num(fmt.count(c.timed_out)), num(fmt.count(c.messages)), num(fmt.count(c.client_count)),
            num(fmt.rate(c.rate))]


class ChannelScreen(AdminScreen):
    """One channel: its nsqds and its consumers."""

    AUTO_FOCUS = "#clients"
    BINDINGS: ClassVar = [
        Binding("p", "pause", "Pause"),
        Binding("e", "empty", "Empty"),
        Binding("d", "delete", "Delete"),
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
            yield SparkRow("msg/s", id="rate")
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
        self.query_one("#title", Static).update(title)
        self.query_one("#depth", SparkRow).show(ch.depth_history, fmt.count(ch.depth))
        self.query_one("#rate", SparkRow).show(ch.rate_history, fmt.rate(ch.rate))

        quantiles = _e2e_quantiles([ch.e2e] + [n.e2e for n in ch.nodes])
        nodes = self.query_one("#nodes", DataTable)
        wide = self.wide("channel-nodes")
        set_columns(nodes, self.labels("channel-nodes", [("NSQd Host", "NSQd Host")] + CHANNEL_COLUMNS)
                     + [fmt.quantile_label(q) for q in quantiles])
        rows: list[tuple[str, list[Any]]] = [
            (n.node, [_host_cell(n.hostname, n.node, paused=n.paused, wide=wide)] + _channel_cells(n, wide)
             + _e2e_cells(n.e2e, quantiles)) for n in ch.nodes]
        if ch.nodes:
            rows.append(("*", [Text("Total", style="bold")] + [num(c.plain, "bold") for c in _channel_cells(ch, wide)]
                         + _e2e_cells(ch.e2e, quantiles)))
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
        self.confirm(f"Empty channel {topic}/{name}? Its {fmt.count(ch.depth)} queued messages on "
                     f"{len(ch.nodes)} nsqd are lost.", "Empty", lambda a: a.empty_channel(topic, name))

    def action_delete(self) -> None:
        ch = self._stats()
        if ch is None:
            return
        topic, name = self.topic, self.channel
        self.confirm(f"Delete channel {topic}/{name} from the lookupds and {len(ch.nodes)} nsqd? Its "
                     f"{fmt.count(ch.depth)} queued messages are lost and its {ch.client_count} clients "
                     "disconnected.", "Delete", lambda a: a.delete_channel(topic, name), after=self._gone)

    def _gone(self) -> None:
        if self.app.screen is self:
            self.app.pop_screen()


class NodesScreen(AdminScreen):
    """The nsqds and the lookupds."""

    AUTO_FOCUS = "#nodes"
    BINDINGS: ClassVar = [Binding("1", "app.mode('topics')", "Topics")]
    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        yield DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        yield Label("nsqlookupd", classes="section", id="lookupds-label")
        yield DataTable(id="lookupds", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        set_columns(self.query_one("#nodes", DataTable),
                     ["Hostname", "Broadcast Address", "TCP", "HTTP", "Version", "Lookupds", "Topics"])
        set_columns(self.query_one("#lookupds", DataTable), ["Address", "Version", "Status"])
        super().on_mount()

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        self.query_one("#title", Static).update(Text(f"NSQd Nodes ({len(snapshot.nodes)})", style="bold"))
        n_lookupds = len(snapshot.lookupds)
        rows = []
        for node in snapshot.nodes:
            rows.append((node.api_address, self._node_cells(node, n_lookupds)))
        fill_table(self.query_one("#nodes", DataTable), rows)
        lookupds = self.query_one("#lookupds", DataTable)
        fill_table(lookupds, [(lk.address, [Text(lk.address, style="bold"), lk.version or "-",
                                            Text(f"✘ {lk.error}", style="bold red") if lk.error
                                            else Text("OK", style="green")]) for lk in snapshot.lookupds])
        lookupds.display = bool(snapshot.lookupds)
        self.query_one("#lookupds-label").display = bool(snapshot.lookupds)

    @staticmethod
    def _node_cells(node: NodeInfo, n_lookupds: int) -> list[Any]:
        style = "yellow" if node.out_of_date else ""
        if node.error:
            version: Text = Text("✘ unreachable", style="bold red")
            topics = Text(node.error, style="red")
        else:
            version = Text(node.version + (" (old)" if node.out_of_date else ""), style=style)
            topics = Text(f"{len(node.topics)}: ", style="bold")
            for i, (name, tombstoned) in enumerate(node.topics):
                if i:
                    topics.append(" ")
                topics.append(name + (" (tombstoned)" if tombstoned else ""),
                              style="strike yellow" if tombstoned else "cyan")
        conns = num(len(node.remote_addresses) if n_lookupds else "-",
                    "bold yellow" if n_lookupds and len(node.remote_addresses) != n_lookupds else "")
        return [Text(node.hostname, style=style or "bold"), node.broadcast_address, num(node.tcp_port or "-"),
                num(node.http_port or "-"), version, conns, topics]


class AdminApp(App[None]):
    """The ``nsq admin`` app.

    Args:
        source: ``description`` and ``async poll() -> ClusterSnapshot``.
        admin: performs the actions (None: actions report that they are unavailable).
        read_only: offer no action at all (no key, no footer entry).
        read_only_reason: shown next to READ-ONLY.
        refresh_interval: seconds between polls (``+``/``-`` change it).
        snapshot: shown at once, before the first poll answers.

    Attributes:
        snapshot: the latest :class:`~nsq.tui.model.ClusterSnapshot` (None before the first).
        results: every :class:`~nsq.tui.actions.ActionResult` so far.
        polls: polls done (failed ones included); ``poll_error`` the last failure's text.
    """

    TITLE = "nsq admin"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #status { height: 1; padding: 0 1; }
    #totals { height: auto; padding: 0 1; }
    #title { height: auto; padding: 0 1; }
    #errors { height: auto; max-height: 4; padding: 0 1; background: $error 15%; }
    #filter { height: 3; margin: 0 1; }
    #sparks { height: 1; }
    SparkRow { padding: 0 1; }
    .section { padding: 0 1; color: $accent; text-style: bold; }
    DataTable { height: auto; max-height: 1fr; margin: 0 1; }
    TopicScreen #nodes, ChannelScreen #nodes { max-height: 9; }
    NodesScreen #lookupds { max-height: 8; }
    .notice { padding: 0 1; color: $text-muted; text-style: italic; }
    """
    BINDINGS: ClassVar = [
        Binding("question_mark", "help", "Help"),
        Binding("1", "mode('topics')", "Topics", show=False),
        Binding("2", "mode('nodes')", "Nodes", show=False),
        Binding("r", "refresh", "Refresh", show=False),
        Binding("plus", "interval(1)", "Slower", show=False),
        Binding("minus", "interval(-1)", "Faster", show=False),
        Binding("q", "quit", "Quit"),
    ]
    MODES: ClassVar = {"topics": TopicsScreen, "nodes": NodesScreen}
    DEFAULT_MODE = "topics"

    def __init__(self, source: Any, admin: Admin | None = None, *, read_only: bool = False,
                 read_only_reason: str = "", refresh_interval: float = 2.0,
                 snapshot: ClusterSnapshot | None = None) -> None:
        super().__init__()
        self.source = source
        self.admin = admin
        self.read_only = read_only
        self.read_only_reason = read_only_reason
        self.refresh_interval = refresh_interval
        self.snapshot = snapshot
        self.poll_error = ""
        self.user = admin.actor.user if admin is not None else ""
        self.results: list[ActionResult] = []
        self._wake = asyncio.Event()
        self.polls = 0

    def on_mount(self) -> None:
        self.sub_title = getattr(self.source, "description", "")
        self._poll_loop()

    @work(exclusive=True, group="poll")
    async def _poll_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                snapshot = await self.source.poll()
            except Exception as exc:  # a bug must not stop the app; show it
                self.poll_error = f"{type(exc).__name__}: {exc}"
            else:
                self.poll_error = ""
                self.snapshot = snapshot
            self.polls += 1
            self.show_snapshot()
            try:
                await asyncio.wait_for(self._wake.wait(), self.refresh_interval)
            except asyncio.TimeoutError:
                pass

    def show_snapshot(self) -> None:
        """Render the latest snapshot on the current screen."""
        try:
            screen = self.screen
        except ScreenStackError:  # between two modes
            return
        if isinstance(screen, AdminScreen) and self.snapshot is not None:
            screen.show(self.snapshot)

    def refresh_now(self) -> None:
        """Poll now instead of at the next interval."""
        self._wake.set()

    def action_refresh(self) -> None:
        self.refresh_now()

    def action_interval(self, step: int) -> None:
        current = self.refresh_interval
        if step > 0:
            self.refresh_interval = next((v for v in REFRESH_INTERVALS if v > current), current)
        else:
            self.refresh_interval = next((v for v in reversed(REFRESH_INTERVALS) if v < current), current)
        self.notify(f"refresh every {fmt.interval(self.refresh_interval)}", timeout=2)
        self.show_snapshot()
        self.refresh_now()

    async def action_mode(self, mode: str) -> None:
        """Show the Topics (or Nodes) list itself, not a screen opened from it."""
        if mode != self.current_mode:
            await self.switch_mode(mode)
        while len(self.screen_stack) > 1:
            await self.pop_screen()

    def action_help(self) -> None:
        sections = [(name, [(k, w) for k, w, changes in keys if not (changes and self.read_only)])
                    for name, keys in KEYS]
        footer = ("Read-only: no action is offered." if self.read_only else
                  "Every action asks for a confirmation first; the result shows in a toast.")
        self.push_screen(HelpScreen("nsq admin keys", [s for s in sections if s[1]], footer))

    def run_admin(self, job: Callable[[Admin], Awaitable[Any]], after: Callable[[], None] | None = None) -> None:
        """Run an action (``job(admin)``) in a worker, report it, refresh."""
        if self.read_only:
            return
        admin = self.admin
        if admin is None:
            self.notify("actions are not available here", severity="error")
            return

        async def run() -> None:
            outcome = await job(admin)
            results = outcome if isinstance(outcome, list) else [outcome]
            self.results.extend(results)
            for r in results:
                self.notify(r.summary(), severity="information" if r.ok else "error", timeout=6 if r.ok else 12)
            if after is not None and all(r.done for r in results):
                after()
            self.refresh_now()

        self.run_worker(run(), group="action")
