"""nsqlookupd's V1 connections under hostile input (in-process lookupd, raw V1 bytes).

- A failure while handling one connection's bytes -- even an unexpected
  exception -- closes that connection only; the daemon serves the others.
- Over-long lines, negative or huge IDENTIFY sizes and deeply nested JSON
  are answered with Go's error codes and closed, before the rest arrives.
- A closed connection leaves nothing behind: not in the connection set,
  not in any registration, and its protocol object is freed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import struct
import weakref
from typing import Any

import pytest

from nsq.protocol.lookupd import MAGIC_V1, MAX_LINE, V1ClientParser, encode_identify, encode_ping, encode_register
from nsq.server.lookupd import NSQLookupd

from ..server.helpers import RawConn, wait_for

IDENT = {"broadcast_address": "nsqd.example", "tcp_port": 4150, "http_port": 4151, "version": "1.2.1",
         "hostname": "box"}


class V1Conn(RawConn):
    MAGIC = MAGIC_V1

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer, V1ClientParser())

    def _take(self) -> bytes | None:
        return self.parser.next_response()

    async def command(self, data: bytes, timeout: float = 2.0) -> bytes:
        await self.send(data)
        return await self._next(timeout)



# ``lookupd``: the package's pytest fixture (nsq/pytest_plugin.py), an
# in-process nsqlookupd on 127.0.0.1 port 0


async def registered(lookupd: NSQLookupd) -> V1Conn:
    conn = await V1Conn.open(lookupd.tcp_port)
    assert json.loads(await conn.command(encode_identify(IDENT)))["tcp_port"] == lookupd.tcp_port
    assert await conn.command(encode_register("t", "c")) == b"OK"
    return conn


async def test_an_exception_in_a_handler_closes_that_connection_only(lookupd, monkeypatch, caplog):
    good = await registered(lookupd)
    real = lookupd.register

    def register(peer: Any, topic: str, channel: str) -> None:
        if topic == "boom":
            raise RuntimeError("bug")
        real(peer, topic, channel)

    monkeypatch.setattr(lookupd, "register", register)
    bad = await registered(lookupd)
    await bad.send(encode_register("boom"))
    assert await bad.expect_closed(2.0) == []
    assert "internal error" in caplog.text
    # the daemon and the other connection go on
    assert await good.command(encode_ping()) == b"OK"
    assert await good.command(encode_register("t2")) == b"OK"
    await good.aclose()
    await bad.aclose()


@pytest.mark.parametrize("data,text", [
    (b"PING" + b" " * MAX_LINE, f"E_INVALID command line longer than {MAX_LINE} bytes".encode()),
    (b"IDENTIFY\n" + struct.pack(">i", -1), b"E_BAD_BODY IDENTIFY failed to read body"),
    (b"IDENTIFY\n" + struct.pack(">i", 200_000), b"E_BAD_BODY IDENTIFY failed to read body"),
    (b"IDENTIFY\n" + struct.pack(">i", 60_000) + b"[" * 60_000, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
], ids=["long-line", "negative-size", "200KB-size", "nested-json"])
async def test_hostile_input_is_answered_and_closed(lookupd, data, text):
    conn = await V1Conn.open(lookupd.tcp_port)
    await conn.send(data)
    assert await conn.expect_closed(2.0) == [text]
    await conn.aclose()
    other = await registered(lookupd)
    await other.aclose()


async def test_a_closed_connection_leaves_nothing_behind(lookupd):
    conns = [await registered(lookupd) for _ in range(5)]
    protocols = [weakref.ref(p) for p in lookupd._conns]
    assert len(protocols) == 5
    assert len(lookupd.db.find_producers("client", "", "")) == 5
    for conn in conns:
        await conn.aclose()

    async def gone() -> bool:
        return not lookupd._conns

    await wait_for(gone, timeout=2.0)
    assert lookupd.db.find_producers("client", "", "") == []
    assert lookupd.db.find_producers("topic", "t", "") == []
    assert lookupd.db.find_producers("channel", "t", "c") == []
    assert all(not producers for _reg, producers in lookupd.db.items())
    gc.collect()
    assert [r for r in protocols if r() is not None] == []


@pytest.mark.parametrize("data", [
    encode_identify({"hostname": "x"}),  # missing fields
    b"IDENTIFY\n" + struct.pack(">i", 5) + b"{bad}",  # not JSON
    b"IDENTIFY\n" + struct.pack(">i", 30_000) + b"[" * 30_000,  # nested too deep
    encode_identify({**IDENT, "tcp_port": "x"}),  # a field of the wrong type
    encode_register("t", "c"),  # before IDENTIFY
    encode_identify(IDENT) + b"REGISTER b@d\n",  # a bad topic name
    b"FOO\n",
], ids=["missing-fields", "bad-json", "nested-json", "wrong-type", "register-first", "bad-topic", "unknown"])
async def test_a_refused_connection_is_freed_without_the_cycle_collector(lookupd, data):
    """Nothing a refused connection leaves is a reference cycle: its protocol
    (with its parser and buffered input) is freed by reference counting
    alone. A daemon runs the full cycle collection rarely
    (:mod:`nsq.server.gctune`), so a cycle per refused connection grows RSS
    linearly with hostile traffic."""
    gc.collect()
    gc.disable()
    try:
        conn = await V1Conn.open(lookupd.tcp_port)
        (protocol,) = lookupd._conns
        ref = weakref.ref(protocol)
        del protocol
        await conn.send(data)
        assert (await conn.expect_closed(2.0))[-1].startswith(b"E_")
        await conn.aclose()

        async def freed() -> bool:
            return ref() is None

        await wait_for(freed, timeout=2.0)
    finally:
        gc.enable()
