"""Our nsqd against the official Node.js client, nsqjs (Writer and Reader).

nsqjs (pinned in ``nsqjs/package.json``) is installed once with npm into
``<repo>/.cache/nsqjs`` (gitignored) and reused. ``nsqjs/nsqjs_script.js``
drives it in a ``node`` subprocess started with
:func:`asyncio.create_subprocess_exec`, so the test's event loop keeps serving
our in-process nsqd while node runs. Counters are read back from our
``/stats?format=json`` and compared with what Go nsqd v1.2.1 reports.

Without ``node``/``npm`` the tests are skipped; if npm cannot install nsqjs
they are skipped too, unless ``NSQ_REQUIRE_NSQJS=1`` turns that into a failure.

``nsqd``, ``http_get_json`` and ``http_post`` come from ``conftest.py``; the
node process is run and tracked by :mod:`tests.interop.helpers`, as pynsq's is.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .helpers import ScriptProcess, spawner, wait_stats

pytestmark = [
    pytest.mark.slow,
    # the first test may run `npm install` during setup
    pytest.mark.timeout(600),
]

HERE = Path(__file__).resolve().parent / "nsqjs"
PACKAGE_JSON = HERE / "package.json"
SCRIPT = HERE / "nsqjs_script.js"
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "nsqjs"
NSQJS_VERSION = json.loads(PACKAGE_JSON.read_text())["dependencies"]["nsqjs"]
USER_AGENT = f"nsqjs/{NSQJS_VERSION}"

N = 100
_INSTALL_TIMEOUT = 300


# --------------------------------------------------------------------- setup

def _cached_install_ok() -> bool:
    """The cache holds node_modules for exactly this package.json."""
    cached_pkg = CACHE_DIR / "package.json"
    installed = CACHE_DIR / "node_modules" / "nsqjs" / "package.json"
    if not (cached_pkg.is_file() and installed.is_file()):
        return False
    if cached_pkg.read_bytes() != PACKAGE_JSON.read_bytes():
        return False
    try:
        return json.loads(installed.read_text())["version"] == NSQJS_VERSION
    except (ValueError, KeyError):
        return False


def _npm_install() -> None:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time
        if _cached_install_ok():
            return
        shutil.rmtree(CACHE_DIR / "node_modules", ignore_errors=True)
        shutil.copyfile(PACKAGE_JSON, CACHE_DIR / "package.json")
        cmd = ["npm", "install", "--no-audit", "--no-fund", "--no-package-lock"]
        try:
            proc = subprocess.run(
                cmd, cwd=CACHE_DIR, stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=_INSTALL_TIMEOUT,
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{' '.join(cmd)} timed out after {e.timeout}s") from e
        if proc.returncode != 0 or not _cached_install_ok():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}")


@pytest.fixture(scope="session")
def nsqjs_node_modules() -> Path:
    """``<repo>/.cache/nsqjs/node_modules`` holding the pinned nsqjs."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"nsqjs interop needs Node.js: {' and '.join(missing)} not on PATH")
    try:
        _npm_install()
    except (RuntimeError, OSError) as e:
        reason = f"cannot install nsqjs@{NSQJS_VERSION} with npm: {e}"
        if os.environ.get("NSQ_REQUIRE_NSQJS", "") not in ("", "0"):
            pytest.fail(reason)
        pytest.skip(reason)
    return CACHE_DIR / "node_modules"


class NodeProcess(ScriptProcess):
    """One run of ``nsqjs_script.js``; stdout lines are parsed into ``events``."""

    client = "nsqjs"
    script = "node nsqjs_script.js"
    finish_timeout = 60
    release = None  # closing stdin releases --hold-stdin


@pytest.fixture
async def nsqjs(nsqjs_node_modules, nsqd, tmp_path_factory):
    """``await nsqjs(mode, *args)`` starts ``nsqjs_script.js`` against ``nsqd``.

    ``--host``/``--port`` point at the server; processes still running at
    teardown are killed.
    """
    env = dict(os.environ, NODE_PATH=str(nsqjs_node_modules))
    env.pop("NODE_OPTIONS", None)
    env.pop("DEBUG", None)  # nsqjs logs through `debug`; set NSQJS_DEBUG to enable
    if os.environ.get("NSQJS_DEBUG"):
        env["DEBUG"] = os.environ["NSQJS_DEBUG"]

    async with spawner(
        NodeProcess, ["node", str(SCRIPT)],
        env=env,
        make_cwd=lambda: tmp_path_factory.mktemp("nsqjs-cwd"),
    ) as spawn:

        async def start(mode: str, *args: str) -> NodeProcess:
            return await spawn([mode, "--host", "127.0.0.1", "--port", str(nsqd.tcp_port), *args])

        yield start


def bodies(n: int = N) -> list[str]:
    return [f"msg-{i}" for i in range(n)]


def check_identify(ready: dict[str, Any]) -> None:
    """nsqjs reads max_rdy_count, max_msg_timeout, msg_timeout from the answer."""
    assert ready["nsqjs"] == NSQJS_VERSION
    ident = ready["identify"]
    assert ident["version"] == "1.2.1"
    assert ident["max_rdy_count"] == 2500
    assert ident["msg_timeout"] == 60000
    assert ident["max_msg_timeout"] == 900000
    assert ident["tls_v1"] is False
    assert ident["deflate"] is False
    assert ident["snappy"] is False
    assert ident["auth_required"] is False


# --------------------------------------------------------------------- tests

async def test_writer_pub_mpub_dpub(nsqd, nsqjs, http_get_json, http_post):
    """Writer: 50 PUBs + 5 MPUBs of 10 + 1 DPUB, all pipelined; every callback OK."""
    topic, channel = "nsqjs_writer", "c"
    # a channel up front, so the deferred message is visible as deferred
    await http_post("/topic/create", topic=topic)
    await http_post("/channel/create", topic=topic, channel=channel)

    w = await nsqjs("writer", "--topic", topic, "--count", str(N),
                    "--mpub-batch", "10", "--defer-ms", "60000", "--hold-stdin")
    done = await w.wait_event("done")
    assert done == {"event": "done", "pub": N // 2, "mpub": 5, "dpub": 1,
                    "messages": N + 1}
    check_identify(w.of("ready")[0])

    # while connected the writer is listed as a producer with nsqjs's user agent
    stats = await http_get_json("/stats", format="json", topic=topic)
    [prod] = stats["producers"] or [None]
    assert prod is not None, stats
    assert prod["user_agent"] == USER_AGENT
    assert "nsqjs" in prod["user_agent"]
    assert prod["version"] == "V2"
    assert prod["pub_counts"] == [{"topic": topic, "count": N + 1}]

    assert await w.finish() == 0, w.describe()
    assert w.events[-1] == {"event": "closed"}, w.describe()

    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["depth"] == N and c["deferred_count"] == 1)
    assert t["topic_name"] == topic
    assert t["message_count"] == N + 1
    assert t["message_bytes"] == sum(len(b) for b in bodies()) + len("deferred")
    assert t["depth"] == 0
    assert c["channel_name"] == channel
    assert c["message_count"] == N + 1
    assert c["depth"] == N
    assert c["deferred_count"] == 1
    assert c["in_flight_count"] == 0
    # the producer is gone once nsqjs has closed
    stats = await http_get_json("/stats", format="json")
    assert stats["producers"] is None


async def test_reader_receives_http_mpub(nsqd, nsqjs, http_get_json, http_post):
    """Reader: 100 messages from our HTTP /mpub, each delivered and finished once."""
    topic, channel = "nsqjs_reader", "ch"
    expected = bodies()
    assert await http_post("/mpub", "\n".join(expected).encode(), topic=topic) == "OK"

    r = await nsqjs("reader", "--topic", topic, "--channel", channel,
                    "--count", str(N), "--max-in-flight", "10", "--hold-stdin")
    done = await r.wait_event("done")
    assert done["received"] == N
    check_identify(r.of("ready")[0])

    # while connected: one client, nsqjs's user agent, every FIN counted
    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == N)
    [client] = c["clients"]
    assert client["user_agent"] == USER_AGENT
    assert "nsqjs" in client["user_agent"]
    assert client["version"] == "V2"
    assert client["message_count"] == N
    assert client["finish_count"] == N
    assert client["requeue_count"] == 0
    assert client["in_flight_count"] == 0
    assert client["ready_count"] == 10
    assert c["depth"] == 0
    assert c["in_flight_count"] == 0

    assert await r.finish() == 0, r.describe()
    assert r.events[-1] == {"event": "closed"}, r.describe()

    msgs = r.of("message")
    assert sorted(m["body"] for m in msgs) == sorted(expected)  # exactly once each
    assert [m["body"] for m in msgs] == expected  # in publish order (one channel, one client)
    assert all(m["attempts"] == 1 for m in msgs)
    assert len({m["id"] for m in msgs}) == N
    assert all(len(m["id"]) == 16 for m in msgs)
    assert r.of("requeue") == []

    stats, t, c = await wait_stats(http_get_json, topic, channel,
                                   lambda t, c: c["client_count"] == 0)
    assert t["message_count"] == N
    assert c["message_count"] == N
    assert c["depth"] == 0
    assert c["in_flight_count"] == 0
    assert c["requeue_count"] == 0
    assert c["timeout_count"] == 0
    assert c["client_count"] == 0


async def test_reader_requeue_then_finish(nsqd, nsqjs, http_get_json, http_post):
    """REQ with delay 0 on attempt 1, FIN on attempt 2: attempts reach 2."""
    topic, channel = "nsqjs_requeue", "ch"
    expected = bodies()
    assert await http_post("/mpub", "\n".join(expected).encode(), topic=topic) == "OK"

    r = await nsqjs("reader", "--topic", topic, "--channel", channel,
                    "--count", str(N), "--max-in-flight", "5", "--requeue")
    assert await r.finish() == 0, r.describe()
    assert r.of("done")[0]["received"] == N

    requeued = r.of("requeue")
    finished = r.of("message")
    assert sorted(m["body"] for m in requeued) == sorted(expected)
    assert sorted(m["body"] for m in finished) == sorted(expected)
    assert all(m["attempts"] == 1 for m in requeued)
    assert all(m["attempts"] == 2 for m in finished)
    # a requeued message keeps its id
    assert {m["body"]: m["id"] for m in requeued} == {m["body"]: m["id"] for m in finished}

    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["client_count"] == 0 and c["in_flight_count"] == 0)
    assert t["message_count"] == N
    assert c["message_count"] == N
    assert c["requeue_count"] == N
    assert c["timeout_count"] == 0
    assert c["depth"] == 0
    assert c["deferred_count"] == 0
    assert c["in_flight_count"] == 0


async def test_reader_discovers_nsqds_through_our_lookupd(cluster, nsqjs, http):
    """nsqjs's Reader with lookupdHTTPAddresses only: it finds both of our
    nsqds through our nsqlookupd and gets the messages published on each."""
    from .conftest import wait_lookup

    lookupd, nsqds = cluster
    topic = "nsqjs_lookupd"
    for i, d in enumerate(nsqds):
        d.get_topic(topic).publish([f"nsqd{i}-{j}".encode() for j in range(N // 2)])
    await wait_lookup(http, lookupd, topic, 2)

    r = await nsqjs("reader", "--lookupd", f"127.0.0.1:{lookupd.http_port}", "--topic", topic,
                    "--channel", "ch", "--count", str(N), "--max-in-flight", "10")
    done = await r.wait_event("done")
    assert done["received"] == N, r.describe()
    got = sorted(m["body"] for m in r.of("message"))
    assert got == sorted(f"nsqd{i}-{j}" for i in range(2) for j in range(N // 2))
    assert await r.finish() == 0, r.describe()
    for d in nsqds:
        assert d.topics[topic].channels["ch"].message_count == N // 2
