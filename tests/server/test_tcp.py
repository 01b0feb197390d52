"""nsqd TCP protocol V2 against a real in-process daemon (https://nsq.io/clients/tcp_protocol_spec.html)."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time

import pytest

from nsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE

from .helpers import HTTP, Conn, c, wait_for

IDENTIFY_KEYS = {
    "max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
    "deflate_level", "max_deflate_level", "snappy", "sample_rate", "auth_required",
    "output_buffer_size", "output_buffer_timeout",
}
HEX16 = re.compile(rb"^[0-9a-f]{16}$")


async def consumer(connect, topic: str, channel: str, rdy: int = 100, **identify) -> Conn:
    conn = await connect()
    if identify:
        assert await conn.identify(**identify) == (FRAME_TYPE_RESPONSE, b"OK")
    await conn.subscribe(topic, channel, rdy)
    return conn


# -- IDENTIFY -----------------------------------------------------------------


async def test_identify_without_feature_negotiation_answers_ok(connect):
    conn = await connect()
    assert await conn.identify(client_id="x", hostname="h") == (FRAME_TYPE_RESPONSE, b"OK")
    assert await conn.identify(client_id="x", feature_negotiation=False) == (FRAME_TYPE_RESPONSE, b"OK")


async def test_identify_feature_negotiation_answers_json(connect, nsqd):
    conn = await connect()
    ftype, data = await conn.identify(feature_negotiation=True, msg_timeout=5000)
    assert ftype == FRAME_TYPE_RESPONSE
    resp = json.loads(data)
    assert set(resp) == IDENTIFY_KEYS
    assert resp["max_rdy_count"] == 2500
    assert resp["version"] == "1.2.1"
    assert resp["msg_timeout"] == 5000
    assert resp["max_msg_timeout"] == 900000
    assert resp["tls_v1"] is False and resp["auth_required"] is False
    assert (resp["deflate"], resp["snappy"], resp["sample_rate"]) == (False, False, 0)
    assert (resp["deflate_level"], resp["max_deflate_level"]) == (6, 6)
    assert (resp["output_buffer_size"], resp["output_buffer_timeout"]) == (16384, 250)
    # the connection is usable afterwards
    await conn.publish("t", b"x")


async def test_identify_twice_before_sub(connect):
    conn = await connect()
    assert await conn.identify(client_id="a") == (FRAME_TYPE_RESPONSE, b"OK")
    ftype, data = await conn.identify(client_id="b", feature_negotiation=True)
    assert ftype == FRAME_TYPE_RESPONSE and set(json.loads(data)) == IDENTIFY_KEYS
    await conn.subscribe("t", "ch")


async def test_identify_after_sub_is_fatal(connect):
    conn = await connect()
    await conn.subscribe("t", "ch")
    await conn.send(c.identify({"client_id": "x"}))
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b"E_INVALID cannot IDENTIFY in current state")]


# -- framing errors -----------------------------------------------------------


async def test_bad_magic(connect):
    conn = await connect(magic=b"  V1")
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL")]


async def test_unknown_command(connect):
    conn = await connect()
    await conn.send(b"BOGUS\n")
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b"E_INVALID invalid command BOGUS")]


# -- publish / consume ----------------------------------------------------------


async def test_pub_then_sub_receives_message(connect):
    pub = await connect()
    await pub.publish("t", b"hello")
    sub = await consumer(connect, "t", "ch", rdy=1)
    before = time.time_ns()
    msg = await sub.read_message()
    assert msg.attempts == 1
    assert HEX16.match(msg.id)
    assert msg.body == b"hello"
    assert 0 < msg.timestamp <= before


async def test_sub_then_pub_receives_message(connect):
    sub = await consumer(connect, "t", "ch", rdy=1)
    pub = await connect()
    await pub.publish("t", b"live")
    msg = await sub.read_message()
    assert (msg.attempts, msg.body) == (1, b"live")


async def test_mpub_three_in_order(connect):
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.send(c.mpub("t", [b"one", b"two", b"three"]))
    await pub.expect_ok()
    bodies = [(await sub.read_message()).body for _ in range(3)]
    assert bodies == [b"one", b"two", b"three"]


async def test_dpub_delays_delivery(connect):
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.send(c.dpub("t", 300, b"later"))
    t0 = time.monotonic()
    await pub.expect_ok()
    await sub.expect_nothing(0.2)
    msg = await sub.read_message(timeout=1.0)
    elapsed = time.monotonic() - t0
    assert msg.body == b"later" and msg.attempts == 1
    assert 0.25 <= elapsed < 0.8, elapsed


async def test_fin_unknown_id_is_not_fatal(connect):
    sub = await consumer(connect, "t", "ch")
    await sub.send(c.fin(b"0123456789abcdef"))
    assert await sub.expect_error() == b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"
    await sub.send(c.nop())
    # still subscribed and working
    pub = await connect()
    await pub.publish("t", b"after")
    msg = await sub.read_message()
    assert msg.body == b"after"
    await sub.send(c.fin(msg.id))
    await sub.expect_nothing(0.1)


async def test_fins_in_one_write_with_a_bad_one_in_the_middle(connect, http: HTTP):
    """Back-to-back FINs (parsed as one batch) act one by one: the unknown id
    gets its E_FIN_FAILED, the others finish, the connection goes on."""
    sub = await consumer(connect, "t", "ch", rdy=10)
    pub = await connect()
    for i in range(4):
        await pub.publish("t", b"m%d" % i)
    msgs = [await sub.read_message() for _ in range(4)]
    ids = [m.id for m in msgs]
    await sub.send(b"".join(c.fin(i) for i in ids[:2]) + c.fin(b"fedcba9876543210")
                   + b"".join(c.fin(i) for i in ids[2:]))
    assert await sub.expect_error() == b"E_FIN_FAILED FIN fedcba9876543210 failed ID not in flight"

    async def finished():
        ch = await http.channel_stats("t", "ch")
        return ch["in_flight_count"] == 0 and ch["clients"][0]["finish_count"] == 4

    await wait_for(finished)
    await sub.send(c.fin(ids[0]))  # already finished
    assert await sub.expect_error() == b"E_FIN_FAILED FIN %s failed ID not in flight" % ids[0]


async def test_fin_unknown_id_then_pub_on_same_connection(connect):
    conn = await connect()
    await conn.subscribe("t", "ch")
    await conn.send(c.fin(b"fedcba9876543210"))
    assert await conn.expect_error() == b"E_FIN_FAILED FIN fedcba9876543210 failed ID not in flight"
    await conn.publish("t", b"x")


async def test_fin_short_id_is_fatal(connect):
    sub = await consumer(connect, "t", "ch")
    await sub.send(c.fin(b"0123456789abcde"))
    frames = await sub.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b"E_INVALID Invalid Message ID")]


async def test_fin_removes_in_flight(connect, http: HTTP):
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"x")
    msg = await sub.read_message()
    ch = await http.channel_stats("t", "ch")
    assert ch["in_flight_count"] == 1
    await sub.send(c.fin(msg.id))

    async def done():
        ch = await http.channel_stats("t", "ch")
        return ch["in_flight_count"] == 0 and ch["clients"][0]["finish_count"] == 1

    await wait_for(done)


async def test_rdy_1_workers_get_the_next_message_only_after_each_fin(connect, http: HTTP):
    """A work queue: two RDY 1 workers on a channel holding a backlog each
    hold one message at a time and get the next after their FIN; all are
    delivered once, each worker's in publish order."""
    w1 = await consumer(connect, "wq", "ch", rdy=0)
    w2 = await consumer(connect, "wq", "ch", rdy=0)
    pub = await connect()
    await pub.send(c.mpub("wq", [b"%03d" % i for i in range(40)]))
    await pub.expect_ok()
    for w in (w1, w2):
        await w.send(c.rdy(1))
    seen: dict[Conn, list[bytes]] = {w1: [], w2: []}
    for round_ in range(20):
        for w in (w1, w2):
            msg = await w.read_message()
            if round_ < 2:
                await w.expect_nothing(0.05)  # RDY 1: nothing more until the FIN
            seen[w].append(msg.body)
            await w.send(c.fin(msg.id))
    assert sorted(seen[w1] + seen[w2]) == [b"%03d" % i for i in range(40)]
    assert all(bodies == sorted(bodies) and len(bodies) == 20 for bodies in seen.values())

    async def done():
        ch = await http.channel_stats("wq", "ch")
        return ch["depth"] == 0 and ch["in_flight_count"] == 0 and \
            [cl["finish_count"] for cl in ch["clients"]] == [20, 20]

    await wait_for(done)


@pytest.mark.both_storages
async def test_rdy_1_workers_take_a_backlog_on_disk_one_per_fin(make_nsqd, tmp_path, session):
    """With --mem-queue-size=0 the backlog waits in the disk queue (or the
    topic log): each RDY 1 worker's FIN brings it the next record read, all
    once, each worker's in order, and nothing is left queued or held."""
    nsqd = await make_nsqd(data_path=str(tmp_path), mem_queue_size=0)
    http = HTTP(session, nsqd.http_port)
    workers = [await Conn.open(nsqd.tcp_port) for _ in range(3)]
    for w in workers:
        await w.subscribe("wq", "ch", rdy=0)
    pub = await Conn.open(nsqd.tcp_port)
    await pub.send(c.mpub("wq", [b"%03d" % i for i in range(60)]))
    await pub.expect_ok()
    assert (await http.channel_stats("wq", "ch"))["depth"] == 60
    for w in workers:
        await w.send(c.rdy(1))
    seen: dict[Conn, list[bytes]] = {w: [] for w in workers}
    for _ in range(20):
        for w in workers:
            msg = await w.read_message()
            seen[w].append(msg.body)
            await w.send(c.fin(msg.id))
    assert sorted(b for bodies in seen.values() for b in bodies) == [b"%03d" % i for i in range(60)]
    assert all(bodies == sorted(bodies) for bodies in seen.values())

    async def done():
        ch = await http.channel_stats("wq", "ch")
        return ch["depth"] == 0 and ch["in_flight_count"] == 0 and \
            sum(cl["finish_count"] for cl in ch["clients"]) == 60

    await wait_for(done)
    for conn in (*workers, pub):
        await conn.aclose()


async def test_a_sampling_rdy_1_worker_drains_the_backlog(connect, http: HTTP):
    """A RDY 1 worker sampling 30 % keeps getting messages after one is
    sampled out (it is skipped, its room stays) until the backlog is gone."""
    w = await consumer(connect, "s", "ch", rdy=0, sample_rate=30)
    pub = await connect()
    await pub.send(c.mpub("s", [b"%03d" % i for i in range(200)]))
    await pub.expect_ok()
    await w.send(c.rdy(1))
    got = []
    while True:
        ch = await http.channel_stats("s", "ch")
        if ch["depth"] == 0 and ch["in_flight_count"] == 0:
            break
        msg = await w.read_message(timeout=5.0)
        got.append(msg.body)
        await w.send(c.fin(msg.id))
    # Go keeps a message when rand(100) <= rate: 31 % expected, sd ~6.5 of 200
    assert 30 < len(got) < 100 and got == sorted(set(got)), got


async def test_req_zero_redelivers(connect, http: HTTP):
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"again")
    msg = await sub.read_message()
    await sub.send(c.req(msg.id, 0))
    msg2 = await sub.read_message()
    assert (msg2.id, msg2.body, msg2.attempts) == (msg.id, b"again", 2)
    ch = await http.channel_stats("t", "ch")
    assert ch["requeue_count"] == 1


async def test_req_with_delay(connect, http: HTTP):
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"later")
    msg = await sub.read_message()
    await sub.send(c.req(msg.id, 300))
    t0 = time.monotonic()
    ch = await http.channel_stats("t", "ch")
    assert ch["deferred_count"] == 1 and ch["in_flight_count"] == 0
    await sub.expect_nothing(0.2)
    msg2 = await sub.read_message(timeout=1.0)
    assert 0.25 <= time.monotonic() - t0 < 0.8
    assert (msg2.id, msg2.attempts) == (msg.id, 2)


async def test_req_unknown_id_is_not_fatal(connect):
    sub = await consumer(connect, "t", "ch")
    await sub.send(c.req(b"0123456789abcdef", 0))
    assert await sub.expect_error() == b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight"
    await sub.send(c.touch(b"0123456789abcdef"))
    assert await sub.expect_error() == b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight"
    pub = await connect()
    await pub.publish("t", b"ok")
    assert (await sub.read_message()).body == b"ok"


async def test_touch_extends_timeout(connect, http: HTTP):
    sub = await consumer(connect, "t", "ch", msg_timeout=1000)
    pub = await connect()
    await pub.publish("t", b"slow")
    msg = await sub.read_message()
    await asyncio.sleep(0.6)
    await sub.send(c.touch(msg.id))
    # without the TOUCH it would time out at ~1.0 s; now at ~1.6 s
    await sub.expect_nothing(0.6)
    await sub.send(c.fin(msg.id))
    await sub.expect_nothing(0.1)  # no E_FIN_FAILED: still in flight
    ch = await http.channel_stats("t", "ch")
    assert ch["timeout_count"] == 0 and ch["in_flight_count"] == 0


async def test_msg_timeout_redelivers(connect, http: HTTP):
    sub = await consumer(connect, "t", "ch", msg_timeout=1000)
    pub = await connect()
    await pub.publish("t", b"timeout")
    t0 = time.monotonic()
    msg = await sub.read_message()
    assert msg.attempts == 1
    msg2 = await sub.read_message(timeout=1.5)
    elapsed = time.monotonic() - t0
    assert 0.95 <= elapsed < 1.5, elapsed
    assert (msg2.id, msg2.attempts, msg2.body) == (msg.id, 2, b"timeout")
    ch = await http.channel_stats("t", "ch")
    assert ch["timeout_count"] == 1
    # FIN of the timed-out delivery's id is fine: the redelivery is in flight
    await sub.send(c.fin(msg2.id))
    await sub.expect_nothing(0.1)


# -- limits ---------------------------------------------------------------------


async def test_rdy_over_max(connect):
    conn = await connect()
    await conn.subscribe("t", "ch")
    await conn.send(c.rdy(2501))
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b"E_INVALID RDY count 2501 out of range 0-2500")]


async def test_rdy_at_max_is_fine(connect):
    conn = await connect()
    await conn.subscribe("t", "ch", rdy=2500)
    await conn.expect_nothing(0.1)


async def test_pub_too_big(make_nsqd):
    d = await make_nsqd(max_msg_size=1024)
    conn = await Conn.open(d.tcp_port)
    try:
        await conn.send(c.pub("t", b"x" * 2000))
        frames = await conn.expect_closed()
        assert frames == [(FRAME_TYPE_ERROR, b"E_BAD_MESSAGE PUB message too big 2000 > 1024")]
    finally:
        await conn.aclose()


async def test_pub_empty_body_is_fatal(connect):
    conn = await connect()
    await conn.send(c.pub("t", b""))
    frames = await conn.expect_closed()
    assert len(frames) == 1 and frames[0][0] == FRAME_TYPE_ERROR
    assert frames[0][1].startswith(b"E_BAD_MESSAGE ")
    assert frames[0][1] == b"E_BAD_MESSAGE PUB invalid message body size 0"


async def test_pub_bad_topic(connect):
    conn = await connect()
    await conn.send(c.pub("bad!topic", b"x"))
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid')]


async def test_mpub_bad_topic_doubled_prefix(connect):
    conn = await connect()
    await conn.send(c.mpub("bad!t", [b"a"]))
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!t" is not valid')]


async def test_sub_bad_channel(connect):
    conn = await connect()
    await conn.send(c.sub("t", "a" * 65))
    frames = await conn.expect_closed()
    assert frames == [(FRAME_TYPE_ERROR, b'E_BAD_CHANNEL SUB channel name "' + b"a" * 65 + b'" is not valid')]


# -- one publish per read (the producer waiting for each OK) ----------------------


async def test_publishes_one_per_read_are_answered_and_delivered_in_order(connect, http: HTTP):
    """A producer that writes one PUB or MPUB and waits for its OK (each a
    read of its own, parsed in place): every OK, counts, delivery order."""
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.identify(client_id="p")
    sent = []
    for i in range(30):
        if i % 3 == 0:
            await pub.send(c.pub("t", b"p%d" % i))
            sent.append(b"p%d" % i)
        elif i % 3 == 1:
            await pub.send(c.mpub("t", [b"m%d" % i]))
            sent.append(b"m%d" % i)
        else:
            await pub.send(c.mpub("t", [b"a%d" % i, b"b%d" % i]))
            sent += [b"a%d" % i, b"b%d" % i]
        await pub.expect_ok()
    got = [(await sub.read_message()).body for _ in sent]
    assert got == sent
    stats = await http.stats()
    topic = next(t for t in stats["topics"] if t["topic_name"] == "t")
    assert topic["message_count"] == len(sent)
    producer = next(p for p in stats["producers"] if p["client_id"] == "p")
    assert producer["pub_counts"] == [{"topic": "t", "count": len(sent)}]


async def test_an_mpub_of_30_in_one_read_is_answered_and_delivered_in_order(connect, http: HTTP):
    """An MPUB of 6 KB (30 x 200 bytes), one read to a topic published to
    before: OK, every message delivered in order, counted once."""
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"first")
    bodies = [b"%03d" % i + bytes(197) for i in range(30)]
    await pub.send(c.mpub("t", bodies))
    await pub.expect_ok()
    assert [(await sub.read_message()).body for _ in range(31)] == [b"first", *bodies]
    assert (await http.channel_stats("t", "ch"))["message_count"] == 31


@pytest.mark.parametrize("body, error", [
    (struct.pack(">ii", 8, 1) + struct.pack(">i", 0) * 1, b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (struct.pack(">ii", 4, 0), b"E_BAD_BODY MPUB invalid message count 0"),
    (struct.pack(">iii", 9, 2, 1) + b"a", b"E_BAD_MESSAGE MPUB failed to read message(1) body size"),
    # 5 KB: past the small read, within the publish lane's read
    (struct.pack(">ii", 4 + 25 * 204 + 4, 26) + (struct.pack(">i", 200) + bytes(200)) * 25 + struct.pack(">i", 0),
     b"E_BAD_MESSAGE MPUB invalid message(25) body size 0"),
])
async def test_bad_mpub_alone_in_a_read_is_fatal_for_that_connection_only(connect, body, error):
    """A bad MPUB to a topic already published to, alone in its read: the
    same error frame and close as anywhere in a stream; the daemon goes on."""
    sub = await consumer(connect, "t", "ch")
    bad = await connect()
    await bad.publish("t", b"first")
    await bad.send(b"MPUB t\n" + body)
    assert await bad.expect_closed() == [(FRAME_TYPE_ERROR, error)]
    assert (await sub.read_message()).body == b"first"
    good = await connect()
    await good.publish("t", b"after")
    assert (await sub.read_message()).body == b"after"


# -- CLS ------------------------------------------------------------------------


async def test_cls(connect):
    sub = await consumer(connect, "t", "ch")
    await sub.send(c.cls())
    await sub.expect_response(b"CLOSE_WAIT")
    pub = await connect()
    await pub.publish("t", b"nobody")
    await sub.expect_nothing(0.3)


# -- distribution -----------------------------------------------------------------


async def _collect(conn: Conn, into: list, fin: bool = True) -> None:
    while True:
        try:
            msg = await conn.read_message(timeout=0.3)
        except asyncio.TimeoutError:
            return
        into.append(msg)
        if fin:
            await conn.send(c.fin(msg.id))


async def test_two_consumers_share_a_channel(connect):
    a = await consumer(connect, "t", "ch")
    b = await consumer(connect, "t", "ch")
    pub = await connect()
    n = 20
    for i in range(n):
        await pub.publish("t", b"m%d" % i)
    got_a: list = []
    got_b: list = []
    await asyncio.gather(_collect(a, got_a), _collect(b, got_b))
    assert got_a and got_b, (len(got_a), len(got_b))
    bodies = [m.body for m in got_a + got_b]
    assert len(bodies) == n
    assert sorted(bodies) == sorted(b"m%d" % i for i in range(n))
    assert len({m.id for m in got_a + got_b}) == n


async def test_two_consumers_share_mpub(connect):
    a = await consumer(connect, "t", "ch")
    b = await consumer(connect, "t", "ch")
    pub = await connect()
    n = 50
    await pub.send(c.mpub("t", [b"m%d" % i for i in range(n)]))
    await pub.expect_ok()
    got_a: list = []
    got_b: list = []
    await asyncio.gather(_collect(a, got_a), _collect(b, got_b))
    assert got_a and got_b
    assert sorted(m.body for m in got_a + got_b) == sorted(b"m%d" % i for i in range(n))


async def test_two_channels_each_get_every_message(connect):
    a = await consumer(connect, "t", "ch1")
    b = await consumer(connect, "t", "ch2")
    pub = await connect()
    await pub.send(c.mpub("t", [b"1", b"2", b"3"]))
    await pub.expect_ok()
    await pub.publish("t", b"4")
    got_a: list = []
    got_b: list = []
    await asyncio.gather(_collect(a, got_a), _collect(b, got_b))
    assert [m.body for m in got_a] == [b"1", b"2", b"3", b"4"]
    assert [m.body for m in got_b] == [b"1", b"2", b"3", b"4"]
    assert [m.id for m in got_a] == [m.id for m in got_b]


async def test_topic_without_channel_keeps_messages(connect, http: HTTP):
    pub = await connect()
    for body in (b"a", b"b", b"c"):
        await pub.publish("t", body)
    t = await http.topic_stats("t")
    assert t["depth"] == 3 and t["channels"] == []
    sub = await consumer(connect, "t", "ch")
    got = [(await sub.read_message()).body for _ in range(3)]
    assert got == [b"a", b"b", b"c"]
    t = await http.topic_stats("t")
    assert t["depth"] == 0


# -- heartbeats ---------------------------------------------------------------------


async def test_heartbeat_sent_and_answered(connect):
    conn = await connect()
    assert await conn.identify(heartbeat_interval=1000) == (FRAME_TYPE_RESPONSE, b"OK")
    t0 = time.monotonic()
    assert await conn.read_frame(timeout=1.5) == (FRAME_TYPE_RESPONSE, b"_heartbeat_")
    assert 0.9 <= time.monotonic() - t0 < 1.5
    await conn.send(c.nop())
    # answered: the next heartbeat comes, and the connection is still open
    assert await conn.read_frame(timeout=1.5) == (FRAME_TYPE_RESPONSE, b"_heartbeat_")
    await conn.publish("t", b"alive")


async def test_heartbeat_unanswered_closes(connect):
    conn = await connect()
    assert await conn.identify(heartbeat_interval=1000) == (FRAME_TYPE_RESPONSE, b"OK")
    t0 = time.monotonic()
    frames = await conn.expect_closed(timeout=3.5)
    elapsed = time.monotonic() - t0
    assert (FRAME_TYPE_RESPONSE, b"_heartbeat_") in frames
    assert 1.5 <= elapsed <= 3.5, elapsed


# -- isolation / lifecycle ------------------------------------------------------------


async def test_fatal_error_does_not_affect_other_clients(connect):
    sub = await consumer(connect, "t", "ch")
    bad = await connect()
    await bad.send(b"BOGUS\n")
    await bad.expect_closed()
    pub = await connect()
    await pub.publish("t", b"still here")
    assert (await sub.read_message()).body == b"still here"


async def test_ephemeral_channel_deleted_with_last_client(connect, http: HTTP):
    sub = await consumer(connect, "t", "c#ephemeral")
    ch = await http.channel_stats("t", "c#ephemeral")
    assert ch is not None and ch["client_count"] == 1
    await sub.aclose()

    async def gone():
        t = await http.topic_stats("t")
        return t is not None and t["channels"] == []

    await wait_for(gone)


async def test_ephemeral_topic_deleted_with_last_channel(connect, http: HTTP):
    sub = await consumer(connect, "t#ephemeral", "c#ephemeral")
    assert await http.topic_stats("t#ephemeral") is not None
    await sub.aclose()

    async def gone():
        return await http.topic_stats("t#ephemeral") is None

    await wait_for(gone)


async def test_mem_queue_size_durable_topic_refuses(make_nsqd, session):
    d = await make_nsqd(mem_queue_size=5)
    http = HTTP(session, d.http_port)
    conn = await Conn.open(d.tcp_port)
    try:
        for i in range(5):
            await conn.publish("t", b"m%d" % i)
        await conn.send(c.pub("t", b"m5"))
        frames = await conn.expect_closed()
        assert len(frames) == 1 and frames[0][0] == FRAME_TYPE_ERROR
        assert frames[0][1].startswith(b"E_PUB_FAILED ")
        t = await http.topic_stats("t")
        assert t["depth"] == 5 and t["message_count"] == 5
    finally:
        await conn.aclose()


async def test_mem_queue_size_ephemeral_topic_drops(make_nsqd, session):
    d = await make_nsqd(mem_queue_size=5)
    http = HTTP(session, d.http_port)
    conn = await Conn.open(d.tcp_port)
    try:
        for i in range(8):
            await conn.publish("t#ephemeral", b"m%d" % i)
        t = await http.topic_stats("t#ephemeral")
        assert t["depth"] == 5 and t["message_count"] == 8
    finally:
        await conn.aclose()


async def test_stats_client_version_and_producer(connect, http: HTTP):
    await consumer(connect, "t", "ch", client_id="cons", hostname="h1", user_agent="ua/1")
    pub = await connect()
    await pub.publish("t", b"x")
    stats = await http.stats()
    client = stats["topics"][0]["channels"][0]["clients"][0]
    assert client["version"] == "V2"
    assert (client["client_id"], client["hostname"], client["user_agent"]) == ("cons", "h1", "ua/1")
    assert client["state"] == 3 and client["ready_count"] == 100
    assert stats["producers"] and stats["producers"][0]["pub_counts"] == [{"topic": "t", "count": 1}]
    assert stats["producers"][0]["version"] == "V2"


async def test_pub_frame_layout(connect):
    """A message frame's bytes exactly: size, type 2, ts, attempts, id, body."""
    sub = await consumer(connect, "t", "ch")
    pub = await connect()
    await pub.publish("t", b"body")
    ftype, data = await sub.read_frame()
    assert ftype == 2
    assert len(data) == 8 + 2 + 16 + 4
    ts, attempts = struct.unpack(">qH", data[:10])
    assert attempts == 1 and abs(ts - time.time_ns()) < 5e9
    assert data[26:] == b"body"


@pytest.mark.parametrize(
    "line,error",
    [
        (b"SUB t\n", b"E_INVALID SUB insufficient number of parameters"),
        (b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
        (b"FIN 0123456789abcdef\n", b"E_INVALID cannot FIN in current state"),
    ],
)
async def test_misc_fatal_errors(connect, line, error):
    conn = await connect()
    await conn.send(line)
    assert await conn.expect_closed() == [(FRAME_TYPE_ERROR, error)]
