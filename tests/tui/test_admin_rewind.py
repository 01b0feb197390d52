"""``nsq admin`` on nsqds with a topic log (``--storage=wal``), driven with
the pilot against a real nsqlookupd and real nsqds in this process: the
retained window on the Topic screen, and ``R`` on the Channel screen (a
time, a confirmation naming the nsqds, ``POST /channel/rewind`` on each,
the per-nsqd answers in a toast and the notification)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from textual.widgets import DataTable, Input

from nsq.cluster.actions import RewindResult
from nsq.cluster.nsqd import NSQDHTTPError
from nsq.cluster.rewind import NEEDS_STORAGE_WAL, parse_since
from nsq.tui.admin import ChannelScreen, TopicScreen
from nsq.tui.admin.dialogs import ConfirmScreen, RewindScreen
from tests.server.test_topiclog import _consume
from tests.tui.conftest import AdminCluster, NotificationSink, wait_until
from tests.tui.test_admin import cells, channel_stats, column, create, has_row, make_app, publish


@pytest.fixture
async def wal_cluster(make_nsq_cluster, tmp_path) -> AsyncIterator[Callable[..., Awaitable[AdminCluster]]]:
    """Factory: a lookupd and ``n`` nsqds with ``--storage=wal`` (their data
    in ``tmp_path``), then ``diskqueue`` more with ``--storage=diskqueue``."""
    made: list[AdminCluster] = []
    async with aiohttp.ClientSession() as session:

        async def factory(n: int = 2, diskqueue: int = 0, **options: Any) -> AdminCluster:
            local = await make_nsq_cluster(n, data_path=str(tmp_path), storage="wal", **options)
            for _ in range(diskqueue):
                await local.add_nsqd(storage="diskqueue")
            cl = AdminCluster(session, local.lookupd, local.nsqds)
            made.append(cl)
            return cl

        try:
            yield factory
        finally:
            for cl in made:
                for x in cl.extra:
                    await x.close()


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]


async def fill(cl: AdminCluster, d, topic: str, channel: str, n: int) -> None:
    """``n`` messages published to ``topic`` on ``d`` and consumed (FIN) from ``channel``."""
    await create(cl, d, topic, channel)
    await publish(cl, d, topic, n)
    assert len(await _consume(d.tcp_port, topic, channel, n)) == n


async def test_the_topic_screen_shows_the_window_each_nsqd_retains(wal_cluster):
    cl = await wal_cluster(2, retention_time=3600.0)
    d1, d2 = cl.nsqds
    await publish(cl, d1, "orders", 30)
    await publish(cl, d2, "orders", 20)
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl)
    async with app.run_test(size=(140, 36)) as pilot:
        app.push_screen(TopicScreen("orders"))
        await pilot.pause()
        table = app.screen.query_one("#retention", DataTable)
        a1, a2 = cl.nsqd_http(d1), cl.nsqd_http(d2)
        await wait_until(pilot, lambda: has_row(table, "*") and has_row(table, a1) and has_row(table, a2))
        assert table.display
        for address, n in ((a1, "30"), (a2, "20")):
            row = cells(table, address)
            assert row[column(table, "Messages")] == n and row[column(table, "Head")] == n
            assert row[column(table, "First")] == "0"
            assert row[column(table, "Retention")] == "1h"
            assert row[column(table, "Retained")].endswith("KiB") or row[column(table, "Retained")].endswith(" B")
            assert row[column(table, "Oldest")].endswith("Z") and row[column(table, "Age")].endswith("s")
        total = cells(table, "*")
        assert total[column(table, "Messages")] == "50" and total[column(table, "Head")] == "50"
        assert total[column(table, "Retention")] == "1h"
        # a topic's log per nsqd in the model too
        log = app.snapshot.topic("orders").log
        assert log.head_offset == 50 and log.nodes == 2 and log.retention_time == "1h0m0s"


async def test_rewind_a_channel_on_every_nsqd_and_report_each_answer(wal_cluster,
                                                                     notification_sink: NotificationSink):
    cl = await wal_cluster(2, retention_time=3600.0)
    d1, d2 = cl.nsqds
    await fill(cl, d1, "orders", "billing", 5)
    await fill(cl, d2, "orders", "billing", 3)
    await cl.wait_registered("orders", [d1, d2])
    app = make_app(cl, endpoint=notification_sink.url)
    async with app.run_test(size=(160, 36), notifications=True) as pilot:
        app.push_screen(ChannelScreen("orders", "billing"))
        await wait_until(pilot, lambda: app.snapshot is not None and (ch := app.snapshot.channel(
            "orders", "billing")) is not None and len(ch.log_nodes) == 2)
        await pilot.pause()
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: has_row(nodes, cl.nsqd_http(d1)))
        assert cells(nodes, cl.nsqd_http(d1))[column(nodes, "Offset")] == "5"  # consumed all: at the head

        await pilot.press("R")
        assert isinstance(app.screen, RewindScreen)
        assert "retains 5 messages since" in app.screen.window
        await pilot.press(*"1h", "enter")
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.question
        assert question.startswith("Rewind channel orders/billing to 1h ago (")
        assert f":{d1.http_port}" in question and f":{d2.http_port}" in question and "on 2 nsqd" in question
        assert "no topic log" not in question and "retains messages only since" not in question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert isinstance(result, RewindResult) and result.ok, result.errors
        assert sorted((r.offset, r.count) for r in result.rewound) == [(0, 3), (0, 5)]
        assert not result.clamp
        # the messages are queued again on each nsqd
        assert (await channel_stats(cl, d1, "orders", "billing"))["depth"] == 5
        assert (await channel_stats(cl, d2, "orders", "billing"))["depth"] == 3
        toast = next(m for m in notifications(app) if m.startswith("rewind orders/billing to 1h: "))
        assert "offset 0, 5 messages again" in toast and "offset 0, 3 messages again" in toast
        await wait_until(pilot, lambda: cells(nodes, cl.nsqd_http(d1))[column(nodes, "Depth")] == "5")
    note = notification_sink.received[0]
    assert (note["action"], note["topic"], note["channel"], note["since"]) == (
        "rewind_channel", "orders", "billing", "1h")
    assert "clamp" not in note and note["url"] == "https://admin.example/api/topics/orders/billing"


async def test_a_time_before_the_retained_window_rewinds_to_its_oldest_message(wal_cluster,
                                                                               notification_sink: NotificationSink):
    cl = await wal_cluster(1, retention_bytes=20_000, max_bytes_per_file=4096)
    (d,) = cl.nsqds
    await create(cl, d, "t", "c")
    for i in range(0, 1000, 100):
        await cl.post(cl.nsqd_http(d), "/mpub?topic=t", b"\n".join(b"%04d" % j + b"x" * 100 for j in range(i, i + 100)))
    assert len(await _consume(d.tcp_port, "t", "c", 1000)) == 1000
    d.checkpoint_logs()  # retention trims the finished segments past 20 kB
    await cl.wait_registered("t", [d])
    app = make_app(cl, endpoint=notification_sink.url)
    async with app.run_test(size=(160, 36), notifications=True) as pilot:
        app.push_screen(ChannelScreen("t", "c"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.topic("t") is not None
                         and app.snapshot.topic("t").log is not None and app.snapshot.topic("t").log.first_offset > 0)
        first = app.snapshot.topic("t").log.first_offset
        await pilot.pause()
        await pilot.press("R", *"1h", "enter")
        assert isinstance(app.screen, ConfirmScreen)
        assert "retains messages only since" in app.screen.question and "it goes back to that one" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert result.ok and result.clamp, result.errors
        assert [(r.offset, r.count) for r in result.rewound] == [(first, 1000 - first)]
        assert (await channel_stats(cl, d, "t", "c"))["depth"] == 1000 - first
    assert notification_sink.received[0]["clamp"] is True


async def test_an_nsqd_that_refuses_a_time_it_no_longer_retains_is_asked_again_with_clamp(wal_cluster, monkeypatch):
    """nsqd documents 400 OFFSET_NOT_RETAINED for a time before its oldest
    retained message; this project's nsqd takes such a time as its oldest
    message instead (``TopicLog.offset_for_time``), so the refusal is
    played here by the client, in front of the real nsqd."""
    cl = await wal_cluster(1, retention_time=3600.0)
    (d,) = cl.nsqds
    await fill(cl, d, "t", "c", 4)
    await cl.wait_registered("t", [d])
    app = make_app(cl)
    rewind = app.source.nsqd.rewind
    asked: list[bool] = []

    async def refusing(address: str, topic: str, channel: str, since: str, clamp: bool = False) -> tuple[int, int]:
        asked.append(clamp)
        if not clamp:
            raise NSQDHTTPError(address, 'POST /channel/rewind answered 400 {"message":"OFFSET_NOT_RETAINED"}', 400)
        return await rewind(address, topic, channel, since, clamp)

    monkeypatch.setattr(app.source.nsqd, "rewind", refusing)
    async with app.run_test(size=(160, 36), notifications=True) as pilot:
        app.push_screen(ChannelScreen("t", "c"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("t", "c") is not None
                         and app.snapshot.channel("t", "c").log_nodes)
        await pilot.pause()
        await pilot.press("R", *"2h", "enter", "y")
        await wait_until(pilot, lambda: len(app.results) == 1 and isinstance(app.screen, ConfirmScreen))
        first = app.results[0]
        assert not first.ok and first.not_retained and "OFFSET_NOT_RETAINED" in first.summary()
        assert "no longer retain" in app.screen.question and "oldest message each retains" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 2)
        again = app.results[1]
        assert again.ok and again.clamp and [(r.offset, r.count) for r in again.rewound] == [(0, 4)]
    assert asked == [False, True]


async def test_an_nsqd_without_a_topic_log_answers_needs_storage_wal(wal_cluster):
    cl = await wal_cluster(1, diskqueue=1, retention_time=3600.0)
    wal, dq = cl.nsqds
    await fill(cl, wal, "orders", "billing", 2)
    await fill(cl, dq, "orders", "billing", 2)
    await cl.wait_registered("orders", [wal, dq])
    app = make_app(cl)
    async with app.run_test(size=(160, 36), notifications=True) as pilot:
        app.push_screen(TopicScreen("orders"))
        await pilot.pause()
        table = app.screen.query_one("#retention", DataTable)
        await wait_until(pilot, lambda: has_row(table, cl.nsqd_http(dq)))
        assert "no topic log" in cells(table, cl.nsqd_http(dq))[0]

        app.push_screen(ChannelScreen("orders", "billing"))
        await pilot.pause()
        nodes = app.screen.query_one("#nodes", DataTable)
        await wait_until(pilot, lambda: has_row(nodes, cl.nsqd_http(dq)))
        assert cells(nodes, cl.nsqd_http(dq))[column(nodes, "Offset")] == "-"
        await pilot.press("R")
        app.screen.query_one("#since", Input).value = "1h"
        await pilot.press("enter")
        question = app.screen.question
        assert "on 2 nsqd" in question and f"keeps no topic log: {NEEDS_STORAGE_WAL}." in question
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert [r.count for r in result.rewound] == [2] and len(result.unavailable) == 1
        # the nsqd's own answer, through its real HTTP API
        assert result.errors == [f"{result.unavailable[0]}: {NEEDS_STORAGE_WAL}"]
        toast = next(m for m in notifications(app) if m.startswith("rewind orders/billing"))
        assert "2 messages again" in toast and NEEDS_STORAGE_WAL in toast
        assert (await channel_stats(cl, wal, "orders", "billing"))["depth"] == 2
        assert (await channel_stats(cl, dq, "orders", "billing"))["depth"] == 0


async def test_a_channel_only_on_diskqueue_nsqds_is_not_offered_a_rewind(wal_cluster):
    cl = await wal_cluster(0, diskqueue=1)
    (dq,) = cl.nsqds
    await fill(cl, dq, "orders", "billing", 1)
    await cl.wait_registered("orders", [dq])
    app = make_app(cl)
    async with app.run_test(size=(160, 36), notifications=True) as pilot:
        app.push_screen(ChannelScreen("orders", "billing"))
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.channel("orders", "billing"))
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, ChannelScreen) and app.results == []
        assert any(f"unavailable, {NEEDS_STORAGE_WAL}" in m for m in notifications(app))
        # the Admin call itself, asked anyway, reports the nsqd's refusal
        result = await app.admin.rewind_channel("orders", "billing", "1h")
        assert not result.ok and result.unavailable and result.done == 0
        assert NEEDS_STORAGE_WAL in result.summary()
    assert parse_since("1h") > 0
