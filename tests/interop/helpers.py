"""Shared helpers for the interop tests (pynsq in ``conftest.py``, nsqjs in ``test_nsqjs.py``).

* :class:`ScriptProcess`: one run of a client script in a subprocess whose
  stdout is one JSON event a line; subclassed once per client.
* :func:`spawner`: starts such scripts with piped stdin/stdout/stderr, tracks
  them, and kills whatever still runs when the ``async with`` block ends.
* :func:`wait_stats`: polls our ``/stats`` for one topic/channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest


class ScriptProcess:
    """One run of a client script; stdout lines are parsed into ``events``.

    Subclasses set ``client`` (named in failure messages), ``script`` (how
    :meth:`describe` names the run), ``finish_timeout`` (the default of
    :meth:`finish`) and ``release`` (written to stdin by :meth:`finish`
    before it closes stdin, or ``None`` to only close it).
    """

    client = "client"
    script = "script"
    finish_timeout: float = 60
    release: bytes | None = None

    def __init__(self, proc: asyncio.subprocess.Process, argv: list[str]):
        self.proc = proc
        self.argv = argv
        self.events: list[dict[str, Any]] = []
        self._stderr = bytearray()
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self._stderr += chunk

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def describe(self) -> str:
        tail = "\n".join(self.stderr.splitlines()[-40:])
        events = "\n".join(json.dumps(e) for e in self.events[-20:])
        return (
            f"{self.script} {' '.join(self.argv)}\n"
            f"returncode: {self.proc.returncode}\n"
            f"last events:\n{events}\n"
            f"stderr tail:\n{tail}"
        )

    async def _next_event(self) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            event = {"event": "garbage", "line": line.decode("utf-8", "replace")}
        self.events.append(event)
        return event

    async def wait_event(self, name: str, timeout: float = 60) -> dict[str, Any]:
        """Read stdout until an event called ``name`` arrives."""

        async def scan() -> dict[str, Any]:
            while True:
                event = await self._next_event()
                if event is None:
                    await self.proc.wait()
                    await self._stderr_task
                    pytest.fail(f"{self.client} exited before {name!r}\n{self.describe()}")
                if event.get("event") == name:
                    return event

        try:
            return await asyncio.wait_for(scan(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            pytest.fail(f"no {name!r} from {self.client} within {timeout}s\n{self.describe()}")

    async def finish(self, timeout: float | None = None) -> int:
        """Release and close stdin, read stdout to EOF, wait for exit."""
        if timeout is None:
            timeout = self.finish_timeout

        async def drain() -> None:
            if self.proc.stdin is not None and not self.proc.stdin.is_closing():
                if self.release is not None:
                    try:
                        self.proc.stdin.write(self.release)
                        await self.proc.stdin.drain()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                self.proc.stdin.close()
            while await self._next_event() is not None:
                pass
            await self.proc.wait()
            await self._stderr_task

        try:
            await asyncio.wait_for(drain(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            pytest.fail(f"{self.client} did not exit within {timeout}s\n{self.describe()}")
        return self.proc.returncode

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        try:
            await asyncio.wait_for(self._stderr_task, 5)
        except (asyncio.TimeoutError, Exception):
            pass

    def of(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == name]


P = TypeVar("P", bound=ScriptProcess)


@contextlib.asynccontextmanager
async def spawner(
    cls: type[P],
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    make_cwd: Callable[[], Path],
) -> AsyncIterator[Callable[[list[str]], Awaitable[P]]]:
    """Yields ``spawn(argv)``, which runs ``command + argv`` wrapped in ``cls``.

    Each run gets a fresh cwd from ``make_cwd()`` and piped
    stdin/stdout/stderr; runs still going when the block ends are killed.
    """
    started: list[P] = []

    async def spawn(argv: list[str]) -> P:
        proc = await asyncio.create_subprocess_exec(
            *command, *argv,
            cwd=str(make_cwd()), env=dict(env),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        p = cls(proc, argv)
        started.append(p)
        return p

    try:
        yield spawn
    finally:
        for p in started:
            await p.kill()


async def wait_stats(get_json, topic: str, channel: str, check, timeout: float = 10.0):
    """Poll ``/stats`` until ``check(topic_stats, channel_stats)`` holds.

    Returns the last (stats, topic, channel); callers assert on them, so a
    timeout shows the actual values.
    """
    deadline = time.monotonic() + timeout
    while True:
        stats = await get_json("/stats", format="json", topic=topic, channel=channel)
        t = (stats["topics"] or [{}])[0]
        c = (t.get("channels") or [{}])[0]
        if (t and c and check(t, c)) or time.monotonic() > deadline:
            return stats, t, c
        await asyncio.sleep(0.05)
