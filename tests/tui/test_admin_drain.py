"""``D`` on the Nodes screen of ``nsq admin``: drain the selected nsqd
(``POST /drain``) behind a confirmation, driven with Textual's pilot against
real in-process nsqds (and a stand-in for a Go nsqd, which has no drain)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from textual.widgets import DataTable
from textual.widgets._toast import Toast

from nsq.client import Consumer
from nsq.cluster.actions import Admin
from nsq.cluster.poller import Cluster
from nsq.tui.admin import AdminApp, NodesScreen
from nsq.tui.admin.dialogs import ConfirmScreen, HelpScreen
from tests.tui.conftest import AdminCluster, NotificationSink, wait_until
from tests.tui.test_admin import ACTOR, has_row, make_app, move_to
from tests.tui.test_admin_peek import go_nsqd  # noqa: F401 (a fixture: answers as Go nsqd 1.2.1)

DRAIN_TEXT = "stops taking publishes and new deliveries, waits for messages in flight, then exits"


@pytest.fixture
async def closers() -> AsyncIterator[list]:
    made: list = []
    yield made
    for x in made:
        await x.close()


def nsqd_app(closers: list, addresses: list[str], *, endpoint: str = "", read_only: bool = False) -> AdminApp:
    cluster = Cluster([], addresses, connect_timeout=5.0, request_timeout=15.0)  # loaded machines: see test_admin.make_app
    admin = Admin(cluster, ACTOR, endpoint)
    closers.extend([admin, cluster])
    return AdminApp(cluster, None if read_only else admin, read_only=read_only, refresh_interval=0.2)


async def to_nodes(pilot, app: AdminApp, row: str) -> DataTable:
    await pilot.press("2")
    assert isinstance(app.screen, NodesScreen)
    table = app.screen.query_one("#nodes", DataTable)
    await wait_until(pilot, lambda: has_row(table, row))
    return table


def toasts(app: AdminApp) -> list[str]:
    return [str(t.render()) for t in app.screen.query(Toast)]


async def ping(address: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(f"http://{address}/ping") as r:
        return r.status, await r.text()


async def test_drain_waits_for_the_message_in_flight_then_the_nsqd_stops(make_nsqd, closers,
                                                                         notification_sink: NotificationSink):
    d = await make_nsqd(broadcast_address="127.0.0.1", drain_timeout=30.0)
    address = f"127.0.0.1:{d.http_port}"
    d.get_topic("orders").get_channel("billing")
    held: list = []

    async def hold(message):  # keep it in flight
        message.disable_auto_response()
        held.append(message)

    consumer = Consumer("orders", "billing", hold, nsqd_tcp_addresses=[f"127.0.0.1:{d.tcp_port}"])
    await consumer.start()
    closers.append(_Closer(consumer))
    async with aiohttp.ClientSession() as s, s.post(f"http://{address}/pub?topic=orders", data=b"m") as r:
        assert r.status == 200
    app = nsqd_app(closers, [address], endpoint=notification_sink.url)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        await wait_until(pilot, lambda: len(held) == 1)
        await to_nodes(pilot, app, address)
        await pilot.press("D")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith("Drain nsqd ")
        assert address in app.screen.question and DRAIN_TEXT in app.screen.question
        assert app.screen.verb == "Drain" and app.screen.destructive
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert result.ok, result.errors
        assert result.action == "drain_node" and result.node == address
        assert result.summary().startswith(f"drain node {address}: draining")
        await wait_until(pilot, lambda: any(f"drain node {address}: draining" in t for t in toasts(app)))
        # draining, not gone: the message in flight keeps it up
        assert d.draining and not d.exiting
        assert await ping(address) == (503, "DRAINING")
        held[0].finish()
        await asyncio.wait_for(d.wait_stopped(), 10)
    assert len(notification_sink.received) == 1
    note = notification_sink.received[0]
    assert note["action"] == "drain_node" and note["node"] == address and note["topic"] == ""
    assert "channel" not in note and note["user"] == "alice" and note["via"] == "testhost"
    assert note["url"] == f"https://admin.example/api/nodes/{address.replace(':', '%3A')}"


class _Closer:
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    async def close(self) -> None:
        await self.consumer.close(timeout=1)


async def test_cancel_does_nothing_then_drain_stops_only_the_selected_nsqd(admin_cluster: AdminCluster,
                                                                           notification_sink: NotificationSink):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    target, other = cl.nsqd_http(d2), cl.nsqd_http(d1)
    app = make_app(cl, endpoint=notification_sink.url)
    async with app.run_test(size=(120, 30)) as pilot:
        table = await to_nodes(pilot, app, target)
        await wait_until(pilot, lambda: has_row(table, other))
        move_to(table, target)
        await pilot.press("D")
        assert isinstance(app.screen, ConfirmScreen) and target in app.screen.question
        await pilot.press("n")  # refused: nothing happens
        assert isinstance(app.screen, NodesScreen)
        await pilot.press("D", "escape")
        assert isinstance(app.screen, NodesScreen)
        await pilot.pause(0.3)
        assert app.results == [] and notification_sink.received == []
        assert not d1.draining and not d2.draining and not d2.exiting

        move_to(table, target)
        await pilot.press("D")
        await pilot.click("#yes")
        await wait_until(pilot, lambda: len(app.results) == 1)
        assert app.results[0].ok, app.results[0].errors
        await asyncio.wait_for(d2.wait_stopped(), 10)  # nothing in flight: drained at once, then stopped
        assert not d1.draining and not d1.exiting
        # it unregistered from the lookupd: the Nodes screen drops it
        await wait_until(pilot, lambda: not has_row(table, target))
        assert has_row(table, other)
    assert [(n["action"], n["node"]) for n in notification_sink.received] == [("drain_node", target)]


async def test_a_go_nsqd_has_no_drain(go_nsqd, closers, notification_sink: NotificationSink):  # noqa: F811
    app = nsqd_app(closers, [go_nsqd.address], endpoint=notification_sink.url)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        await to_nodes(pilot, app, go_nsqd.address)
        await pilot.press("D")
        assert "Drain nsqd gonsqd" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert result.errors == ["this nsqd has no drain (Go nsqd)"]
        assert result.summary() == f"drain node {go_nsqd.address}: this nsqd has no drain (Go nsqd)"
        await wait_until(pilot, lambda: any("this nsqd has no drain (Go nsqd)" in t for t in toasts(app)))
    assert notification_sink.received == []  # nothing was done, nothing is notified


async def test_an_unreachable_nsqd_reports_the_failure(closers):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    app = nsqd_app(closers, [dead])
    async with app.run_test(size=(120, 30)) as pilot:
        await to_nodes(pilot, app, dead)
        await pilot.press("D", "y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        assert not app.results[0].ok and dead in app.results[0].errors[0]


async def test_read_only_offers_no_drain(make_nsqd, closers):
    d = await make_nsqd(broadcast_address="127.0.0.1")
    address = f"127.0.0.1:{d.http_port}"
    app = nsqd_app(closers, [address], read_only=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await to_nodes(pilot, app, address)
        shown = {key for key, b in app.screen.active_bindings.items()
                 if b.binding.show and app.screen.check_action(b.binding.action, ()) is not False}
        assert "D" not in shown and "1" in shown
        await pilot.press("D")
        await pilot.pause(0.3)
        assert isinstance(app.screen, NodesScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert [k for k, _ in dict(app.screen.sections)["Nodes"]] == ["enter", "l"]  # no drain
        assert "D" not in {k for _, section in app.screen.sections for k, _ in section}
    assert app.results == [] and not d.draining


async def test_the_help_lists_drain_and_the_footer_offers_it(make_nsqd, closers):
    d = await make_nsqd(broadcast_address="127.0.0.1")
    address = f"127.0.0.1:{d.http_port}"
    app = nsqd_app(closers, [address])
    async with app.run_test(size=(120, 30)) as pilot:
        await to_nodes(pilot, app, address)
        shown = {key for key, b in app.screen.active_bindings.items()
                 if b.binding.show and app.screen.check_action(b.binding.action, ()) is not False}
        assert "D" in shown
        await pilot.press("question_mark")
        nodes = dict(app.screen.sections)["Nodes"]
        assert ("D", "drain the selected nsqd (then it exits)") in nodes
    assert not d.draining
