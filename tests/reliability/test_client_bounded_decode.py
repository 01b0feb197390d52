"""The client's side of compression: nsq.client.Connection decodes what
nsqd sends in bounded steps and still delivers every frame, in order.

A stand-in nsqd (a raw asyncio server) grants deflate or snappy in its
IDENTIFY answer, then writes the compressed ``OK`` and 3000 message frames
(about 6 MiB inflated, much more than one decode step) in a single write;
a corrupt compressed stream closes the connection.
"""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from nsq.client.connection import Connection
from nsq.protocol.compression import CompressionError, DeflateCodec, SnappyCodec
from nsq.protocol.errors import ProtocolError
from nsq.protocol.frames import FRAME_TYPE_RESPONSE, MAGIC_V2, encode_frame
from nsq.protocol.message import encode_message_frame

COUNT = 3000


async def fake_nsqd(kind: str, payload: bytes | None, corrupt: bool = False) -> asyncio.Server:
    """Answer IDENTIFY granting ``kind``, then send the compressed ``OK`` and ``payload``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == MAGIC_V2
        assert await reader.readline() == b"IDENTIFY\n"
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
        answer = {"max_rdy_count": 2500, "version": "1.2.1", "max_msg_timeout": 900000, "msg_timeout": 60000,
                  "tls_v1": False, "deflate": kind == "deflate", "deflate_level": 6, "max_deflate_level": 6,
                  "snappy": kind == "snappy", "sample_rate": 0, "auth_required": False,
                  "output_buffer_size": 16384, "output_buffer_timeout": 250}
        codec = DeflateCodec() if kind == "deflate" else SnappyCodec(65536)
        wire = codec.encode(encode_frame(FRAME_TYPE_RESPONSE, b"OK") + (payload or b""))
        if corrupt:
            wire = wire[:len(wire) // 2] + b"\xff" * 64 + wire[len(wire) // 2:]
        writer.write(encode_frame(FRAME_TYPE_RESPONSE, json.dumps(answer).encode()) + wire)
        await writer.drain()
        try:
            await reader.read()  # until the client closes
        except ConnectionError:
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def messages() -> tuple[bytes, list[bytes]]:
    bodies = [b"%06d" % i + bytes(2000) for i in range(COUNT)]
    frames = b"".join(encode_message_frame(i, 1, b"%016x" % i, body) for i, body in enumerate(bodies))
    return frames, bodies


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
async def test_client_delivers_every_frame_of_a_large_compressed_write(kind):
    frames, bodies = messages()
    assert len(frames) > 4 * 1024 * 1024
    server = await fake_nsqd(kind, frames)
    got: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    def on_message(conn: Connection, msg) -> None:
        got.append(msg.body)
        if len(got) == COUNT and not done.done():
            done.set_result(None)

    port = server.sockets[0].getsockname()[1]
    conn = Connection(f"127.0.0.1:{port}", identify={kind: True}, on_message=on_message)
    try:
        features = await conn.connect()
        assert features[kind] is True
        await asyncio.wait_for(done, 10)
        assert got == bodies
        assert not conn.closed
    finally:
        conn.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
async def test_client_closes_on_a_corrupt_compressed_stream(kind):
    frames, _ = messages()
    server = await fake_nsqd(kind, frames, corrupt=True)
    port = server.sockets[0].getsockname()[1]
    conn = Connection(f"127.0.0.1:{port}", identify={kind: True}, on_message=lambda c, m: None)
    try:
        await conn.connect()
        await asyncio.wait_for(conn.wait_closed(), 10)
        # snappy chunks are CRC-checked; corrupt deflate may also inflate
        # to bytes that are no valid frame
        expected = CompressionError if kind == "snappy" else (CompressionError, ProtocolError)
        assert isinstance(conn.close_error, expected), conn.close_error
    finally:
        conn.close()
        server.close()
        await server.wait_closed()
