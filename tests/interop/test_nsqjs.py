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
from .pynsq_script import make_body

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


@pytest.fixture(scope="session")
def nsqjs_snappy(nsqjs_node_modules) -> None:
    """Skips unless nsqjs's optional snappy support (snappystream, whose snappy
    binding comes as a prebuilt npm package per platform) loads here."""
    env = dict(os.environ, NODE_PATH=str(nsqjs_node_modules))
    env.pop("NODE_OPTIONS", None)
    proc = subprocess.run(["node", "-e", "require('snappystream')"], env=env, cwd=CACHE_DIR,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        pytest.skip("nsqjs snappy: its optional dependency snappystream (native snappy binding) "
                    f"did not install or load on this platform:\n{tail}")


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


# -- negotiated features: snappy, deflate, TLS, client certificates, AUTH ---------

FEATURE_N = 60
PAD = 7000  # MPUB batches of 10 such bodies exceed snappy's 64 KiB chunk


def padded_bodies(n: int = FEATURE_N, pad: int = PAD) -> list[str]:
    """What ``--pad`` publishes: nsqjs_script.js's makeBody, the same as pynsq_script's make_body."""
    return [make_body("msg-", i, pad) for i in range(n)]


async def feature_roundtrip(nsqjs, http_get_json, topic: str, *flags: str,
                            n: int = FEATURE_N, pad: int = PAD) -> dict:
    """nsqjs Writer, then nsqjs Reader, both with ``flags``, through our nsqd.

    Both hold the connection after "done" so their /stats entries can be
    read; returns ``{"writer", "reader", "producer", "client"}``.
    """
    w = await nsqjs("writer", "--topic", topic, "--count", str(n), "--pad", str(pad),
                    "--hold-stdin", "--timeout", "20", *flags)
    done = await w.wait_event("done", timeout=20)
    assert done["messages"] == n, w.describe()
    stats = await http_get_json("/stats", format="json", topic=topic)
    producers = stats["producers"] or []
    assert len(producers) == 1, stats
    producer = producers[0]
    assert await w.finish(timeout=20) == 0, w.describe()
    assert w.events[-1] == {"event": "closed"}, w.describe()

    r = await nsqjs("reader", "--topic", topic, "--channel", "ch", "--count", str(n),
                    "--max-in-flight", "20", "--hold-stdin", "--timeout", "20", *flags)
    done = await r.wait_event("done", timeout=20)
    assert done["received"] == n, r.describe()
    _, t, c = await wait_stats(http_get_json, topic, "ch",
                               lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == n)
    [client] = c["clients"]
    assert client["finish_count"] == n, client
    assert await r.finish(timeout=20) == 0, r.describe()
    assert r.events[-1] == {"event": "closed"}, r.describe()
    assert [m["body"] for m in r.of("message")] == padded_bodies(n, pad)  # in order, once each
    assert t["message_count"] == n
    assert t["message_bytes"] == sum(len(b) for b in padded_bodies(n, pad))
    return {"writer": w, "reader": r, "producer": producer, "client": client}


def assert_features(result: dict, *, tls: bool = False, snappy: bool = False, deflate: bool = False,
                    tls_version: str = "TLS1.3") -> None:
    """Both IDENTIFY answers granted exactly these features, and /stats shows them."""
    for who in ("writer", "reader"):
        [ready] = result[who].of("ready")[:1]
        ident = ready["identify"]
        assert ready["nsqjs"] == NSQJS_VERSION
        assert ident["tls_v1"] is tls, (who, ident)
        assert ident["snappy"] is snappy, (who, ident)
        assert ident["deflate"] is deflate, (who, ident)
    for who in ("producer", "client"):
        s = result[who]
        assert s["user_agent"] == USER_AGENT, s
        assert s["tls"] is tls, (who, s)
        assert s["snappy"] is snappy, (who, s)
        assert s["deflate"] is deflate, (who, s)
        if tls:
            assert s["tls_version"] == tls_version, (who, s)
            assert s["tls_cipher_suite"], (who, s)
        else:
            assert s["tls_version"] == "", (who, s)


async def test_snappy_roundtrip(nsqjs_snappy, nsqjs, http_get_json):
    """snappy: true (the optional snappystream module; its native snappy binding
    came with npm) with 7 KB bodies: multi-chunk snappy frames both ways."""
    result = await feature_roundtrip(nsqjs, http_get_json, "nsqjs_snappy", "--snappy")
    assert_features(result, snappy=True)


async def test_deflate_roundtrip(nsqjs, http_get_json):
    """deflate: true, deflateLevel 9 asked for; our default --max-deflate-level
    6 caps it, as Go does, and nsqjs deflates at the level granted."""
    result = await feature_roundtrip(nsqjs, http_get_json, "nsqjs_deflate", "--deflate",
                                     "--deflate-level", "9")
    assert_features(result, deflate=True)
    for who in ("writer", "reader"):
        ident = result[who].of("ready")[0]["identify"]
        assert ident["deflate_level"] == 6 and ident["max_deflate_level"] == 6, ident


@pytest.mark.nsqd_options(tls=True)
async def test_tls_roundtrip_with_ca(nsqjs, http_get_json, pki):
    """tls: true with ca: <the test CA>: nsqjs verifies our certificate
    (tlsVerification stays true) after IDENTIFY, then speaks TLS."""
    result = await feature_roundtrip(nsqjs, http_get_json, "nsqjs_tls", "--tls-ca", pki.ca)
    assert_features(result, tls=True)


@pytest.mark.nsqd_options(tls=True)
async def test_tls_untrusted_server_certificate(nsqd, nsqjs, pki):
    """Without the CA (and tlsVerification left on) nsqjs refuses our
    certificate and reports it; nothing is published."""
    w = await nsqjs("writer", "--topic", "nsqjs_untrusted", "--count", "1", "--tls", "--timeout", "15")
    assert await w.finish(timeout=20) == 2, w.describe()
    err = w.of("error")[0]["message"]
    assert "certificate" in err, w.describe()
    assert "nsqjs_untrusted" not in nsqd.topics


@pytest.mark.nsqd_options(tls=True)
async def test_tls_no_verification_with_deflate(nsqjs, http_get_json):
    """tls: true, tlsVerification: false, then deflate over the TLS stream."""
    result = await feature_roundtrip(nsqjs, http_get_json, "nsqjs_tls_deflate", "--no-tls-verify",
                                     "--deflate")
    assert_features(result, tls=True, deflate=True)


@pytest.mark.nsqd_options(tls=True)
async def test_tls_snappy_roundtrip(nsqjs_snappy, nsqjs, http_get_json, pki):
    """TLS, then snappy over the TLS stream."""
    result = await feature_roundtrip(nsqjs, http_get_json, "nsqjs_tls_snappy", "--tls-ca", pki.ca,
                                     "--snappy")
    assert_features(result, tls=True, snappy=True)


@pytest.mark.nsqd_options(client_auth=True)
async def test_tls_client_certificate(nsqd, nsqjs, http_get_json, pki):
    """--tls-client-auth-policy=require-verify: nsqjs with cert/key from the
    test CA gets through; without a certificate it does not."""
    result = await feature_roundtrip(nsqjs, http_get_json, "nsqjs_client_cert", "--tls-ca", pki.ca,
                                     "--tls-cert", pki.client_cert, "--tls-key", pki.client_key,
                                     n=20, pad=100)
    assert_features(result, tls=True)

    # no certificate; one from another CA. With TLS 1.3 the client's side of
    # the handshake is done before the server refuses the certificate, so
    # nsqjs sees the connection close rather than an alert.
    for cert in ([], ["--tls-cert", pki.other_cert, "--tls-key", pki.other_key]):
        w = await nsqjs("writer", "--topic", "nsqjs_no_cert", "--count", "1", "--tls-ca", pki.ca,
                        *cert, "--timeout", "15")
        assert await w.finish(timeout=20) == 2, w.describe()
        assert w.of("error"), w.describe()
        assert w.of("done") == [], w.describe()
    assert "nsqjs_no_cert" not in nsqd.topics


def grant(topic: str, channels: list[str], *permissions: str) -> dict:
    return {"permissions": list(permissions), "topic": topic, "channels": channels}


@pytest.mark.nsqd_options(auth=True)
async def test_auth_allowed_and_refused(nsqd, nsqjs, http_get_json, authd):
    """authSecret: AUTH after IDENTIFY, then PUB/MPUB and SUB are checked."""
    topic = "nsqjs_auth"
    # as in Go, PUB checks the channel "" against the channel regexes too
    authd.answers["rw"] = {"ttl": 3600, "identity": "rw-user", "identity_url": "https://auth.example/rw",
                           "authorizations": [grant(f"^{topic}$", [".*"], "publish"),
                                              grant(f"^{topic}$", ["^ch$"], "subscribe")]}
    authd.answers["read-only"] = {"ttl": 3600, "identity": "reader",
                                  "authorizations": [grant(f"^{topic}$", [".*"], "subscribe")]}

    result = await feature_roundtrip(nsqjs, http_get_json, topic, "--auth-secret", "rw", n=20, pad=10)
    for who in ("writer", "reader"):
        ready = result[who].of("ready")[0]
        assert ready["identify"]["auth_required"] is True
        assert ready["auth"] == {"identity": "rw-user", "identity_url": "https://auth.example/rw",
                                 "permission_count": 2}, result[who].describe()
    for who in ("producer", "client"):
        assert result[who]["authed"] is True and result[who]["auth_identity"] == "rw-user", result[who]
    assert [q["secret"] for q in authd.queries] == ["rw", "rw"]
    assert all(q["tls"] == "false" and q["remote_ip"] == "127.0.0.1" for q in authd.queries)

    w = await nsqjs("writer", "--topic", topic, "--count", "2", "--auth-secret", "read-only",
                    "--timeout", "15")
    assert await w.finish(timeout=20) == 2, w.describe()
    assert f'E_UNAUTHORIZED AUTH failed for PUB on "{topic}" ""' in w.of("error")[0]["message"], w.describe()

    r = await nsqjs("reader", "--topic", topic, "--channel", "other", "--count", "1",
                    "--auth-secret", "rw", "--timeout", "15")
    assert await r.finish(timeout=20) == 2, r.describe()
    assert f'E_UNAUTHORIZED AUTH failed for SUB on "{topic}" "other"' in r.of("error")[0]["message"], \
        r.describe()

    w = await nsqjs("writer", "--topic", topic, "--count", "1", "--auth-secret", "nobody", "--timeout", "15")
    assert await w.finish(timeout=20) == 2, w.describe()
    assert "E_AUTH_FAILED AUTH failed" in w.of("error")[0]["message"], w.describe()

    assert nsqd.topics[topic].message_count == 20
    assert "other" not in nsqd.topics[topic].channels
