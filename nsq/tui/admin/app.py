"""The ``nsq admin`` app: polls its source, renders the current screen,
runs the admin actions and reports them in toasts."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from textual import work
from textual.app import App, ScreenStackError
from textual.binding import Binding

from nsq.cluster.actions import ActionResult, Actor, Admin
from nsq.cluster.model import ClusterSnapshot
from nsq.cluster.peek import Peek
from nsq.cluster.poller import Cluster
from nsq.tui import fmt
from nsq.tui.admin.base import AdminHost, AdminScreen
from nsq.tui.admin.channel import ChannelScreen
from nsq.tui.admin.counter import CounterScreen
from nsq.tui.admin.dialogs import HelpScreen
from nsq.tui.admin.keys import KEYS, REFRESH_INTERVALS
from nsq.tui.admin.lookup import LookupScreen
from nsq.tui.admin.navigation import ShowChannel, ShowNode, ShowPeek, ShowTopic
from nsq.tui.admin.node import NodeScreen
from nsq.tui.admin.nodes import NodesScreen
from nsq.tui.admin.peek import PeekScreen
from nsq.tui.admin.topic import TopicScreen
from nsq.tui.admin.topics import TopicsScreen

__all__ = ["AdminApp", "FixedSource", "run_admin_app"]


class FixedSource:
    """A source that answers every poll with the same snapshot, and every
    peek with the same messages (screenshots, tests).

    Args:
        peeks: ``{(topic, channel): Peek}`` (channel "" for a topic's own
            queue); a peek at anything else answers a note.
    """

    def __init__(self, snapshot: ClusterSnapshot, description: str = "lookupd 127.0.0.1:4161",
                 peeks: dict[tuple[str, str], Peek] | None = None) -> None:
        self.snapshot = snapshot
        self.description = description
        self.peeks = peeks or {}

    async def poll(self) -> ClusterSnapshot:
        """The snapshot given."""
        return self.snapshot

    async def peek(self, snapshot: ClusterSnapshot, topic: str, channel: str = "", n: int = 20) -> Peek:
        """The peek given for ``(topic, channel)``, its messages cut to ``n``
        per nsqd (as :meth:`nsq.cluster.poller.Cluster.peek`)."""
        fixed = self.peeks.get((topic, channel))
        if fixed is None:
            return Peek(topic, channel, snapshot.taken_at, notes=["no fixed messages for this one"])
        per_node: dict[str, int] = {}
        kept = []
        for m in fixed.messages:
            per_node[m.node] = per_node.get(m.node, 0) + 1
            if per_node[m.node] <= n:
                kept.append(m)
        return dataclasses.replace(fixed, messages=kept, notes=list(fixed.notes))


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
        snapshot: the latest :class:`~nsq.cluster.model.ClusterSnapshot` (None before the first).
        results: every :class:`~nsq.cluster.actions.ActionResult` so far.
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
    #sparks.stacked { layout: grid; grid-size: 2; height: 2; }
    #sparks.stacked > #depth { column-span: 2; }
    SparkRow { padding: 0 1; }
    .section { padding: 0 1; color: $accent; text-style: bold; }
    DataTable { height: auto; max-height: 1fr; margin: 0 1; }
    /* only the table with the focus shows its cursor row: enter and the
       actions act on that row (two tables on one screen, one cursor) */
    DataTable:blur > .datatable--cursor { background: transparent; color: $foreground; text-style: none; }
    TopicScreen #nodes, ChannelScreen #nodes { max-height: 9; }
    TopicScreen #retention { max-height: 7; }
    NodesScreen #lookupds, LookupScreen #lookupds { max-height: 8; }
    .notice { padding: 0 1; color: $text-muted; text-style: italic; }
    PeekScreen #notes { height: auto; padding: 0 1; }
    """
    BINDINGS: ClassVar = [
        Binding("question_mark", "help", "Help"),
        Binding("1", "mode('topics')", "Topics", show=False),
        Binding("2", "mode('nodes')", "Nodes", show=False),
        Binding("3", "mode('counter')", "Counter", show=False),
        Binding("4", "mode('lookup')", "Lookup", show=False),
        Binding("r", "refresh", "Refresh", show=False),
        Binding("plus", "interval(1)", "Slower", show=False),
        Binding("minus", "interval(-1)", "Faster", show=False),
        Binding("q", "quit", "Quit"),
    ]
    MODES: ClassVar = {"topics": TopicsScreen, "nodes": NodesScreen, "counter": CounterScreen,
                        "lookup": LookupScreen}
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
        """Show the Topics (Nodes, Counter, Lookup) screen itself, not a screen opened from it."""
        if mode != self.current_mode:
            await self.switch_mode(mode)
        while len(self.screen_stack) > 1:
            await self.pop_screen()

    # -- navigation: the screens post these (nsq.tui.admin.navigation), the app pushes --

    def on_show_topic(self, message: ShowTopic) -> None:
        self.push_screen(TopicScreen(message.topic))

    def on_show_channel(self, message: ShowChannel) -> None:
        self.push_screen(ChannelScreen(message.topic, message.channel))

    def on_show_node(self, message: ShowNode) -> None:
        self.push_screen(NodeScreen(message.http_address))

    def on_show_peek(self, message: ShowPeek) -> None:
        self.push_screen(PeekScreen(message.topic, message.channel))

    def action_help(self) -> None:
        sections = [(name, [(k, w) for k, w, changes in keys if not (changes and self.read_only)])
                    for name, keys in KEYS]
        footer = ("Read-only: no action is offered." if self.read_only else
                  "Every action asks for a confirmation first; the result shows in a toast.")
        self.push_screen(HelpScreen("nsq admin keys", [s for s in sections if s[1]], footer))

    def run_admin(self, job: Callable[[Admin], Awaitable[Any]], after: Callable[[], None] | None = None,
                  then: Callable[[list[ActionResult]], None] | None = None) -> None:
        """Run an action (``job(admin)``) in a worker, report it, refresh.

        Args:
            after: called before the toasts when every result did something.
            then: called with the results after the toasts (a follow-up
                question, such as the rewind's offer to go to the oldest
                retained message).
        """
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
            # leave the screen first (a deleted topic's): each screen shows the
            # toasts not yet expired, so a toast raised before the screen
            # changes would show again on the next one
            if after is not None and all(r.done for r in results):
                after()
            for r in results:
                self.notify(r.summary(), severity="information" if r.ok else "error", timeout=6 if r.ok else 12)
            if then is not None:
                then(results)
            self.refresh_now()

        self.run_worker(run(), group="action")


def _screens_see(app: AdminApp) -> AdminHost:
    """Never called: mypy checks here that the app has what the screens ask of it."""
    return app


def run_admin_app(lookupd_http_addresses: list[str], nsqd_http_addresses: list[str], *, actor: Actor,
                  read_only: bool, read_only_reason: str = "", connect_timeout: float = 2.0,
                  request_timeout: float = 5.0, ssl_context: ssl.SSLContext | None = None,
                  notification_http_endpoint: str = "", action_log: str = "", refresh_interval: float = 2.0,
                  auth_secret: str = "") -> int:
    """Run ``nsq admin`` in this terminal on the cluster the addresses name.

    Args:
        lookupd_http_addresses, nsqd_http_addresses: one of the two (see
            :class:`~nsq.cluster.poller.Cluster`).
        actor: who acts (notifications, action log).
        read_only, read_only_reason: offer no action, and say why.
        connect_timeout, request_timeout: seconds, per HTTP request.
        ssl_context: for ``https://`` addresses.
        notification_http_endpoint, action_log: where each action is reported.
        refresh_interval: seconds between polls.
        auth_secret: sent to the nsqds as ``Authorization: Bearer <secret>``
            (nsqd's ``--http-auth-required``); "" sends none.

    Returns:
        the app's return code (0).
    """
    # log lines on stderr would tear the screen: actions go to the action log
    logging.getLogger("nsq.admin").addHandler(logging.NullHandler())
    logging.getLogger("nsq.admin").propagate = False

    async def main() -> int:
        async with Cluster(lookupd_http_addresses, nsqd_http_addresses, connect_timeout=connect_timeout,
                           request_timeout=request_timeout, ssl_context=ssl_context,
                           auth_secret=auth_secret) as cluster:
            admin = None if read_only else Admin(cluster, actor, notification_http_endpoint, action_log)
            app = AdminApp(cluster, admin, read_only=read_only, read_only_reason=read_only_reason,
                           refresh_interval=refresh_interval)
            try:
                await app.run_async()
            finally:
                if admin is not None:
                    await admin.close()
            return app.return_code or 0

    return asyncio.run(main())
