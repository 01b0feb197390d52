"""Many short connections, each sending one byte stream and ending in one of
several ways, against a daemon on 127.0.0.1 (asyncio client side).

Ways a connection ends (picked per stream by the caller's ``random.Random``):

- ``eof``: half-close after sending, read until the daemon closes (or 2 s);
- ``read``: read for up to 0.2 s, then close;
- ``close``: close at once (unread answers may turn it into an RST);
- ``abort``: close with an RST (SO_LINGER 0) right after sending;
- ``drip``: send in 1-100 byte pieces with pauses, then half-close.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Outcome", "barrage", "ENDINGS"]

ENDINGS = ("eof", "read", "close", "abort", "drip")
_WEIGHTS = (40, 20, 20, 15, 5)


@dataclass
class Outcome:
    """What a barrage did.

    Attributes:
        connections: connections opened.
        bytes_sent: stream bytes written (bytes).
        bytes_received: answer bytes read (bytes).
        endings: how many connections ended each way.
        refused: connections the daemon refused or reset while sending.
    """

    connections: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    endings: Counter = field(default_factory=Counter)
    refused: int = 0


async def _read_until(reader: asyncio.StreamReader, timeout: float) -> int:
    got = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (left := deadline - loop.time()) > 0:
        try:
            data = await asyncio.wait_for(reader.read(65536), left)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            break
        if not data:
            break
        got += len(data)
    return got


async def _one(port: int, stream: bytes, ending: str, rng: random.Random, out: Outcome) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        out.refused += 1
        return
    out.connections += 1
    out.endings[ending] += 1
    try:
        if ending == "drip":
            pos = 0
            while pos < len(stream):
                n = rng.randint(1, 100)
                writer.write(stream[pos:pos + n])
                pos += n
                await writer.drain()
                await asyncio.sleep(0.001)
        else:
            writer.write(stream)
            await writer.drain()
        out.bytes_sent += len(stream)
        if ending in ("eof", "drip"):
            if writer.can_write_eof():
                writer.write_eof()
            out.bytes_received += await _read_until(reader, 2.0)
        elif ending == "read":
            out.bytes_received += await _read_until(reader, 0.2)
        elif ending == "abort":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
    except (ConnectionError, OSError):
        out.refused += 1
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def barrage(port: int, streams: Iterable[bytes], rng: random.Random, concurrency: int = 16) -> Outcome:
    """Send every stream of ``streams`` over its own connection, ``concurrency``
    at a time. Which ending each stream gets depends only on ``rng``."""
    out = Outcome()
    items = iter(streams)

    async def worker() -> None:
        # taking a stream and drawing its ending happen between awaits, so
        # the (stream, ending) pairs do not depend on scheduling
        for stream in items:
            ending = rng.choices(ENDINGS, _WEIGHTS)[0]
            await _one(port, stream, ending, random.Random(rng.getrandbits(32)), out)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out
