"""Server-side max attempts with a dead-letter topic, and peeking at queued
messages (beyond Go nsqd): real daemons, raw V2 connections, HTTP."""

from __future__ import annotations

import base64
import json
import signal
import time

import pytest

from nsq.client import Consumer, Producer
from nsq.server.nsqd.delivery.deadletter import dead_letter_topic

from .helpers import HTTP, Conn, wait_for

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages



def test_dead_letter_names():
    assert dead_letter_topic("{topic}.{channel}.dead", "orders", "billing") == "orders.billing.dead"
    assert dead_letter_topic("{topic}.{channel}.dead", "t", "c#ephemeral") == "t.c.dead#ephemeral"
    assert dead_letter_topic("{topic}.{channel}.dead", "t#ephemeral", "c") == "t.c.dead#ephemeral"
    assert dead_letter_topic("dead", "t", "c") == "dead"
    assert dead_letter_topic("{topic}", "t", "c") is None  # its own topic: a loop
    assert dead_letter_topic("{topic}.{channel}.dead", "t" * 40, "c" * 40) is None  # over 64 chars
    assert dead_letter_topic("bad name {topic}", "t", "c") is None


async def test_req_loop_ends_on_the_dead_letter_topic(make_nsqd, session):
    d = await make_nsqd(max_attempts=3)
    http = HTTP(session, d.http_port)
    prod = await Conn.open(d.tcp_port)
    await prod.publish("orders", b"poison")
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("orders", "billing", rdy=1)
    attempts = []
    for _ in range(3):
        msg = await conn.read_message()
        attempts.append(msg.attempts)
        await conn.send(b"REQ " + msg.id + b" 0\n")
    assert attempts == [1, 2, 3]
    await conn.expect_nothing(0.3)  # not delivered a fourth time
    channel = await http.channel_stats("orders", "billing")
    assert channel["dead_letter_count"] == 1 and channel["max_attempts"] == 3
    assert channel["depth"] == 0 and channel["in_flight_count"] == 0
    dead = await Conn.open(d.tcp_port)
    await dead.subscribe("orders.billing.dead", "inspect", rdy=1)
    got = await dead.read_message()
    assert (got.body, got.attempts, got.id) == (b"poison", 1, msg.id)  # attempts start again on the new topic


async def test_timeouts_and_req_with_delay_dead_letter_too(make_nsqd):
    d = await make_nsqd(max_attempts=2, msg_timeout=1.0)
    prod = await Conn.open(d.tcp_port)
    await prod.publish("t", b"slow")
    await prod.publish("t", b"deferred")
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=2)
    first = [await conn.read_message() for _ in range(2)]
    by_body = {m.body: m for m in first}
    await conn.send(b"REQ " + by_body[b"deferred"].id + b" 100\n")  # with a delay
    again = [await conn.read_message(timeout=3) for _ in range(2)]  # the timeout and the delay
    assert sorted(m.attempts for m in again) == [2, 2]
    for m in again:
        if m.body == b"deferred":
            await conn.send(b"REQ " + m.id + b" 100\n")
    # "slow" times out at attempt 2, "deferred" is requeued at attempt 2
    channel = d.get_topic("t").channels["c"]

    async def both_dead() -> bool:
        return channel.dead_letter_count == 2

    await wait_for(both_dead, timeout=4)
    assert d.get_topic("t.c.dead").channels == {} and d.get_topic("t.c.dead").depth == 2


async def test_per_channel_override_and_off(make_nsqd, session):
    d = await make_nsqd()
    http = HTTP(session, d.http_port)
    d.get_topic("t").get_channel("c")
    status, body = await http.get("/channel/config", topic="t", channel="c")
    assert status == 200 and json.loads(body) == {"max_attempts": 0, "dead_letter_topic": "t.c.dead",
                                                  "dead_letter_count": 0}
    status, body = await http.post("/channel/config", json.dumps({"max_attempts": 1}), topic="t", channel="c")
    assert status == 200 and json.loads(body)["max_attempts"] == 1
    for bad in ('{"max_attempts": -1}', '{"max_attempts": "3"}', '{"other": 1}', "not json"):
        status, _ = await http.post("/channel/config", bad, topic="t", channel="c")
        assert status == 400
    status, _ = await http.get("/channel/config", topic="t", channel="nope")
    assert status == 404
    prod = await Conn.open(d.tcp_port)
    await prod.publish("t", b"once")
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=1)
    msg = await conn.read_message()
    await conn.send(b"REQ " + msg.id + b" 0\n")
    await conn.expect_nothing(0.3)
    assert d.get_topic("t.c.dead").depth == 1


async def test_invalid_dead_letter_name_requeues_and_drops_nothing(make_nsqd):
    d = await make_nsqd(max_attempts=1, dead_letter_topic="{topic}")
    prod = await Conn.open(d.tcp_port)
    await prod.publish("t", b"kept")
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=1)
    for attempt in (1, 2, 3):
        msg = await conn.read_message()
        assert msg.attempts == attempt
        await conn.send(b"REQ " + msg.id + b" 0\n")
    assert d.get_topic("t").channels["c"].dead_letter_count == 0


async def test_setting_and_dead_letters_survive_a_restart(make_nsqd, tmp_path):
    d = await make_nsqd(data_path=str(tmp_path))
    channel = d.get_topic("t").get_channel("c")
    d.settings.set("t", "c", max_attempts=5)
    channel.max_attempts = 5
    d.get_topic("t.c.dead").publish([b"already dead"])
    await d.stop()
    with open(tmp_path / "nsqd.dat") as f:  # still Go's format: no extra keys
        assert set(json.load(f)) == {"topics", "version"}
    d = await make_nsqd(data_path=str(tmp_path))
    assert d.get_topic("t").channels["c"].max_attempts == 5
    assert d.get_topic("t.c.dead").depth == 1
    d.get_topic("t").delete_channel("c")
    assert d.settings.get("t", "c") == {}  # a new channel of that name starts with the default


def test_kill9_leaves_each_message_on_its_channel_or_on_the_dead_letter_topic(tmp_path):
    """--sync-every=1: after kill -9 every acknowledged message is either
    still queued on the channel or on the dead-letter topic (never neither)."""
    from tests.reliability.daemons import NSQDDaemon
    from tests.reliability.v2sock import V2Socket

    flags = (f"--data-path={tmp_path}", "--mem-queue-size=0", "--sync-every=1", "--max-attempts=1")
    d = NSQDDaemon(*flags)
    try:
        pub = V2Socket(d.tcp_port)
        for i in range(20):
            assert pub.pub("t", b"%02d" % i) == (0, b"OK")
        cons = V2Socket(d.tcp_port)
        cons.sub("t", "c", 10)
        for _ in range(10):
            msg_id, _, _ = cons.read_message()
            cons.sock.sendall(b"REQ " + msg_id + b" 0\n")
        time.sleep(0.5)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    finally:
        d.stop()
    d = NSQDDaemon(*flags)
    try:
        seen: dict[bytes, set] = {}
        for topic, channel in (("t", "c"), ("t.c.dead", "x")):
            conn = V2Socket(d.tcp_port, timeout=1.0)
            conn.sub(topic, channel, 50)
            try:
                while True:
                    ftype, data = conn.read_frame()
                    if ftype != 2:
                        continue
                    seen.setdefault(data[26:], set()).add(topic)
                    conn.fin(data[10:26])
            except (TimeoutError, OSError):
                pass
            conn.close()
        # never neither; after kill -9 a dead letter may also still be on the
        # channel (its read position is synced after the dead-letter write)
        assert set(seen) == {b"%02d" % i for i in range(20)}, sorted(seen)
        assert sum("t.c.dead" in v for v in seen.values()) == 10
    finally:
        d.stop()


async def test_peek_memory_then_disk_changes_nothing(make_nsqd, session, tmp_path):
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=2)
    http = HTTP(session, d.http_port)
    d.get_topic("t").get_channel("c")
    prod = await Conn.open(d.tcp_port)
    for i in range(5):
        await prod.publish("t", b"m%d" % i)
    before = await http.channel_stats("t", "c")
    wal = d.options.storage == "wal"
    # both engines keep --mem-queue-size of them in memory, the rest on disk
    assert before["backend_depth"] == 3
    status, body = await http.get("/channel/peek", topic="t", channel="c", n="4")
    assert status == 200
    msgs = json.loads(body)["messages"]
    assert [base64.b64decode(m["body"]) for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
    assert all(len(m["id"]) == 16 and m["attempts"] == 0 and m["timestamp"] > 0 for m in msgs)
    assert await http.channel_stats("t", "c") == before  # nothing moved
    dq = d.get_topic("t").channels["c"].backend
    if wal:
        assert (dq.next, dq.depth) == (2, 3)  # the cursor did not move
    else:
        assert (dq.read_file_num, dq.read_pos, dq.depth) == (0, 0, 3)
    # delivery order is what peek said
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=5)
    got = [(await conn.read_message()) for _ in range(5)]
    assert [m.id.decode() for m in got[:4]] == [m["id"] for m in msgs]
    for bad in ("0", "101", "x"):
        status, _ = await http.get("/channel/peek", topic="t", channel="c", n=bad)
        assert status == 400
    assert (await http.get("/channel/peek", topic="nope", channel="c"))[0] == 404
    assert (await http.get("/channel/peek", topic="t", channel="nope"))[0] == 404


async def test_topic_peek_without_channels(make_nsqd, session):
    d = await make_nsqd()
    http = HTTP(session, d.http_port)
    d.get_topic("t").publish([b"held"])
    status, body = await http.get("/topic/peek", topic="t")
    assert status == 200 and base64.b64decode(json.loads(body)["messages"][0]["body"]) == b"held"
    assert d.get_topic("t").depth == 1
    assert (await http.get("/topic/peek", topic="nope"))[0] == 404


async def test_our_client_gives_up_through_the_server(make_nsqd):
    """A client that never gives up itself (max_attempts=0) still stops
    seeing a poison message once nsqd moves it to the dead-letter topic."""
    d = await make_nsqd(max_attempts=2)
    producer = Producer(f"127.0.0.1:{d.tcp_port}")
    await producer.connect()
    await producer.publish("jobs", b"poison")
    seen = []

    async def handler(msg):
        seen.append(msg.attempts)
        raise RuntimeError("cannot process")

    consumer = Consumer("jobs", "work", handler, nsqd_tcp_addresses=[f"127.0.0.1:{d.tcp_port}"],
                        max_attempts=0, requeue_delay_ms=10, max_requeue_delay_ms=50)
    await consumer.start()

    async def dead() -> bool:
        return d.get_topic("jobs").channels["work"].dead_letter_count == 1

    await wait_for(dead, timeout=10)
    await consumer.close()
    await producer.close()
    assert seen == [1, 2]


async def test_channel_config_changes_only_once_persisted(make_nsqd, session, tmp_path, monkeypatch):
    from nsq.server.nsqd.delivery import deadletter

    d = await make_nsqd(data_path=str(tmp_path), max_attempts=3)
    http = HTTP(session, d.http_port)
    d.get_topic("t").get_channel("c")

    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(deadletter, "replace_atomically", disk_full)
    status, _ = await http.post("/channel/config", json.dumps({"max_attempts": 9}), topic="t", channel="c")
    assert status == 500
    assert d.get_topic("t").channels["c"].max_attempts == 3
    assert d.settings.overrides == {}
    monkeypatch.undo()
    status, body = await http.post("/channel/config", json.dumps({"max_attempts": 9}), topic="t", channel="c")
    assert status == 200 and json.loads(body)["max_attempts"] == 9
    assert d.get_topic("t").channels["c"].max_attempts == 9
