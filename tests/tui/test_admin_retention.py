"""``nsq admin`` and the topic log (nsqd ``--storage=wal``): the retained
window on the Topic screen, the channel's offsets, and rewind (``R`` on the
Channel screen). Snapshots and pure checks on fixed data; the pilot tests
against real in-process WAL nsqds are in test_admin_rewind.py.

The fixed cluster is test_admin_snapshots.py's, its nsqds answering as
``--storage=wal`` nsqds do: page_views has a log on both (vm1 keeps it 24h
or 1 GiB, vm2 24h with no size cap; the total shows "varies"), its channels
an ``offset``; api_requests and signups have none (as on a diskqueue nsqd).
"""

from __future__ import annotations

import copy

import pytest
from textual.widgets import DataTable

from nsq.cluster.model import ClusterSnapshot, LookupdInfo, NodeError, TopicLog, aggregate
from nsq.cluster.rates import History, apply_rates
from nsq.cluster.rewind import error_code, format_time, parse_since
from nsq.client.lookupd import HTTPAPIError
from nsq.tui import fmt
from nsq.tui.admin import AdminApp, ChannelScreen, FixedSource, TopicScreen
from nsq.tui.admin.dialogs import RewindScreen
from nsq.tui.admin.retention import retention_text, since_text
from tests.tui.test_admin_snapshots import POLLS, T0, _nodes, _stats

#: when vm1's and vm2's oldest retained page_views messages were published (Unix s)
OLDEST = (T0 - 3 * 3600 - 125, T0 - 95 * 60)


def _wal_stats(node: int, i: int) -> dict:
    """nsqd ``node``'s /stats at poll ``i``, with page_views in a topic log."""
    stats = _stats(node, i)
    for t in stats["topics"]:
        if t["topic_name"] != "page_views":
            continue
        head = 180_000 * (node + 1) + t["message_count"]
        t.update(head_offset=head, first_offset=head - 95_000 + 20_000 * node,
                 retained_bytes=(95_000 - 20_000 * node) * 230, oldest_timestamp=int(OLDEST[node] * 1e9),
                 retention_time="24h0m0s", retention_bytes=(1 << 30) if node == 0 else 0)
        for ch in t["channels"]:
            ch["offset"] = head - ch["depth"]
    return stats


def wal_snapshot() -> ClusterSnapshot:
    """The fixed cluster after POLLS polls, page_views in a topic log."""
    history = History()
    snapshot = None
    for i in range(POLLS):
        nodes = _nodes()
        snapshot = ClusterSnapshot(
            taken_at=T0 - 2.0 * (POLLS - 1 - i), lookupds=[LookupdInfo("10.0.0.9:4161", "1.2.1")], nodes=nodes,
            topics=aggregate([(nodes[n], _wal_stats(n, i)) for n in (0, 1)], ["future_topic"]),
            errors=[NodeError("nsqd", "10.0.0.3:4151", nodes[2].error)])
        apply_rates(snapshot, history)
    assert snapshot is not None
    return snapshot


SNAPSHOT = wal_snapshot()


def app(read_only: bool = False) -> AdminApp:
    snap = copy.deepcopy(SNAPSHOT)
    return AdminApp(FixedSource(snap), None, read_only=read_only, snapshot=snap)


# -- snapshots -------------------------------------------------------------------


def test_topic_screen_with_the_retained_window(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter"], terminal_size=(120, 36))


def test_channel_screen_with_offsets(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter", "down", "enter"], terminal_size=(150, 30))


def test_rewind_dialog(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter", "down", "enter", "R", *"9", "0", "m"],
                        terminal_size=(100, 30))


# -- the model and the texts -----------------------------------------------------------


def test_the_topic_log_is_parsed_per_nsqd_and_summed():
    topic = SNAPSHOT.topic("page_views")
    assert topic is not None and topic.log is not None
    vm1, vm2 = (n.log for n in topic.nodes)
    assert vm1 is not None and vm2 is not None
    assert (vm1.retained_messages, vm2.retained_messages) == (95_000, 75_000)
    assert topic.log.retained_messages == 170_000 and topic.log.nodes == 2
    assert topic.log.retained_bytes == vm1.retained_bytes + vm2.retained_bytes
    assert topic.log.oldest_timestamp == vm1.oldest_timestamp  # the older of the two
    assert (retention_text(vm1), retention_text(vm2), retention_text(topic.log)) == (
        "24h, max 1.0 GiB", "24h", "varies")
    # a topic on no log, and a channel's offsets (per nsqd only)
    assert SNAPSHOT.topic("api_requests").log is None
    metrics = SNAPSHOT.channel("page_views", "metrics")
    assert metrics.offset is None and [n.offset is not None for n in metrics.nodes] == [True, True]
    assert SNAPSHOT.channel("api_requests", "analytics").log_nodes == []


def test_retention_settings_in_words():
    def log(rt: str, rb: int) -> TopicLog:
        return TopicLog(0, 0, 0, 0, rt, rb)

    assert retention_text(log("0s", 0)) == "none"
    assert retention_text(log("1h30m0s", 0)) == "1h30m"
    assert retention_text(log("0s", 512 << 20)) == "max 512.0 MiB"
    assert retention_text(log("", 0)) == "varies"
    assert [fmt.size(n) for n in (0, 1023, 1024, 5 << 30)] == ["0 B", "1023 B", "1.0 KiB", "5.0 GiB"]
    assert [fmt.go_duration(d) for d in ("24h0m0s", "1m0s", "10s", "1h0m5s")] == ["24h", "1m", "10s", "1h0m5s"]


def test_since_takes_a_duration_or_an_rfc3339_time():
    now = 1_800_000_000_000_000_000
    assert parse_since("90m", now) == now - 90 * 60 * 10**9
    assert parse_since(" 1h ", now) == now - 3600 * 10**9
    assert parse_since("0", now) == now
    assert parse_since("2026-11-25T10:00:00Z", now) == 1_795_600_800 * 10**9
    assert parse_since("2026-11-25T11:00:00+01:00", now) == 1_795_600_800 * 10**9
    assert parse_since("2026-11-25T10:00:00.250Z", now) == 1_795_600_800_250_000_000
    for bad, why in [("", "give a duration"), ("yesterday", "neither"), ("-1h", "without a sign"),
                     ("2026-11-25T10:00:00", "no time zone"), ("2099-01-01T00:00:00Z", "future"),
                     ("3600", "neither")]:
        with pytest.raises(ValueError, match=why):
            parse_since(bad, now)
    assert format_time(1_795_600_800_250_000_000) == "2026-11-25T10:00:00Z"
    assert parse_since(format_time(now), now) <= now  # what the screens show reads back
    assert since_text("1h", now) == "1h ago (2027-01-15T07:00:00Z)"
    assert since_text("2027-01-15T07:00:00Z", now) == "2027-01-15T07:00:00Z (1h0m0s ago)"


def test_the_code_of_an_nsqd_error_answer():
    body = '{"message":"NEEDS_STORAGE_WAL: start nsqd with --storage=wal"}'
    exc = HTTPAPIError("10.0.0.1:4151", f"POST /channel/rewind answered 400 {body}", 400)
    assert error_code(exc) == "NEEDS_STORAGE_WAL: start nsqd with --storage=wal"
    assert error_code(HTTPAPIError("a", "connection refused")) == ""
    assert error_code(HTTPAPIError("a", "POST /x answered 500 {oops")) == ""


# -- the screens on fixed data ------------------------------------------------------------


def _cells(table: DataTable, key: str) -> list[str]:
    return [str(c) for c in table.get_row(key)]


async def test_topic_screen_rows_of_the_retained_window():
    a = app()
    async with a.run_test(size=(140, 40)) as pilot:
        a.push_screen(TopicScreen("page_views"))
        await pilot.pause()
        table = a.screen.query_one("#retention", DataTable)
        labels = [str(c.label) for c in table.ordered_columns]
        assert labels == ["NSQd Host", "Retained", "Messages", "Oldest Message", "Age", "First Offset",
                          "Head Offset", "Retention"]
        vm1 = _cells(table, "10.0.0.1:4151")
        assert vm1[1:5] == ["20.8 MiB", "95,000", format_time(int(OLDEST[0] * 1e9)), "3h2m5s"]
        assert vm1[7] == "24h, max 1.0 GiB"
        total = _cells(table, "*")
        assert total[2] == "170,000" and total[4] == "3h2m5s" and total[5] == "-" and total[7] == "varies"
        # a topic without a log has no such table
        a.pop_screen()
        a.push_screen(TopicScreen("api_requests"))
        await pilot.pause()
        assert not a.screen.query_one("#retention", DataTable).display


async def test_rewind_asks_for_a_time_and_checks_it():
    a = app()
    async with a.run_test(size=(120, 36)) as pilot:
        a.push_screen(ChannelScreen("page_views", "metrics"))
        await pilot.pause()
        await pilot.press("R")
        assert isinstance(a.screen, RewindScreen)
        assert "vm1:4151 retains 95,000 messages since" in a.screen.window
        await pilot.press(*"soon", "enter")
        assert isinstance(a.screen, RewindScreen)  # refused, and why
        assert "neither a duration" in str(a.screen.query_one("#problem").render())
        await pilot.press("escape")
        assert isinstance(a.screen, ChannelScreen)
        # a channel on no topic log: unavailable, said at once
        a.push_screen(ChannelScreen("api_requests", "analytics"))
        await pilot.pause()
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(a.screen, ChannelScreen)
        assert any("NEEDS_STORAGE_WAL: start nsqd with --storage=wal" in n.message for n in a._notifications)


async def test_read_only_offers_no_rewind():
    a = app(read_only=True)
    async with a.run_test(size=(120, 36)) as pilot:
        a.push_screen(ChannelScreen("page_views", "metrics"))
        await pilot.pause()
        assert "R" not in {k for k, b in a.screen.active_bindings.items()
                           if a.screen.check_action(b.binding.action, ()) is not False}
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(a.screen, ChannelScreen)
        await pilot.press("question_mark")
        assert not any(k == "R" for _, section in a.screen.sections for k, _ in section)
