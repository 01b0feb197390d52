"""Fixtures: an in-process nsqd on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from nsq.server.nsqd.nsqd import NSQD
from .helpers import HTTP, Conn


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # modules marked both_storages run each test with --storage=diskqueue
    # and --storage=wal (for every nsqd started with a data path)
    if metafunc.definition.get_closest_marker("both_storages") and "storage" in metafunc.fixturenames:
        metafunc.parametrize("storage", ["diskqueue", "wal"])


@pytest.fixture
def storage() -> str:
    """The storage engine of the nsqds a test starts with a data path."""
    import os

    return os.environ.get("NSQ_TEST_STORAGE", "diskqueue")


@pytest.fixture
def make_nsqd(make_nsqd, storage: str) -> Callable[..., Awaitable[NSQD]]:
    """The plugin's ``make_nsqd``, with ``storage`` for nsqds that have a data path."""

    async def factory(**options: Any) -> NSQD:
        if options.get("data_path"):
            options.setdefault("storage", storage)
        return await make_nsqd(**options)

    return factory


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
