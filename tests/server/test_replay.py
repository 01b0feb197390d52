"""Retention, replay and reading by offset on the topic log (``--storage=wal``):
an in-process nsqd, its real HTTP API and files."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import pytest

from nsq.server.nsqd.http.replay import READ_HEADER, parse_since

from .helpers import HTTP
from .test_topiclog import _consume


@pytest.fixture
async def wal(make_nsqd, tmp_path):
    async def factory(**options):
        options.setdefault("data_path", str(tmp_path))
        options.setdefault("storage", "wal")
        options.setdefault("max_bytes_per_file", 4096)
        return await make_nsqd(**options)

    return factory


def _age_segments(topic, seconds: float) -> None:
    """Make every segment look last written ``seconds`` ago."""
    for name in os.listdir(topic.log.path):
        if name.endswith(".log"):
            path = os.path.join(topic.log.path, name)
            t = time.time() - seconds
            os.utime(path, (t, t))


async def _checkpoint(nsqd) -> None:
    import asyncio

    nsqd.checkpoint_logs()
    await asyncio.sleep(0.2)  # the disk thread writes, the loop trims


def _decode_read(body: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(body):
        offset, _ts, _attempts, _msg_id, size = READ_HEADER.unpack_from(body, pos)
        pos += READ_HEADER.size
        out.append((offset, body[pos:pos + size]))
        pos += size
    return out


def test_since_takes_rfc3339_unix_ns_and_durations():
    now = 1_800_000_000_000_000_000
    assert parse_since("1700000000000000000", now) == 1_700_000_000_000_000_000
    assert parse_since("90m", now) == now - 90 * 60 * 10**9
    when = datetime(2026, 11, 25, 10, 0, tzinfo=timezone.utc)
    assert parse_since("2026-11-25T10:00:00Z", now) == int(when.timestamp()) * 10**9
    for bad in ("yesterday", "2026-11-25T10:00:00", "-"):
        with pytest.raises(ValueError):
            parse_since(bad, now)


async def test_retention_by_size_keeps_finished_messages_and_rewind_replays_them(wal, session):
    nsqd = await wal(retention_bytes=20_000)
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.get_channel("c")
    for i in range(0, 1000, 50):
        topic.publish([b"%04d" % j + b"x" * 100 for j in range(i, i + 50)])
    assert len(await _consume(nsqd.tcp_port, "t", "c", 1000)) == 1000
    await _checkpoint(nsqd)
    retained = topic.log.retained_bytes
    biggest = max(size for _, size in topic.log.segments())
    assert 20_000 - biggest < retained <= 20_000  # up to the cap, in whole segments
    first = topic.log.first
    assert 0 < first < 1000
    stats = await http.topic_stats("t")
    assert stats["head_offset"] == 1000 and stats["first_offset"] == first
    assert stats["retained_bytes"] == retained and stats["oldest_timestamp"] > 0
    assert (await http.channel_stats("t", "c"))["offset"] == 1000

    status, body = await http.post("/channel/rewind", topic="t", channel="c", offset=str(first - 1))
    assert (status, json.loads(body)["message"]) == (400, "OFFSET_NOT_RETAINED")
    status, body = await http.post("/channel/rewind", topic="t", channel="c", offset=str(first + 10))
    assert status == 200 and json.loads(body) == {"offset": first + 10, "count": 1000 - first - 10}
    again = await _consume(nsqd.tcp_port, "t", "c", 1000 - first - 10)
    assert again == [b"%04d" % j + b"x" * 100 for j in range(first + 10, 1000)]  # publish order
    status, body = await http.post("/channel/rewind", topic="t", channel="c", offset="0", clamp="true")
    assert status == 200 and json.loads(body)["offset"] == first
    # a time before the oldest retained message: not retained either, unless clamped
    status, body = await http.post("/channel/rewind", topic="t", channel="c", since="1h")
    assert (status, json.loads(body)["message"]) == (400, "OFFSET_NOT_RETAINED")
    status, body = await http.post("/channel/rewind", topic="t", channel="c", since="1h", clamp="true")
    assert status == 200 and json.loads(body)["offset"] == first


async def test_retention_by_time_deletes_only_segments_older_than_it(wal, session):
    nsqd = await wal(retention_time=3600.0)
    topic = nsqd.get_topic("t")
    topic.get_channel("c")
    for i in range(0, 500, 50):
        topic.publish([b"y" * 100] * 50)
    await _consume(nsqd.tcp_port, "t", "c", 500)
    await _checkpoint(nsqd)
    segments = len(list(topic.log.segments()))
    assert segments > 3 and topic.log.first == 0  # all finished, all younger than an hour
    _age_segments(topic, 7200)
    await _checkpoint(nsqd)
    assert len(list(topic.log.segments())) == 1  # the newest stays


async def test_retention_never_deletes_what_a_channel_has_not_finished(wal):
    nsqd = await wal(retention_time=0.001)
    topic = nsqd.get_topic("t")
    topic.get_channel("fast")
    topic.get_channel("slow")
    for i in range(10):
        topic.publish([b"z" * 100] * 50)
    await _consume(nsqd.tcp_port, "t", "fast", 500)
    _age_segments(topic, 60)
    await _checkpoint(nsqd)
    assert topic.log.first == 0
    assert len(await _consume(nsqd.tcp_port, "t", "slow", 500)) == 500


async def test_rewind_by_time_and_start_earliest(wal, session):
    nsqd = await wal(retention_bytes=10**9)
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.get_channel("c")
    topic.publish([b"old%d" % i for i in range(100)])
    time.sleep(0.05)
    middle = time.time_ns()
    time.sleep(0.05)
    topic.publish([b"new%d" % i for i in range(100)])
    await _consume(nsqd.tcp_port, "t", "c", 200)
    for since in (str(middle), datetime.fromtimestamp(middle / 1e9, timezone.utc).isoformat()):
        status, body = await http.post("/channel/rewind", topic="t", channel="c", since=since)
        assert status == 200 and json.loads(body) == {"offset": 100, "count": 100}, body
        assert await _consume(nsqd.tcp_port, "t", "c", 100) == [b"new%d" % i for i in range(100)]
    status, _ = await http.post("/channel/rewind", topic="t", channel="c", since="1h")
    assert status == 200
    assert len(await _consume(nsqd.tcp_port, "t", "c", 200)) == 200

    assert (await http.post("/channel/create", topic="t", channel="replay", start="earliest"))[0] == 200
    assert (await http.channel_stats("t", "replay"))["depth"] == 200
    assert (await http.post("/channel/create", topic="t", channel="now"))[0] == 200
    assert (await http.channel_stats("t", "now"))["depth"] == 0
    assert (await http.post("/channel/create", topic="t", channel="x", start="nonsense"))[0] == 400


async def test_topic_config_and_rewound_positions_survive_a_restart(wal, session):
    nsqd = await wal()
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.get_channel("c")
    topic.publish([b"m%d" % i for i in range(300)])
    status, body = await http.post("/topic/config", json.dumps({"retention_time": "24h",
                                                                  "retention_bytes": 1 << 30}), topic="t")
    assert status == 200 and json.loads(body) == {"retention_time": "24h0m0s", "retention_bytes": 1 << 30}
    await _consume(nsqd.tcp_port, "t", "c", 300)
    await _checkpoint(nsqd)
    assert topic.log.first == 0  # kept for a day
    assert (await http.post("/channel/rewind", topic="t", channel="c", offset="250"))[0] == 200
    await nsqd.stop()
    again = await wal()
    http = HTTP(session, again.http_port)
    status, body = await http.get("/topic/config", topic="t")
    assert json.loads(body) == {"retention_time": "24h0m0s", "retention_bytes": 1 << 30}
    assert (await http.channel_stats("t", "c"))["depth"] == 50
    for bad in ({"retention_time": "soon"}, {"retention_bytes": -1}, {"other": 1}, []):
        assert (await http.post("/topic/config", json.dumps(bad), topic="t"))[0] == 400


async def test_read_by_offset_and_commit(wal, session):
    nsqd = await wal()
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.publish([b"r%d" % i for i in range(500)])
    status, body = await http.get("/topic/read", topic="t", offset="100", limit="50")
    assert status == 200
    assert _decode_read(body) == [(i, b"r%d" % i) for i in range(100, 150)]
    status, body = await http.get("/topic/read", topic="t", offset="480", limit="50")
    assert [o for o, _ in _decode_read(body)] == list(range(480, 500))
    assert topic.depth == 500  # reading changed nothing
    # a reader's progress on its own channel: lag in /stats, retention holds for it
    assert (await http.post("/channel/create", topic="t", channel="spark", start="earliest"))[0] == 200
    status, body = await http.post("/channel/commit", topic="t", channel="spark", offset="300")
    assert status == 200 and json.loads(body) == {"offset": 300, "depth": 200}
    assert (await http.channel_stats("t", "spark"))["offset"] == 300
    await _checkpoint(nsqd)
    assert topic.log.first <= 300
    status, body = await http.get("/metrics")
    text = body.decode()
    assert 'nsq_topic_head_offset{topic="t"} 500.0' in text
    assert 'nsq_channel_offset{channel="spark",topic="t"} 300.0' in text


async def test_diskqueue_mode_answers_a_clear_400(make_nsqd, session, tmp_path):
    nsqd = await make_nsqd(data_path=str(tmp_path))
    http = HTTP(session, nsqd.http_port)
    nsqd.get_topic("t").get_channel("c")
    calls = [
        ("GET", "/topic/config", {"topic": "t"}),
        ("POST", "/topic/config", {"topic": "t"}),
        ("POST", "/channel/rewind", {"topic": "t", "channel": "c", "offset": "0"}),
        ("POST", "/channel/commit", {"topic": "t", "channel": "c", "offset": "0"}),
        ("GET", "/topic/read", {"topic": "t", "offset": "0"}),
        ("POST", "/channel/create", {"topic": "t", "channel": "d", "start": "earliest"}),
    ]
    for method, path, params in calls:
        status, body = await (http.get(path, **params) if method == "GET" else http.post(path, **params))
        assert status == 400 and b"--storage=wal" in body, (path, body)
    assert "head_offset" not in (await http.topic_stats("t"))
    assert b"nsq_topic_head_offset" not in (await http.get("/metrics"))[1]


async def test_a_rewind_does_not_send_a_message_still_in_flight_twice(wal, session):
    from nsq.protocol import commands as c

    from .helpers import Conn

    nsqd = await wal()
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.get_channel("c")
    topic.publish([b"a", b"b", b"c"])
    conn = await Conn.open(nsqd.tcp_port)
    await conn.subscribe("t", "c", rdy=1)
    held = await conn.read_message()  # "a" stays in flight
    assert (await http.post("/channel/rewind", topic="t", channel="c", offset="0"))[0] == 200
    await conn.send(c.rdy(10))
    others = [await conn.read_message() for _ in range(2)]
    assert sorted(m.body for m in others) == [b"b", b"c"]
    await conn.expect_nothing(0.3)
    await conn.send(c.fin(held.id))
    for m in others:
        await conn.send(c.fin(m.id))
    await conn.expect_nothing(0.3)
    assert topic.channels["c"].depth == 0 and not topic.channels["c"].in_flight
    await conn.aclose()


async def test_create_at_an_offset_commit_drops_deferred_and_committed_offset(wal, session):
    nsqd = await wal()
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.publish([b"m%d" % i for i in range(100)])
    assert (await http.post("/channel/create", topic="t", channel="at40", offset="40"))[0] == 200
    channel = topic.channels["at40"]
    assert channel.depth == 60 and channel.queue[0][5] == 40  # the first 40 are skipped
    topic.publish([b"late"], defer_ms=60_000)
    topic.publish([b"m%d" % i for i in range(100, 110)])
    assert len(channel.queue) == 70 and len(channel.deferred) == 1  # the DPUB deferred at once
    got = await _consume(nsqd.tcp_port, "t", "at40", 70)
    assert got == [b"m%d" % i for i in range(40, 110)]
    assert len(channel.deferred) == 1  # the DPUB, read and deferred
    stats = await http.channel_stats("t", "at40")
    assert stats["committed_offset"] == 40 or stats["committed_offset"] >= 40
    status, _ = await http.post("/channel/commit", topic="t", channel="at40", offset="111")
    assert status == 200 and not channel.deferred
    stats = await http.channel_stats("t", "at40")
    assert stats["committed_offset"] == 111 and stats["depth"] == 0 and stats["deferred_count"] == 0


async def test_read_says_what_is_synced_and_reads_only_that_when_asked(wal, session):
    # a long --sync-timeout and a large --sync-every: nothing is fsynced
    # until the test asks (a roll fsyncs the segment it closes)
    nsqd = await wal(sync_every=1_000_000, sync_timeout=3600.0, max_bytes_per_file=1 << 20)
    http = HTTP(session, nsqd.http_port)
    topic = nsqd.get_topic("t")
    topic.publish([b"s%d" % i for i in range(10)])
    status, body, headers = await http.request("GET", "/topic/read", params={"topic": "t", "offset": "0"})
    assert status == 200 and len(_decode_read(body)) == 10
    assert (headers["X-NSQ-Head-Offset"], headers["X-NSQ-Synced-Offset"]) == ("10", "0")
    status, body, headers = await http.request("GET", "/topic/read",
                                               params={"topic": "t", "offset": "0", "synced": "true"})
    assert status == 200 and _decode_read(body) == [] and headers["X-NSQ-Next-Offset"] == "0"
    assert (await http.topic_stats("t"))["synced_offset"] == 0
    topic.log.sync()
    topic.publish([b"late"])
    status, body, headers = await http.request("GET", "/topic/read",
                                               params={"topic": "t", "offset": "0", "synced": "true"})
    assert [o for o, _ in _decode_read(body)] == list(range(10)) and headers["X-NSQ-Synced-Offset"] == "10"
    assert (await http.topic_stats("t"))["synced_offset"] == 10
