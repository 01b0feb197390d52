"""Snapshot tests (pytest-textual-snapshot) of every ``nsq admin`` screen.

The app is fed a fixed cluster (:class:`~nsq.tui.admin.FixedSource`): the
nsqd ``/stats`` answers of two nsqds over twelve polls, 2 s apart, run
through the real aggregation and rate code, plus a third nsqd that does not
answer; the Peek screen gets fixed messages. Regenerate with ``pytest tests/tui --snapshot-update`` and look at
the report before committing.
"""

from __future__ import annotations

import copy

from nsq.cluster.model import ClusterSnapshot, LookupdInfo, NodeError, NodeInfo, aggregate
from nsq.cluster.peek import Peek, PeekedMessage, merge_peeks
from nsq.cluster.rates import History, apply_rates
from nsq.tui.admin import AdminApp, FixedSource

T0 = 1_790_000_000.0  # the last poll, Unix seconds
POLLS = 12


def _nodes() -> list[NodeInfo]:
    return [
        NodeInfo(hostname="vm1", broadcast_address="10.0.0.1", tcp_port=4150, http_port=4151, version="1.2.1",
                 remote_addresses=["10.0.0.9:4161/10.0.0.1:50001"],
                 topics=[("api_requests", False), ("page_views", False), ("signups", False)]),
        NodeInfo(hostname="vm2", broadcast_address="10.0.0.2", tcp_port=4150, http_port=4151, version="1.2.0",
                 remote_addresses=["10.0.0.9:4161/10.0.0.2:50002"],
                 topics=[("api_requests", False), ("page_views", True)], out_of_date=True),
        NodeInfo(hostname="vm3", broadcast_address="10.0.0.3", tcp_port=4150, http_port=4151, version="",
                 remote_addresses=["10.0.0.9:4161/10.0.0.3:50003"], topics=[("page_views", False)],
                 error="nsqd 10.0.0.3:4151: Cannot connect to host 10.0.0.3:4151 [Connection refused]"),
    ]


def _e2e(topic: str, channel: str, base: int) -> dict:
    return {"count": 40, "percentiles": [{"quantile": 0.99, "value": base * 9}, {"quantile": 0.5, "value": base}],
            "topic": topic, "channel": channel, "host": ""}


def _client(n: int, node: int, ua: str, **extra) -> dict:
    out = {"client_id": f"worker{n}", "hostname": f"app{n}", "version": "V2",
           "remote_address": f"10.0.1.{n}:{40000 + n}", "state": 3, "ready_count": 25, "in_flight_count": 5 + n,
           "message_count": 1000 * n + node, "finish_count": 990 * n, "requeue_count": 3 * n,
           "connect_ts": int(T0) - 3600 * n - 125, "sample_rate": 0, "deflate": False, "snappy": False,
           "user_agent": ua, "tls": False}
    out.update(extra)
    return out


def _stats(node: int, i: int) -> dict:
    """nsqd ``node``'s /stats at poll ``i`` (counters grow with i)."""
    views = (2000 + 37 * i + sum(j * j * 13 % 29 for j in range(i))) * (node + 1)
    channels = [
        # archive has no consumer: its depth grows by every message (egress 0)
        {"channel_name": "archive", "depth": 4000 + node + views - 2000 * (node + 1),
         "backend_depth": 1000 * node + 10 * i,
         "in_flight_count": 0, "deferred_count": 25, "message_count": views, "requeue_count": 0,
         "timeout_count": 0, "client_count": 0, "clients": [], "paused": False,
         "e2e_processing_latency": _e2e("page_views", "archive", 0)},
        {"channel_name": "metrics", "depth": 2000 - 5 * i + node, "backend_depth": 0, "in_flight_count": 30 + node,
         "deferred_count": 27, "message_count": views, "requeue_count": 40 + i, "timeout_count": 7 + node,
         "client_count": 2, "paused": False, "e2e_processing_latency": _e2e("page_views", "metrics", 2_500_000),
         # this project's nsqd on vm1 dead-letters after 5 attempts; vm2 answers as a Go nsqd (no such keys)
         **({"dead_letter_count": 2 + i // 4, "max_attempts": 5} if node == 0 else {}),
         "clients": [_client(1 + node, node, "metrics-worker/1.4", snappy=True),
                     _client(3 + node, node, "metrics-worker/1.4", tls=True, tls_version="TLS1.3",
                             sample_rate=25)]},
        {"channel_name": "tail9#ephemeral", "depth": 0, "backend_depth": 0, "in_flight_count": 0,
         "deferred_count": 0, "message_count": views, "requeue_count": 0, "timeout_count": 0, "client_count": 1,
         "paused": False, "e2e_processing_latency": _e2e("page_views", "tail9#ephemeral", 180_000),
         "clients": [_client(7, node, "nsq_tail/1.2.1", deflate=True)]},
    ]
    topics = [{"topic_name": "page_views", "depth": 0, "backend_depth": 0, "message_count": views,
               "paused": False, "channels": channels,
               "e2e_processing_latency": _e2e("page_views", "", 1_200_000 * (node + 1))},
              {"topic_name": "api_requests", "depth": 3 + node, "backend_depth": 0, "message_count": 500 + 11 * i,
               "paused": node == 0, "e2e_processing_latency": {"count": 0, "percentiles": None},
               "channels": [{"channel_name": "analytics", "depth": 140 + 11 * i, "backend_depth": 0,
                             "in_flight_count": 0, "deferred_count": 0, "message_count": 500 + 11 * i,
                             "requeue_count": 0, "timeout_count": 0, "client_count": 1, "paused": True,
                             "clients": [_client(9, node, "analytics/0.9")],
                             "e2e_processing_latency": {"count": 0, "percentiles": None}}]}]
    if node == 0:
        topics.append({"topic_name": "signups", "depth": 137, "backend_depth": 37, "message_count": 137,
                       "paused": False, "channels": [], "e2e_processing_latency": {"count": 0, "percentiles": None}})
    return {"version": "1.2.1", "health": "OK", "start_time": int(T0) - 86400, "topics": topics}


def fixed_snapshot() -> ClusterSnapshot:
    """The cluster after POLLS polls, 2 s apart (rates and sparklines filled in)."""
    history = History()
    snapshot = None
    for i in range(POLLS):
        nodes = _nodes()
        per_node = [(nodes[n], _stats(n, i)) for n in (0, 1)]
        snapshot = ClusterSnapshot(
            taken_at=T0 - 2.0 * (POLLS - 1 - i), lookupds=[LookupdInfo("10.0.0.9:4161", "1.2.1")], nodes=nodes,
            topics=aggregate(per_node, ["future_topic"]),
            errors=[NodeError("nsqd", "10.0.0.3:4151", nodes[2].error)])
        apply_rates(snapshot, history)
    assert snapshot is not None
    return snapshot


SNAPSHOT = fixed_snapshot()


def fixed_peeks() -> dict[tuple[str, str], Peek]:
    """page_views/metrics: vm1's next messages (text, a long line, binary,
    a requeued one); vm2 answers as a Go nsqd would (no peek endpoint)."""

    def m(n: int, age: float, body: bytes, attempts: int = 0) -> PeekedMessage:
        return PeekedMessage(id=f"0d1f{n:012x}", timestamp=int((T0 - age) * 1e9), attempts=attempts, body=body,
                             node="10.0.0.1:4151", hostname="vm1")

    vm1 = [m(1, 3725, b'{"path": "/checkout", "user": 4411}', attempts=3),
           m(2, 400, ('{"path": "/search", "q": "' + "long query " * 12 + '"}').encode()),
           m(3, 95, b'{"path": "/", "user": 17}'), m(4, 12, b"\x00\x17\xfe\xca binary"),
           m(5, 2, "multi\nline caf\u00e9".encode())]
    note = "nsqd vm2 (10.0.0.2:4151): no peek endpoint (Go nsqd has none)"
    return {("page_views", "metrics"): Peek("page_views", "metrics", T0, merge_peeks([vm1]), [note], 2)}


def app(read_only: bool = False) -> AdminApp:
    snap = copy.deepcopy(SNAPSHOT)
    return AdminApp(FixedSource(snap, peeks=fixed_peeks()), None, read_only=read_only, snapshot=snap)


def test_topics_screen(snap_compare):
    assert snap_compare(app(), terminal_size=(80, 24))


def test_topics_screen_read_only(snap_compare):
    assert snap_compare(app(read_only=True), terminal_size=(80, 24))


def test_topics_sorted_by_rate_and_filtered(snap_compare):
    assert snap_compare(app(), press=["s"] * 6 + ["slash", "p", "a", "enter"], terminal_size=(80, 24))


def test_topic_screen(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter"], terminal_size=(120, 30))


def test_topic_screen_80x24(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter"], terminal_size=(80, 24))


def test_channel_screen(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter", "down", "enter"], terminal_size=(140, 30))


def test_channel_screen_80x24(snap_compare):
    assert snap_compare(app(), press=["down", "down", "enter", "down", "enter"], terminal_size=(80, 24))


def test_inactive_topic(snap_compare):
    assert snap_compare(app(), press=["down", "enter"], terminal_size=(80, 24))


def test_channel_paused(snap_compare):
    assert snap_compare(app(), press=["enter", "enter"], terminal_size=(120, 24))


def test_peek_screen(snap_compare):
    async def peek(pilot) -> None:
        await pilot.press("down", "down", "enter", "down", "enter", "m")
        while getattr(pilot.app.screen, "peeked", None) is None:  # the peek runs in a worker
            await pilot.pause(0.01)
        await pilot.pause()

    assert snap_compare(app(), run_before=peek, terminal_size=(100, 24))


def test_nodes_screen_with_an_unreachable_nsqd(snap_compare):
    assert snap_compare(app(), press=["2"], terminal_size=(120, 24))


def test_confirm_delete(snap_compare):
    assert snap_compare(app(), press=["down", "down", "d"], terminal_size=(80, 24))


def test_help_screen(snap_compare):
    assert snap_compare(app(), press=["question_mark"], terminal_size=(80, 42))


def test_node_screen(snap_compare):
    assert snap_compare(app(), press=["2", "enter"], terminal_size=(150, 32))


def test_counter_screen(snap_compare):
    assert snap_compare(app(), press=["3"], terminal_size=(80, 24))


def test_lookup_screen(snap_compare):
    assert snap_compare(app(), press=["4"], terminal_size=(100, 24))


def test_nodes_screen_lookupd_addresses(snap_compare):
    assert snap_compare(app(), press=["2", "l"], terminal_size=(120, 24))
