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
  :func:`asyncio.create_subprocess_exec`. A test marked
  ``@pytest.mark.nsqd_options(...)`` gets one started with those
  :class:`NSQDOptions` fields, plus three shorthands: ``tls=True`` (the
  ``pki`` server certificate and key), ``client_auth=True`` (``tls=True``,
  the ``pki`` CA as ``--tls-root-ca-file`` and
  ``--tls-client-auth-policy=require-verify``) and ``auth=True`` (the
  ``authd`` auth server as ``--auth-http-address``).
* ``pki``: a CA, a server certificate for localhost/127.0.0.1 and a client
  certificate (CN ``client``) from :func:`tests.tlsutil.make_pki`.
* ``authd``: a local HTTP auth server (:class:`AuthServer`); set its
  ``answers`` (secret -> JSON answer) before a client connects.
* ``pynsq``: starts :mod:`pynsq_script` in that virtualenv.
* ``http_get_json`` / ``http_post``: small aiohttp helpers against the nsqd
  (over HTTPS, with the ``pki`` client certificate, when it requires TLS).
"""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path
from typing import Any, Callable

import aiohttp
import pytest
from aiohttp import web

from nsq.server.nsqd import NSQD, NSQDOptions
from tests.tlsutil import PKI, make_pki

from . import pynsq_env
from .helpers import ScriptProcess, spawner


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "nsqd_options(**options): start the interop `nsqd` fixture with these NSQDOptions fields "
        "(and the shorthands tls=True, client_auth=True, auth=True; see tests/interop/conftest.py)",
    )


@pytest.fixture(scope="session")
def pynsq_python() -> Path:
    try:
        return pynsq_env.ensure_pynsq_venv()
    except pynsq_env.PynsqUnavailable as e:
        reason = f"cannot build the pynsq virtualenv ({' '.join(pynsq_env.PINS)}): {e}"
        if os.environ.get("NSQ_REQUIRE_PYNSQ", "") not in ("", "0"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


class AuthServer:
    """A local auth server (nsqd's ``--auth-http-address``), served on the test's loop.

    ``GET /auth?secret=S`` answers ``answers[S]`` as JSON, or 403 for an
    unknown secret; every query string is recorded in ``queries``.
    """

    def __init__(self) -> None:
        self.answers: dict[str, dict] = {}
        self.queries: list[dict[str, str]] = []
        self.address = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.queries.append(dict(request.query))
        answer = self.answers.get(request.query.get("secret", ""))
        if answer is None:
            return web.json_response({"message": "unknown secret"}, status=403)
        return web.json_response(answer)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/auth", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.address = f"127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
def authd() -> AuthServer:
    """The auth server; the ``nsqd`` fixture starts it (``nsqd_options(auth=True)``)."""
    return AuthServer()


@pytest.fixture
async def nsqd(request, tmp_path):
    data = tmp_path / "nsqd-data"
    data.mkdir()
    marker = request.node.get_closest_marker("nsqd_options")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    client_auth = options.pop("client_auth", False)
    tls = options.pop("tls", False) or client_auth
    auth = options.pop("auth", False)
    if tls:
        pki = request.getfixturevalue("pki")
        options.setdefault("tls_cert", pki.server_cert)
        options.setdefault("tls_key", pki.server_key)
        # as Go, nsqd opens an HTTPS listener when TLS is configured; keep it
        # off the default 0.0.0.0:4152
        options.setdefault("https_address", "127.0.0.1:0")
        if client_auth:
            options.setdefault("tls_root_ca_file", pki.ca)
            options.setdefault("tls_client_auth_policy", "require-verify")
    authd: AuthServer | None = None
    if auth:
        authd = request.getfixturevalue("authd")
        await authd.start()
        options.setdefault("auth_http_addresses", [authd.address])
    d = NSQD(NSQDOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(data),
        **options,
    ))
    try:
        await d.start()
        try:
            yield d
        finally:
            await d.stop()
    finally:
        if authd is not None:
            await authd.stop()


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


def _nsqd_http(request, nsqd) -> tuple[str, ssl.SSLContext | bool]:
    """Base URL and ``ssl`` argument for the nsqd's HTTP API.

    With ``--tls-required=true`` (also implied by a client auth policy) plain
    HTTP answers 403 TLS_REQUIRED, as in Go: use the HTTPS listener then,
    trusting the ``pki`` CA and presenting its client certificate.
    """
    if nsqd.tls_required != "true":
        return f"http://127.0.0.1:{nsqd.http_port}", True
    pki = request.getfixturevalue("pki")
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.load_cert_chain(pki.client_cert, pki.client_key)
    return f"https://127.0.0.1:{nsqd.https_port}", ctx


@pytest.fixture
def http_get_json(request, http, nsqd) -> Callable:
    base, ssl_arg = _nsqd_http(request, nsqd)

    async def get(path: str, **params: str) -> Any:
        async with http.get(base + path, params=params, ssl=ssl_arg) as resp:
            text = await resp.text()
            assert resp.status == 200, f"GET {path} {params}: {resp.status} {text}"
            return json.loads(text)

    return get


@pytest.fixture
def http_post(request, http, nsqd) -> Callable:
    base, ssl_arg = _nsqd_http(request, nsqd)

    async def post(path: str, body: bytes = b"", **params: str) -> str:
        async with http.post(base + path, params=params, data=body, ssl=ssl_arg) as resp:
            text = await resp.text()
            assert resp.status == 200, f"POST {path} {params}: {resp.status} {text}"
            return text

    return post


@pytest.fixture
async def cluster(make_nsq_cluster):
    """An nsqlookupd and two nsqds registered with it (in-process, loopback;
    the package's ``make_nsq_cluster``).

    Its value is ``(lookupd, [nsqd, nsqd])``; the nsqds broadcast
    ``127.0.0.1`` so clients that discover them through ``/lookup`` can
    connect.
    """
    local = await make_nsq_cluster(2)
    return local.lookupd, local.nsqds


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
