"""``nsq admin`` driven with Textual's pilot against a real nsqlookupd and two
real nsqds (in this process, loopback, port 0)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from textual.widgets import DataTable, Input, Static

from nsq.client import Consumer
from nsq.cluster.actions import Actor, Admin
from nsq.tui.admin import AdminApp, ChannelScreen, NodesScreen, TopicScreen, TopicsScreen
from nsq.cluster.poller import Cluster
from nsq.tui.admin.dialogs import ConfirmScreen, CreateScreen, HelpScreen
from tests.tui.conftest import AdminCluster, NotificationSink, wait_until

ACTOR = Actor(user="alice", remote_ip="10.0.0.7:51234", user_agent="pilot/1.0", via="testhost",
              url_base="https://admin.example")


def make_app(cl: AdminCluster, *, endpoint: str = "", read_only: bool = False, nsqd: list[str] | None = None,
             **kw) -> AdminApp:
    # lookupd, the nsqds and the app share this test's loop: on a loaded machine a request may wait
    # seconds for its turn (a 2 s limit once failed an action there); no test here waits for a timeout
    cluster = Cluster([] if nsqd else [cl.lookupd_http], nsqd or [], connect_timeout=5.0, request_timeout=15.0)
    admin = Admin(cluster, ACTOR, endpoint)
    cl.extra += [admin, cluster]
    return AdminApp(cluster, None if read_only else admin, read_only=read_only, refresh_interval=0.2, **kw)


def cells(table: DataTable, key: str) -> list[str]:
    return [str(c) for c in table.get_row(key)]


def has_row(table: DataTable, key: str) -> bool:
    return any(str(r.key.value) == key for r in table.ordered_rows)


def column(table: DataTable, label: str) -> int:
    return [str(c.label).split(" ")[0] for c in table.ordered_columns].index(label)


def move_to(table: DataTable, key: str) -> None:
    table.move_cursor(row=table.get_row_index(key), animate=False)


async def publish(cl: AdminCluster, d, topic: str, n: int) -> None:
    await cl.post(cl.nsqd_http(d), f"/mpub?topic={topic}", b"\n".join(b"m%d" % i for i in range(n)))


async def create(cl: AdminCluster, d, topic: str, channel: str) -> None:
    await cl.post(cl.nsqd_http(d), f"/topic/create?topic={topic}")
    await cl.post(cl.nsqd_http(d), f"/channel/create?topic={topic}&channel={channel}")


async def channel_stats(cl: AdminCluster, d, topic: str, channel: str) -> dict | None:
    for t in (await cl.stats(d))["topics"] or []:
        if t["topic_name"] == topic:
            return next((c for c in t["channels"] if c["channel_name"] == channel), None)
    return None


async def topic_names(cl: AdminCluster, d) -> set[str]:
    return {t["topic_name"] for t in (await cl.stats(d))["topics"] or []}


async def test_topics_appear_with_their_depth_summed_over_nsqds(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    await publish(cl, d1, "orders", 3)
    await publish(cl, d2, "orders", 2)
    await publish(cl, d1, "events", 4)
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl)
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(table, "orders") and has_row(table, "events"))
        orders = cells(table, "orders")
        assert orders[column(table, "Depth")] == "5"
        assert orders[column(table, "Mem")] == "5 + 0"
        assert orders[column(table, "Messages")] == "5"
        assert orders[column(table, "Producers")] == "2"
        assert cells(table, "events")[column(table, "Producers")] == "1"
        totals = str(app.screen.query_one("#totals", Static).render())
        assert "depth 9 (9 + 0)" in totals and "messages 9" in totals
        # rates need two polls; the second shows a number, not "-"
        await wait_until(pilot, lambda: cells(table, "orders")[column(table, "In/s")] != "-")


async def test_drill_down_topic_channel_clients(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "billing")
    await cl.wait_registered("orders", [d1, d2])
    await publish(cl, d1, "orders", 6)
    held: list = []

    async def hold(message):  # keep messages in flight
        message.disable_auto_response()
        held.append(message)

    consumer = Consumer("orders", "billing", hold, nsqd_tcp_addresses=[f"127.0.0.1:{d1.tcp_port}"],
                        max_in_flight=2, identify={"user_agent": "billing-worker/2.0", "snappy": True})
    await consumer.start()
    cl.extra.append(_Closer(consumer))
    app = make_app(cl)
    async with app.run_test(size=(170, 36)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(table, "orders"))
        move_to(table, "orders")
        await pilot.press("enter")
        assert isinstance(app.screen, TopicScreen) and app.screen.topic == "orders"
        nodes = app.screen.query_one("#nodes", DataTable)
        channels = app.screen.query_one("#channels", DataTable)
        await wait_until(pilot, lambda: has_row(channels, "billing") and has_row(nodes, "*"))
        assert has_row(nodes, f"127.0.0.1:{d1.http_port}") and has_row(nodes, f"127.0.0.1:{d2.http_port}")
        await wait_until(pilot, lambda: cells(channels, "billing")[column(channels, "In-Flight")] == "2")
        assert cells(channels, "billing")[column(channels, "Depth")] == "4"
        assert cells(channels, "billing")[column(channels, "Connections")] == "1"

        move_to(channels, "billing")
        await pilot.press("enter")
        assert isinstance(app.screen, ChannelScreen) and app.screen.channel == "billing"
        clients = app.screen.query_one("#clients", DataTable)
        await wait_until(pilot, lambda: clients.row_count == 1)
        row = [str(c) for c in clients.get_row_at(0)]
        assert row[column(clients, "User-Agent")] == "billing-worker/2.0"
        assert row[column(clients, "Protocol")] == "V2"
        assert "Snappy" in row[column(clients, "Attributes")]
        assert row[column(clients, "In-Flight")] == "2"
        assert row[column(clients, "Ready")] == "2"
        assert row[column(clients, "NSQd")].endswith(f":{d1.http_port}")

        await pilot.press("escape")
        assert isinstance(app.screen, TopicScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, TopicsScreen)
        for m in held:
            m.finish()


class _Closer:
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    async def close(self) -> None:
        await self.consumer.close(timeout=1)


async def test_pausing_a_channel_shows_paused_in_nsqd_stats_and_notifies(admin_cluster: AdminCluster,
                                                                          notification_sink: NotificationSink):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "billing")
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl, endpoint=notification_sink.url)
    async with app.run_test(size=(120, 30)) as pilot:
        app.push_screen(ChannelScreen("orders", "billing"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("orders", "billing"))
        await pilot.press("p")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Pause channel orders/billing on 2 nsqd" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        assert app.results[0].ok, app.results[0].errors
        for d in (d1, d2):
            assert (await channel_stats(cl, d, "orders", "billing"))["paused"] is True
        title = app.screen.query_one("#title", Static)
        await wait_until(pilot, lambda: "paused" in str(title.render()))

        # p again offers unpause
        await pilot.press("p")
        assert "Unpause channel" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 2)
        for d in (d1, d2):
            assert (await channel_stats(cl, d, "orders", "billing"))["paused"] is False

    assert [n["action"] for n in notification_sink.received] == ["pause_channel", "unpause_channel"]
    note = notification_sink.received[0]
    assert set(note) == {"action", "topic", "channel", "timestamp", "user", "remote_ip", "user_agent", "url", "via"}
    assert note["topic"] == "orders" and note["channel"] == "billing"
    assert note["user"] == "alice" and note["remote_ip"] == "10.0.0.7:51234" and note["user_agent"] == "pilot/1.0"
    assert note["via"] == "testhost"
    assert note["url"] == "https://admin.example/api/topics/orders/billing"
    assert isinstance(note["timestamp"], int) and note["timestamp"] > 1_600_000_000


async def test_delete_asks_first_then_deletes_on_every_producer(admin_cluster: AdminCluster,
                                                                notification_sink: NotificationSink):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "doomed", "c")
        await publish(cl, d, "doomed", 2)
    await publish(cl, d1, "kept", 1)
    await cl.wait_registered("doomed", [d1, d2])
    app = make_app(cl, endpoint=notification_sink.url)
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(table, "doomed") and has_row(table, "kept"))
        move_to(table, "doomed")
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Delete topic doomed" in app.screen.question and "2 nsqd" in app.screen.question
        await pilot.press("n")  # refused: nothing happens
        assert isinstance(app.screen, TopicsScreen)
        assert app.results == []
        for d in (d1, d2):
            assert "doomed" in await topic_names(cl, d)

        move_to(table, "doomed")
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#yes")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert result.ok, result.errors  # no spurious 404 from the nsqds lookupd already told
        for d in (d1, d2):
            assert "doomed" not in await topic_names(cl, d)
        assert "kept" in await topic_names(cl, d1)
        assert "doomed" not in (await cl.get_json(cl.lookupd_http, "/topics"))["topics"]
        await wait_until(pilot, lambda: not has_row(table, "doomed"))
        assert has_row(table, "kept")
    assert [(n["action"], n["topic"]) for n in notification_sink.received] == [("delete_topic", "doomed")]
    assert "channel" not in notification_sink.received[0]


async def test_delete_channel_from_its_screen_removes_it_everywhere_and_goes_back(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "old")
        await create(cl, d, "orders", "new")
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl)
    async with app.run_test(size=(120, 30)) as pilot:
        app.push_screen(TopicScreen("orders"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("orders", "old"))
        app.push_screen(ChannelScreen("orders", "old"))
        await pilot.pause()
        await pilot.press("d")
        assert "Delete channel orders/old" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: isinstance(app.screen, TopicScreen))
        assert app.results[0].ok, app.results[0].errors
        for d in (d1, d2):
            assert await channel_stats(cl, d, "orders", "old") is None
            assert await channel_stats(cl, d, "orders", "new") is not None


async def test_create_topic_and_channel_from_the_form(admin_cluster: AdminCluster,
                                                      notification_sink: NotificationSink):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    await cl.post(cl.nsqd_http(d1), "/topic/create?topic=orders")
    await cl.wait_registered("orders", [d1])
    app = make_app(cl, endpoint=notification_sink.url)
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(table, "orders"))
        await pilot.press("c")
        assert isinstance(app.screen, CreateScreen)
        await pilot.press(*"bad topic!")
        await pilot.press("enter")
        assert isinstance(app.screen, CreateScreen)  # refused
        assert "invalid topic name" in str(app.screen.query_one("#problem", Static).render())
        app.screen.query_one("#topic", Input).value = "orders"
        app.screen.query_one("#channel", Input).value = "audit"
        await pilot.click("#create")
        await wait_until(pilot, lambda: len(app.results) == 2)
        assert all(r.ok for r in app.results), [r.errors for r in app.results]
        # the producer nsqd got the channel, the lookupd knows it
        assert await channel_stats(cl, d1, "orders", "audit") is not None
        assert "audit" in (await cl.get_json(cl.lookupd_http, "/channels?topic=orders"))["channels"]
        # a topic only lookupd knows shows with no producer, with its lookupd channels
        await pilot.press("c")
        app.screen.query_one("#topic", Input).value = "future"
        app.screen.query_one("#channel", Input).value = "later"
        await pilot.press("enter")
        await wait_until(pilot, lambda: has_row(table, "future"))
        assert cells(table, "future")[column(table, "Producers")] == "0"
        assert "no nsqd" in cells(table, "future")[0]
        assert [c.name for c in app.snapshot.topic("future").channels] == ["later"]
    assert [(n["action"], n["topic"], n.get("channel")) for n in notification_sink.received] == [
        ("create_topic", "orders", None), ("create_channel", "orders", "audit"),
        ("create_topic", "future", None), ("create_channel", "future", "later")]
    assert notification_sink.received[0]["url"] == "https://admin.example/api/topics"


async def test_a_tab_typed_fast_in_the_create_form_moves_to_the_channel_field():
    """Keys a terminal hands over in one read are queued at once: the tab
    must move the focus before the keys after it are delivered."""
    from textual import events

    from nsq.tui.admin import FixedSource
    from tests.tui.test_admin_snapshots import fixed_snapshot

    snap = fixed_snapshot()
    app = AdminApp(FixedSource(snap), None, snapshot=snap)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("c", *"orders", "tab", *"audit")
        assert isinstance(app.screen, CreateScreen)
        assert [app.screen.query_one(f"#{f}", Input).value for f in ("topic", "channel")] == ["orders", "audit"]
        await pilot.press("escape", "c")
        for key in [*"topic", "tab", *"chan", "shift+tab"]:
            app._driver.process_message(events.Key(key, {"tab": "\t", "shift+tab": None}.get(key, key)))
        await pilot.pause(0.3)
        assert [app.screen.query_one(f"#{f}", Input).value for f in ("topic", "channel")] == ["topic", "chan"]
        assert app.focused.id == "topic"


async def test_pause_and_empty_a_topic(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await publish(cl, d, "orders", 3)
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl)
    async with app.run_test(size=(120, 30)) as pilot:
        app.push_screen(TopicScreen("orders"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.topic("orders") is not None)
        await pilot.press("p", "y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        await pilot.press("e", "y")
        await wait_until(pilot, lambda: len(app.results) == 2)
        assert all(r.ok for r in app.results)
        for d in (d1, d2):
            t = (await cl.stats(d))["topics"][0]
            assert t["paused"] is True and t["depth"] == 0


async def test_tombstone_the_selected_producer(admin_cluster: AdminCluster, notification_sink: NotificationSink):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await publish(cl, d, "orders", 1)
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl, endpoint=notification_sink.url)
    node = f"127.0.0.1:{d2.http_port}"
    async with app.run_test(size=(120, 30)) as pilot:
        app.push_screen(TopicScreen("orders"))
        nodes = None
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.topic("orders") is not None
                         and app.snapshot.topic("orders").producers == 2)
        await pilot.pause()
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: has_row(nodes, node))
        move_to(nodes, node)
        await pilot.press("t")
        assert f"Tombstone topic orders on nsqd {node}" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        assert app.results[0].ok, app.results[0].errors
        assert "orders" not in await topic_names(cl, d2)  # deleted there, as nsqadmin does
        assert "orders" in await topic_names(cl, d1)
    assert notification_sink.received[0]["action"] == "tombstone_topic_producer"
    assert notification_sink.received[0]["node"] == node
    assert notification_sink.received[0]["url"] == f"https://admin.example/api/nodes/{node.replace(':', '%3A')}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_nsqd_shows_an_error_row_and_the_app_goes_on(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, _ = cl.nsqds
    await publish(cl, d1, "orders", 2)
    dead = f"127.0.0.1:{_free_port()}"
    app = make_app(cl, nsqd=[cl.nsqd_http(d1), dead])
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(table, "orders"))
        assert cells(table, "orders")[column(table, "Depth")] == "2"
        errors = app.screen.query_one("#errors", Static)
        assert errors.display and dead in str(errors.render())
        polls = app.polls
        await wait_until(pilot, lambda: app.polls >= polls + 2)  # still polling
        await pilot.press("2")
        assert isinstance(app.screen, NodesScreen)
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: has_row(nodes, dead))
        row = cells(nodes, dead)
        assert "unreachable" in row[column(nodes, "Version")]
        assert cells(nodes, cl.nsqd_http(d1))[column(nodes, "Version")] == "1.2.1"
        await pilot.press("1")
        assert isinstance(app.screen, TopicsScreen)


async def test_a_registered_nsqd_whose_http_is_down_shows_on_the_topic(admin_cluster: AdminCluster):
    """An nsqd lookupd lists (it registered over TCP) but whose HTTP API does
    not answer: an error line, an unreachable row on its topic and on Nodes."""
    cl = admin_cluster
    d1, _ = cl.nsqds
    await publish(cl, d1, "orders", 1)
    dead_http = _free_port()
    host, port = cl.lookupd.tcp_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({"broadcast_address": "127.0.0.1", "hostname": "ghost", "tcp_port": _free_port(),
                       "http_port": dead_http, "version": "1.2.1"}).encode()
    writer.write(b"  V1IDENTIFY\n" + struct.pack(">l", len(body)) + body + b"REGISTER orders\n")
    await writer.drain()
    try:
        app = make_app(cl)
        async with app.run_test(size=(140, 30)) as pilot:
            app.push_screen(TopicScreen("orders"))
            await pilot.pause()
            nodes = app.screen.query_one("#nodes", DataTable)
            ghost = f"127.0.0.1:{dead_http}"
            await wait_until(pilot, lambda: has_row(nodes, ghost))
            assert "unreachable" in cells(nodes, ghost)[0]
            assert ghost in str(app.screen.query_one("#errors", Static).render())
            assert has_row(nodes, f"127.0.0.1:{d1.http_port}")
    finally:
        writer.close()


async def test_read_only_offers_no_action(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "billing")
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl, read_only=True)
    action_keys = {"c", "p", "e", "d", "t"}
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: has_row(table, "orders"))
        assert "READ-ONLY" in str(app.screen.query_one("#status", Static).render())
        for screen in (TopicsScreen, TopicScreen, ChannelScreen):
            if screen is TopicScreen:
                app.push_screen(TopicScreen("orders"))
            elif screen is ChannelScreen:
                app.push_screen(ChannelScreen("orders", "billing"))
            await pilot.pause()
            shown = {key for key, b in app.screen.active_bindings.items()
                     if b.binding.show and app.screen.check_action(b.binding.action, ()) is not False}
            assert not shown & action_keys, shown
            for key in sorted(action_keys):
                await pilot.press(key)
                assert not isinstance(app.screen, (ConfirmScreen, CreateScreen)), key
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = {k for _, section in app.screen.sections for k, _ in section}
        assert not keys & {"c", "p", "p / e / d", "t", "d", "e"}
    assert app.results == []
    for d in (d1, d2):
        assert (await channel_stats(cl, d, "orders", "billing"))["paused"] is False


async def test_filter_sort_and_refresh_interval(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, _ = cl.nsqds
    await publish(cl, d1, "alpha", 1)
    await publish(cl, d1, "beta", 3)
    await publish(cl, d1, "order_a", 2)
    app = make_app(cl)
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.screen.query_one("#topics", DataTable)
        await wait_until(pilot, lambda: table.row_count == 3)
        keys = lambda: [str(r.key.value) for r in table.ordered_rows]  # noqa: E731
        assert keys() == ["alpha", "beta", "order_a"]
        move_to(table, "alpha")
        await pilot.press("s")  # by depth, largest first
        assert keys() == ["beta", "order_a", "alpha"]
        assert app.screen.selected().name == "alpha"  # the cursor stays on its topic
        await pilot.press("S")
        assert keys() == ["alpha", "order_a", "beta"]
        await pilot.press("slash", *"orde")
        assert keys() == ["order_a"]
        await pilot.press("escape")
        assert keys() == ["alpha", "order_a", "beta"]
        await pilot.press("s")  # by memory + disk, largest first
        assert app.screen.sort_column == column(table, "Mem")
        assert keys() == ["beta", "order_a", "alpha"]
        await pilot.press("S")
        assert keys() == ["alpha", "order_a", "beta"]
        assert app.refresh_interval == 0.2
        await pilot.press("plus")
        assert app.refresh_interval == 0.5
        await pilot.press("plus", "plus")
        assert app.refresh_interval == 2.0
        await pilot.press("minus")
        assert app.refresh_interval == 1.0
        assert "refresh 1s" in str(app.screen.query_one("#status", Static).render())


async def test_keyboard_navigation_between_screens():
    """1 and 2 show the Topics and Nodes lists themselves; escape goes up;
    the help lists the keys; q quits. (Fixed data: no cluster needed.)"""
    from nsq.tui.admin import FixedSource
    from tests.tui.test_admin_snapshots import fixed_snapshot

    snap = fixed_snapshot()
    app = AdminApp(FixedSource(snap), None, snapshot=snap)
    async with app.run_test(size=(80, 24)) as pilot:
        assert isinstance(app.screen, TopicsScreen)
        await pilot.press("down", "down", "enter")
        assert isinstance(app.screen, TopicScreen) and app.screen.topic == "page_views"
        await pilot.press("down", "enter")
        assert isinstance(app.screen, ChannelScreen) and app.screen.channel == "metrics"
        await pilot.press("2")
        assert isinstance(app.screen, NodesScreen)
        await pilot.press("1")
        assert isinstance(app.screen, TopicsScreen)  # the list, not the channel left open
        await pilot.press("enter", "backspace")
        assert isinstance(app.screen, TopicsScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert ("t", "tombstone the topic on the selected nsqd (and delete it there)") in app.screen.sections[2][1]
        await pilot.press("escape")
        assert isinstance(app.screen, TopicsScreen)
        # actions without an Admin (a fixed source) say so instead of failing
        await pilot.press("p", "y")
        await pilot.pause()
        await pilot.press("q")
    assert app.return_code == 0


async def test_https_nsqd_with_the_tls_client_flags(make_nsqd, tmp_path):
    """--http-client-tls-root-ca-file: an nsqd's HTTPS API is read; without
    the CA the certificate check fails and shows as that nsqd's error."""
    from nsq.client.tls import client_context
    from tests.tlsutil import make_pki

    pki = make_pki(tmp_path)
    d = await make_nsqd(tls_cert=pki.server_cert, tls_key=pki.server_key)
    d.get_topic("secure")
    address = f"https://127.0.0.1:{d.https_port}"
    async with Cluster([], [address], ssl_context=client_context(root_ca_file=pki.ca)) as cluster:
        snap = await cluster.fetch()
        assert snap.errors == [] and [t.name for t in snap.topics] == ["secure"]
        assert snap.nodes[0].api_address == address
    async with Cluster([], [address]) as cluster:  # the system CAs do not know this one
        snap = await cluster.fetch()
        assert len(snap.errors) == 1 and "certificate" in snap.errors[0].message.lower()
        assert snap.topics == [] and snap.nodes[0].error


def _text(widget) -> str:
    """What ``widget`` shows on screen, line by line joined with spaces."""
    from textual.geometry import Region

    lines = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return " ".join(strip.text.strip() for strip in lines)


async def test_dialog_texts_wrap_in_full_and_say_1_channel():
    """The create and confirmation dialogs show all of their text, wrapped,
    even 60 columns wide; one channel is "1 channel"."""
    from nsq.cluster.model import ChannelStats, ClusterSnapshot, TopicStats
    from nsq.tui.admin import FixedSource

    topic = TopicStats(name="orders", depth=1, channels=[ChannelStats(topic="orders", name="audit")],
                       nodes=[TopicStats(name="orders", node="10.0.0.1:4151", depth=1)])
    snap = ClusterSnapshot(taken_at=0.0, topics=[topic])
    app = AdminApp(FixedSource(snap), None, snapshot=snap)
    async with app.run_test(size=(60, 24)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        intro = app.screen.query_one("#intro", Static)
        assert intro.size.height >= 2
        assert _text(intro) == "Create topic / channel (an empty channel creates only the topic)"
        await pilot.press("escape", "d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.query_one("#question", Static)
        assert _text(question) == ("Delete topic orders with its 1 channel from the lookupds and 1 nsqd? "
                                   "Every queued message is lost.")
        await pilot.press("n", "e")
        await pilot.pause()
        assert "The 1 message queued in the topic itself (not in its channels) on 1 nsqd is lost." in _text(
            app.screen.query_one("#question", Static))
        await pilot.press("n")
        assert "1 topic · 1 channel · 0/0 nsqd · 0 clients" in str(app.screen.query_one("#status", Static).render())
