"""Producer: publish to one nsqd over TCP (PUB, MPUB, DPUB), pipelined.

Each publish writes its command at once and awaits its own ``OK``; many can
be in flight on one connection (nsqd answers in order). A closed connection
is reopened by the next publish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from nsq.client.connection import Connection
from nsq.protocol import commands

__all__ = ["Producer"]


class Producer:
    """Publishes to the nsqd at ``address`` (``host:port``, TCP).

    Args:
        address: nsqd TCP address.
        identify: extra IDENTIFY fields (``user_agent``, ``heartbeat_interval`` ms, ...).
        connect_timeout: seconds.
        tls_context: as :class:`~nsq.client.Consumer`'s (``identify`` may
            ask for ``tls_v1``, ``snappy``, ``deflate``).
        auth_secret: as :class:`~nsq.client.Consumer`'s.

    Every publish method raises :class:`~nsq.client.errors.ErrorResponse`
    when nsqd refuses (``E_BAD_TOPIC``, ``E_BAD_MESSAGE``, ``E_PUB_FAILED``),
    :class:`~nsq.client.errors.ConnectionClosedError` if the connection
    drops before the answer, and ``OSError`` if nsqd cannot be reached.
    """

    def __init__(self, address: str, identify: dict[str, Any] | None = None, connect_timeout: float = 5.0,
                 tls_context: Any = None, auth_secret: str | None = None) -> None:
        self.address = address
        self.identify = identify
        self.connect_timeout = connect_timeout
        self.tls_context = tls_context
        self.auth_secret = auth_secret
        self._conn: Connection | None = None
        self._connecting: asyncio.Future[Connection] | None = None

    async def connect(self) -> None:
        """Connect now (publishing connects on demand anyway)."""
        await self._connection()

    async def _connection(self) -> Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        connecting: asyncio.Future[Connection] = loop.create_future()
        self._connecting = connecting
        try:
            conn = Connection(self.address, self.identify, connect_timeout=self.connect_timeout,
                              tls_context=self.tls_context, auth_secret=self.auth_secret)
            await conn.connect()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                connecting.cancel()
            else:
                connecting.set_exception(exc)
                connecting.exception()  # mark retrieved
            self._connecting = None
            raise
        self._conn = conn
        connecting.set_result(conn)
        self._connecting = None
        return conn

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB one message (``body``: bytes, at most nsqd's --max-msg-size)."""
        conn = await self._connection()
        await conn.command(commands.pub(topic, body))

    async def multi_publish(self, topic: str, bodies: Iterable[bytes]) -> None:
        """MPUB: several messages, atomically."""
        conn = await self._connection()
        await conn.command(commands.mpub(topic, bodies))

    async def deferred_publish(self, topic: str, body: bytes, delay_ms: int) -> None:
        """DPUB: deliver ``body`` after ``delay_ms`` milliseconds."""
        conn = await self._connection()
        await conn.command(commands.dpub(topic, delay_ms, body))

    async def close(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout`` s) for the answers to what was sent, then
        close the connection."""
        conn = self._conn
        self._conn = None
        if conn is not None and not conn.closed:
            deadline = asyncio.get_running_loop().time() + timeout
            while conn.pending and not conn.closed and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
            conn.close()
            await conn.wait_closed()

    async def __aenter__(self) -> Producer:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
