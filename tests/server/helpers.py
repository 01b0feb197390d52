"""Raw TCP / HTTP helpers for the nsqd integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp

from nsq.protocol import commands as c
from nsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    MAGIC_V2,
    FrameReader,
)
from nsq.protocol.message import DecodedMessage, decode_message

NSQ_HEADER = ("X-NSQ-Content-Type", "nsq; version=1.0")


class Closed(Exception):
    """The server closed the connection."""


_CLASS_MAGIC = object()


class RawConn:
    """A raw TCP connection with an incremental parser (a sans-IO reader
    with ``feed(bytes)``); subclasses say how to take one item off it."""

    MAGIC: bytes = b""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, parser: Any) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = parser
        self.eof = False

    @classmethod
    async def open(cls, port: int, magic: Any = _CLASS_MAGIC):
        """Connect and send ``magic`` (default: the class's; None: nothing)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        if magic is _CLASS_MAGIC:
            magic = cls.MAGIC
        if magic is not None:
            writer.write(magic)
        return conn

    async def send(self, *data: bytes) -> None:
        self.writer.write(b"".join(data))
        await self.writer.drain()

    async def _fill(self, timeout: float) -> None:
        if self.eof:
            raise Closed()
        try:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.eof = True
            raise Closed()
        self.parser.feed(data)

    def _take(self) -> Any:
        """The next parsed item, or None (subclasses)."""
        raise NotImplementedError

    async def _next(self, timeout: float) -> Any:
        """The next item; raises TimeoutError or Closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            item = self._take()
            if item is not None:
                return item
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise asyncio.TimeoutError()
            await self._fill(remaining)

    async def expect_closed(self, timeout: float = 1.0) -> list:
        """Wait for EOF; returns what was received before it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        got = []
        while True:
            item = self._take()
            if item is not None:
                got.append(item)
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"connection not closed within {timeout}s (got {got!r})")
            try:
                await self._fill(remaining)
            except Closed:
                return got
            except asyncio.TimeoutError:
                raise AssertionError(f"connection not closed within {timeout}s (got {got!r})") from None

    def close(self) -> None:
        self.writer.close()

    async def aclose(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


class Conn(RawConn):
    """One raw V2 TCP connection to nsqd."""

    MAGIC = MAGIC_V2

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer, FrameReader())
        self.frames = self.parser

    def _take(self) -> tuple[int, bytes] | None:
        return self.frames.next_frame()

    async def read_frame(self, timeout: float = 1.0) -> tuple[int, bytes]:
        """The next frame; raises TimeoutError or Closed."""
        return await self._next(timeout)

    async def expect_response(self, data: bytes, timeout: float = 1.0) -> None:
        assert await self.read_frame(timeout) == (FRAME_TYPE_RESPONSE, data)

    async def expect_ok(self, timeout: float = 1.0) -> None:
        await self.expect_response(b"OK", timeout)

    async def expect_error(self, timeout: float = 1.0) -> bytes:
        ftype, data = await self.read_frame(timeout)
        assert ftype == FRAME_TYPE_ERROR, (ftype, data)
        return data

    async def read_message(self, timeout: float = 1.0) -> DecodedMessage:
        ftype, data = await self.read_frame(timeout)
        assert ftype == FRAME_TYPE_MESSAGE, (ftype, data)
        return decode_message(data)

    async def expect_nothing(self, timeout: float) -> None:
        """Assert no frame arrives (and the connection stays open) for ``timeout``."""
        try:
            frame = await self.read_frame(timeout)
        except asyncio.TimeoutError:
            return
        raise AssertionError(f"unexpected frame {frame!r}")

    async def identify(self, **data: Any) -> tuple[int, bytes]:
        await self.send(c.identify(data))
        return await self.read_frame()

    async def subscribe(self, topic: str, channel: str, rdy: int | None = None) -> None:
        await self.send(c.sub(topic, channel))
        await self.expect_ok()
        if rdy is not None:
            await self.send(c.rdy(rdy))

    async def publish(self, topic: str, body: bytes) -> None:
        await self.send(c.pub(topic, body))
        await self.expect_ok()



class HTTP:
    """aiohttp helpers bound to one nsqd's HTTP port."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}"

    async def request(
        self, method: str, path: str, data: bytes | str | None = None, params: dict | None = None
    ) -> tuple[int, bytes, Any]:
        """(status, body, headers); asserts the X-NSQ-Content-Type header."""
        async with self.session.request(method, self.base + path, data=data, params=params) as resp:
            body = await resp.read()
            assert resp.headers.get(NSQ_HEADER[0]) == NSQ_HEADER[1], (method, path, dict(resp.headers))
            return resp.status, body, resp.headers

    async def get(self, path: str, **params: Any) -> tuple[int, bytes]:
        status, body, _ = await self.request("GET", path, params=params or None)
        return status, body

    async def post(self, path: str, data: bytes | str | None = None, **params: Any) -> tuple[int, bytes]:
        status, body, _ = await self.request("POST", path, data=data, params=params or None)
        return status, body

    async def stats(self, **params: Any) -> dict[str, Any]:
        status, body = await self.get("/stats", format="json", **params)
        assert status == 200, body
        return json.loads(body)

    async def topic_stats(self, topic: str) -> dict[str, Any] | None:
        stats = await self.stats(topic=topic)
        for t in stats["topics"] or []:
            if t["topic_name"] == topic:
                return t
        return None

    async def channel_stats(self, topic: str, channel: str) -> dict[str, Any] | None:
        t = await self.topic_stats(topic)
        if t is None:
            return None
        for ch in t["channels"]:
            if ch["channel_name"] == channel:
                return ch
        return None


def error_json(text: str) -> bytes:
    return json.dumps({"message": text}, separators=(",", ":")).encode()


async def wait_for(predicate, timeout: float = 1.0, interval: float = 0.02):
    """Poll an async predicate until it returns a truthy value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s (last {value!r})")
        await asyncio.sleep(interval)


__all__ = ["Conn", "HTTP", "Closed", "error_json", "wait_for", "c", "NSQ_HEADER"]


class AuthServer:
    """A local auth server (https://nsq.io/components/nsqd.html#auth):
    secret -> answer; records every query (a dict of its parameters).

    Attributes:
        answers: secret -> the JSON answer; an unknown secret gets 403.
        status: answer every query with this status instead (e.g. 500).
        delay: seconds to wait before answering.
        address: ``host:port`` once served (:func:`serve_auth`).
    """

    def __init__(self, answers: dict[str, dict] | None = None) -> None:
        self.answers: dict[str, dict] = dict(answers or {})
        self.queries: list[dict] = []
        self.status = 200
        self.delay = 0.0
        self.address = ""

    async def handle(self, request):
        from aiohttp import web

        self.queries.append(dict(request.query))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.Response(status=self.status, text="nope")
        answer = self.answers.get(request.query.get("secret", ""))
        if answer is None:
            return web.json_response({"message": "unknown secret"}, status=403)
        return web.json_response(answer)


@contextlib.asynccontextmanager
async def serve_app(app):
    """Serve the aiohttp ``app`` on a free loopback port; yields the port."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_auth(server: AuthServer):
    """Serve ``server`` on a free loopback port (sets its ``address``)."""
    from aiohttp import web

    app = web.Application()
    app.router.add_get("/auth", server.handle)
    async with serve_app(app) as port:
        server.address = f"127.0.0.1:{port}"
        yield server
