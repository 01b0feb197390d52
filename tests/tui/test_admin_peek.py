"""``nsq admin``'s Peek screen and Dead column, driven with Textual's pilot
against real nsqds (in this process, loopback, port 0) and, for what a Go
nsqd answers, a stand-in HTTP server: ``/stats`` without
``dead_letter_count`` and 404 ``{"message":"NOT_FOUND"}`` for
``/channel/peek`` (Go nsqd's HTTP API: https://nsq.io/components/nsqd.html#http-api)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from textual.widgets import DataTable, Static

from nsq.cluster.poller import Cluster
from nsq.tui.admin import AdminApp, ChannelScreen, PeekScreen, TopicScreen
from tests.server.helpers import Conn
from tests.tui.conftest import wait_until


def column(table: DataTable, label: str) -> int:
    return [str(c.label) for c in table.ordered_columns].index(label)


def rows(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def has_row(table: DataTable, key: str) -> bool:
    return any(str(r.key.value) == key for r in table.ordered_rows)


def http(d) -> str:
    return f"127.0.0.1:{d.http_port}"


async def post(address: str, path: str, body: bytes = b"") -> None:
    async with aiohttp.ClientSession() as s, s.post(f"http://{address}{path}", data=body) as r:
        assert r.status == 200, await r.text()


async def create(address: str, topic: str, channel: str) -> None:
    await post(address, f"/topic/create?topic={topic}")
    await post(address, f"/channel/create?topic={topic}&channel={channel}")


async def channel_stats(address: str, topic: str, channel: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(f"http://{address}/stats?format=json") as r:
        stats = json.loads(await r.read())
    t = next(t for t in stats["topics"] if t["topic_name"] == topic)
    return next(c for c in t["channels"] if c["channel_name"] == channel)


@pytest.fixture
async def clusters() -> AsyncIterator[list[Cluster]]:
    made: list[Cluster] = []
    yield made
    for c in made:
        await c.close()


def make_app(clusters: list[Cluster], nsqd: list[str], **kw) -> AdminApp:
    cluster = Cluster([], nsqd, connect_timeout=5.0, request_timeout=15.0)  # loaded machines: see test_admin.make_app
    clusters.append(cluster)
    kw.setdefault("refresh_interval", 0.2)
    return AdminApp(cluster, None, **kw)


class GoNSQD:
    """Answers as a Go nsqd 1.2.1 would: ``/info``, ``/stats`` (a channel
    ``orders/billing`` with 2 messages, no dead-letter keys) and 404
    ``NOT_FOUND`` for any other path."""

    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/info", self.info)
        app.router.add_get("/stats", self.stats)
        app.router.add_route("*", "/{tail:.*}", self.not_found)  # any other path, as Go nsqd's router
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def close(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "1.2.1", "broadcast_address": "127.0.0.1", "hostname": "gonsqd",
                                  "http_port": self.port, "tcp_port": 4150, "start_time": int(time.time())})

    async def stats(self, request: web.Request) -> web.Response:
        channel = {"channel_name": "billing", "depth": 2, "backend_depth": 0, "in_flight_count": 0,
                   "deferred_count": 0, "message_count": 2, "requeue_count": 0, "timeout_count": 0,
                   "client_count": 0, "clients": [], "paused": False,
                   "e2e_processing_latency": {"count": 0, "percentiles": None}}
        topic = {"topic_name": "orders", "channels": [channel], "depth": 0, "backend_depth": 0,
                 "message_count": 2, "message_bytes": 4, "paused": False,
                 "e2e_processing_latency": {"count": 0, "percentiles": None}}
        return web.json_response({"version": "1.2.1", "health": "OK", "start_time": int(time.time()),
                                  "topics": [topic], "producers": []})

    async def not_found(self, request: web.Request) -> web.Response:
        return web.json_response({"message": "NOT_FOUND"}, status=404)


@pytest.fixture
async def go_nsqd() -> AsyncIterator[GoNSQD]:
    g = GoNSQD()
    await g.start()
    yield g
    await g.close()


async def test_peek_shows_memory_and_disk_messages_of_two_nsqds_and_changes_nothing(make_nsqd, tmp_path, clusters):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # broadcast addresses nobody can reach: the peek must go where the app was told (--nsqd-http-address)
    a = await make_nsqd(data_path=str(tmp_path / "a"), mem_queue_size=1, broadcast_address="nsqd-a.invalid")
    b = await make_nsqd(data_path=str(tmp_path / "b"), mem_queue_size=1, broadcast_address="nsqd-b.invalid")
    for d in (a, b):
        await create(http(d), "orders", "billing")
    await post(http(a), "/pub?topic=orders", b"first")  # memory
    await post(http(b), "/pub?topic=orders", b"second")  # memory
    await post(http(a), "/pub?topic=orders", b"\xff\x00binary")  # disk
    await post(http(b), "/pub?topic=orders", "line one\nline \u00e9 two".encode())  # disk
    await post(http(a), "/pub?topic=orders", b"x" * 500)  # disk
    before = {d.http_port: await channel_stats(http(d), "orders", "billing") for d in (a, b)}
    assert before[a.http_port]["backend_depth"] == 2 and before[b.http_port]["backend_depth"] == 1

    app = make_app(clusters, [http(a), http(b)])
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("orders", "billing")
                         is not None and len(app.snapshot.channel("orders", "billing").nodes) == 2)
        app.push_screen(ChannelScreen("orders", "billing"))
        await pilot.pause()
        await pilot.press("m")
        assert isinstance(app.screen, PeekScreen)
        table = app.screen.query_one("#messages", DataTable)
        await wait_until(pilot, lambda: table.row_count == 5)
        got = rows(table)
        body, where = column(table, "Body"), column(table, "NSQd Host")
        assert [r[body] for r in got][:4] == ["first", "second", "hex ff 00 62 69 6e 61 72 79",
                                              "line one\\nline \u00e9 two"]
        long = got[4][body]
        assert long.startswith("xxxx") and long.endswith("…") and len(long) < 100 - 40  # cut to the width
        ports = [r[where].rsplit(":", 1)[-1] for r in got]
        assert ports == [str(p) for p in (a.http_port, b.http_port, a.http_port, b.http_port, a.http_port)]
        assert {r[column(table, "Attempts")] for r in got} == {"0"}
        assert all(len(r[column(table, "ID")]) == 16 for r in got)
        assert all(r[column(table, "Age")].endswith("s") for r in got)
        assert not app.screen.query_one("#notes", Static).display
        assert "next 5 messages on 2 nsqd" in str(app.screen.query_one("#title", Static).render())

        await pilot.press("r")  # peek again: the same messages
        await pilot.pause(0.3)
        await wait_until(pilot, lambda: table.row_count == 5)
        await pilot.press("escape")
        assert isinstance(app.screen, ChannelScreen)
    for d in (a, b):
        after = await channel_stats(http(d), "orders", "billing")
        keys = ("depth", "backend_depth", "in_flight_count", "message_count", "requeue_count")
        assert {k: after[k] for k in keys} == {k: before[d.http_port][k] for k in keys}


async def test_peek_a_topic_without_channels_and_not_one_with_channels(make_nsqd, clusters):
    d = await make_nsqd(broadcast_address="127.0.0.1")
    await post(http(d), "/mpub?topic=waiting", b"one\ntwo")
    await create(http(d), "flowing", "c")
    app = make_app(clusters, [http(d)])
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.topic("flowing") is not None)
        app.push_screen(TopicScreen("flowing"))
        await pilot.pause()
        assert app.screen.check_action("peek", ()) is False  # has a channel: "m" is not offered
        await pilot.press("m")
        assert isinstance(app.screen, TopicScreen)
        await pilot.press("escape")
        app.push_screen(TopicScreen("waiting"))
        await pilot.pause()
        shown = {k for k, b in app.screen.active_bindings.items() if b.binding.show
                 and app.screen.check_action(b.binding.action, ()) is not False}
        assert "m" in shown
        await pilot.press("m")
        assert isinstance(app.screen, PeekScreen) and app.screen.channel == ""
        table = app.screen.query_one("#messages", DataTable)
        await wait_until(pilot, lambda: table.row_count == 2)
        assert [r[column(table, "Body")] for r in rows(table)] == ["one", "two"]
    assert (await _topic_depth(http(d), "waiting")) == 2


async def _topic_depth(address: str, topic: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"http://{address}/stats?format=json") as r:
        stats = json.loads(await r.read())
    return next(t["depth"] for t in stats["topics"] if t["topic_name"] == topic)


async def test_dead_column_counts_a_dead_lettered_message(make_nsqd, clusters):
    d = await make_nsqd(max_attempts=1, broadcast_address="127.0.0.1")
    await create(http(d), "orders", "billing")
    await create(http(d), "orders", "audit")
    await post(http(d), "/pub?topic=orders", b"poison")
    conn = await Conn.open(d.tcp_port)
    try:
        await conn.subscribe("orders", "billing", rdy=1)
        msg = await conn.read_message()
        assert msg.attempts == 1
        await conn.send(b"REQ " + msg.id + b" 0\n")  # attempt 1 of 1: to orders.billing.dead
        app = make_app(clusters, [http(d)])
        async with app.run_test(size=(160, 30)) as pilot:  # wide: the max attempts note beside the name
            app.push_screen(TopicScreen("orders"))
            await pilot.pause()
            channels = app.screen.query_one("#channels", DataTable)
            await wait_until(pilot, lambda: has_row(channels, "billing") and
                             str(channels.get_row("billing")[column(channels, "Dead")]) == "1")
            assert str(channels.get_row("audit")[column(channels, "Dead")]) == "0"
            assert "max 1 attempt" in str(channels.get_row("billing")[0])
            app.push_screen(ChannelScreen("orders", "billing"))
            await pilot.pause()
            nodes = app.screen.query_one("#nodes", DataTable)
            await wait_until(pilot, lambda: has_row(nodes, "*"))
            assert str(nodes.get_row("*")[column(nodes, "Dead")]) == "1"
            assert str(nodes.get_row(http(d))[column(nodes, "Dead")]) == "1"
            title = str(app.screen.query_one("#title", Static).render())
            assert "max 1 attempt" in title and "max 1 attempts" not in title
    finally:
        await conn.aclose()
    assert (await channel_stats(http(d), "orders", "billing"))["depth"] == 0


async def test_a_go_nsqd_keeps_the_table_and_peek_working(make_nsqd, go_nsqd, clusters):
    """Its stats lack ``dead_letter_count`` (Dead 0) and its 404 for the peek
    path is a one-line note beside the other nsqd's messages."""
    d = await make_nsqd(broadcast_address="127.0.0.1")
    await create(http(d), "orders", "billing")
    await post(http(d), "/pub?topic=orders", b"ours")
    app = make_app(clusters, [http(d), go_nsqd.address])
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("orders", "billing")
                         is not None and len(app.snapshot.channel("orders", "billing").nodes) == 2)
        assert app.snapshot.errors == []
        app.push_screen(ChannelScreen("orders", "billing"))
        await pilot.pause()
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: has_row(nodes, go_nsqd.address) and has_row(nodes, "*"))
        assert str(nodes.get_row(go_nsqd.address)[column(nodes, "Dead")]) == "0"
        assert str(nodes.get_row("*")[column(nodes, "Depth")]) == "3"
        await pilot.press("m")
        table = app.screen.query_one("#messages", DataTable)
        await wait_until(pilot, lambda: table.row_count == 1)
        assert rows(table)[0][column(table, "Body")] == "ours"
        notes = app.screen.query_one("#notes", Static)
        assert notes.display
        text = str(notes.render())
        assert len(text.splitlines()) == 1
        assert "gonsqd" in text and go_nsqd.address in text and "no peek endpoint" in text


async def test_peek_after_the_channel_is_gone_is_a_note(make_nsqd, clusters):
    d = await make_nsqd(broadcast_address="127.0.0.1")
    await create(http(d), "orders", "billing")
    app = make_app(clusters, [http(d)], refresh_interval=60.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("orders", "billing"))
        await post(http(d), "/channel/delete?topic=orders&channel=billing")  # after the poll
        app.push_screen(PeekScreen("orders", "billing"))
        await pilot.pause()
        notes = app.screen.query_one("#notes", Static)
        await wait_until(pilot, lambda: notes.display)
        assert "no longer has this channel" in str(notes.render())
        assert app.screen.query_one("#nomessages", Static).display
