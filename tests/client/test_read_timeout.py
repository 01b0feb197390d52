"""A client connection that reads nothing for two heartbeat intervals is dead.

A peer cut off by the network sends neither data nor FIN nor RST; nsqd
heartbeats every interval, so silence for two intervals means the link is
gone (nsqd applies the same rule to its clients). The fake nsqd here
answers IDENTIFY and then either says nothing or heartbeats; frames as
https://nsq.io/clients/tcp_protocol_spec.html draws them.
"""

from __future__ import annotations

import asyncio

import pytest

from nsq.client import Consumer, Producer
from nsq.client.connection import Connection, read_timeout_for
from nsq.client.errors import ConnectionClosedError
from nsq.protocol.frames import FRAME_TYPE_RESPONSE, HEARTBEAT, encode_frame


async def fake_nsqd(heartbeat: float | None, answer_commands: bool = False):
    """A server that takes the magic and IDENTIFY, answers OK, then sends a
    heartbeat every ``heartbeat`` s (None: never) and nothing else."""
    tasks: list[asyncio.Task] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        await reader.readline()  # IDENTIFY
        size = int.from_bytes(await reader.readexactly(4), "big")
        await reader.readexactly(size)
        writer.write(encode_frame(FRAME_TYPE_RESPONSE, b"OK"))
        if answer_commands:
            await reader.readline()  # SUB
            writer.write(encode_frame(FRAME_TYPE_RESPONSE, b"OK"))
        while heartbeat is not None:
            await asyncio.sleep(heartbeat)
            writer.write(encode_frame(FRAME_TYPE_RESPONSE, HEARTBEAT))
        await asyncio.sleep(3600)

    def accept(reader, writer):
        tasks.append(asyncio.ensure_future(serve(reader, writer)))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}", tasks


def test_read_timeout_follows_the_heartbeat_interval():
    assert read_timeout_for({"heartbeat_interval": 1000}) == 2.0
    assert read_timeout_for({}) == 60.0  # nsqd's default 30 s heartbeats
    assert read_timeout_for({"heartbeat_interval": -1}) == 0.0  # heartbeats off: never
    assert Connection("127.0.0.1:4150", {"heartbeat_interval": 500}).read_timeout == 1.0
    assert Connection("127.0.0.1:4150", read_timeout=7).read_timeout == 7


async def test_silent_connection_is_aborted_after_two_heartbeat_intervals():
    server, address, tasks = await fake_nsqd(None)
    try:
        conn = Connection(address, {"heartbeat_interval": 200})
        await conn.connect()
        loop = asyncio.get_running_loop()
        start = loop.time()
        pending = conn.command(b"PUB t\n\x00\x00\x00\x01x")
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(pending, 3)
        assert 0.35 <= loop.time() - start <= 1.5
        assert conn.closed and isinstance(conn.close_error, TimeoutError)
    finally:
        for t in tasks:
            t.cancel()
        server.close()


async def test_heartbeats_keep_a_connection_alive():
    server, address, tasks = await fake_nsqd(0.1)
    try:
        conn = Connection(address, {"heartbeat_interval": 200})
        await conn.connect()
        await asyncio.sleep(1.2)  # three read timeouts
        assert not conn.closed
        conn.close()
        await conn.wait_closed()
    finally:
        for t in tasks:
            t.cancel()
        server.close()


async def test_producer_gives_up_on_a_silent_nsqd():
    server, address, tasks = await fake_nsqd(None)
    try:
        producer = Producer(address, {"heartbeat_interval": 200})
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(producer.publish("t", b"x"), 3)
        await producer.close()
    finally:
        for t in tasks:
            t.cancel()
        server.close()


async def test_consumer_drops_a_silent_nsqd():
    server, address, tasks = await fake_nsqd(None, answer_commands=True)
    try:
        consumer = Consumer("t", "c", lambda m: None, [address], identify={"heartbeat_interval": 200},
                            reconnect_max_delay=60)
        await consumer.start()
        assert address in consumer.connections
        await asyncio.sleep(1.0)
        assert address not in consumer.connections  # dropped, a reconnect scheduled
        await consumer.close(timeout=0.5)
    finally:
        for t in tasks:
            t.cancel()
        server.close()
