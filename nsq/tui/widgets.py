"""Textual pieces shared by the TUIs: a sparkline scaled from zero (alone
and labelled), and :func:`fill_table` (refresh a DataTable in place, keeping
the cursor on the same row). The modal dialogs are in
:mod:`nsq.tui.admin.dialogs`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Label

__all__ = ["Spark", "SparkRow", "fill_table", "num", "peak", "set_columns", "spark_lines"]


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
        key = str(table.ordered_rows[table.cursor_row].key.value)
        table._nsq_cursor_key = key  # type: ignore[attr-defined]  # our attribute: read back by fill_table
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
