"""What a newcomer met in ``nsq admin``: a channel drained by a consumer
read 0 msg/s (the rate was the ingress only); on the Topic screen both
tables showed a cursor row while only one had the focus; a delete's
"done" toast showed twice (once per screen). Real lookupd and nsqds in this
process, driven with the pilot."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from nsq.client import Consumer
from nsq.tui.admin import ChannelScreen, NodeScreen, TopicScreen, TopicsScreen
from tests.tui.conftest import AdminCluster, wait_until
from tests.tui.test_admin import _Closer, cells, column, create, has_row, make_app, move_to, publish


def rate(text: str) -> float:
    return float(text.replace(",", "")) if text != "-" else -1.0


async def test_a_draining_consumer_shows_as_egress(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, _ = cl.nsqds
    await create(cl, d1, "orders", "work")
    await publish(cl, d1, "orders", 400)  # a backlog; nothing is published while it drains
    await cl.wait_registered("orders", [d1])

    async def slow(message):  # about 20 messages/s
        await asyncio.sleep(0.05)

    consumer = Consumer("orders", "work", slow, nsqd_tcp_addresses=[f"127.0.0.1:{d1.tcp_port}"], max_in_flight=1)
    await consumer.start()
    cl.extra.append(_Closer(consumer))
    app = make_app(cl)
    async with app.run_test(size=(170, 40)) as pilot:
        topics = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(topics, "orders")
                         and rate(cells(topics, "orders")[column(topics, "Out/s")]) > 2)
        assert cells(topics, "orders")[column(topics, "In/s")] == "0"
        move_to(topics, "orders")
        await pilot.press("enter")
        assert isinstance(app.screen, TopicScreen)
        channels = app.screen.query_one("#channels", DataTable)
        await wait_until(pilot, lambda: has_row(channels, "work")
                         and rate(cells(channels, "work")[column(channels, "Out/s")]) > 2)
        assert cells(channels, "work")[column(channels, "In/s")] == "0"
        nodes = app.screen.query_one("#nodes", DataTable)
        assert rate(cells(nodes, "*")[column(nodes, "Out/s")]) > 0


def shows_cursor(table: DataTable) -> bool:
    """Whether the cursor row stands out from the table's background."""
    return table.get_component_rich_style("datatable--cursor").bgcolor != table.rich_style.bgcolor


async def test_only_the_focused_table_shows_its_cursor_and_enter_follows_it(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "billing")
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl)
    async with app.run_test(size=(170, 40)) as pilot:
        await app.push_screen(TopicScreen("orders"))
        nodes, channels = app.screen.query_one("#nodes", DataTable), app.screen.query_one("#channels", DataTable)
        await wait_until(pilot, lambda: has_row(channels, "billing") and nodes.row_count == 3)
        assert app.focused is channels
        assert shows_cursor(channels) and not shows_cursor(nodes)
        await pilot.press("enter")
        assert isinstance(app.screen, ChannelScreen)
        await pilot.press("escape", "tab")
        assert app.focused is nodes
        assert shows_cursor(nodes) and not shows_cursor(channels)
        await pilot.press("enter")  # the row the (now visible) nodes cursor is on
        assert isinstance(app.screen, NodeScreen)


async def test_a_delete_that_leaves_the_screen_raises_its_toast_on_the_next_screen(admin_cluster: AdminCluster,
                                                                                     monkeypatch):
    """Each screen has its own toast rack, and a screen coming back shows
    every toast not yet expired: a toast raised on the Topic screen just
    before the delete leaves it could show there and again on Topics. The
    toast must be raised once the Topics screen is current, and show once."""
    from textual.app import App
    from textual.widgets._toast import Toast

    raised_on: list[str] = []
    shown: list[str] = []
    notify, init = App.notify, Toast.__init__

    def recording_notify(self, message, *args, **kwargs):
        raised_on.append(type(self.screen).__name__)
        notify(self, message, *args, **kwargs)

    def counting(self, notification, *args, **kwargs):
        shown.append(notification.message)
        init(self, notification, *args, **kwargs)

    monkeypatch.setattr(App, "notify", recording_notify)
    monkeypatch.setattr(Toast, "__init__", counting)
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "doomed", "c")
    await cl.wait_registered("doomed", [d1, d2])
    app = make_app(cl)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        app.push_screen(TopicScreen("doomed"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.topic("doomed") is not None)
        await pilot.press("d", "y")
        await wait_until(pilot, lambda: len(app.results) == 1 and isinstance(app.screen, TopicsScreen))
        await pilot.pause(0.5)
    assert app.results[0].ok, app.results[0].errors
    assert raised_on == ["TopicsScreen"]
    assert shown == ["delete topic doomed: done"]
