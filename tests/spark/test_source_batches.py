"""The stream reader's batches without a SparkSession: the Arrow record
batches ``read`` yields, the pipelined planning against a real nsqd, and the
bridge's coalesced answers and TOUCH."""

from __future__ import annotations

import time

import pytest

from tests.spark.conftest import require_spark, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


class _Conn:
    def __init__(self, address: str) -> None:
        self.address = address


def _messages(n: int, nsqds: list[str]) -> list:
    """Client Messages as the Consumer makes them (no connection needed to build one)."""
    from nsq.client.message import Message

    base = 1_700_000_000_123_456_789
    return [Message(f"{i:016x}".encode(), f"body-{i}".encode() * (i % 3), base + i * 1_001, 1 + i % 4, "t",
                    _Conn(nsqds[i % len(nsqds)]), None) for i in range(n)]


def _reference_rows(topic: str, messages: list) -> list[dict]:
    """What the source's rows are, computed in plain Python per message."""
    import datetime as dt

    utc = dt.timezone.utc
    return [{"body": m.body, "id": m.id.decode(), "attempts": m.attempts,
             "timestamp": dt.datetime.fromtimestamp(m.timestamp // 1000 // 1_000_000, utc)
             + dt.timedelta(microseconds=m.timestamp // 1000 % 1_000_000),
             "topic": topic, "nsqd": m.nsqd_address} for m in messages]


@pytest.mark.parametrize("num_partitions", [None, 2])
def test_read_yields_record_batches_with_the_stream_columns(num_partitions):
    require_spark()
    from pyspark.sql.pandas.types import to_arrow_schema

    from nsq.spark.options import source_settings
    from nsq.spark.columns import STREAM_STRUCT
    from nsq.spark.source import NSQStreamReader, _partitions

    nsqds = ["10.0.0.1:4150", "10.0.0.2:4150"]
    messages = _messages(1001, nsqds)
    parts = _partitions("t", messages, num_partitions)
    assert len(parts) == 2 and sum(len(p) for p in parts) == len(messages)
    reader = NSQStreamReader(source_settings({"topic": "t", "nsqd_tcp_address": nsqds[0]}), None)
    # the schema PySpark checks a data source's record batches against
    expected_schema = to_arrow_schema(STREAM_STRUCT, timezone="UTC")
    rows = []
    for part in parts:
        batches = list(reader.read(part))
        assert len(batches) == 1 and batches[0].schema.equals(expected_schema)
        assert batches[0].num_rows == len(part)
        rows.extend(batches[0].to_pylist())
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(rows, key=key) == sorted(_reference_rows("t", messages), key=key)
    if num_partitions is None:  # one partition per nsqd
        assert [{r["nsqd"] for r in b.to_pylist()} for part in parts for b in reader.read(part)] == \
            [{nsqds[0]}, {nsqds[1]}]


def test_auto_connections_cover_max_in_flight_at_nsqds_default_rdy_cap():
    from nsq.spark.bridge import auto_connections

    assert auto_connections(100_000, 1) == 40
    assert auto_connections(100_000, 0) == 40  # none known yet: as one
    assert auto_connections(100_000, 10) == 4
    assert auto_connections(2500, 1) == 1
    assert auto_connections(2501, 1) == 2
    assert auto_connections(1, 50) == 1


def test_held_limit_follows_max_messages_per_trigger():
    from nsq.spark.options import DEFAULT_MAX_IN_FLIGHT, source_settings

    base = {"topic": "t", "nsqd_tcp_address": "x:1"}
    assert source_settings(base).held_limit == DEFAULT_MAX_IN_FLIGHT
    assert source_settings({**base, "maxmessagespertrigger": "500"}).held_limit == 1000
    assert source_settings({**base, "maxmessagespertrigger": "500", "max_in_flight": "700"}).held_limit == 700


def test_pipelined_batches_take_every_message_once_and_fin_after_planning(cluster):
    """max_in_flight below the topic's size: the reader holds at most that,
    each batch is FINed only once the batch after it is asked for, and
    every message comes out once."""
    require_spark()
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from nsq.spark.options import source_settings
    from nsq.spark.source import NSQStreamReader

    topic = "spark_pipelined"
    sent = [f"p-{i}".encode() for i in range(6000)]
    cluster.mpub(topic, sent)
    reader = NSQStreamReader(source_settings({"topic": topic, "nsqd_tcp_address": cluster.nsqd.tcp,
                                              "max_in_flight": "4000"}), None)
    got: list[bytes] = []
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        # two consumers (ceil(4000 / 2500)), one connection each
        assert cluster.channel_stats(topic, "spark")["client_count"] == 2
        # an empty answer only means nothing came within the wait: on a loaded
        # machine a pause mid-stream is one, so go on until every message came
        deadline = time.monotonic() + 60
        while len(got) < len(sent) or end != start:
            assert time.monotonic() < deadline, f"{len(got)} of {len(sent)} read in 60 s"
            taken = end["seq"] - start["seq"]
            for part in reader.partitions(start, end):
                for batch in reader.read(part):
                    got.extend(batch.column("body").to_pylist())
            c = cluster.channel_stats(topic, "spark")
            assert taken <= c["in_flight_count"] <= 4000  # this batch is held, not FINed
            start, end = end, reader.latestOffset(end, ReadAllAvailable())
        # the last batch was FINed by the latestOffset that found nothing more
        c = wait_for(lambda: (s := cluster.channel_stats(topic, "spark"))["in_flight_count"] == 0 and s, 10,
                     "every batch FINed")
        assert c["depth"] == 0 and c["requeue_count"] == 0 and c["timeout_count"] == 0
    finally:
        reader.stop()
    assert sorted(got) == sorted(sent)


def test_bridge_touches_held_messages_and_answers_them_in_one_write(cluster):
    """Held past msg_timeout, nothing times out (TOUCH); the FINs of one
    call go out as one write per connection."""
    from nsq.spark.bridge import ConsumerBridge

    topic = "spark_bridge_touch"
    cluster.mpub(topic, [f"t-{i}".encode() for i in range(200)])
    bridge = ConsumerBridge(topic, "spark", (cluster.nsqd.tcp,), max_in_flight=200, connections=None,
                            identify={"msg_timeout": 1500}, msg_timeout=1.5)
    bridge.start()
    try:
        assert bridge.connections == 1
        wait_for(lambda: len(bridge.incoming) == 200, 10, "200 messages held")
        time.sleep(3.5)  # over twice msg_timeout
        c = cluster.channel_stats(topic, "spark")
        assert c["timeout_count"] == 0 and c["in_flight_count"] == 200
        messages = list(bridge.incoming)
        [conn] = [conn for consumer in bridge._consumers for conn in consumer.connections.values()]
        transport = conn._transport
        writes: list[bytes] = []
        real_write = transport.write
        transport.write = lambda data: (writes.append(bytes(data)), real_write(data))[1]
        bridge.finish(messages[:150])
        bridge.requeue(messages[150:], delay_ms=60_000)  # deferred: not handed straight back
        c = wait_for(lambda: (s := cluster.channel_stats(topic, "spark"))["in_flight_count"] == 0 and s, 10,
                     "all answered")
        assert c["timeout_count"] == 0 and c["requeue_count"] == 50 and c["deferred_count"] == 50
        assert [(w.count(b"FIN "), w.count(b"REQ ")) for w in writes if b"TOUCH " not in w] == [(150, 0), (0, 50)]
    finally:
        bridge.close()
    wait_for(lambda: cluster.channel_stats(topic, "spark")["client_count"] == 0, 10, "connection closed")
