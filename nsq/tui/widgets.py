"""Textual pieces shared by the TUIs: the confirmation, create and help
modals, a sparkline scaled from zero (alone and labelled), and :func:`fill_table` (refresh a DataTable
in place, keeping the cursor on the same row)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Label, Static

from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["ConfirmScreen", "CreateScreen", "HelpScreen", "Spark", "SparkRow", "fill_table", "num", "peak", "set_columns",
           "spark_lines"]


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
        tall = any(isinstance(c, Text) and "\n" in c.plain for c in cells)
        table.add_row(*cells, key=key, height=None if tall else 1)
    if not rows:
        return
    row = keys.index(cursor_key) if cursor_key in keys else min(max(old_row, 0), len(rows) - 1)
    table.move_cursor(row=row, animate=False)


#: the eighths of a cell a bar can fill
BARS = "▁▂▃▄▅▆▇█"


def spark_lines(data: Sequence[float], width: int, height: int = 1,
                summary: Callable[[Sequence[float]], float] = max) -> list[str]:
    """``data`` as ``height`` lines of ``width`` bar characters, scaled from
    zero to the largest value: zero (and no data at all) draws nothing, any
    value above zero at least the lowest bar. More points than columns are
    summarised (``summary`` of each column's points); fewer are stretched."""
    if width <= 0 or height <= 0:
        return []
    blank = [" " * width] * height
    if not data:
        return blank
    n = len(data)
    if n > width:
        columns = [summary(data[i * n // width:max((i + 1) * n // width, i * n // width + 1)]) for i in range(width)]
    else:
        columns = [data[i * n // width] for i in range(width)]
    top = max(columns)
    if top <= 0:
        return blank
    steps = height * len(BARS)
    levels = [0 if v <= 0 else max(1, round(v / top * steps)) for v in columns]
    lines = []
    for row in range(height):
        floor = (height - 1 - row) * len(BARS)
        line = ""
        for level in levels:
            fill = min(max(level - floor, 0), len(BARS))
            line += BARS[fill - 1] if fill else " "
        lines.append(line)
    return lines


def peak(value: float) -> str:
    """A sparkline's maximum, short: ``"1,234"``, ``"12.5"``, ``"0"``."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


class Spark(Widget):
    """A sparkline scaled from zero (unlike Textual's, min to max), so that
    a steady value draws a level line and zero or no data draws nothing;
    as tall as the widget (eighths of a cell per step).

    Attributes:
        data: the values, oldest first.
    """

    DEFAULT_CSS = """
    Spark { height: 1; color: $accent; }
    """
    data: reactive[list[float]] = reactive(list, always_update=True)

    def __init__(self, data: Sequence[float] = (), *, summary_function: Callable[[Sequence[float]], float] = max,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.summary_function = summary_function
        self.data = list(data)

    def render(self) -> Text:
        return Text("\n".join(spark_lines(self.data, self.size.width, self.size.height, self.summary_function)))


class SparkRow(Horizontal):
    """``label`` and the latest value, a :class:`Spark` of a series, and its
    maximum (one line)."""

    DEFAULT_CSS = """
    SparkRow { height: 1; width: 1fr; }
    SparkRow > Label { width: auto; padding: 0 1 0 0; color: $text-muted; }
    SparkRow > Label.peak { padding: 0 0 0 1; }
    SparkRow > Spark { width: 1fr; }
    """

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._label = label

    def compose(self) -> ComposeResult:
        yield Label(self._label, classes="label")
        yield Spark()
        yield Label("", classes="peak")

    def show(self, series: Sequence[float], current: str) -> None:
        """Plot ``series`` and show ``current`` (the latest value) in the
        label, the series' maximum after the plot."""
        values = list(series)
        self.query_one(".label", Label).update(f"{self._label} {current}")
        self.query_one(Spark).data = values
        self.query_one(".peak", Label).update(f"max {peak(max(values))}" if values else "")


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
    ConfirmScreen #question { width: 1fr; height: auto; margin-bottom: 1; }
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

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        # priority: the app moves the focus before it hands on the next key,
        # so that keys typed fast after the tab land in the next field
        Binding("tab", "app.focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True),
    ]
    DEFAULT_CSS = """
    CreateScreen { align: center middle; }
    CreateScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: thick $primary; background: $surface; padding: 1 2;
    }
    CreateScreen #intro { width: 1fr; height: auto; }
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
            yield Static("Create topic / channel (an empty channel creates only the topic)", id="intro",
                         markup=False)
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
