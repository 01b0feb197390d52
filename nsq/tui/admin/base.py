"""What every ``nsq admin`` screen has: header, status line, the screen's
body, error lines and footer; the confirmation and create forms in front of
an action; no action at all when read-only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Protocol, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from nsq.cluster.actions import ActionResult, Admin
from nsq.cluster.model import ClusterSnapshot
from nsq.tui import fmt
from nsq.tui.admin.keys import ADMIN_ACTIONS, WIDE_FROM
from nsq.tui.admin.dialogs import ConfirmScreen, CreateScreen

__all__ = ["AdminHost", "AdminScreen"]


class AdminHost(Protocol):
    """What the screens ask of the app (:class:`~nsq.tui.admin.app.AdminApp`
    has it), so that no screen module imports the app: the latest
    snapshot and its source, the status line's figures, whether actions
    are offered, and running one."""

    snapshot: ClusterSnapshot | None
    #: ``description``, ``async poll()``, and ``async peek(...)`` when it can peek
    source: Any
    read_only: bool
    read_only_reason: str
    user: str
    refresh_interval: float
    poll_error: str

    def run_admin(self, job: Callable[[Admin], Awaitable[Any]], after: Callable[[], None] | None = None,
                  then: Callable[[list[ActionResult]], None] | None = None) -> None:
        """Run an action in a worker, report it, refresh."""


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
    def admin_app(self) -> AdminHost:
        """The app, as the screens see it."""
        return cast(AdminHost, self.app)

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
                 fmt.plural(t.topics, "topic"), fmt.plural(t.channels, "channel"), f"{t.nodes_up}/{t.nodes} nsqd",
                 fmt.plural(t.clients, "client")]
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
                destructive: bool = True, after: Callable[[], None] | None = None,
                then: Callable[[list[ActionResult]], None] | None = None) -> None:
        """Ask ``question``; on yes run ``job(admin)`` (then ``after`` if
        every result is ok; ``then`` with the results, after their toasts)."""
        if self.admin_app.read_only:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.admin_app.run_admin(job, after, then)

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
