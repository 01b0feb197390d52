"""Large message bodies: a loop turn writes at most ``ClientV2.OUT_BUDGET``
bytes of messages to one consumer; what does not fit goes back to the front
of the channel's queue, in order, for it or another consumer."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from nsq.protocol.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from nsq.server.nsqd.tcp.client_v2 import ClientV2

from .helpers import HTTP, Conn, c

pytestmark = pytest.mark.both_storages

BODY = 256 * 1024  # bytes: four messages fill the budget


def bodies(n: int) -> list[bytes]:
    return [i.to_bytes(4, "big") * (BODY // 4) for i in range(n)]


async def publish(connect, topic: str, msgs: list[bytes]) -> None:
    pub = await connect()
    for i in range(0, len(msgs), 8):
        await pub.send(c.mpub(topic, msgs[i:i + 8]))
        assert await pub.read_frame(timeout=10) == (FRAME_TYPE_RESPONSE, b"OK")


async def channel_stats(http: HTTP, topic: str) -> dict:
    ch = await http.channel_stats(topic, "ch")
    assert ch is not None
    return ch


async def test_one_consumer_gets_every_large_body_in_order(connect, http: HTTP):
    assert ClientV2.OUT_BUDGET < 64 * BODY  # what this test is about
    msgs = bodies(64)
    sub = await connect()
    await sub.subscribe("big", "ch")
    await publish(connect, "big", msgs)
    await sub.send(c.rdy(2500))
    got = []
    for _ in range(64):
        m = await sub.read_message(timeout=10)
        assert m.attempts == 1
        got.append(m.body)
        await sub.send(c.fin(m.id))
    assert got == msgs
    await sub.expect_nothing(0.2)
    ch = await channel_stats(http, "big")
    assert (ch["depth"], ch["in_flight_count"], ch["message_count"]) == (0, 0, 64)


async def test_two_consumers_share_large_bodies_without_loss_or_duplicates(connect, http: HTTP):
    msgs = bodies(48)
    subs = []
    for _ in range(2):
        s = await connect()
        await s.subscribe("big2", "ch", rdy=2500)
        subs.append(s)
    await publish(connect, "big2", msgs)
    got: list[bytes] = []
    ids: set[bytes] = set()
    while len(got) < len(msgs):
        progressed = False
        for s in subs:
            try:
                ftype, data = await s.read_frame(timeout=0.2)
            except TimeoutError:
                continue
            assert ftype == FRAME_TYPE_MESSAGE
            msg_id, body = data[10:26], data[26:]
            assert msg_id not in ids
            ids.add(msg_id)
            got.append(body)
            progressed = True
        if not progressed:
            ch = await channel_stats(http, "big2")
            assert ch["in_flight_count"] == len(got), "a message counted in flight was never sent"
    assert sorted(got) == sorted(msgs)
    ch = await channel_stats(http, "big2")
    assert (ch["depth"], ch["in_flight_count"]) == (0, 48)
    counts = [client["message_count"] for client in ch["clients"]]
    assert sum(counts) == 48


async def test_a_consumer_that_does_not_read_is_not_handed_its_whole_rdy(nsqd, connect, http: HTTP):
    """Go's messagePump blocks on the socket; here the budget and the
    transport's high-water mark stop the hand-out: what is in flight is
    what the socket buffers took, not RDY x body bytes."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # no autotuning
    sock.connect(("127.0.0.1", nsqd.tcp_port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    sub = Conn(reader, writer)
    writer.write(Conn.MAGIC)
    try:
        await publish(connect, "idle", bodies(200))  # 50 MiB queued, then RDY 2500 at once
        await sub.subscribe("idle", "ch", rdy=2500)
        deadline = time.monotonic() + 0.5
        highest = 0
        while time.monotonic() < deadline:
            highest = max(highest, (await channel_stats(http, "idle"))["in_flight_count"])
            await asyncio.sleep(0.05)
        # the budget (4 bodies) + the server's send buffer (tcp_wmem, 4 MiB
        # by default) + 64 KiB received: about 22 bodies
        assert 0 < highest <= 60
        got = 0
        while got < 200:  # and once it reads, it gets them all
            m = await sub.read_message(timeout=10)
            assert m.body == got.to_bytes(4, "big") * (BODY // 4)
            await sub.send(c.fin(m.id))
            got += 1
    finally:
        await sub.aclose()


async def test_a_backlog_on_disk_is_read_a_turn_at_a_time(make_nsqd, tmp_path):
    """With every message in the store (--mem-queue-size=0), a turn reads
    about one turn's bytes of large bodies from it, not 1,024 of them into
    memory while a turn sends four."""
    nsqd = await make_nsqd(data_path=str(tmp_path), mem_queue_size=0)
    pub = await Conn.open(nsqd.tcp_port)
    sub = await Conn.open(nsqd.tcp_port)
    try:
        await sub.subscribe("disk", "ch")
        await publish(lambda: _same(pub), "disk", bodies(120))  # 30 MiB
        channel = nsqd.topics["disk"].channels["ch"]
        await sub.send(c.rdy(2500))
        longest = 0
        for i in range(120):
            m = await sub.read_message(timeout=10)
            assert m.body == i.to_bytes(4, "big") * (BODY // 4)
            await sub.send(c.fin(m.id))
            longest = max(longest, len(channel.queue))
        assert longest <= 64, longest  # the first read, before a body size is known
    finally:
        await pub.aclose()
        await sub.aclose()


async def _same(conn):
    return conn
