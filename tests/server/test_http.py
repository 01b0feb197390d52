"""nsqd's HTTP API against a real in-process daemon (Go: nsqd/http.go)."""

from __future__ import annotations

import json
import struct
import time

import pytest

from .helpers import HTTP, Conn, c, error_json

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages


TOP_KEYS = {"version", "health", "start_time", "topics", "memory", "producers"}
TOPIC_KEYS = {
    "topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes",
    "paused", "e2e_processing_latency",
}
CHANNEL_KEYS = {
    "channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count", "message_count",
    "requeue_count", "timeout_count", "client_count", "clients", "paused", "e2e_processing_latency",
    # beyond Go (server-side max attempts); Go clients ignore unknown keys
    "dead_letter_count", "max_attempts",
}
CLIENT_KEYS = {
    "client_id", "hostname", "version", "remote_address", "state", "ready_count", "in_flight_count",
    "message_count", "finish_count", "requeue_count", "connect_ts", "sample_rate", "deflate", "snappy",
    "user_agent", "tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
    "tls_negotiated_protocol_is_mutual",
}
LATENCY_KEYS = {"count", "percentiles", "topic", "channel", "host"}


def binary_mpub(bodies: list[bytes], count: int | None = None) -> bytes:
    out = struct.pack(">i", len(bodies) if count is None else count)
    for body in bodies:
        out += struct.pack(">i", len(body)) + body
    return out


async def consumer(connect, topic: str, channel: str, rdy: int = 100) -> Conn:
    conn = await connect()
    await conn.subscribe(topic, channel, rdy)
    return conn


# -- basics -------------------------------------------------------------------------


async def test_ping(http: HTTP):
    assert await http.get("/ping") == (200, b"OK")


async def test_info(http: HTTP, nsqd):
    status, body = await http.get("/info")
    assert status == 200
    info = json.loads(body)
    assert set(info) == {"version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time"}
    assert info["version"] == "1.2.1"
    assert info["tcp_port"] == nsqd.tcp_port and info["http_port"] == nsqd.http_port
    assert isinstance(info["start_time"], int)


async def test_not_found(http: HTTP):
    assert await http.get("/nope") == (404, b'{"message":"NOT_FOUND"}')
    assert await http.post("/topic/bogus", topic="t") == (404, b'{"message":"NOT_FOUND"}')


async def test_method_not_allowed(http: HTTP):
    assert await http.get("/pub", topic="t") == (405, b'{"message":"METHOD_NOT_ALLOWED"}')
    assert await http.post("/ping") == (405, b'{"message":"METHOD_NOT_ALLOWED"}')
    status, _, _ = await http.request("DELETE", "/stats")
    assert status == 405


# -- /pub ---------------------------------------------------------------------------


async def test_pub_delivers(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    assert await http.post("/pub", b"via http", topic="t") == (200, b"OK")
    msg = await sub.read_message()
    assert (msg.body, msg.attempts) == (b"via http", 1)
    # HTTP publishers are not producers
    stats = await http.stats()
    assert stats["producers"] is None
    assert stats["topics"][0]["message_count"] == 1
    assert stats["topics"][0]["message_bytes"] == len(b"via http")


async def test_pub_defer(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    t0 = time.monotonic()
    assert await http.post("/pub", b"later", topic="t", defer=300) == (200, b"OK")
    ch = await http.channel_stats("t", "ch")
    assert ch["deferred_count"] == 1
    await sub.expect_nothing(0.2)
    msg = await sub.read_message()
    assert msg.body == b"later"
    assert 0.25 <= time.monotonic() - t0 < 0.8


@pytest.mark.parametrize(
    "params,body,status,text",
    [
        ({}, b"x", 400, "MISSING_ARG_TOPIC"),
        ({"topic": "bad!topic"}, b"x", 400, "INVALID_TOPIC"),
        ({"topic": "a" * 65}, b"x", 400, "INVALID_TOPIC"),
        ({"topic": "t"}, b"", 400, "MSG_EMPTY"),
        ({"topic": "t"}, b"x" * 1025, 413, "MSG_TOO_BIG"),
        ({"topic": "t", "defer": "-1"}, b"x", 400, "INVALID_DEFER"),
        ({"topic": "t", "defer": "abc"}, b"x", 400, "INVALID_DEFER"),
        ({"topic": "t", "defer": "3600001"}, b"x", 400, "INVALID_DEFER"),
    ],
)
async def test_pub_errors(make_nsqd, session, params, body, status, text):
    d = await make_nsqd(max_msg_size=1024)
    http = HTTP(session, d.http_port)
    assert await http.post("/pub", body, **params) == (status, error_json(text))


async def test_pub_at_max_size_ok(make_nsqd, session):
    d = await make_nsqd(max_msg_size=1024)
    http = HTTP(session, d.http_port)
    assert await http.post("/pub", b"x" * 1024, topic="t") == (200, b"OK")
    assert await http.post("/pub", b"x", topic="t", defer="3600000") == (200, b"OK")


# -- /mpub --------------------------------------------------------------------------


async def test_mpub_text_drops_empty_lines(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    assert await http.post("/mpub", b"one\n\ntwo\nthree\n\n", topic="t") == (200, b"OK")
    got = [(await sub.read_message()).body for _ in range(3)]
    assert got == [b"one", b"two", b"three"]
    await sub.expect_nothing(0.1)
    t = await http.topic_stats("t")
    assert t["message_count"] == 3


async def test_mpub_empty_body_ok(http: HTTP):
    assert await http.post("/mpub", b"", topic="t") == (200, b"OK")
    t = await http.topic_stats("t")
    assert t["message_count"] == 0


async def test_mpub_binary(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    bodies = [b"a\nb", b"\x00\x01", b"zz"]  # newlines and NULs are data in binary mode
    assert await http.post("/mpub", binary_mpub(bodies), topic="t", binary="true") == (200, b"OK")
    got = [(await sub.read_message()).body for _ in range(3)]
    assert got == bodies


async def test_mpub_binary_count_zero(http: HTTP):
    assert await http.post("/mpub", binary_mpub([]), topic="t", binary="true") == (413, error_json("BAD_BODY"))


async def test_mpub_binary_truncated(http: HTTP):
    data = binary_mpub([b"hello", b"world"])[:-2]
    assert await http.post("/mpub", data, topic="t", binary="true") == (413, error_json("BAD_MESSAGE"))
    data = binary_mpub([b"hello"], count=2)
    assert await http.post("/mpub", data, topic="t", binary="true") == (413, error_json("BAD_MESSAGE"))
    t = await http.topic_stats("t")
    assert t is None or t["message_count"] == 0


async def test_mpub_errors(make_nsqd, session):
    d = await make_nsqd(max_msg_size=10, max_body_size=100)
    http = HTTP(session, d.http_port)
    assert await http.post("/mpub", b"a\nb") == (400, error_json("MISSING_ARG_TOPIC"))
    assert await http.post("/mpub", b"a\nb", topic="bad!") == (400, error_json("INVALID_TOPIC"))
    assert await http.post("/mpub", b"a\n" + b"x" * 11, topic="t") == (413, error_json("MSG_TOO_BIG"))
    assert await http.post("/mpub", b"x\n" * 60, topic="t") == (413, error_json("BODY_TOO_BIG"))
    data = binary_mpub([b"x" * 11])
    assert await http.post("/mpub", data, topic="t", binary="true") == (413, error_json("BAD_MESSAGE"))


# -- /stats -------------------------------------------------------------------------


async def test_stats_json_shape(http: HTTP, connect):
    await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"x")
    stats = await http.stats()
    assert set(stats) == TOP_KEYS
    assert stats["version"] == "1.2.1" and stats["health"] == "OK"
    [topic] = stats["topics"]
    assert set(topic) == TOPIC_KEYS
    assert set(topic["e2e_processing_latency"]) == LATENCY_KEYS
    [channel] = topic["channels"]
    assert set(channel) == CHANNEL_KEYS
    assert set(channel["e2e_processing_latency"]) == LATENCY_KEYS
    [client] = channel["clients"]
    assert set(client) == CLIENT_KEYS
    assert client["version"] == "V2"
    assert channel["client_count"] == 1 and channel["message_count"] == 1
    [producer] = stats["producers"]
    assert set(producer) == CLIENT_KEYS | {"pub_counts"}
    assert producer["version"] == "V2"
    assert producer["pub_counts"] == [{"topic": "t", "count": 1}]


async def test_stats_producers_null_without_publishers(http: HTTP, connect):
    stats = await http.stats()
    assert stats["producers"] is None
    assert stats["topics"] == []  # Go: make([]TopicStats, 0); null only for a filter naming no topic
    await consumer(connect, "t", "ch")
    stats = await http.stats()
    assert stats["producers"] is None


async def test_stats_topics_sorted_and_filtered(http: HTTP):
    for name in ("b", "c", "a"):
        assert await http.post("/topic/create", topic=name) == (200, b"")
    stats = await http.stats()
    assert [t["topic_name"] for t in stats["topics"]] == ["a", "b", "c"]
    stats = await http.stats(topic="b")
    assert [t["topic_name"] for t in stats["topics"]] == ["b"]
    stats = await http.stats(topic="nothing")
    assert stats["topics"] is None


async def test_stats_channel_filter(http: HTTP):
    await http.post("/topic/create", topic="t")
    for ch in ("z", "y"):
        assert await http.post("/channel/create", topic="t", channel=ch) == (200, b"")
    stats = await http.stats(topic="t")
    assert [ch["channel_name"] for ch in stats["topics"][0]["channels"]] == ["y", "z"]
    stats = await http.stats(topic="t", channel="z")
    assert [ch["channel_name"] for ch in stats["topics"][0]["channels"]] == ["z"]


async def test_stats_include_flags(http: HTTP, connect):
    await consumer(connect, "t", "ch")
    stats = await http.stats(include_clients="false", include_mem="false")
    assert "memory" not in stats
    assert stats["topics"][0]["channels"][0]["clients"] is None  # Go leaves the slice nil


async def test_stats_text(http: HTTP, connect):
    status, body = await http.get("/stats")
    assert status == 200
    assert b"Topics: None" in body
    await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"x")
    status, body = await http.get("/stats")
    text = body.decode()
    assert "\nTopics:" in text
    assert "[t              ] depth:" in text
    assert "[ch                       ] depth:" in text


# -- topic admin --------------------------------------------------------------------


async def test_topic_admin(http: HTTP):
    assert await http.post("/topic/create", topic="t") == (200, b"")
    assert await http.post("/topic/create", topic="t") == (200, b"")
    assert await http.post("/topic/create") == (400, error_json("MISSING_ARG_TOPIC"))
    assert await http.post("/topic/create", topic="bad!") == (400, error_json("INVALID_TOPIC"))
    assert await http.post("/pub", b"x", topic="t") == (200, b"OK")
    assert (await http.topic_stats("t"))["depth"] == 1
    assert await http.post("/topic/empty", topic="t") == (200, b"")
    assert (await http.topic_stats("t"))["depth"] == 0
    assert await http.post("/topic/pause", topic="t") == (200, b"")
    assert (await http.topic_stats("t"))["paused"] is True
    assert await http.post("/topic/unpause", topic="t") == (200, b"")
    assert (await http.topic_stats("t"))["paused"] is False
    assert await http.post("/topic/delete", topic="t") == (200, b"")
    assert await http.topic_stats("t") is None
    for action in ("delete", "empty", "pause", "unpause"):
        assert await http.post(f"/topic/{action}", topic="gone") == (404, error_json("TOPIC_NOT_FOUND"))
        assert await http.post(f"/topic/{action}") == (400, error_json("MISSING_ARG_TOPIC"))


async def test_topic_pause_holds_messages(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    assert await http.post("/topic/pause", topic="t") == (200, b"")
    assert await http.post("/pub", b"held", topic="t") == (200, b"OK")
    await sub.expect_nothing(0.3)
    assert (await http.topic_stats("t"))["depth"] == 1
    assert await http.post("/topic/unpause", topic="t") == (200, b"")
    assert (await sub.read_message()).body == b"held"


async def test_topic_delete_closes_clients(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    assert await http.post("/topic/delete", topic="t") == (200, b"")
    await sub.expect_closed()
    assert (await http.stats())["topics"] == []


# -- channel admin ------------------------------------------------------------------


async def test_channel_admin(http: HTTP):
    assert await http.post("/channel/create", topic="t", channel="ch") == (404, error_json("TOPIC_NOT_FOUND"))
    assert await http.post("/topic/create", topic="t") == (200, b"")
    assert await http.post("/channel/create", topic="t", channel="ch") == (200, b"")
    ch = await http.channel_stats("t", "ch")
    assert ch is not None and ch["paused"] is False
    assert await http.post("/channel/pause", topic="t", channel="ch") == (200, b"")
    assert (await http.channel_stats("t", "ch"))["paused"] is True
    assert await http.post("/channel/unpause", topic="t", channel="ch") == (200, b"")
    assert (await http.channel_stats("t", "ch"))["paused"] is False
    assert await http.post("/channel/empty", topic="t", channel="ch") == (200, b"")
    assert await http.post("/channel/delete", topic="t", channel="ch") == (200, b"")
    assert await http.channel_stats("t", "ch") is None
    for action in ("delete", "empty", "pause", "unpause"):
        path = f"/channel/{action}"
        assert await http.post(path, topic="t", channel="ch") == (404, error_json("CHANNEL_NOT_FOUND"))
        assert await http.post(path, topic="nope", channel="ch") == (404, error_json("TOPIC_NOT_FOUND"))
        assert await http.post(path, topic="bad!", channel="ch") == (400, error_json("INVALID_ARG_TOPIC"))
        assert await http.post(path, topic="t", channel="bad!") == (400, error_json("INVALID_ARG_CHANNEL"))
        assert await http.post(path, channel="ch") == (400, error_json("MISSING_ARG_TOPIC"))
        assert await http.post(path, topic="t") == (400, error_json("MISSING_ARG_CHANNEL"))
    assert await http.post("/channel/create", topic="bad!", channel="ch") == (400, error_json("INVALID_ARG_TOPIC"))
    assert await http.post("/channel/create", topic="t", channel="b d") == (400, error_json("INVALID_ARG_CHANNEL"))


async def test_channel_pause_delivers_nothing_until_unpaused(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    assert await http.post("/channel/pause", topic="t", channel="ch") == (200, b"")
    assert await http.post("/pub", b"p1", topic="t") == (200, b"OK")
    assert await http.post("/pub", b"p2", topic="t") == (200, b"OK")
    await sub.expect_nothing(0.3)
    assert (await http.channel_stats("t", "ch"))["depth"] == 2
    assert await http.post("/channel/unpause", topic="t", channel="ch") == (200, b"")
    got = [(await sub.read_message()).body for _ in range(2)]
    assert got == [b"p1", b"p2"]


async def test_channel_empty_drops_depth(http: HTTP):
    await http.post("/topic/create", topic="t")
    await http.post("/channel/create", topic="t", channel="ch")
    assert await http.post("/mpub", b"1\n2\n3", topic="t") == (200, b"OK")
    assert (await http.channel_stats("t", "ch"))["depth"] == 3
    assert await http.post("/channel/empty", topic="t", channel="ch") == (200, b"")
    assert (await http.channel_stats("t", "ch"))["depth"] == 0


async def test_channel_empty_clears_in_flight(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch", rdy=1)
    await http.post("/mpub", b"1\n2", topic="t")
    msg = await sub.read_message()
    ch = await http.channel_stats("t", "ch")
    assert (ch["in_flight_count"], ch["depth"]) == (1, 1)
    assert await http.post("/channel/empty", topic="t", channel="ch") == (200, b"")
    ch = await http.channel_stats("t", "ch")
    assert (ch["in_flight_count"], ch["depth"]) == (0, 0)
    await sub.send(c.fin(msg.id))
    assert await sub.expect_error() == b"E_FIN_FAILED FIN %s failed ID not in flight" % msg.id
    # RDY 1 is usable again
    await http.post("/pub", b"3", topic="t")
    assert (await sub.read_message()).body == b"3"


async def test_channel_delete_closes_clients(http: HTTP, connect):
    sub = await consumer(connect, "t", "ch")
    assert await http.post("/channel/delete", topic="t", channel="ch") == (200, b"")
    await sub.expect_closed()


async def test_channel_created_gets_later_messages(http: HTTP, connect):
    await http.post("/topic/create", topic="t")
    await http.post("/channel/create", topic="t", channel="ch")
    await http.post("/pub", b"queued", topic="t")
    sub = await consumer(connect, "t", "ch")
    assert (await sub.read_message()).body == b"queued"


# -- /config ------------------------------------------------------------------------


async def test_config_lookupd_addresses(http: HTTP):
    assert await http.get("/config/nsqlookupd_tcp_addresses") == (200, b"[]")
    status, _, _ = await http.request("PUT", "/config/nsqlookupd_tcp_addresses", data=b"not json")
    assert status == 400
    status, body, _ = await http.request("PUT", "/config/nsqlookupd_tcp_addresses", data=b"{bad")
    assert (status, body) == (400, error_json("INVALID_VALUE"))
    status, body, _ = await http.request("PUT", "/config/nsqlookupd_tcp_addresses", data=b"[]")
    assert (status, body) == (200, b"[]")


async def test_config_unknown_option(http: HTTP):
    status, body, _ = await http.request("PUT", "/config/bogus_option", data=b"1")
    assert (status, body) == (400, error_json("INVALID_OPTION"))
    assert await http.get("/config/bogus_option") == (400, error_json("INVALID_OPTION"))


async def test_config_get_known_option(http: HTTP):
    status, body = await http.get("/config/mem_queue_size")
    assert (status, json.loads(body)) == (200, 10000)


async def test_stats_json_written_from_the_topics_is_the_typed_stats_json(make_nsqd, tmp_path):
    """``/stats?format=json`` is written straight from the topics
    (``get_stats``); the typed stats (``collect_stats``, read by the text
    report, statsd, ``/metrics`` and the auth filter) give the same bytes,
    for every filter, with clients, latency windows, a paused topic, a
    channel-less topic and (with --storage=wal) the topic log's figures."""
    import orjson

    from nsq.server.nsqd.stats.collect import collect_stats, get_stats

    d = await make_nsqd(data_path=str(tmp_path), e2e_processing_latency_percentiles=[0.5, 0.99])
    sub = await Conn.open(d.tcp_port)
    pub = await Conn.open(d.tcp_port)
    try:
        await sub.subscribe("t", "ch", 10)
        for i in range(5):
            await pub.publish("t", b"m%d" % i)
        for _ in range(3):
            m = await sub.read_message(timeout=5)
            await sub.send(b"FIN " + m.id + b"\n")
        await pub.publish("lonely", b"x")  # a topic without channels
        d.get_topic("t").get_channel("second")
        d.get_topic("p").pause()
        for topic, channel, clients, mem in [("", "", True, False), ("t", "", True, False), ("t", "ch", False, False),
                                             ("", "second", True, False), ("nothing", "", True, False),
                                             ("lonely", "", False, False), ("", "", False, False)]:
            direct = get_stats(d, topic, channel, clients, mem)
            assert orjson.dumps(direct) == orjson.dumps(collect_stats(d, topic, channel, clients, mem).to_json())
        full = get_stats(d, include_mem=False)
        assert [t["topic_name"] for t in full["topics"]] == ["lonely", "p", "t"]
        t = full["topics"][2]
        assert [c["channel_name"] for c in t["channels"]] == ["ch", "second"]
        assert t["e2e_processing_latency"]["count"] == 3 and len(t["e2e_processing_latency"]["percentiles"]) == 2
        assert ("head_offset" in t) == (d.topics["t"].store.log is not None)
    finally:
        await sub.aclose()
        await pub.aclose()
