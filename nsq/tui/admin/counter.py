"""The Counter screen: the messages processed over the cluster, in large
digits, with the rate (nsqadmin's counter page,
``nsqadmin/static/html/counter.hbs``)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Center, Vertical
from textual.widgets import Digits, Static

from nsq.cluster.model import ClusterSnapshot
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen

__all__ = ["CounterScreen", "processed"]


def processed(snapshot: ClusterSnapshot) -> tuple[int, float | None]:
    """The messages processed over the cluster, as nsqadmin's counter
    (``message_count`` summed over every channel of every topic on every
    nsqd), and their rate per second (None before a second poll)."""
    total, rates = 0, []
    for topic in snapshot.topics:
        for ch in topic.channels:
            total += ch.messages
            if ch.rate is not None:
                rates.append(ch.rate)
    return total, (sum(rates) if rates else None)


class CounterScreen(AdminScreen):
    """Messages processed, large."""

    BINDINGS: ClassVar = [
        Binding("1", "app.mode('topics')", "Topics"),
        Binding("2", "app.mode('nodes')", "Nodes"),
    ]
    DEFAULT_CSS = """
    CounterScreen #counter-box { height: 1fr; align: center middle; }
    CounterScreen #counter-label { width: auto; color: $text-muted; text-style: bold; }
    CounterScreen Digits { width: auto; color: $success; }
    CounterScreen #counter-rate { width: auto; }
    """

    def compose_body(self) -> ComposeResult:
        with Vertical(id="counter-box"):
            with Center():
                yield Static("Messages Processed", id="counter-label")
            with Center():
                yield Digits("0", id="counter")
            with Center():
                yield Static("", id="counter-rate")

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        total, rate = processed(snapshot)
        self.query_one("#counter", Digits).update(fmt.count(total))
        line = Text(fmt.rate(rate), style="bold")
        line.append(" messages/s", style="dim")
        self.query_one("#counter-rate", Static).update(line)
