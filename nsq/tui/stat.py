"""Live ``nsq stat``: one channel's nsq_stat figures in a Textual TUI.

The columns are the plain report's (ingress and egress in messages/s;
depth total, memory, disk, in flight, deferred; requeued, timed out,
messages, clients), shown

- per nsqd that has the topic, with a TOTAL row and a status column
  (``ok``, ``unreachable``, ``no channel``, ``replica``: a replica's copy,
  left out of TOTAL beside its leader); the errors themselves are
  listed under the table, and polling goes on, with the nsqds'
  replication lines (:func:`~nsq.cluster.stat.replication_line`);
- as sparklines of the cluster's depth, ingress and egress;
- as a history table, one row per report as the plain lines.

Data comes from :class:`nsq.cluster.stat.StatPoller` (or anything with
its ``poll()``/``close()``/``topic``/``channel``/``interval``/``source``),
so the TUI and the plain report (:mod:`nsq.apps.stat`) always agree.

Keys: ``q`` quit, ``p`` pause/resume polling, ``r`` poll now.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import IO, Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Static

from nsq.cluster.stat import PlainWriter, StatReport, replication_line
from nsq.tui.widgets import Spark

__all__ = ["COLUMNS", "StatApp", "run_stat_app"]

#: (key, label) of the figure columns, in the plain report's order
COLUMNS = (("ingress", "ingress"), ("egress", "egress"), ("total", "total"), ("mem", "mem"),
           ("disk", "disk"), ("inflt", "inflt"), ("def", "def"), ("req", "req"), ("t-o", "t-o"),
           ("msgs", "msgs"), ("clients", "clients"))

#: how many points the sparklines keep, and rows the history keeps
SPARK_POINTS = 120
HISTORY_ROWS = 1000


def _cells(counters: dict[str, int] | None, ingress: int | None, egress: int | None) -> list[Text]:
    """The 11 figure cells (right-aligned; ``-`` for a missing figure)."""

    def cell(value: int | None) -> Text:
        return Text("-" if value is None else str(value), justify="right")

    if counters is None:
        return [cell(ingress), cell(egress)] + [cell(None)] * 9
    c = counters
    return [cell(ingress), cell(egress), cell(c["depth"]), cell(c["depth"] - c["backend_depth"]),
            cell(c["backend_depth"]), cell(c["in_flight_count"]), cell(c["deferred_count"]),
            cell(c["requeue_count"]), cell(c["timeout_count"]), cell(c["message_count"]),
            cell(c["client_count"])]


class SparkBox(Vertical):
    """A labelled sparkline of the last :data:`SPARK_POINTS` values, scaled
    from zero (:class:`~nsq.tui.widgets.Spark`), its maximum in the title."""

    DEFAULT_CSS = """
    SparkBox { border: round $primary; height: 4; width: 1fr; padding: 0 1; }
    SparkBox Spark { height: 2; }
    """

    def __init__(self, label: str, unit: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.label = label
        self.unit = unit
        self.values: deque[float] = deque(maxlen=SPARK_POINTS)
        self.border_title = label

    def compose(self) -> ComposeResult:
        yield Spark([], summary_function=max)

    def push(self, value: int | None) -> None:
        """Add a point (None: no figure this time, the line is not moved)."""
        if value is None:
            return
        self.values.append(float(value))
        self.query_one(Spark).data = list(self.values)
        self.border_title = f"{self.label} {value}{self.unit} (max {max(self.values):g})"


class StatApp(App[int]):
    """The live report of one channel.

    Args:
        poller: a :class:`~nsq.cluster.stat.StatPoller` (or an object with
            the same ``poll``/``close`` coroutines and attributes).
        count: end once this many reports with rates were shown, as
            ``nsq stat --count`` prints that many rows: ``count`` + 1 polls
            (the first only sets the base of the rates); None runs until ``q``.

    Attributes:
        reports: every report shown, oldest first (the last
            :data:`HISTORY_ROWS`).
        ended_by_count: True once ``count`` + 1 polls were shown and the app
            exited by itself.
    """

    TITLE = "nsq stat"
    CSS = """
    Screen { layout: vertical; }
    #title { height: 1; padding: 0 1; background: $boost; text-style: bold; }
    #sparks { height: 4; }
    #nodes { height: auto; max-height: 10; }
    #status { height: auto; max-height: 4; padding: 0 1; color: $error; }
    #status.-ok { color: $text-muted; }
    #history { height: 1fr; }
    """
    BINDINGS = [("q", "quit", "Quit"), ("p", "pause", "Pause/resume"), ("r", "refresh", "Poll now")]

    def __init__(self, poller: Any, *, count: int | None = None) -> None:
        super().__init__()
        self.poller = poller
        self.count = count
        self.reports: deque[StatReport] = deque(maxlen=HISTORY_ROWS)
        self.ended_by_count = False
        self.paused = False
        self._wake = asyncio.Event()
        self._last: StatReport | None = None

    def compose(self) -> ComposeResult:
        yield Static(self.title_text(), id="title")
        with Horizontal(id="sparks"):
            yield SparkBox("depth", id="spark-depth")
            yield SparkBox("ingress", "/s", id="spark-ingress")
            yield SparkBox("egress", "/s", id="spark-egress")
        yield DataTable(id="nodes", cursor_type="none", zebra_stripes=True)
        yield Static("waiting for the first poll...", id="status", classes="-ok")
        yield DataTable(id="history", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        nodes = self.query_one("#nodes", DataTable)
        nodes.add_column("nsqd", key="nsqd")
        for key, label in COLUMNS:
            nodes.add_column(label, key=key)
        nodes.add_column("status", key="status")
        history = self.query_one("#history", DataTable)
        history.add_column("#", key="n")
        history.add_column("time", key="time")
        for key, label in COLUMNS:
            history.add_column(label, key=key)
        history.focus()
        self.run_worker(self._poll_loop(), name="poll", exclusive=True)

    async def on_unmount(self) -> None:
        await self.poller.close()

    # polling

    async def _poll_loop(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            if not self.paused:
                try:
                    report = await self.poller.poll()
                except Exception as exc:  # a bug or an unexpected answer: show it, go on
                    number = (self._last.number + 1) if self._last else 1
                    report = StatReport(number, time.time(), error=f"{type(exc).__name__}: {exc}")
                self.show(report)
                if self.count is not None and report.number > self.count:
                    self.ended_by_count = True
                    self.exit(0)
                    return
            due = max(due + self.poller.interval, loop.time())
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), due - loop.time())
                due = loop.time()  # woken by "poll now" or resume
            except TimeoutError:
                pass

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.query_one("#title", Static).update(self.title_text())
        if not self.paused:
            self._wake.set()

    def action_refresh(self) -> None:
        self.paused = False
        self._wake.set()

    # display

    def title_text(self) -> Text:
        """The top line: topic/channel, PAUSED, report number and time, interval, source."""
        p = self.poller
        text = Text.assemble(("nsq stat ", "bold"), (f"{p.topic}/{p.channel}", "bold cyan"))
        if self.paused:
            text.append("  PAUSED", "bold yellow")
        if self._last is not None:
            of = f"/{self.count + 1}" if self.count else ""
            text.append(f"  report {self._last.number}{of} "
                        + time.strftime("%H:%M:%S", time.localtime(self._last.time)))
        text.append(f"  every {p.interval:g}s  {p.source}")
        return text

    def show(self, report: StatReport) -> None:
        """Put one report on screen (title, sparklines, nodes, status, history)."""
        self._last = report
        self.reports.append(report)
        self.query_one("#title", Static).update(self.title_text())

        nodes = self.query_one("#nodes", DataTable)
        nodes.clear()
        for node in report.nodes:
            if node.missing:
                status = Text("no channel", style="yellow")
            elif node.error:
                status = Text("unreachable", style="bold red")
            elif node.is_replica and not node.summed:
                status = Text("replica", style="cyan")  # a copy of its leader's channel, not in TOTAL
            else:
                status = Text("ok", style="green")
            nodes.add_row(node.address, *_cells(node.counters, node.ingress, node.egress), status,
                          key=node.address)
        bad = [n for n in report.nodes if n.error and not n.missing]
        if report.nodes:
            nodes.add_row(Text("TOTAL", style="bold"), *_cells(report.totals, report.ingress, report.egress),
                          Text(f"{len(bad)} of {len(report.nodes)} down" if bad else "", style="red"),
                          key="TOTAL")

        status_line = self.query_one("#status", Static)
        problems = ([report.error] if report.error else []) + [n.error or "" for n in bad]
        replication = [line for line in (replication_line(n, report.topic) for n in report.nodes) if line]
        if problems:
            status_line.update(Text("\n".join(problems + replication)))
            status_line.remove_class("-ok")
        else:
            status_line.update(Text("\n".join([f"{len(report.nodes)} nsqd" + ("s" if len(report.nodes) != 1 else "")
                                               + " with the topic"] + replication)))
            status_line.add_class("-ok")

        if report.totals is not None:
            self.query_one("#spark-depth", SparkBox).push(report.totals["depth"])
        self.query_one("#spark-ingress", SparkBox).push(report.ingress)
        self.query_one("#spark-egress", SparkBox).push(report.egress)

        history = self.query_one("#history", DataTable)
        at_end = history.row_count == 0 or history.cursor_row >= history.row_count - 1
        if report.totals is not None:
            history.add_row(Text(str(report.number), justify="right"),
                            time.strftime("%H:%M:%S", time.localtime(report.time)),
                            *_cells(report.totals, report.ingress, report.egress), key=str(report.number))
        else:
            history.add_row(Text(str(report.number), justify="right"),
                            time.strftime("%H:%M:%S", time.localtime(report.time)),
                            Text(report.error or "no data", style="red"), *[""] * (len(COLUMNS) - 1),
                            key=str(report.number))
        while history.row_count > HISTORY_ROWS:
            first = next(iter(history.rows))
            history.remove_row(first)
        if at_end:
            history.move_cursor(row=history.row_count - 1)


def run_stat_app(poller: Any, *, count: int | None = None, out: IO[str] | None = None) -> int:
    """Run :class:`StatApp` in the terminal; returns the exit code (0).

    When it ends by ``count``, the plain nsq_stat lines of the reports seen
    (those without errors) are written to ``out`` afterwards, so the figures
    stay on the terminal once the TUI is gone.
    """
    app = StatApp(poller, count=count)
    app.run()
    if app.ended_by_count and out is not None:
        writer = PlainWriter(out)
        for report in app.reports:
            if report.first_error is None:
                writer.write(report)
        out.flush()
    return app.return_code or 0
