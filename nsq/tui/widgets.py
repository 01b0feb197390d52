"""Textual pieces shared by the TUIs: the confirmation, create and help
modals, a labelled sparkline, and :func:`fill_table` (refresh a DataTable
in place, keeping the cursor on the same row)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label, Sparkline, Static

from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["ConfirmScreen", "CreateScreen", "HelpScreen", "SparkRow", "fill_table", "num", "set_columns"]


def num(value: str | int, style: str = "") -> Text:
    """A right-aligned table cell."""
    return Text(str(value), style=style, justify="right")


def set_columns(table: DataTable, labels: Sequence[str]) -> None:
    """Give ``table`` these columns. Only when they change: the table is
    rebuilt (rows dropped until the next :func:`fill_table`, which puts the
    cursor back on the row it was on)."""
    if [str(c.label) for c in table.ordered_columns] == list(labels):
        return
    if 0 <= table.cursor_row < table.row_count:
        table._nsq_cursor_key = str(table.ordered_rows[table.cursor_row].key.value)  # type: ignore[attr-defined]
    table.clear(columns=True)
    for i, label in enumerate(labels):
        table.add_column(label, key=f"c{i}")


def fill_table(table: DataTable, rows: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Show ``rows`` (``(row key, cells)``) in ``table``.

    With the same keys in the same order the cells are updated in place;
    otherwise the rows are rebuilt and the cursor goes back to the row with
    the key it was on (or the nearest index).
    """
    keys = [k for k, _ in rows]
    current = [str(r.key.value) for r in table.ordered_rows]
    columns = [c.key for c in table.ordered_columns]
    if keys == current:
        for key, cells in rows:
            for column, value in zip(columns, cells):
                if table.get_cell(key, column) != value:
                    table.update_cell(key, column, value, update_width=True)
        return
    cursor_key = current[table.cursor_row] if 0 <= table.cursor_row < len(current) else None
    if not current:  # rebuilt by set_columns
        cursor_key = getattr(table, "_nsq_cursor_key", None)
    old_row = table.cursor_row
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if not rows:
        return
    row = keys.index(cursor_key) if cursor_key in keys else min(max(old_row, 0), len(rows) - 1)
    table.move_cursor(row=row, animate=False)


class SparkRow(Horizontal):
    """``label`` then a :class:`~textual.widgets.Sparkline` of a series (one line)."""

    DEFAULT_CSS = """
    SparkRow { height: 1; width: 1fr; }
    SparkRow > Label { width: auto; padding: 0 1 0 0; color: $text-muted; }
    SparkRow > Sparkline { width: 1fr; }
    """

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._label = label

    def compose(self) -> ComposeResult:
        yield Label(self._label)
        yield Sparkline([], summary_function=max)

    def show(self, series: Sequence[float], current: str) -> None:
        """Plot ``series`` and show ``current`` (the latest value) in the label."""
        self.query_one(Label).update(f"{self._label} {current}")
        self.query_one(Sparkline).data = list(series) or [0.0]


class ConfirmScreen(ModalScreen[bool]):
    """"Are you sure?": dismissed with True (``y`` or the action button) or
    False (``n``, ``escape`` or Cancel, which has the focus)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: thick $error 80%; background: $surface; padding: 1 2;
    }
    ConfirmScreen #question { width: 1fr; margin-bottom: 1; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 2; }
    """

    def __init__(self, question: str, verb: str, destructive: bool = True) -> None:
        super().__init__()
        self.question = question
        self.verb = verb
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, id="question", markup=False)
            with Horizontal():
                yield Button(f"{self.verb} (y)", id="yes", variant="error" if self.destructive else "primary")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class CreateScreen(ModalScreen[tuple[str, str] | None]):
    """nsqadmin's "Create Topic/Channel" form: dismissed with ``(topic,
    channel)`` (channel may be "") or None. Names are checked before."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    CreateScreen { align: center middle; }
    CreateScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: thick $primary; background: $surface; padding: 1 2;
    }
    CreateScreen Input { margin-bottom: 1; }
    CreateScreen #problem { color: $error; height: auto; }
    CreateScreen Horizontal { height: auto; align-horizontal: right; }
    CreateScreen Button { margin-left: 2; }
    """

    def __init__(self, topic: str = "") -> None:
        super().__init__()
        self.topic = topic

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Create topic / channel (an empty channel creates only the topic)")
            yield Input(self.topic, placeholder="topic", id="topic")
            yield Input(placeholder="channel (optional)", id="channel")
            yield Static("", id="problem")
            with Horizontal():
                yield Button("Create", id="create", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#channel" if self.topic else "#topic", Input).focus()

    def _submit(self) -> None:
        topic = self.query_one("#topic", Input).value.strip()
        channel = self.query_one("#channel", Input).value.strip()
        if not is_valid_topic_name(topic):
            self.query_one("#problem", Static).update(f"invalid topic name {topic!r}")
            return
        if channel and not is_valid_channel_name(channel):
            self.query_one("#problem", Static).update(f"invalid channel name {channel!r}")
            return
        self.dismiss((topic, channel))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "create":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """The keys, as ``(section, [(keys, what)])``; any of escape, ``?``, ``q`` closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 100%; border: thick $primary; background: $surface;
        padding: 0 1;
    }
    """

    def __init__(self, title: str, sections: Sequence[tuple[str, Sequence[tuple[str, str]]]],
                 footer: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.sections = sections
        self.footer_text = footer

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, expand=True, padding=(0, 1))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(ratio=1)
        for section, keys in self.sections:
            table.add_row(Text(section, style="bold underline"), "")
            for key, what in keys:
                table.add_row(Text(key, style="bold"), what)
        with VerticalScroll():
            yield Static(Text(self.title_text, style="bold"))
            yield Static(table)
            if self.footer_text:
                yield Static(self.footer_text, markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
