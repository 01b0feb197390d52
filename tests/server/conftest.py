"""Fixtures: an in-process nsqd on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from nsq.server.nsqd.nsqd import NSQD
from .helpers import HTTP, Conn


@pytest.fixture
async def nsqd(make_nsqd) -> NSQD:
    return await make_nsqd()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def http(nsqd: NSQD, session: aiohttp.ClientSession) -> HTTP:
    return HTTP(session, nsqd.http_port)


@pytest.fixture
async def connect(nsqd: NSQD) -> AsyncIterator[Callable[..., Awaitable[Conn]]]:
    """Factory of raw V2 connections to ``nsqd`` (closed at teardown)."""
    conns: list[Conn] = []

    async def factory(port: int | None = None, **kw: Any) -> Conn:
        conn = await Conn.open(port or nsqd.tcp_port, **kw)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        await conn.aclose()
