"""Our nsqd against the official Python client, pynsq (Writer and Reader).

pynsq runs in its own virtualenv, in a subprocess (see ``conftest.py``); our
nsqd runs in-process on the test's event loop. Counters are read back from
our ``/stats?format=json`` and compared with what Go nsqd v1.2.1 reports.
"""

from __future__ import annotations

import collections

import pytest

from . import pynsq_env, pynsq_script
from .helpers import wait_stats

pytestmark = [
    pytest.mark.slow,
    # the first test may build the virtualenv (pip install) during setup
    pytest.mark.timeout(600),
]

N = 100


async def test_pynsq_version_and_identify(nsqd, pynsq, http_get_json):
    """pynsq negotiates features; the JSON IDENTIFY answer has what it reads."""
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", "identify", "--count", "1")
    assert await w.finish() == 0, w.describe()
    start = w.of("start")[0]
    assert f"pynsq=={start['pynsq']}" in pynsq_env.PINS
    assert f"tornado=={start['tornado']}" in pynsq_env.PINS
    assert "site-packages" in start["nsq_file"], start
    ident = w.of("identify")
    assert len(ident) == 1, w.describe()
    data = ident[0]["data"]
    assert data["version"] == "1.2.1"
    assert data["max_rdy_count"] == 2500
    assert data["msg_timeout"] == 60000
    assert data["max_msg_timeout"] == 900000
    assert data["auth_required"] is False
    # pynsq echoes its own output buffer settings back from the server
    assert data["output_buffer_size"] == 16384
    assert data["output_buffer_timeout"] == 250


async def test_writer_pub_and_mpub(nsqd, pynsq, http_get_json):
    """(a) nsq.Writer publishes 50 PUBs and 5 MPUBs of 10; every callback is OK."""
    topic = "pynsq_writer"
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", topic, "--count", str(N), "--mpub-batch", "10",
                    "--wait-stdin", "--timeout", "60")
    done = await w.wait_event("done", timeout=60)
    assert done["published"] == N

    # while the writer is still connected it is listed as a producer
    stats = await http_get_json("/stats", format="json", topic=topic)
    producers = stats["producers"] or []
    assert len(producers) == 1, stats
    prod = producers[0]
    assert prod["user_agent"] == f"pynsq/{pynsq_env.PINS[0].split('==')[1]}"
    assert prod["version"] == "V2"
    assert prod["pub_counts"] == [{"topic": topic, "count": N}]

    assert await w.finish() == 0, w.describe()

    stats = await http_get_json("/stats", format="json", topic=topic)
    [t] = stats["topics"]
    assert t["topic_name"] == topic
    assert t["message_count"] == N
    assert t["depth"] == N
    assert t["channels"] == []
    # bodies are "msg-0" .. "msg-99"
    assert t["message_bytes"] == sum(len(f"msg-{i}") for i in range(N))


async def test_writer_then_reader_roundtrip(nsqd, pynsq):
    """pynsq Writer -> our nsqd -> pynsq Reader: the same 100 bodies come back."""
    topic, addr = "pynsq_roundtrip", f"127.0.0.1:{nsqd.tcp_port}"
    w = await pynsq("writer", "--nsqd-tcp", addr, "--topic", topic, "--count", str(N))
    assert await w.finish(timeout=60) == 0, w.describe()
    r = await pynsq("reader", "--nsqd-tcp", addr, "--topic", topic, "--channel", "ch",
                    "--count", str(N), "--max-in-flight", "50", "--timeout", "60")
    assert await r.finish(timeout=60) == 0, r.describe()
    bodies = sorted(m["body"] for m in r.of("message"))
    assert bodies == sorted(f"msg-{i}" for i in range(N))


@pytest.mark.parametrize("deflate", [False, True], ids=["plain", "deflate-requested"])
async def test_reader_receives_http_published(nsqd, pynsq, http_post, http_get_json, deflate):
    """(b) 100 messages via HTTP /mpub and /pub; nsq.Reader gets each exactly once.

    With ``deflate`` the client asks for deflate in IDENTIFY: whatever the
    server answers, delivery must work (pynsq upgrades only if it says yes).
    """
    topic, channel = "pynsq_reader", "ch"
    bodies = [f"body-{i:03d}-{'x' * (i % 7)}" for i in range(N)]
    # create the channel first so nothing depends on when the reader subscribes
    # (as in Go, /channel/create needs an existing topic)
    await http_post("/topic/create", topic=topic)
    await http_post("/channel/create", topic=topic, channel=channel)
    await http_post("/mpub", "\n".join(bodies[:60]).encode(), topic=topic)
    for b in bodies[60:]:
        assert await http_post("/pub", b.encode(), topic=topic) == "OK"

    args = ["--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}", "--topic", topic,
            "--channel", channel, "--count", str(N), "--max-in-flight", "25",
            "--wait-stdin", "--timeout", "60"]
    if deflate:
        args.append("--deflate")
    r = await pynsq("reader", *args)
    done = await r.wait_event("done", timeout=60)
    assert done["distinct"] == N and done["deliveries"] == N, r.describe()

    msgs = r.of("message")
    assert sorted(m["body"] for m in msgs) == sorted(bodies)
    assert all(m["attempts"] == 1 for m in msgs)
    assert len({m["id"] for m in msgs}) == N
    assert all(len(m["id"]) == 16 for m in msgs)

    # the reader is still connected: its FINs show in the client's counters
    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == N and c["in_flight_count"] == 0,
    )
    assert c["channel_name"] == channel
    assert c["in_flight_count"] == 0, c
    assert c["depth"] == 0
    assert c["deferred_count"] == 0
    assert c["message_count"] == N
    assert c["requeue_count"] == 0
    assert c["timeout_count"] == 0
    assert c["client_count"] == 1
    [client] = c["clients"]
    assert client["finish_count"] == N, client
    assert client["message_count"] == N
    assert client["requeue_count"] == 0
    assert client["in_flight_count"] == 0
    assert client["ready_count"] == 25
    assert client["user_agent"].startswith("pynsq/")
    assert t["message_count"] == N

    assert await r.finish() == 0, r.describe()
    ident = r.of("identify")[0]["data"]
    if deflate and ident.get("deflate"):
        assert ident["deflate_level"] >= 1

    stats, t, c = await wait_stats(http_get_json, topic, channel, lambda t, c: c["client_count"] == 0)
    assert c["client_count"] == 0
    assert c["in_flight_count"] == 0
    assert c["depth"] == 0


async def test_reader_requeue_then_finish(nsqd, pynsq, http_post, http_get_json):
    """(c) The handler answers False on attempt 1 (REQ), True on attempt 2 (FIN).

    pynsq requeues with a delay of ``requeue_delay * attempts`` seconds
    (here 1 s), so the message comes back from the deferred queue with the
    same id and ``attempts`` 2.
    """
    topic, channel, count = "pynsq_requeue", "ch", 10
    bodies = [f"again-{i}" for i in range(count)]
    await http_post("/mpub", "\n".join(bodies).encode(), topic=topic)

    r = await pynsq("reader", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", topic, "--channel", channel, "--count", str(count),
                    "--max-in-flight", "5", "--requeue-first", "--requeue-delay", "1",
                    "--wait-stdin", "--timeout", "60")
    done = await r.wait_event("done", timeout=60)
    assert done["distinct"] == count, r.describe()

    by_body = collections.defaultdict(list)
    for m in r.of("message"):
        by_body[m["body"]].append(m)
    assert sorted(by_body) == sorted(bodies)
    for body, deliveries in by_body.items():
        assert [d["attempts"] for d in deliveries] == [1, 2], (body, deliveries)
        first, second = deliveries
        assert first["id"] == second["id"]
        assert first["ts"] == second["ts"]  # the original publish timestamp
        # REQ with a 1000 ms timeout: it must not come back immediately
        assert second["t"] - first["t"] >= 0.5, (body, deliveries)

    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == count,
    )
    assert c["in_flight_count"] == 0, c
    assert c["deferred_count"] == 0
    assert c["depth"] == 0
    assert c["message_count"] == count
    assert c["requeue_count"] == count
    assert c["timeout_count"] == 0
    [client] = c["clients"]
    assert client["finish_count"] == count
    assert client["requeue_count"] == count
    assert client["message_count"] == 2 * count
    assert await r.finish() == 0, r.describe()


async def test_heartbeats_keep_idle_connection(nsqd, pynsq, http_get_json):
    """heartbeat_interval=1 s: pynsq answers our heartbeats with NOP, stays connected."""
    topic = "pynsq_heartbeat"
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", topic, "--count", "4", "--heartbeat-interval", "1",
                    "--idle", "3.2", "--timeout", "30")
    assert await w.finish(timeout=30) == 0, w.describe()
    assert len(w.of("heartbeat")) >= 2, w.describe()
    assert len(w.of("identify")) == 1, "the connection was re-established:\n" + w.describe()
    stats = await http_get_json("/stats", format="json", topic=topic)
    assert stats["topics"][0]["message_count"] == 4


async def test_reader_discovers_nsqds_through_our_lookupd(cluster, pynsq, http):
    """pynsq's Reader with lookupd_http_addresses only: it finds both of our
    nsqds through our nsqlookupd and gets the messages published on each."""
    from .conftest import wait_lookup

    lookupd, nsqds = cluster
    topic = "pynsq_lookupd"
    for i, d in enumerate(nsqds):
        d.get_topic(topic).publish([f"nsqd{i}-{j}".encode() for j in range(N // 2)])
    data = await wait_lookup(http, lookupd, topic, 2)
    assert {p["tcp_port"] for p in data["producers"]} == {d.tcp_port for d in nsqds}

    r = await pynsq("reader", "--lookupd-http", f"127.0.0.1:{lookupd.http_port}",
                    "--topic", topic, "--channel", "ch", "--count", str(N),
                    "--max-in-flight", "10", "--timeout", "60")
    assert await r.finish(timeout=60) == 0, r.describe()
    bodies = sorted(m["body"] for m in r.of("message"))
    assert bodies == sorted(f"nsqd{i}-{j}" for i in range(2) for j in range(N // 2))
    for d in nsqds:
        assert d.topics[topic].channels["ch"].message_count == N // 2


# -- negotiated features: snappy, deflate, TLS, client certificates, AUTH ---------

FEATURE_N = 60
PAD = 7000  # MPUB batches of 10 such bodies exceed snappy's 64 KiB chunk


def expected_bodies(n: int = FEATURE_N, pad: int = PAD, prefix: str = "msg-") -> list[str]:
    return [pynsq_script.make_body(prefix, i, pad) for i in range(n)]


async def feature_roundtrip(nsqd, pynsq, http_get_json, topic: str, *flags: str,
                            n: int = FEATURE_N, pad: int = PAD) -> dict:
    """pynsq Writer, then pynsq Reader, both with ``flags``, through our nsqd.

    Both stay connected after "done" (``--wait-stdin``) so their /stats
    entries (the producer, the channel's client) can be read; returns
    ``{"writer", "reader", "producer", "client"}``.
    """
    addr = f"127.0.0.1:{nsqd.tcp_port}"
    w = await pynsq("writer", "--nsqd-tcp", addr, "--topic", topic, "--count", str(n),
                    "--pad", str(pad), "--wait-stdin", "--timeout", "20", *flags)
    done = await w.wait_event("done", timeout=20)
    assert done["published"] == n, w.describe()
    stats = await http_get_json("/stats", format="json", topic=topic)
    producers = stats["producers"] or []
    assert len(producers) == 1, stats
    producer = producers[0]
    assert await w.finish() == 0, w.describe()

    r = await pynsq("reader", "--nsqd-tcp", addr, "--topic", topic, "--channel", "ch",
                    "--count", str(n), "--max-in-flight", "20", "--wait-stdin", "--timeout", "20", *flags)
    done = await r.wait_event("done", timeout=20)
    assert done["distinct"] == n and done["deliveries"] == n, r.describe()
    _, t, c = await wait_stats(http_get_json, topic, "ch",
                               lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == n)
    [client] = c["clients"]
    assert client["finish_count"] == n, client
    assert await r.finish() == 0, r.describe()
    assert sorted(m["body"] for m in r.of("message")) == sorted(expected_bodies(n, pad))
    assert t["message_count"] == n
    assert t["message_bytes"] == sum(len(b) for b in expected_bodies(n, pad))
    return {"writer": w, "reader": r, "producer": producer, "client": client}


def single_identify(proc) -> dict:
    ident = proc.of("identify")
    assert len(ident) == 1, "reconnected or never identified:\n" + proc.describe()
    return ident[0]["data"]


def assert_features(result: dict, *, tls: bool = False, snappy: bool = False, deflate: bool = False) -> None:
    """Both IDENTIFY answers granted exactly these features, and /stats shows them."""
    for who in ("writer", "reader"):
        data = single_identify(result[who])
        assert data["tls_v1"] is tls, (who, data)
        assert data["snappy"] is snappy, (who, data)
        assert data["deflate"] is deflate, (who, data)
    for who in ("producer", "client"):
        s = result[who]
        assert s["tls"] is tls, (who, s)
        assert s["snappy"] is snappy, (who, s)
        assert s["deflate"] is deflate, (who, s)
        assert s["user_agent"] == f"pynsq/{pynsq_env.PINS[0].split('==')[1]}", s
        if tls:
            # pynsq 0.9.1 pins ssl_version=PROTOCOL_TLSv1_2
            assert s["tls_version"] == "TLS1.2", (who, s)
            assert s["tls_cipher_suite"], (who, s)
        else:
            assert s["tls_version"] == "" and s["tls_cipher_suite"] == "", (who, s)


async def test_snappy_roundtrip(nsqd, pynsq, http_get_json):
    """(a) snappy=True (python-snappy's framing format) both ways, with 7 KB
    bodies, pynsq's would-block bug patched (see pynsq_script.fix_would_block;
    the unpatched reader is test_snappy_reader_unpatched_pynsq)."""
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_snappy", "--snappy")
    assert_features(result, snappy=True)


async def test_snappy_reader_unpatched_pynsq(nsqd, pynsq, http_get_json):
    """pynsq exactly as released (no fix_would_block) reading 7 KB bodies with snappy.

    Needs Go's chunking: nsqd frames snappy output in chunks of at most
    output_buffer_size (16 KiB), as Go's bufio-over-snappy writer does;
    64 KiB chunks make pynsq 0.9.1 under tornado 6 drop the connection."""
    await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_snappy_unpatched", "--snappy",
                            "--no-fix-would-block")


async def test_deflate_roundtrip(nsqd, pynsq, http_get_json):
    """(b) deflate=True (level 6, pynsq's default): granted at that level, used both ways."""
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_deflate", "--deflate")
    assert_features(result, deflate=True)
    for who in ("writer", "reader"):
        data = single_identify(result[who])
        assert data["deflate_level"] == 6, data
        assert data["max_deflate_level"] == 6, data


@pytest.mark.nsqd_options(tls=True)
async def test_tls_roundtrip(nsqd, pynsq, http_get_json, pki):
    """(c) tls_v1=True with tls_options={"ca_certs": <test CA>}: the upgrade
    after IDENTIFY verifies our certificate, then everything goes over TLS."""
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_tls", "--tls-ca", pki.ca)
    assert_features(result, tls=True)


@pytest.mark.nsqd_options(tls=True)
async def test_tls_untrusted_server_certificate(nsqd, pynsq, pki):
    """Without our CA (tls_options={}: the system CAs) pynsq refuses the
    upgrade and reports it; nothing is published."""
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}", "--topic", "pynsq_untrusted",
                    "--count", "1", "--tls", "--timeout", "15")
    assert await w.finish() == 6, w.describe()
    [err] = w.of("error")[:1]
    assert err["type"] == "SendError" and "failed to upgrade to TLS" in err["error"], w.describe()
    assert "CERTIFICATE_VERIFY_FAILED" in err["error"], w.describe()
    assert "pynsq_untrusted" not in nsqd.topics


@pytest.mark.nsqd_options(tls=True)
async def test_tls_snappy_roundtrip(nsqd, pynsq, http_get_json, pki):
    """(d) TLS, then snappy on top of the TLS stream."""
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_tls_snappy",
                                     "--tls-ca", pki.ca, "--snappy")
    assert_features(result, tls=True, snappy=True)


@pytest.mark.nsqd_options(tls=True)
async def test_tls_deflate_roundtrip(nsqd, pynsq, http_get_json, pki):
    """TLS, then deflate on top of the TLS stream."""
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_tls_deflate",
                                     "--tls-ca", pki.ca, "--deflate")
    assert_features(result, tls=True, deflate=True)


@pytest.mark.nsqd_options(client_auth=True)
async def test_tls_client_certificate(nsqd, pynsq, http_get_json, pki):
    """(e) --tls-client-auth-policy=require-verify: pynsq with the CA's client
    certificate (tls_options certfile/keyfile) gets through; without one the
    TLS upgrade fails."""
    assert nsqd.tls_required == "true"
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, "pynsq_client_cert",
                                     "--tls-ca", pki.ca, "--tls-cert", pki.client_cert,
                                     "--tls-key", pki.client_key, n=20, pad=100)
    assert_features(result, tls=True)

    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}", "--topic", "pynsq_no_cert",
                    "--count", "1", "--tls-ca", pki.ca, "--timeout", "15")
    assert await w.finish() == 6, w.describe()
    err = w.of("error")[0]
    assert err["type"] == "SendError" and "failed to upgrade to TLS" in err["error"], w.describe()
    assert "pynsq_no_cert" not in nsqd.topics


def grant(topic: str, channels: list[str], *permissions: str) -> dict:
    return {"permissions": list(permissions), "topic": topic, "channels": channels}


@pytest.mark.nsqd_options(auth=True)
async def test_auth_allowed_and_refused(nsqd, pynsq, http_get_json, authd):
    """(f) auth_secret: AUTH after IDENTIFY (auth_required), then PUB/MPUB and
    SUB are checked against the auth server's authorizations."""
    topic = "pynsq_auth"
    # as in Go, PUB checks the channel "" against the channel regexes too,
    # so a publish grant needs one that matches "" (here ".*")
    authd.answers["rw"] = {"ttl": 3600, "identity": "rw-user", "identity_url": "https://auth.example/rw",
                           "authorizations": [grant(f"^{topic}$", [".*"], "publish"),
                                              grant(f"^{topic}$", ["^ch$"], "subscribe")]}
    authd.answers["read-only"] = {"ttl": 3600, "identity": "reader",
                                  "authorizations": [grant(f"^{topic}$", [".*"], "subscribe")]}
    authd.answers["write-only"] = {"ttl": 3600, "identity": "writer",
                                   "authorizations": [grant(f"^{topic}$", [".*"], "publish")]}

    result = await feature_roundtrip(nsqd, pynsq, http_get_json, topic, "--auth-secret", "rw", n=20, pad=10)
    for who in ("writer", "reader"):
        assert single_identify(result[who])["auth_required"] is True
        [auth] = [e["data"] for e in result[who].of("auth")]
        assert auth == {"identity": "rw-user", "identity_url": "https://auth.example/rw",
                        "permission_count": 2}, result[who].describe()
    for who in ("producer", "client"):
        s = result[who]
        assert s["authed"] is True and s["auth_identity"] == "rw-user", s
        assert s["auth_identity_url"] == "https://auth.example/rw", s
    assert len(authd.queries) == 2  # one AUTH per connection, answers cached for the ttl
    for q in authd.queries:
        assert q["secret"] == "rw" and q["remote_ip"] == "127.0.0.1" and q["tls"] == "false", q
        assert q["common_name"] == "", q

    # a secret without "publish": the first PUB is refused (fatal: the connection closes)
    addr = f"127.0.0.1:{nsqd.tcp_port}"
    w = await pynsq("writer", "--nsqd-tcp", addr, "--topic", topic, "--count", "2",
                    "--auth-secret", "read-only", "--timeout", "15")
    assert await w.finish() == 3, w.describe()
    assert w.of("auth")[0]["data"]["identity"] == "reader"
    assert w.of("error")[0]["error"] == f'E_UNAUTHORIZED AUTH failed for PUB on "{topic}" ""', w.describe()

    # a secret without "subscribe": SUB is refused
    r = await pynsq("reader", "--nsqd-tcp", addr, "--topic", topic, "--channel", "ch2",
                    "--count", "1", "--auth-secret", "write-only", "--timeout", "15")
    assert await r.finish() == 6, r.describe()
    assert r.of("error")[0]["error"] == f'E_UNAUTHORIZED AUTH failed for SUB on "{topic}" "ch2"', r.describe()
    # "rw" may subscribe to "ch" only
    r = await pynsq("reader", "--nsqd-tcp", addr, "--topic", topic, "--channel", "ch2",
                    "--count", "1", "--auth-secret", "rw", "--timeout", "15")
    assert await r.finish() == 6, r.describe()
    assert r.of("error")[0]["error"] == f'E_UNAUTHORIZED AUTH failed for SUB on "{topic}" "ch2"', r.describe()

    # an unknown secret: the auth server says 403, AUTH itself fails
    w = await pynsq("writer", "--nsqd-tcp", addr, "--topic", topic, "--count", "1",
                    "--auth-secret", "nobody", "--timeout", "15")
    assert await w.finish() in (3, 6), w.describe()
    assert w.of("error")[0]["error"] == "E_AUTH_FAILED AUTH failed", w.describe()
    assert w.of("auth") == []

    assert nsqd.topics[topic].message_count == 20
    assert "ch2" not in nsqd.topics[topic].channels


@pytest.mark.nsqd_options(client_auth=True, auth=True)
async def test_auth_over_tls_with_client_certificate(nsqd, pynsq, http_get_json, authd, pki):
    """AUTH after the TLS upgrade: the auth server is told tls=true and the
    client certificate's common name."""
    topic = "pynsq_auth_tls"
    authd.answers["s"] = {"ttl": 60, "identity": "tls-user",
                          "authorizations": [grant(".*", [".*"], "subscribe", "publish")]}
    result = await feature_roundtrip(nsqd, pynsq, http_get_json, topic, "--auth-secret", "s",
                                     "--tls-ca", pki.ca, "--tls-cert", pki.client_cert,
                                     "--tls-key", pki.client_key, "--snappy", n=20, pad=100)
    assert_features(result, tls=True, snappy=True)
    assert [q["tls"] for q in authd.queries] == ["true", "true"]
    assert [q["common_name"] for q in authd.queries] == ["client", "client"]
    assert result["client"]["auth_identity"] == "tls-user"
