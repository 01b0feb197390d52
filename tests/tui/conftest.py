"""Fixtures shared by the TUI tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.cli.conftest import nsqd_proc  # noqa: F401 (a fixture: nsq nsqd as a subprocess)

from nsq.server.lookupd import NSQLookupd
from nsq.server.nsqd.nsqd import NSQD


async def wait_until(pilot: Any, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    """Let the app run (``pilot.pause``) until ``predicate()`` holds; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.05)


@dataclass
class AdminCluster:
    """An nsqlookupd and two nsqds registered with it, in this process."""

    session: aiohttp.ClientSession
    lookupd: NSQLookupd
    nsqds: list[NSQD]
    extra: list[Any] = field(default_factory=list)

    @property
    def lookupd_http(self) -> str:
        return self.lookupd.http_address

    def nsqd_http(self, d: NSQD) -> str:
        return f"127.0.0.1:{d.http_port}"

    async def get_json(self, address: str, path: str) -> Any:
        async with self.session.get(f"http://{address}{path}") as r:
            assert r.status == 200, await r.text()
            return json.loads(await r.read())

    async def post(self, address: str, path: str, body: bytes = b"") -> None:
        async with self.session.post(f"http://{address}{path}", data=body) as r:
            assert r.status == 200, await r.text()

    async def stats(self, d: NSQD) -> dict:
        return await self.get_json(self.nsqd_http(d), "/stats?format=json")

    async def wait_registered(self, topic: str, nsqds: list[NSQD], timeout: float = 5.0) -> None:
        """Until lookupd ``/lookup`` lists exactly ``nsqds`` for ``topic``."""
        want = {d.tcp_port for d in nsqds}
        deadline = time.monotonic() + timeout
        while True:
            async with self.session.get(f"http://{self.lookupd_http}/lookup?topic={topic}") as r:
                ports = {p["tcp_port"] for p in json.loads(await r.read()).get("producers", [])} \
                    if r.status == 200 else set()
            if ports == want:
                return
            assert time.monotonic() < deadline, f"lookupd lists {ports} for {topic}, not {want}"
            await asyncio.sleep(0.02)


@pytest.fixture
async def admin_cluster(make_nsq_cluster) -> AsyncIterator[AdminCluster]:
    """A lookupd and two nsqds registered with it (the package's ``make_nsq_cluster``)."""
    local = await make_nsq_cluster(2)
    async with aiohttp.ClientSession() as session:
        cl = AdminCluster(session, local.lookupd, local.nsqds)
        try:
            yield cl
        finally:
            for x in cl.extra:
                await x.close()


@dataclass
class NotificationSink:
    """A local HTTP endpoint that records the JSON POSTed to it."""

    url: str
    received: list[dict] = field(default_factory=list)


@pytest.fixture
async def notification_sink() -> AsyncIterator[NotificationSink]:
    sink = NotificationSink("")

    async def handle(request: web.Request) -> web.Response:
        assert request.content_type == "application/json"
        sink.received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/notify", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sink.url = f"http://127.0.0.1:{port}/notify"
    try:
        yield sink
    finally:
        await runner.cleanup()


def run_in_pty(argv: list[str], env: dict[str, str], timeout: float,
               respond: Callable[[bytes], bytes | None] | None = None) -> tuple[int, bytes]:
    """Run ``argv`` on a pseudo-terminal, as a user's shell would.

    ``respond(output so far)`` may return keys to type (sent once each
    time it returns bytes). Reads until the program closes the terminal or
    ``timeout`` s pass; a program still running 10 s later is killed.

    Returns:
        (exit code, everything written to the terminal).
    """
    import os
    import pty
    import select
    import sys

    pid, fd = pty.fork()
    if pid == 0:  # child
        os.environ.update(env)
        os.execv(sys.executable, argv)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            if respond is not None and (keys := respond(out)):
                os.write(fd, keys)
    finally:
        reap_by = time.monotonic() + 10
        done, status = os.waitpid(pid, os.WNOHANG)
        while not done and time.monotonic() < reap_by:
            time.sleep(0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
        if not done:  # still running past the deadline: end it
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out
