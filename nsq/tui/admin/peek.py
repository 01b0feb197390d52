"""The Peek screen: the next messages of a channel, or of a topic's own
queue, on every nsqd that has it, changing nothing (this project's nsqd
``GET /channel/peek`` and ``/topic/peek``; see :mod:`nsq.cluster.peek`).

Each nsqd is asked for its next :data:`PEEK_N` messages; the lists are
merged oldest ``timestamp`` first. A row shows the message ID, its delivery
attempts so far, its age (now minus its timestamp, as ``2m14s``), its nsqd
and its body on one line: the text when it is UTF-8, else its bytes in hex,
cut to the width of the terminal. An nsqd that cannot be peeked at (a Go
nsqd has no such endpoint; the channel gone meanwhile; unreachable) is a
one-line note above the table. ``r`` peeks again; escape closes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from nsq.cluster.model import ClusterSnapshot
from nsq.cluster.peek import Peek, PeekedMessage, body_text
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen
from nsq.tui.widgets import fill_table, num, set_columns

__all__ = ["PEEK_N", "PeekScreen"]

#: messages asked of each nsqd
PEEK_N = 20

_COLUMNS = ["ID", "Attempts", "Age", "NSQd Host", "Body"]


class PeekScreen(AdminScreen):
    """The next messages of ``topic``/``channel`` (no ``channel``: the
    messages the topic holds itself).

    Attributes:
        peeked: the last :class:`~nsq.cluster.peek.Peek` (None while the
            first one runs).
    """

    AUTO_FOCUS = "#messages"
    BINDINGS: ClassVar = [
        Binding("r", "repeek", "Peek again"),
    ]

    def __init__(self, topic: str, channel: str = "") -> None:
        super().__init__()
        self.topic = topic
        self.channel = channel
        self.peeked: Peek | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        yield Static("", id="notes")
        yield DataTable(id="messages", cursor_type="row", zebra_stripes=True)
        yield Static("", id="nomessages", classes="notice")

    def on_mount(self) -> None:
        super().on_mount()
        self.action_repeek()

    def action_repeek(self) -> None:
        self._peek()

    @work(exclusive=True, group="peek")
    async def _peek(self) -> None:
        app = self.admin_app
        snapshot = app.snapshot
        peek = getattr(app.source, "peek", None)
        if snapshot is None or peek is None:
            self.peeked = Peek(self.topic, self.channel, notes=["peeking needs a live cluster to ask"])
        else:
            try:
                self.peeked = await peek(snapshot, self.topic, self.channel, PEEK_N)
            except Exception as exc:  # a bug must not stop the app; show it
                self.peeked = Peek(self.topic, self.channel, notes=[f"peek failed: {type(exc).__name__}: {exc}"])
            if not self.peeked.asked and not self.peeked.notes:
                what = "channel" if self.channel else "topic"
                self.peeked.notes.append(f"no nsqd has this {what} (at the last poll)")
        current = app.snapshot  # the latest: a poll may have answered meanwhile
        if current is not None:
            self.show(current)

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        title = Text("Topic: ", style="dim")
        title.append(self.topic, style="bold")
        if self.channel:
            title.append("  Channel: ", style="dim")
            title.append(self.channel, style="bold")
        else:
            title.append("  (its own queue)", style="dim")
        peeked = self.peeked
        if peeked is None:
            title.append("  peeking...", style="italic dim")
        else:
            title.append(f"  next {fmt.plural(len(peeked.messages), 'message')} on {peeked.asked} nsqd, oldest first", style="dim")
        self.query_one("#title", Static).update(title)

        notes = self.query_one("#notes", Static)
        notes.update(Text("\n".join(f"! {n}" for n in (peeked.notes if peeked else [])), style="yellow"))
        notes.display = bool(peeked and peeked.notes)

        messages = peeked.messages if peeked is not None else []
        table = self.query_one("#messages", DataTable)
        set_columns(table, _COLUMNS)
        rows = [(m, [Text(m.id, style="bold"), num(m.attempts), num(fmt.duration(m.age(peeked.taken_at))),
                     m.where]) for m in messages] if peeked is not None else []
        width = self._body_width([[str(c) for c in cells] for _, cells in rows])
        keys: set[str] = set()
        filled: list[tuple[str, list[Any]]] = []
        for m, cells in rows:
            key = f"{m.node}/{m.id}"
            while key in keys:  # the same message twice: keep both rows
                key += "+"
            keys.add(key)
            filled.append((key, cells + [_body_cell(m, width)]))
        fill_table(table, filled)
        table.display = bool(filled)
        empty = self.query_one("#nomessages", Static)
        empty.update("No message queued (in memory or on disk) on the nsqds asked." if peeked is not None
                     else "")
        empty.display = peeked is not None and not filled

    def _body_width(self, rows: list[list[str]]) -> int:
        """Room left for the body column: the terminal width minus the other
        columns (content or label, plus 2 of padding each), the table's
        margins and a scrollbar."""
        used = sum(max([len(label)] + [len(r[i]) for r in rows]) + 2 for i, label in enumerate(_COLUMNS[:-1]))
        return max(12, self.app.size.width - used - 2 - 2 - 2)


def _body_cell(m: PeekedMessage, width: int) -> Text:
    """The body on one line, cut to ``width`` cells: text, or ``hex`` and its bytes."""
    text, is_text = body_text(m.body)
    if is_text:
        out = Text(text)
    else:
        out = Text("hex ", style="dim")
        out.append(text, style="magenta")
    out.truncate(width, overflow="ellipsis")
    return out
