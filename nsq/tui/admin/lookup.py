"""The Lookup screen: the configured lookupds, then the topics and
channels of the cluster as a tree, those no nsqd has yet (created through
a lookupd, nsqadmin's "inactive" ones) marked; create and delete (nsqadmin's
lookup page, ``nsqadmin/static/html/lookup.hbs``)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label, Static

from nsq.cluster.model import ClusterSnapshot
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.cells import name_cell
from nsq.tui.admin.confirmations import confirm_delete_topic
from nsq.tui.admin.navigation import ShowChannel, ShowTopic
from nsq.tui.widgets import fill_table, num, set_columns

__all__ = ["LookupScreen"]


class LookupScreen(AdminScreen):
    """The lookupds and every topic and channel."""

    AUTO_FOCUS = "#tree"
    BINDINGS: ClassVar = [
        Binding("c", "create", "New"),
        Binding("d", "delete", "Delete"),
        Binding("1", "app.mode('topics')", "Topics"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]

    def compose_body(self) -> ComposeResult:
        yield Label("nsqlookupd Host", classes="section")
        yield DataTable(id="lookupds", cursor_type="row", zebra_stripes=True)
        yield Static("No lookupd configured (--nsqd-http-address): topics and channels are the nsqds' own.",
                     id="nolookupds", classes="notice")
        yield Static("", id="title")
        yield DataTable(id="tree", cursor_type="row", zebra_stripes=True)
        yield Static("No topics. c creates one (and a channel).", id="notopics", classes="notice")

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        lookupds = self.query_one("#lookupds", DataTable)
        set_columns(lookupds, ["Address", "Version", "Status"])
        fill_table(lookupds, [(lk.address, [Text(lk.address, style="bold"), lk.version or "-",
                                            Text(f"✘ {lk.error}", style="bold red") if lk.error
                                            else Text("OK", style="green")]) for lk in snapshot.lookupds])
        lookupds.display = bool(snapshot.lookupds)
        self.query_one("#nolookupds", Static).display = not snapshot.lookupds

        inactive = [t for t in snapshot.topics if not t.nodes]
        title = Text("Topics and channels", style="bold")
        title.append(f"  {fmt.plural(len(snapshot.topics), 'topic')}, {len(inactive)} on no nsqd yet",
                     style="dim")
        self.query_one("#title", Static).update(title)
        tree = self.query_one("#tree", DataTable)
        set_columns(tree, ["Topic / Channel", "nsqd", "Depth", "Messages"])
        rows: list[tuple[str, list[Any]]] = []
        for t in snapshot.topics:
            note = "(no nsqd)" if not t.nodes else ""
            rows.append((t.name, [name_cell(t.name, paused=t.paused, note=note, style="bold"), num(t.producers),
                                  num(fmt.count(t.depth)), num(fmt.count(t.messages))]))
            for ch in t.channels:
                note = "(no nsqd)" if not ch.nodes else ""
                rows.append((f"{t.name}/{ch.name}", [name_cell(f"  {ch.name}", paused=ch.paused, note=note),
                                                     num(len(ch.nodes)), num(fmt.count(ch.depth)),
                                                     num(fmt.count(ch.messages))]))
        fill_table(tree, rows)
        tree.display = bool(rows)
        self.query_one("#notopics", Static).display = not rows

    def _cursor_key(self) -> str | None:
        tree = self.query_one("#tree", DataTable)
        if not tree.row_count:
            return None
        return str(tree.ordered_rows[tree.cursor_row].key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id != "tree":
            return
        topic, _, channel = str(event.row_key.value).partition("/")
        self.post_message(ShowChannel(topic, channel) if channel else ShowTopic(topic))

    def action_create(self) -> None:
        self.create()

    def action_delete(self) -> None:
        key = self._cursor_key()
        snapshot = self.admin_app.snapshot
        if key is None or snapshot is None:
            return
        name, _, channel = key.partition("/")
        topic = snapshot.topic(name)
        if topic is None:
            return
        if not channel:
            confirm_delete_topic(self, topic)
            return
        ch = topic.channel(channel)
        where = f"{len(ch.nodes)} nsqd" if ch is not None else "the nsqds"
        self.confirm(f"Delete channel {name}/{channel} from the lookupds and {where}? Its queued messages are "
                     "lost.", "Delete", lambda a: a.delete_channel(name, channel))
