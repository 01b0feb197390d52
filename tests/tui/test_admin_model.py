"""The pure parts of ``nsq admin``: aggregation as nsqadmin's clusterinfo,
rates from successive polls, e2e merging, formats."""

from __future__ import annotations

from nsq.tui import fmt
from nsq.cluster.model import (
    ClusterSnapshot,
    NodeInfo,
    Percentile,
    aggregate,
    merge_e2e,
    parse_e2e,
    version_tuple,
)
from nsq.cluster.rates import History, apply_rates


def node(n: int, topics: list[tuple[str, bool]] = ()) -> NodeInfo:
    return NodeInfo(hostname=f"h{n}", broadcast_address=f"10.0.0.{n}", tcp_port=4150, http_port=4151,
                    version="1.2.1", topics=list(topics))


def channel(name: str, **kw) -> dict:
    out = {"channel_name": name, "depth": 0, "backend_depth": 0, "in_flight_count": 0, "deferred_count": 0,
           "message_count": 0, "requeue_count": 0, "timeout_count": 0, "client_count": 0, "clients": [],
           "paused": False, "e2e_processing_latency": {"count": 0, "percentiles": None}}
    out.update(kw)
    return out


def stats(*topics: dict) -> dict:
    return {"version": "1.2.1", "topics": list(topics)}


def topic(name: str, channels: list[dict] = (), **kw) -> dict:
    out = {"topic_name": name, "depth": 0, "backend_depth": 0, "message_count": 0, "paused": False,
           "channels": list(channels), "e2e_processing_latency": {"count": 0, "percentiles": None}}
    out.update(kw)
    return out


def test_aggregate_sums_topics_and_channels_over_nsqds():
    n1, n2 = node(1, [("t", False)]), node(2, [("t", True)])
    client = {"hostname": "c1", "remote_address": "1.2.3.4:5", "version": "V2", "connect_ts": 100}
    per_node = [
        (n1, stats(topic("t", [channel("a", depth=5, backend_depth=2, in_flight_count=1, client_count=1,
                                       clients=[client]),
                               channel("b", depth=1)], depth=3, backend_depth=1, message_count=10))),
        (n2, stats(topic("t", [channel("a", depth=7, deferred_count=2, paused=True)], depth=4, message_count=20),
                   topic("u", message_count=1))),
    ]
    topics = aggregate(per_node, known_topics=["t", "only_lookupd"])
    assert [t.name for t in topics] == ["only_lookupd", "t", "u"]
    inactive, t, u = topics
    assert inactive.nodes == [] and inactive.producers == 0 and inactive.depth == 0
    assert (t.depth, t.backend_depth, t.memory_depth, t.messages, t.producers) == (7, 1, 6, 30, 2)
    assert [n.node for n in t.nodes] == ["10.0.0.1:4151", "10.0.0.2:4151"]
    assert [n.tombstoned for n in t.nodes] == [False, True]
    a = t.channel("a")
    assert (a.depth, a.backend_depth, a.in_flight, a.deferred, a.client_count, a.paused) == (12, 2, 1, 2, 1, True)
    assert [n.node for n in a.nodes] == ["10.0.0.1:4151", "10.0.0.2:4151"]
    assert [c.node for c in a.clients] == ["10.0.0.1:4151"]
    assert a.clients[0].host == "c1:5" and a.clients[0].protocol == "V2"
    assert t.channel("b").nodes[0].node == "10.0.0.1:4151"
    assert (t.in_flight, t.deferred, t.client_count) == (1, 2, 1)
    assert u.producers == 1


def test_rates_come_from_two_polls_and_skip_counter_resets():
    history = History(size=3)
    n1, n2 = node(1), node(2)

    def poll(at: float, m1: int, m2: int) -> ClusterSnapshot:
        per_node = [(n1, stats(topic("t", [channel("c", message_count=m1)], message_count=m1))),
                    (n2, stats(topic("t", [channel("c", message_count=m2)], message_count=m2)))]
        return apply_rates(ClusterSnapshot(taken_at=at, topics=aggregate(per_node)), history)

    first = poll(100.0, 10, 20)
    assert first.topics[0].rate is None and first.totals.rate is None
    second = poll(102.0, 30, 30)  # +20 and +10 in 2 s
    t = second.topics[0]
    assert t.rate == 15.0 and [n.rate for n in t.nodes] == [10.0, 5.0]
    assert t.channel("c").rate == 15.0 and second.totals.rate == 15.0
    third = poll(104.0, 5, 40)  # nsqd 1 restarted: its counter went back, only nsqd 2 counts
    assert third.topics[0].rate == 5.0
    fourth = poll(106.0, 15, 40)
    assert fourth.topics[0].rate == 5.0
    assert fourth.topics[0].rate_history == [15.0, 5.0, 5.0]  # size 3
    assert fourth.rate_history == [15.0, 5.0, 5.0]
    assert len(fourth.topics[0].depth_history) == 3


def test_egress_is_what_leaves_the_channel_queues_as_nsq_stat():
    history = History()
    n1, n2 = node(1), node(2)

    def poll(at: float, c1: tuple[int, int], c2: tuple[int, int], m: int) -> ClusterSnapshot:
        """c1, c2: (message_count, depth) of channels a and b on nsqd 1; m: the topic's message count."""
        chans = [channel("a", message_count=c1[0], depth=c1[1]), channel("b", message_count=c2[0], depth=c2[1])]
        per_node = [(n1, stats(topic("t", chans, message_count=m))), (n2, stats(topic("t", message_count=0)))]
        return apply_rates(ClusterSnapshot(taken_at=at, topics=aggregate(per_node)), history)

    first = poll(100.0, (100, 100), (100, 0), 100)
    assert first.topics[0].egress is None and first.topics[0].channel("a").egress is None
    # nothing published; a drains 20 messages of its backlog in 2 s, b has nothing to drain
    second = poll(102.0, (100, 80), (100, 0), 100)
    t = second.topics[0]
    a, b = t.channel("a"), t.channel("b")
    assert (a.rate, a.egress) == (0.0, 10.0) and (b.rate, b.egress) == (0.0, 0.0)
    assert (t.rate, t.egress) == (0.0, 10.0)  # the topic's egress: its channels' summed
    assert [n.egress for n in t.nodes] == [10.0, 0.0]  # nsqd 2 has the topic, no channel
    assert second.totals.egress == 10.0
    # 10 published; a keeps up, b gets them all back requeued (its depth grows more than its messages)
    third = poll(104.0, (110, 80), (110, 30), 110)
    a, b = third.topics[0].channel("a"), third.topics[0].channel("b")
    assert (a.rate, a.egress) == (5.0, 5.0) and (b.rate, b.egress) == (5.0, 0.0)  # never below 0
    assert a.egress_history == [10.0, 5.0] and third.topics[0].egress_history == [10.0, 5.0]


def test_e2e_percentiles_merge_as_nsqadmin():
    a = parse_e2e({"count": 10, "percentiles": [{"quantile": 0.5, "value": 100}, {"quantile": 0.99, "value": 900}]})
    assert [p.quantile for p in a] == [0.99, 0.5]
    b = parse_e2e({"count": 30, "percentiles": [{"quantile": 0.99, "value": 500}]})
    merged = merge_e2e([], a)
    merge_e2e(merged, b)
    p99 = merged[0]
    assert (p99.quantile, p99.min, p99.max, p99.count) == (0.99, 500, 900, 40)
    assert p99.average == 900 + (500 - 900) * 30 / 40  # count-weighted
    assert merged[1] == Percentile(0.5, 100, 100, 100, 10)
    assert parse_e2e({"count": 0, "percentiles": None}) == [] and parse_e2e(None) == []


def test_versions_and_out_of_date():
    assert version_tuple("1.2.1") > version_tuple("1.2.0") > version_tuple("0.3.8-alpha")
    assert version_tuple("") == (0,)


def test_formats():
    assert fmt.count(5250) == "5,250"
    assert [fmt.plural(n, "channel") for n in (0, 1, 1250)] == ["0 channels", "1 channel", "1,250 channels"]
    assert fmt.mem_disk(4097, 1098) == "4,097 + 1,098" and fmt.mem_disk(1, 2, compact=True) == "1+2"
    assert [fmt.rate(x) for x in (None, 0, 12.345, 1234.5)] == ["-", "0", "12.3", "1,234"]
    assert [fmt.duration(x) for x in (5, 134, 3725, 3 * 86400 + 7200)] == ["5s", "2m14s", "1h2m5s", "3d2h"]
    assert [fmt.latency(x) for x in (81.5e9, 1.5e9, 249.21e6, 12e3, 5)] == [
        "1m21.5s", "1.50s", "249.21ms", "12.00us", "5ns"]
    assert [fmt.quantile_label(q) for q in (0.99, 0.999, 1.0, 0.5)] == ["p99", "p99.9", "p100", "p50"]
    assert [fmt.interval(x) for x in (0.2, 0.5, 2.0, 60.0)] == ["0.2s", "0.5s", "2s", "1m0s"]


def test_dead_letters_sum_and_max_attempts_over_nsqds_a_go_nsqd_counting_as_off():
    from nsq.tui.admin.cells import CHANNEL_COLUMNS, channel_cells, max_attempts_note

    n1, n2, n3 = node(1), node(2), node(3)
    go = channel("c")  # a Go nsqd: no dead_letter_count, no max_attempts
    per_node = [(n1, stats(topic("t", [channel("c", dead_letter_count=3, max_attempts=5)]))),
                (n2, stats(topic("t", [channel("c", dead_letter_count=1, max_attempts=2)]))),
                (n3, stats(topic("t", [go])))]
    c = aggregate(per_node)[0].channel("c")
    assert (c.dead_letters, c.max_attempts) == (4, 5)
    assert [(n.dead_letters, n.max_attempts) for n in c.nodes] == [(3, 5), (1, 2), (0, 0)]
    assert max_attempts_note(c) == "max 2-5 attempts on 2 of 3 nsqd"
    assert [max_attempts_note(n) for n in c.nodes] == ["max 5 attempts", "max 2 attempts", ""]
    one = aggregate(per_node[:1])[0].channel("c")
    assert max_attempts_note(one) == "max 5 attempts"
    assert max_attempts_note(aggregate([(n1, stats(topic("t", [channel("c", max_attempts=1)])))])[0]
                             .channel("c")) == "max 1 attempt"
    assert max_attempts_note(aggregate(per_node[2:])[0].channel("c")) == ""
    dead = [full for full, _ in CHANNEL_COLUMNS].index("Dead")
    assert [str(x) for x in channel_cells(c)][dead] == "4"
    assert len(channel_cells(c)) == len(CHANNEL_COLUMNS)
