"""Fixtures for interoperability tests with the official Python client, pynsq.

* ``pynsq_python``: the interpreter of a cached virtualenv holding pynsq
  (see :mod:`tests.interop.pynsq_env`). If it cannot be built (no route to
  PyPI) the tests are skipped, unless ``NSQ_REQUIRE_PYNSQ=1`` is set, which
  turns that into a failure (for CI, where PyPI is reachable).
* ``nsqd``: our nsqd, in-process on ephemeral ports. The test's event loop
  keeps serving it while pynsq runs in a subprocess driven with
  :func:`asyncio.create_subprocess_exec`.
* ``pynsq``: starts :mod:`pynsq_script` in that virtualenv.
* ``http_get_json`` / ``http_post``: small aiohttp helpers against the nsqd.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Callable

import aiohttp
import pytest

from nsq.server.nsqd import NSQD, NSQDOptions

from . import pynsq_env


@pytest.fixture(scope="session")
def pynsq_python() -> Path:
    try:
        return pynsq_env.ensure_pynsq_venv()
    except pynsq_env.PynsqUnavailable as e:
        reason = f"cannot build the pynsq virtualenv ({' '.join(pynsq_env.PINS)}): {e}"
        if os.environ.get("NSQ_REQUIRE_PYNSQ", "") not in ("", "0"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
async def nsqd(tmp_path):
    data = tmp_path / "nsqd-data"
    data.mkdir()
    d = NSQD(NSQDOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(data),
    ))
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


class PynsqProcess:
    """One run of ``pynsq_script.py``; stdout is parsed into ``events``."""

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
            f"pynsq_script {' '.join(self.argv)}\n"
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

    async def wait_event(self, name: str, timeout: float) -> dict[str, Any]:
        """Read stdout until an event called ``name`` arrives."""

        async def scan() -> dict[str, Any]:
            while True:
                event = await self._next_event()
                if event is None:
                    await self.proc.wait()
                    await self._stderr_task
                    pytest.fail(f"pynsq exited before {name!r}\n{self.describe()}")
                if event.get("event") == name:
                    return event

        try:
            return await asyncio.wait_for(scan(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            pytest.fail(f"no {name!r} from pynsq within {timeout}s\n{self.describe()}")

    async def finish(self, timeout: float = 15) -> int:
        """Close stdin (releasing ``--wait-stdin``), read to EOF, wait for exit."""

        async def drain() -> None:
            if self.proc.stdin is not None and not self.proc.stdin.is_closing():
                try:
                    self.proc.stdin.write(b"go\n")
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
            pytest.fail(f"pynsq did not exit within {timeout}s\n{self.describe()}")
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


@pytest.fixture
async def pynsq(pynsq_python, tmp_path_factory):
    """``await pynsq(mode, *args)`` starts ``pynsq_script.py`` in the pynsq virtualenv.

    Runs ``python -I`` (no PYTHONPATH, no user site, script directory not on
    sys.path) with a scratch cwd and a cleaned environment, so ``import nsq``
    there is pynsq. Processes still running at teardown are killed.
    """
    started: list[PynsqProcess] = []

    async def start(mode: str, *args: str) -> PynsqProcess:
        cwd = tmp_path_factory.mktemp("pynsq-cwd")
        argv = [mode, *args]
        proc = await asyncio.create_subprocess_exec(
            str(pynsq_python), "-I", str(pynsq_env.SCRIPT), *argv,
            cwd=str(cwd), env=pynsq_env.clean_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        p = PynsqProcess(proc, argv)
        started.append(p)
        return p

    yield start
    for p in started:
        await p.kill()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
def http_get_json(http, nsqd) -> Callable:
    async def get(path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{nsqd.http_port}{path}"
        async with http.get(url, params=params) as resp:
            text = await resp.text()
            assert resp.status == 200, f"GET {path} {params}: {resp.status} {text}"
            return json.loads(text)

    return get


@pytest.fixture
def http_post(http, nsqd) -> Callable:
    async def post(path: str, body: bytes = b"", **params: str) -> str:
        url = f"http://127.0.0.1:{nsqd.http_port}{path}"
        async with http.post(url, params=params, data=body) as resp:
            text = await resp.text()
            assert resp.status == 200, f"POST {path} {params}: {resp.status} {text}"
            return text

    return post
