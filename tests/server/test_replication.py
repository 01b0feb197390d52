"""Replication (docs/operations/replication.md): two in-process nsqds on
loopback ports, a leader and a replica of it, real WebSocket, TCP and HTTP,
real files.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import aiohttp
import pytest

from nsq.protocol import commands as c
from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.options import ConfigError

from .helpers import HTTP, Conn, serve_app

pytestmark = pytest.mark.timeout(60)


async def wait_for(predicate: Any, timeout: float) -> None:
    """Poll ``predicate()`` until it is true, failing after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def segments(nsqd: NSQD, topic: str) -> dict[str, bytes]:
    """Every segment file of the topic's log, by name, and its bytes."""
    path = os.path.join(nsqd.data_path, f"{topic}.wal")
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            with open(os.path.join(path, name), "rb") as fh:
                out[name] = fh.read()
    return out


async def pair(make_nsqd: Any, tmp_path: Any, **leader_opts: Any) -> tuple[NSQD, NSQD]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    leader = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", max_bytes_per_file=4096, **leader_opts)
    replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", max_bytes_per_file=4096,
                              replica_of=f"127.0.0.1:{leader.http_port}")
    await wait_for(lambda: leader.replication.sessions, timeout=10)
    return leader, replica


def head(nsqd: NSQD, topic: str) -> int:
    t = nsqd.topics.get(topic)
    return t.store.log.head if t is not None else -1


async def test_replica_copies_records_byte_identical_and_channels(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/topic/create", topic="t"))[0] == 200
    assert (await lh.post("/channel/create", topic="t", channel="c"))[0] == 200
    for i in range(30):  # several segments (4 KiB each)
        assert (await lh.post("/mpub", data="\n".join(f"m{i}-{j}-" + "x" * 40 for j in range(10)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 300, timeout=10)
    assert head(leader, "t") == 300
    assert len(segments(leader, "t")) > 2
    assert segments(replica, "t") == segments(leader, "t")  # same files, same bytes
    assert "c" in replica.topics["t"].channels

    # consume and finish 100 on the leader: the replica's copy of the channel follows
    conn = await Conn.open(leader.tcp_port)
    try:
        await conn.subscribe("t", "c", rdy=100)
        for _ in range(100):
            msg = await conn.read_message(timeout=5)
            await conn.send(c.fin(msg.id))
        await wait_for(lambda: replica.topics["t"].channels["c"].store.cursor.finished.low == 100, timeout=10)
    finally:
        await conn.aclose()
    rstats = await HTTP(session, replica.http_port).channel_stats("t", "c")
    assert rstats is not None and rstats["depth"] == 200


async def test_pages_from_memory_and_from_the_files_copy_the_same_bytes(make_nsqd, tmp_path, session,
                                                                         monkeypatch) -> None:
    """The sender's pages come from the appends it kept, from the segment
    files once it dropped them (past TAIL) or a page ended inside one
    (PAGE), and, after a reconnect, from the files: the copy is the same."""
    from nsq.server.nsqd.replication import leader as sender

    monkeypatch.setattr(sender, "TAIL", 5000)
    monkeypatch.setattr(sender, "PAGE", 2500)
    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    for i in range(40):  # ~1 KB per MPUB, a few in flight at once; every 8th larger than PAGE
        body = "\n".join(f"m{i}-{j}-" + "y" * 50 for j in range(30 if i % 8 == 7 else 10))
        await asyncio.gather(*(lh.post("/mpub", data=body, topic=t) for t in ("t", "t", "u")))
        if i % 4 == 0:
            await asyncio.sleep(0.01)
    await wait_for(lambda: head(replica, "t") == head(leader, "t") == 1000, timeout=10)
    await wait_for(lambda: head(replica, "u") == 500, timeout=10)
    assert len(segments(leader, "t")) > 2
    assert segments(replica, "t") == segments(leader, "t")
    assert segments(replica, "u") == segments(leader, "u")


async def test_with_replica_acks_an_append_goes_onto_the_stream_in_its_own_turn(make_nsqd, tmp_path, session,
                                                                              monkeypatch) -> None:
    """With ``--replica-acks``, an append the replica is level with is
    written to the stream by the append itself (no sender turn in
    between); one that is not (the sender still has pages to send, from
    the kept appends or the files) waits for the sender. Either way the
    copy ends the same."""
    from nsq.server.nsqd.replication import leader as sender

    monkeypatch.setattr(sender, "TAIL", 5000)
    monkeypatch.setattr(sender, "PAGE", 2500)
    leader, replica = await pair(make_nsqd, tmp_path, replica_acks=1)
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/pub", data="first", topic="t"))[0] == 200  # the replica knows the topic, level with it
    sess = leader.replication.sessions[0]
    topic = leader.topics["t"]
    topic.publish([b"direct-%d" % i for i in range(5)])
    assert sess.sent["t"] == head(leader, "t") == 6  # on the stream already, in this turn
    sess.sent["t"] = 3  # as if the sender were behind: the next append leaves it to the sender
    topic.publish([b"queued"])
    assert sess.sent["t"] == 3 and "t" in sess.dirty
    sess.sent["t"] = 6
    for i in range(30):  # concurrent MPUBs to two topics, some larger than PAGE
        body = "\n".join(f"m{i}-{j}-" + "y" * 50 for j in range(30 if i % 8 == 7 else 10))
        await asyncio.gather(*(lh.post("/mpub", data=body, topic=t) for t in ("t", "t", "u")))
    await wait_for(lambda: head(replica, "t") == head(leader, "t") and head(replica, "u") == head(leader, "u"),
                   timeout=10)
    assert head(leader, "t") > 600
    assert segments(replica, "t") == segments(leader, "t")
    assert segments(replica, "u") == segments(leader, "u")


@pytest.mark.parametrize("acks", [0, 1])
async def test_a_topic_deleted_and_made_again_while_followed_is_copied_from_its_start(make_nsqd, tmp_path, session,
                                                                                     acks) -> None:
    """A topic deleted on the leader and published to again, with the
    replica connected throughout: the replica drops its old copy and copies
    the new log from offset 0, whether or not a state message came between
    the delete and the new records."""
    leader, replica = await pair(make_nsqd, tmp_path, replica_acks=acks)
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/mpub", data="\n".join(f"a{i}" for i in range(50)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 50, timeout=10)
    assert (await lh.post("/topic/delete", topic="t"))[0] == 200
    await wait_for(lambda: "t" not in replica.topics, timeout=10)  # a state message in between
    assert (await lh.post("/mpub", data="\n".join(f"b{i}" for i in range(10)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 10, timeout=10)
    assert segments(replica, "t") == segments(leader, "t")
    # deleted and made again at once: no state message in between
    assert (await lh.post("/topic/delete", topic="t"))[0] == 200
    assert (await lh.post("/mpub", data="\n".join(f"c{i}-" + "z" * 30 for i in range(20)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 20, timeout=10)
    await asyncio.sleep(0.2)  # nothing more arrives (an old record would make it 30 or more)
    assert head(replica, "t") == 20
    assert segments(replica, "t") == segments(leader, "t")


async def test_replica_refuses_publish_and_subscribe(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path)
    lh, rh = HTTP(session, leader.http_port), HTTP(session, replica.http_port)
    assert (await lh.post("/pub", data="a", topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 1, timeout=10)
    status, body = await rh.post("/pub", data="b", topic="t")
    assert status == 503 and f"127.0.0.1:{leader.http_port}".encode() in body and b"PUB_FAILED" in body
    status, body = await rh.post("/mpub", data="b\nc", topic="new")
    assert status == 503 and b"replica of" in body
    assert (await rh.post("/topic/create", topic="other"))[0] == 503
    conn = await Conn.open(replica.tcp_port)
    try:
        await conn.send(c.pub("t", b"x"))
        assert b"E_PUB_FAILED" in await conn.expect_error()
    finally:
        await conn.aclose()
    for cmd in (c.pub("new", b"x"), c.dpub("t", 100, b"x"), c.mpub("t", [b"x", b"y"])):
        conn = await Conn.open(replica.tcp_port)
        try:
            await conn.send(cmd)
            assert b"FAILED" in await conn.expect_error()
        finally:
            await conn.aclose()
    conn = await Conn.open(replica.tcp_port)
    try:
        await conn.send(c.sub("t", "c"))
        err = await conn.expect_error()
        assert err.startswith(b"E_SUB_FAILED") and str(leader.http_port).encode() in err
    finally:
        await conn.aclose()
    assert head(replica, "t") == 1 and "new" not in replica.topics and "other" not in replica.topics
    status, text = await rh.get("/stats")
    assert status == 200 and f"Replication: replica of 127.0.0.1:{leader.http_port}, epoch 0, connected".encode() in text
    status, text = await HTTP(session, leader.http_port).get("/stats")
    assert b"Replication: leader, epoch 0, replica-acks 0, 1 replicas" in text
    status, metrics = await rh.get("/metrics")
    assert b"\nnsq_replication_leader 0.0\n" in metrics and b"\nnsq_replication_replicas 1.0\n" in metrics
    stats = await rh.stats()
    assert stats["replication"]["role"] == "replica"
    assert stats["replication"]["leader"] == f"127.0.0.1:{leader.http_port}"


async def test_replica_acks_wait_for_the_replica_and_time_out_without_it(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path, replica_acks=1, replica_timeout=1.0)
    conn = await Conn.open(leader.tcp_port)
    try:
        for i in range(20):
            await conn.send(c.pub("t", b"m%d" % i))
            await conn.expect_ok(timeout=5)
            assert head(replica, "t") >= i + 1  # answered only once the replica has it
        await replica.stop()
        await wait_for(lambda: not leader.replication.sessions, timeout=10)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await conn.send(c.pub("t", b"lost?"))
        err = await conn.expect_error(timeout=5)
        assert err.startswith(b"E_PUB_FAILED") and b"replica" in err
        assert loop.time() - t0 >= 0.9
    finally:
        await conn.aclose()
    status, body = await HTTP(session, leader.http_port).post("/pub", data="x", topic="t")
    assert status == 503 and b"PUB_FAILED" in body


async def test_promote_epoch_and_delivery_from_copied_position(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path)
    lh, rh = HTTP(session, leader.http_port), HTTP(session, replica.http_port)
    assert (await lh.post("/topic/create", topic="t"))[0] == 200
    assert (await lh.post("/channel/create", topic="t", channel="c"))[0] == 200
    assert (await lh.post("/mpub", data="\n".join(f"m{j}" for j in range(50)), topic="t"))[0] == 200
    conn = await Conn.open(leader.tcp_port)
    try:
        await conn.subscribe("t", "c", rdy=20)
        for _ in range(20):
            await conn.send(c.fin((await conn.read_message(timeout=5)).id))
        await wait_for(lambda: replica.topics.get("t") is not None
                       and replica.topics["t"].channels["c"].store.cursor.finished.low == 20, timeout=10)
    finally:
        await conn.aclose()
    assert (await lh.post("/replica/promote"))[0] == 400
    await leader.stop()
    status, body = await rh.post("/replica/promote")
    assert status == 200, body
    assert replica.replication.epoch == 1 and not replica.replica_of
    assert (await rh.post("/pub", data="after", topic="t"))[0] == 200
    conn = await Conn.open(replica.tcp_port)
    got = []
    try:
        await conn.subscribe("t", "c", rdy=100)
        for _ in range(31):
            msg = await conn.read_message(timeout=5)
            got.append(msg.body)
            await conn.send(c.fin(msg.id))
    finally:
        await conn.aclose()
    assert got == [f"m{j}".encode() for j in range(20, 50)] + [b"after"]


async def test_replica_of_refusals(make_nsqd, tmp_path) -> None:
    with pytest.raises(ConfigError, match="--storage=wal"):
        await make_nsqd(data_path=str(tmp_path), storage="diskqueue", replica_of="127.0.0.1:4151")
    with pytest.raises(ConfigError, match="--storage=wal"):
        await make_nsqd(data_path=str(tmp_path), storage="diskqueue", replica_acks=1)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigError, match="itself"):
        await make_nsqd(data_path=str(tmp_path), storage="wal", http_address=f"127.0.0.1:{port}",
                        replica_of=f"127.0.0.1:{port}")


async def test_bad_frames_reconnect_without_damage(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/mpub", data="a\nb\nc", topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 3, timeout=10)
    from nsq.server.nsqd.replication.wire import encode_records

    follower = replica.replication.follower
    assert follower is not None
    frame = encode_records("t", 3, 0, 1, 4, b"\x00\x00\x00\x20garbage")
    with pytest.raises(Exception, match="damaged"):
        follower._records(frame[:-1] + b"?")  # a byte changed on the way
    with pytest.raises(Exception, match="damaged|truncated"):
        follower._records(frame[:-3])  # cut short
    for at in (1, 8, 20, len(frame) // 2):  # the head (topic, offsets, count) is covered too
        with pytest.raises(Exception, match="damaged"):
            follower._records(frame[:at] + bytes([frame[at] ^ 0x10]) + frame[at + 1:])
    with pytest.raises(Exception, match="a page of 20 bytes for 5 records"):
        follower._records(encode_records("t", 3, 0, 5, 8, bytes(20)))  # whole, but too short for its count
    assert head(replica, "t") == 3
    assert segments(replica, "t") == segments(leader, "t")
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(f"http://127.0.0.1:{leader.http_port}/replica/stream") as ws:
            await ws.send_json({"type": "hello", "topics": {}})  # a replica of an older release: no version
            msg = await ws.receive_json(timeout=5)
            assert msg["type"] == "refused" and "stream version 1, this leader 2" in msg["message"], msg
        for garbage in ("not json", "[1, 2]", '{"topics": {"t": {"head": "x"}}}', '{"topics": [1]}'):
            async with s.ws_connect(f"http://127.0.0.1:{leader.http_port}/replica/stream") as ws:
                await ws.send_str(garbage)
                msg = await ws.receive(timeout=5)
                assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), garbage
    assert (await lh.post("/pub", data="d", topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 4, timeout=10)


async def test_deletes_pauses_and_retention_follow_but_absence_deletes_nothing(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path, sync_timeout=0.1)
    lh = HTTP(session, leader.http_port)
    for topic in ("t", "u"):
        assert (await lh.post("/topic/create", topic=topic))[0] == 200
        assert (await lh.post("/channel/create", topic=topic, channel="c"))[0] == 200
        assert (await lh.post("/channel/create", topic=topic, channel="d"))[0] == 200
        assert (await lh.post("/pub", data="x", topic=topic))[0] == 200
    await wait_for(lambda: head(replica, "u") == 1 and "d" in replica.topics["u"].channels, timeout=10)
    assert (await lh.post("/topic/pause", topic="t"))[0] == 200
    assert (await lh.post("/channel/pause", topic="u", channel="c"))[0] == 200
    assert (await lh.post("/channel/delete", topic="u", channel="d"))[0] == 200
    assert (await lh.post("/topic/delete", topic="t"))[0] == 200
    assert (await lh.post("/topic/config", data='{"retention_time": "1h"}', topic="u"))[0] == 200
    await wait_for(lambda: "t" not in replica.topics and "d" not in replica.topics["u"].channels
                   and replica.topics["u"].channels["c"].paused
                   and replica.topics["u"].store.retention_time == 3600, timeout=10)
    assert not os.path.exists(os.path.join(replica.data_path, "t.wal"))
    # the leader goes down: its topics vanish from its state, the replica keeps every one
    await leader.stop()
    await asyncio.sleep(0.3)
    assert "u" in replica.topics and head(replica, "u") == 1


async def test_catch_up_after_restarts_of_either_side(make_nsqd, tmp_path, session) -> None:
    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/mpub", data="\n".join("a" * 100 for _ in range(50)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 50, timeout=10)
    await replica.stop()
    assert (await lh.post("/mpub", data="\n".join("b" * 100 for _ in range(50)), topic="t"))[0] == 200
    replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", max_bytes_per_file=4096,
                              replica_of=f"127.0.0.1:{leader.http_port}")
    await wait_for(lambda: head(replica, "t") == 100, timeout=10)
    port = leader.http_port
    await leader.stop()
    leader = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", max_bytes_per_file=4096,
                             http_address=f"127.0.0.1:{port}")
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/mpub", data="\n".join("c" * 100 for _ in range(50)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 150, timeout=15)
    assert segments(replica, "t") == segments(leader, "t")


async def test_old_leader_rejoins_cut_back_to_the_new_leaders_log(make_nsqd, tmp_path, session) -> None:
    a, b = await pair(make_nsqd, tmp_path)
    ah = HTTP(session, a.http_port)
    assert (await ah.post("/mpub", data="\n".join(f"m{i}" for i in range(10)), topic="t"))[0] == 200
    await wait_for(lambda: head(b, "t") == 10, timeout=10)
    await b.stop()
    assert (await ah.post("/mpub", data="\n".join(f"only-a{i}" for i in range(5)), topic="t"))[0] == 200
    await a.stop()  # the leader is lost; its replica is promoted
    b = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", max_bytes_per_file=4096,
                        replica_of=f"127.0.0.1:{a.http_port}")
    bh = HTTP(session, b.http_port)
    status, body = await bh.post("/replica/promote")
    assert status == 200 and b'"epoch":1' in body
    assert (await bh.post("/mpub", data="\n".join(f"new{i}" for i in range(3)), topic="t"))[0] == 200
    # the old leader comes back as a replica of the new one: its 5 records after offset 10 are cut
    a = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", max_bytes_per_file=4096,
                        replica_of=f"127.0.0.1:{b.http_port}")
    await wait_for(lambda: head(a, "t") == 13 and segments(a, "t") == segments(b, "t"), timeout=10)
    records, _ = a.topics["t"].store.log.read(10, 10)
    assert [r[2] for r in records] == [b"new0", b"new1", b"new2"]
    assert a.replication.epoch == 0 or a.replication.epoch == 1


async def test_refuses_a_leader_of_another_cluster_or_an_older_epoch(make_nsqd, tmp_path, session, caplog) -> None:
    a, b = await pair(make_nsqd, tmp_path)
    assert (await HTTP(session, a.http_port).post("/pub", data="x", topic="t"))[0] == 200
    await wait_for(lambda: head(b, "t") == 1, timeout=10)
    await b.stop()
    (tmp_path / "other").mkdir()
    other = await make_nsqd(data_path=str(tmp_path / "other"), storage="wal")
    b = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", replica_of=f"127.0.0.1:{other.http_port}")
    await wait_for(lambda: "another cluster" in caplog.text, timeout=10)
    assert head(b, "t") == 1 and not other.replication.sessions


async def test_a_diskqueue_leader_is_not_followed(make_nsqd, tmp_path, caplog) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    leader = await make_nsqd(data_path=str(tmp_path / "a"), storage="diskqueue")
    await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", replica_of=f"127.0.0.1:{leader.http_port}")
    await wait_for(lambda: "--storage=wal" in caplog.text, timeout=10)


async def test_a_leader_of_another_stream_version_is_not_followed(make_nsqd, tmp_path, caplog) -> None:
    from aiohttp import web

    hellos = []

    async def stream(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        hellos.append(await ws.receive_json(timeout=5))
        await ws.send_json({"type": "hello", "epoch": 0, "cluster": "", "cut": {}, "drop": []})  # no version
        await ws.send_bytes(b"\x01garbage")  # never read: the hello is refused first
        await asyncio.sleep(5)
        return ws

    app = web.Application()
    app.router.add_get("/replica/stream", stream)
    async with serve_app(app) as port:
        (tmp_path / "b").mkdir()
        replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", replica_of=f"127.0.0.1:{port}")
        await wait_for(lambda: "the leader speaks replication stream version 1, this replica 2" in caplog.text,
                       timeout=10)
        assert hellos[0]["version"] == 2
        assert not replica.topics and not replica.replication.follower.connected


async def test_old_leader_restarted_as_leader_cannot_acknowledge(make_nsqd, tmp_path, session) -> None:
    a, b = await pair(make_nsqd, tmp_path, replica_acks=1, replica_timeout=0.5)
    assert (await HTTP(session, a.http_port).post("/pub", data="x", topic="t"))[0] == 200
    await wait_for(lambda: head(b, "t") == 1, timeout=10)
    await a.stop()
    assert (await HTTP(session, b.http_port).post("/replica/promote"))[0] == 200
    # the old leader comes back as a leader: no replica follows it (b is a leader now), so nothing is acknowledged
    a = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", replica_acks=1, replica_timeout=0.5)
    status, body = await HTTP(session, a.http_port).post("/pub", data="y", topic="t")
    assert status == 503 and b"not written by 1 replica" in body
    # and the new leader refuses to follow it: a leader is no replica
    assert not b.replica_of


async def test_lag_is_the_age_of_the_first_missing_message(make_nsqd, tmp_path, session) -> None:
    """The leader's lag in seconds per replica and topic is the age of the
    first message the replica has not confirmed (its publish timestamp), not
    the time since the copy last matched the head; the replica shows its own
    lag per topic, bounded by the newest message it copied."""
    from nsq.server.nsqd.replication.leader import lag_seconds

    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    assert (await lh.post("/mpub", data="\n".join(f"m{i}" for i in range(10)), topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 10
                   and leader.replication.sessions[0].acked.get("t") == 10, timeout=10)
    tlog = leader.topics["t"].store.log
    ts4 = tlog.timestamp_at(4)
    assert ts4 is not None
    # a copy holding offsets 0..3 lacks message 4: its age, whatever the time since the copy matched
    assert lag_seconds(tlog, 4, ts4 + 2_500_000_000) == pytest.approx(2.5)
    assert lag_seconds(tlog, 10, ts4 + 2_500_000_000) == 0.0
    status = leader.replication.status()
    assert status is not None
    assert status["replicas"][0]["topics"]["t"] == {"offset": 10, "lag_messages": 0, "lag_seconds": 0.0}

    rstatus = (await HTTP(session, replica.http_port).stats())["replication"]
    assert rstatus["topics"]["t"] == {"offset": 10, "leader_head": 10, "lag_messages": 0, "lag_seconds": 0.0}
    follower = replica.replication.follower
    assert follower is not None
    # a records frame announced a head 5 further on: the replica is behind by at most the newest copied message's age
    follower.leader_heads["t"] = 15
    last = replica.topics["t"].store.log.timestamp_at(9)
    assert last is not None
    lag = follower.topic_lag(last + 1_500_000_000)["t"]
    assert lag == {"offset": 10, "leader_head": 15, "lag_messages": 5, "lag_seconds": 1.5}
    text = (await HTTP(session, replica.http_port).get("/stats"))[1]
    assert b"[t                    ] offset: 10 lag: 5 msgs" in text


async def test_a_topic_deleted_while_the_replica_was_away_is_dropped(make_nsqd, tmp_path, session, caplog) -> None:
    """A topic deleted on the leader while its replica is down is deleted on
    the replica when it comes back (the leader's tombstone); one deleted and
    created again meanwhile is copied afresh (its log's id changed), never
    mixed with the old copy's records; a topic the leader holds no
    tombstone for is kept."""
    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    for topic in ("gone", "again", "kept"):
        assert (await lh.post("/mpub", data="\n".join(f"{topic}-old{i}" for i in range(5)), topic=topic))[0] == 200
    await wait_for(lambda: all(head(replica, t) == 5 for t in ("gone", "again", "kept")), timeout=10)
    old_id = replica.replication.log_id(replica.topics["again"].store.log)
    assert old_id and old_id == leader.replication.log_id(leader.topics["again"].store.log)
    replica.get_topic("orphan")  # a copy of a topic the leader never had (nor deleted)
    await replica.stop()
    assert (await lh.post("/topic/delete", topic="gone"))[0] == 200
    assert (await lh.post("/topic/delete", topic="again"))[0] == 200
    assert (await lh.post("/mpub", data="\n".join(f"new{i}" for i in range(3)), topic="again"))[0] == 200
    assert "gone" in leader.replication.deleted
    replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", max_bytes_per_file=4096,
                              replica_of=f"127.0.0.1:{leader.http_port}")
    await wait_for(lambda: "gone" not in replica.topics and head(replica, "again") == 3, timeout=10)
    assert not os.path.exists(os.path.join(replica.data_path, "gone.wal"))
    records, _ = replica.topics["again"].store.log.read(0, 10)
    assert [r[2] for r in records] == [b"new0", b"new1", b"new2"]
    assert segments(replica, "again") == segments(leader, "again")
    await wait_for(lambda: replica.replication.log_id(replica.topics["again"].store.log)
                   == leader.replication.log_id(leader.topics["again"].store.log) != old_id, timeout=10)
    assert head(replica, "kept") == 5
    assert "orphan" in replica.topics
    assert any("has topic orphan, which this leader neither holds nor deleted" in r.getMessage()
               for r in caplog.records)
    # the tombstones outlive a restart of the leader
    port = leader.http_port
    await leader.stop()
    leader = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", max_bytes_per_file=4096,
                             http_address=f"127.0.0.1:{port}")
    assert "gone" in leader.replication.deleted and "again" in leader.replication.deleted


async def test_spin_before_sleep_counts_the_streams_frames_as_reads(make_nsqd, tmp_path, session) -> None:
    # a records frame keeps the replica's loop polling, an ack the leader's (HTTP reads touch neither)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    leader = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", spin_before_sleep=0.2)
    replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", spin_before_sleep=0.2,
                              replica_of=f"127.0.0.1:{leader.http_port}")
    leader.spinner.close()  # a window at every read, whatever else this machine runs
    replica.spinner.close()
    await wait_for(lambda: leader.replication.sessions, timeout=10)
    await wait_for(lambda: not leader.spinner.running and not replica.spinner.running, timeout=10)
    before = leader.spinner.turns, replica.spinner.turns
    assert (await HTTP(session, leader.http_port).post("/pub", data="x", topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 1 and leader.replication.sessions[0].acked.get("t") == 1,
                   timeout=10)
    assert replica.spinner.turns > before[1] and leader.spinner.turns > before[0]


@pytest.mark.parametrize("acks", [0, 1])
async def test_a_replica_of_a_leader_waiting_for_acks_polls_after_each_page(make_nsqd, tmp_path, session,
                                                                           acks) -> None:
    """Without --spin-before-sleep, a replica polls for the next page after
    each one only when the leader's publishes wait for replicas."""
    leader, replica = await pair(make_nsqd, tmp_path, replica_acks=acks)
    assert replica.spinner is None
    follower = replica.replication.follower
    assert follower is not None
    await wait_for(lambda: follower.connected, timeout=10)
    assert (await HTTP(session, leader.http_port).post("/pub", data="x", topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 1, timeout=10)
    if not acks:
        assert follower.spinner is None
        return
    spinner = follower.spinner
    assert spinner is not None
    spinner.close()  # a window at every page, whatever else this machine runs
    await wait_for(lambda: not spinner.running, timeout=10)
    before = spinner.turns
    assert (await HTTP(session, leader.http_port).post("/pub", data="y", topic="t"))[0] == 200
    await wait_for(lambda: head(replica, "t") == 2, timeout=10)
    await wait_for(lambda: spinner.turns > before, timeout=10)


async def test_a_copy_from_before_log_ids_of_a_topic_deleted_since_is_dropped(make_nsqd, tmp_path, session) -> None:
    """A replica's copy written before logs had an id (epochs.json a bare
    list) cannot be told from the leader's log by id: when the leader holds
    a tombstone for the topic (deleted, here created again, since) the copy
    is dropped and copied afresh, never cut back to the new log's length
    with the old records in it; a pre-id copy of a topic never deleted is
    kept and takes its leader's id."""
    leader, replica = await pair(make_nsqd, tmp_path)
    lh = HTTP(session, leader.http_port)
    for topic in ("again", "kept"):
        assert (await lh.post("/mpub", data="\n".join(f"{topic}-old{i}" for i in range(5)), topic=topic))[0] == 200
    await wait_for(lambda: all(head(replica, t) == 5 for t in ("again", "kept")), timeout=10)
    epochs = {t: replica.replication.epochs_of(replica.topics[t].store.log) for t in ("again", "kept")}
    await replica.stop()
    for topic, history in epochs.items():  # as a release before log ids wrote it
        with open(os.path.join(replica.data_path, f"{topic}.wal", "epochs.json"), "w") as fh:
            json.dump(history, fh)
    assert (await lh.post("/topic/delete", topic="again"))[0] == 200
    assert (await lh.post("/mpub", data="\n".join(f"new{i}" for i in range(3)), topic="again"))[0] == 200
    replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", max_bytes_per_file=4096,
                              replica_of=f"127.0.0.1:{leader.http_port}")
    await wait_for(lambda: head(replica, "again") == 3 and replica.replication.log_id(replica.topics["again"].store.log)
                   == leader.replication.log_id(leader.topics["again"].store.log), timeout=10)
    records, _ = replica.topics["again"].store.log.read(0, 10)
    assert [r[2] for r in records] == [b"new0", b"new1", b"new2"]
    assert segments(replica, "again") == segments(leader, "again")
    await wait_for(lambda: replica.replication.log_id(replica.topics["kept"].store.log)
                   == leader.replication.log_id(leader.topics["kept"].store.log), timeout=10)
    assert head(replica, "kept") == 5 and segments(replica, "kept") == segments(leader, "kept")
