"""nsqd's input bounds over a real connection (in-process nsqd, raw V2 bytes).

- A command line that does not fit in Go's 16 KiB read buffer closes the
  connection with no error frame (Go nsqd/protocol_v2.go IOLoop: ``failed
  to read command - bufio: buffer full``), whether or not its newline ever
  comes, and nsqd serves the next client.
- IDENTIFY with deeply nested JSON is ``E_BAD_BODY IDENTIFY failed to
  decode JSON body`` (never an internal error).
- Sizes that can never be legal are refused from the size field alone.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from nsq.protocol import commands as c
from nsq.protocol.v2 import MAX_LINE_LENGTH

from ..server.helpers import Conn, wait_for


async def served(nsqd) -> None:
    """nsqd still answers a new client: PUB acknowledged."""
    conn = await Conn.open(nsqd.tcp_port)
    try:
        await conn.publish("still-served", b"ok")
    finally:
        await conn.aclose()


@pytest.mark.parametrize("tail", [b"", b"\n"], ids=["no-newline", "newline-after"])
async def test_overlong_line_closes_without_an_error_frame(make_nsqd, tail):
    nsqd = await make_nsqd()
    conn = await Conn.open(nsqd.tcp_port)
    # exactly one buffer-full of line: the verdict must not wait for more
    await conn.send(c.nop() + b"PUB " + b"x" * (MAX_LINE_LENGTH - 4) + tail)
    frames = await conn.expect_closed(timeout=2.0)
    assert frames == []  # Go sends nothing: ReadSlice failed, IOLoop returned
    await conn.aclose()
    await served(nsqd)


async def test_line_of_max_length_is_served(make_nsqd):
    nsqd = await make_nsqd()
    conn = await Conn.open(nsqd.tcp_port)
    line = b"NOP " + b"x" * (MAX_LINE_LENGTH - 5) + b"\n"
    await conn.send(line + c.pub("t", b"after-long-nop"))
    await conn.expect_ok()
    await conn.aclose()


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000, b'{"client_id":' + b"[" * 50_000 + b"1"],
                         ids=["arrays", "objects", "nested-field"])
async def test_nested_identify_json_is_E_BAD_BODY(make_nsqd, body):
    nsqd = await make_nsqd()
    conn = await Conn.open(nsqd.tcp_port)
    await conn.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert await conn.expect_error() == b"E_BAD_BODY IDENTIFY failed to decode JSON body"
    assert await conn.expect_closed() == []
    await conn.aclose()
    await served(nsqd)


@pytest.mark.parametrize("line,size,text", [
    (b"PUB t\n", -1, b"E_BAD_MESSAGE PUB invalid message body size -1"),
    (b"MPUB t\n", 2**31 - 1, b"E_BAD_BODY MPUB body too big 2147483647 > 5242880"),
    (b"IDENTIFY\n", -(2**31), b"E_BAD_BODY IDENTIFY invalid body size -2147483648"),
])
async def test_impossible_size_is_refused_before_the_body(make_nsqd, line, size, text):
    nsqd = await make_nsqd()
    conn = await Conn.open(nsqd.tcp_port)
    await conn.send(line + struct.pack(">i", size))  # the body never comes
    assert await conn.expect_error() == text
    assert await conn.expect_closed() == []
    await conn.aclose()


async def test_many_overlong_lines_in_parallel_leave_nsqd_serving(make_nsqd):
    nsqd = await make_nsqd()

    async def one() -> None:
        conn = await Conn.open(nsqd.tcp_port)
        await conn.send(b"\0" * (4 * MAX_LINE_LENGTH))
        await conn.expect_closed(timeout=5.0)
        await conn.aclose()

    await asyncio.gather(*(one() for _ in range(50)))
    await served(nsqd)

    async def none_left() -> bool:
        return not nsqd.clients

    await wait_for(none_left, timeout=2.0)  # closed clients are dropped
