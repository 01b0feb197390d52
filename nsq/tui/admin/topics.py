"""The Topics screen: every topic with its figures, cluster totals and a
rate sparkline; sort, filter, and the topic actions (nsqadmin's index page,
``nsqadmin/static/html/topics.hbs``)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input, Static

from nsq.cluster.model import ClusterSnapshot, TopicStats
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.cells import name_cell
from nsq.tui.admin.confirmations import confirm_delete_topic, confirm_empty_topic, confirm_pause_topic
from nsq.tui.admin.navigation import ShowTopic
from nsq.tui.widgets import SparkRow, fill_table, num, set_columns

__all__ = ["TopicsScreen"]


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
        ("Mem + Disk", "Mem+Disk", lambda t: (t.memory_depth + t.backend_depth, t.backend_depth)),
        ("In-Flight", "InFlt", lambda t: t.in_flight),
        ("Deferred", "Def", lambda t: t.deferred),
        ("Messages", "Msgs", lambda t: t.messages),
        ("In/s", "In", lambda t: t.rate or 0.0),
        ("Out/s", "Out", lambda t: t.egress or 0.0),
        ("Channels", "Chan", lambda t: len(t.channels)),
        ("Producers", "Prod", lambda t: t.producers),
    ]
    #: columns left out when the terminal is narrow (80 columns show the rest)
    NARROW_HIDDEN: ClassVar = frozenset({"Producers"})

    def __init__(self) -> None:
        super().__init__()
        self.sort_column = 0
        self.sort_reverse = False
        self.filter_text = ""

    def compose_body(self) -> ComposeResult:
        yield Static("", id="totals")
        yield SparkRow("cluster in/s", id="rate")
        box = Input(placeholder="filter topics (escape clears)", id="filter")
        box.display = False
        yield box
        yield DataTable(id="topics", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self._columns()
        super().on_mount()

    def _visible(self) -> list[int]:
        """Indexes of the :attr:`COLUMNS` shown at this width."""
        wide = self.wide("topics")
        return [i for i, (full, _, _) in enumerate(self.COLUMNS) if wide or full not in self.NARROW_HIDDEN]

    def _columns(self) -> None:
        visible = self._visible()
        if self.sort_column not in visible:
            self.sort_column, self.sort_reverse = 0, False
        names = self.labels("topics", [(full, short) for full, short, _ in self.COLUMNS])
        labels = []
        for i in visible:
            label = names[i]
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
                             ("in/s", fmt.rate(t.rate)), ("out/s", fmt.rate(t.egress))):
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
        visible = self._visible()
        for x in topics:
            inactive = not x.nodes
            cells = [
                name_cell(x.name, paused=x.paused, note="(no nsqd)" if inactive else "", style="bold"),
                num(fmt.count(x.depth)), num(fmt.mem_disk(x.memory_depth, x.backend_depth, compact)),
                num(fmt.count(x.in_flight)), num(fmt.count(x.deferred)), num(fmt.count(x.messages)),
                num(fmt.rate(x.rate)), num(fmt.rate(x.egress)), num(len(x.channels)), num(x.producers),
            ]
            rows.append((x.name, [cells[i] for i in visible]))
        fill_table(self.query_one("#topics", DataTable), rows)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.post_message(ShowTopic(str(event.row_key.value)))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        column = self._visible()[event.column_index]
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False
        self._resort()

    def _resort(self) -> None:
        self._columns()
        if self.admin_app.snapshot is not None:
            self.show_body(self.admin_app.snapshot)

    def action_sort(self) -> None:
        visible = self._visible()
        self.sort_column = visible[(visible.index(self.sort_column) + 1) % len(visible)] \
            if self.sort_column in visible else 0
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
            confirm_pause_topic(self, topic)

    def action_empty(self) -> None:
        topic = self.selected()
        if topic is not None:
            confirm_empty_topic(self, topic)

    def action_delete(self) -> None:
        topic = self.selected()
        if topic is not None:
            confirm_delete_topic(self, topic)
