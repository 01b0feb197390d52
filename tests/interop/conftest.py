"""Fixtures for interoperability tests with the official clients, pynsq and nsqjs.

``nsqd`` and the HTTP helpers serve both; ``pynsq_python``/``pynsq`` are the
pynsq ones (nsqjs's own live in ``test_nsqjs.py``). Both clients' scripts run
through :mod:`tests.interop.helpers`.

* ``pynsq_python``: the interpreter of a cached virtualenv holding pynsq
  (see :mod:`tests.interop.pynsq_env`). If it cannot be built (no route to
  PyPI) the tests are skipped, unless ``NSQ_REQUIRE_PYNSQ=1`` is set, which
  turns that into a failure (for CI, where PyPI is reachable).
* ``nsqd``: our nsqd, in-process on ephemeral ports. The test's event loop
  keeps serving it while a client runs in a subprocess driven with
  :func:`asyncio.create_subprocess_exec`.
* ``pynsq``: starts :mod:`pynsq_script` in that virtualenv.
* ``http_get_json`` / ``http_post``: small aiohttp helpers against the nsqd.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import aiohttp
import pytest

from nsq.server.nsqd import NSQD, NSQDOptions

from . import pynsq_env
from .helpers import ScriptProcess, spawner


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


class PynsqProcess(ScriptProcess):
    """One run of ``pynsq_script.py``; stdout is parsed into ``events``."""

    client = "pynsq"
    script = "pynsq_script"
    finish_timeout = 15
    release = b"go\n"  # releases --wait-stdin


@pytest.fixture
async def pynsq(pynsq_python, tmp_path_factory):
    """``await pynsq(mode, *args)`` starts ``pynsq_script.py`` in the pynsq virtualenv.

    Runs ``python -I`` (no PYTHONPATH, no user site, script directory not on
    sys.path) with a scratch cwd and a cleaned environment, so ``import nsq``
    there is pynsq. Processes still running at teardown are killed.
    """
    async with spawner(
        PynsqProcess, [str(pynsq_python), "-I", str(pynsq_env.SCRIPT)],
        env=pynsq_env.clean_env(),
        make_cwd=lambda: tmp_path_factory.mktemp("pynsq-cwd"),
    ) as spawn:

        async def start(mode: str, *args: str) -> PynsqProcess:
            return await spawn([mode, *args])

        yield start


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


@pytest.fixture
async def cluster():
    """An nsqlookupd and two nsqds registered with it (in-process, loopback).

    Yields ``(lookupd, [nsqd, nsqd])``; the nsqds broadcast ``127.0.0.1`` so
    clients that discover them through ``/lookup`` can connect.
    """
    from nsq.server.lookupd import LookupdOptions, NSQLookupd

    lookupd = NSQLookupd(LookupdOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                        broadcast_address="127.0.0.1"))
    await lookupd.start()
    nsqds = []
    try:
        for _ in range(2):
            d = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                 broadcast_address="127.0.0.1",
                                 nsqlookupd_tcp_addresses=[lookupd.tcp_address]))
            await d.start()
            nsqds.append(d)
        yield lookupd, nsqds
    finally:
        for d in nsqds:
            await d.stop()
        await lookupd.stop()


async def wait_lookup(session: aiohttp.ClientSession, lookupd, topic: str, producers: int,
                      timeout: float = 10.0) -> dict:
    """Poll lookupd ``/lookup?topic=`` until it lists ``producers`` nsqds."""
    import asyncio

    url = f"http://127.0.0.1:{lookupd.http_port}/lookup"
    deadline = asyncio.get_running_loop().time() + timeout
    data: dict = {}
    while asyncio.get_running_loop().time() < deadline:
        async with session.get(url, params={"topic": topic}) as resp:
            if resp.status == 200:
                data = json.loads(await resp.text())
                if len(data["producers"]) >= producers:
                    return data
        await asyncio.sleep(0.05)
    raise AssertionError(f"lookupd never listed {producers} producers of {topic}: {data}")
