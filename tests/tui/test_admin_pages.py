"""The Node, Counter and Lookup screens of ``nsq admin``, driven with the
pilot against a real nsqlookupd and two real nsqds (in this process)."""

from __future__ import annotations

from textual.widgets import DataTable, Static

from nsq.client import Consumer
from nsq.tui.admin import ChannelScreen, NodeScreen, NodesScreen
from tests.tui.conftest import AdminCluster, wait_until
from tests.tui.test_admin import _Closer, cells, column, create, has_row, make_app, move_to, publish


async def test_node_screen_shows_one_nsqd_and_opens_from_every_nsqd_row(admin_cluster: AdminCluster):
    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "billing")
    await create(cl, d2, "events", "audit")
    await cl.wait_registered("orders", [d1, d2])
    await cl.wait_registered("events", [d2])
    await publish(cl, d1, "orders", 3)

    async def hold(message):
        message.disable_auto_response()

    consumer = Consumer("orders", "billing", hold, nsqd_tcp_addresses=[f"127.0.0.1:{d1.tcp_port}"],
                        max_in_flight=1, identify={"user_agent": "billing-worker/2.0"})
    await consumer.start()
    cl.extra.append(_Closer(consumer))
    a1 = f"127.0.0.1:{d1.http_port}"
    app = make_app(cl)
    async with app.run_test(size=(170, 40)) as pilot:
        await pilot.press("2")
        assert isinstance(app.screen, NodesScreen)
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: nodes.row_count == 2)
        move_to(nodes, next(str(r.key.value) for r in nodes.ordered_rows if str(r.key.value).endswith(
            f":{d1.http_port}")))
        await pilot.press("enter")
        assert isinstance(app.screen, NodeScreen) and app.screen.http_address == a1
        queues = app.screen.query_one("#queues", DataTable)
        clients = app.screen.query_one("#clients", DataTable)
        await wait_until(pilot, lambda: clients.row_count == 1 and has_row(queues, "orders/billing"))
        assert [str(r.key.value) for r in queues.ordered_rows] == ["orders", "orders/billing"]  # not d2's events
        await wait_until(pilot, lambda: cells(queues, "orders/billing")[column(queues, "In-Flight")] == "1")
        assert cells(queues, "orders/billing")[column(queues, "Depth")] == "2"
        assert cells(queues, "orders")[column(queues, "Messages")] == "3"
        row = [str(c) for c in clients.get_row_at(0)]
        assert row[column(clients, "User-Agent")] == "billing-worker/2.0"
        assert row[column(clients, "Topic")] == "orders/billing"
        title = str(app.screen.query_one("#title", Static).render())
        assert a1 in title and "1 topic · 3 messages · 1 client" in title
        # enter on the channel row opens the channel; its nsqd row opens the nsqd again
        move_to(queues, "orders/billing")
        await pilot.press("enter")
        assert isinstance(app.screen, ChannelScreen) and app.screen.channel == "billing"
        channel_nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: has_row(channel_nodes, a1))
        channel_nodes.focus()
        move_to(channel_nodes, f"127.0.0.1:{d2.http_port}")
        await pilot.press("enter")
        assert isinstance(app.screen, NodeScreen) and app.screen.http_address == f"127.0.0.1:{d2.http_port}"
        queues = app.screen.query_one("#queues", DataTable)
        await wait_until(pilot, lambda: has_row(queues, "events/audit"))
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, NodeScreen) and app.screen.http_address == a1
        await pilot.press("escape")
        assert isinstance(app.screen, NodesScreen)


async def test_counter_screen_counts_messages_processed_over_the_cluster(admin_cluster: AdminCluster):
    from textual.widgets import Digits

    from nsq.tui.admin import CounterScreen

    cl = admin_cluster
    d1, d2 = cl.nsqds
    for d in (d1, d2):
        await create(cl, d, "orders", "billing")
    await create(cl, d1, "orders", "audit")
    await cl.wait_registered("orders", [d1, d2])
    await publish(cl, d1, "orders", 3)  # two channels on d1: 6
    await publish(cl, d2, "orders", 2)  # one on d2: 2
    app = make_app(cl)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        assert isinstance(app.screen, CounterScreen)
        digits = app.screen.query_one("#counter", Digits)
        await wait_until(pilot, lambda: digits.value == "8")
        await publish(cl, d2, "orders", 1000)
        await wait_until(pilot, lambda: digits.value == "1,008")
        rate = app.screen.query_one("#counter-rate", Static)
        for _ in range(100):  # keep publishing until a poll has seen a rate
            if str(rate.render()).split(" ")[0] not in ("-", "0"):
                break
            await publish(cl, d2, "orders", 50)
            await pilot.pause(0.1)
        assert str(rate.render()).split(" ")[0] not in ("-", "0")
        assert str(rate.render()).endswith("messages/s")
        await pilot.press("1")
        assert not isinstance(app.screen, CounterScreen)


async def test_lookup_screen_lists_topics_no_nsqd_has_creates_and_deletes(admin_cluster: AdminCluster):
    from nsq.tui.admin import LookupScreen
    from nsq.tui.admin.dialogs import ConfirmScreen, CreateScreen

    cl = admin_cluster
    d1, _ = cl.nsqds
    await create(cl, d1, "orders", "billing")
    await cl.wait_registered("orders", [d1])
    app = make_app(cl)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("4")
        assert isinstance(app.screen, LookupScreen)
        lookupds = app.screen.query_one("#lookupds", DataTable)
        tree = app.screen.query_one("#tree", DataTable)
        await wait_until(pilot, lambda: lookupds.row_count == 1 and has_row(tree, "orders/billing"))
        assert has_row(lookupds, cl.lookupd_http)
        await pilot.press("c", *"future", "tab", *"later", "enter")
        assert not isinstance(app.screen, CreateScreen)
        await wait_until(pilot, lambda: has_row(tree, "future/later"))
        assert "no nsqd" in cells(tree, "future")[0] and "no nsqd" in cells(tree, "future/later")[0]
        assert cells(tree, "orders")[column(tree, "nsqd")] == "1"
        assert "1 on no nsqd yet" in str(app.screen.query_one("#title", Static).render())
        # a channel only lookupd knows, under a topic an nsqd has
        await cl.post(cl.lookupd_http, "/channel/create?topic=orders&channel=audit")
        await pilot.press("r")
        await wait_until(pilot, lambda: has_row(tree, "orders/audit"))
        assert "no nsqd" in cells(tree, "orders/audit")[0] and "no nsqd" not in cells(tree, "orders/billing")[0]
        move_to(tree, "future")
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_until(pilot, lambda: not has_row(tree, "future"))
        assert "future" not in (await cl.get_json(cl.lookupd_http, "/topics"))["topics"]
        assert has_row(tree, "orders/billing")


async def test_nodes_screen_expands_lookupd_connections_to_their_addresses(admin_cluster: AdminCluster):
    cl = admin_cluster
    app = make_app(cl)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("2")
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: nodes.row_count == 2)
        key = str(nodes.ordered_rows[0].key.value)
        assert cells(nodes, key)[column(nodes, "Lookupds")] == "1"
        await pilot.press("l")
        await wait_until(pilot, lambda: nodes.row_count == 2)
        expanded = cells(nodes, key)[column(nodes, "Lookupds")]
        assert expanded != "1" and ":" in expanded, expanded
        await pilot.press("l")
        await wait_until(pilot, lambda: nodes.row_count == 2)
        assert cells(nodes, key)[column(nodes, "Lookupds")] == "1"
