"""Negotiated features with real sockets: TLS (tls_v1 upgrade, client certs,
HTTPS, --tls-required), snappy, deflate and AUTH against a local auth server."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct

import aiohttp
import pytest

from .helpers import AuthServer, serve_auth

from nsq.client import ConnectionClosedError, Consumer, ErrorResponse, Producer
from nsq.client.tls import client_context
from nsq.protocol import commands
from nsq.protocol.frames import MAGIC_V2
from tests.tlsutil import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


async def roundtrip(nsqd, identify: dict, n: int = 200, **conn) -> tuple[list[bytes], Consumer]:
    """Publish n messages and consume them, both with the given features."""
    bodies = [b"m%04d " % i + b"x" * (i * 37 % 3000) for i in range(n)]
    async with Producer(nsqd.tcp_address, identify, **conn) as p:
        await p.multi_publish("feat", bodies[: n // 2])
        await asyncio.gather(*(p.publish("feat", b) for b in bodies[n // 2:]))
    got: list[bytes] = []
    c = Consumer("feat", "c", lambda m: got.append(m.body), [nsqd.tcp_address], max_in_flight=50,
                 identify=identify, **conn)
    await c.start()
    deadline = asyncio.get_running_loop().time() + 10
    while len(got) < n and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    await c.close()
    assert sorted(got) == sorted(bodies)
    return got, c


def client_stats(nsqd) -> list[dict]:
    """Each connection's /stats client object."""
    from nsq.server.nsqd.stats.collect import client_stats as stats_of

    return [stats_of(c).to_json() for c in nsqd.clients.values()]


@pytest.mark.parametrize("features", [{"snappy": True}, {"deflate": True, "deflate_level": 9}])
async def test_compression_roundtrip(make_nsqd, features):
    nsqd = await make_nsqd()
    seen = []
    orig = nsqd.add_client

    def spy(client):
        seen.append(client)
        orig(client)

    nsqd.add_client = spy
    await roundtrip(nsqd, features)
    kind = "snappy" if "snappy" in features else "deflate"
    assert seen and all(getattr(c.features, kind) for c in seen)


async def test_identify_answers_and_both_compressions_refused(make_nsqd):
    nsqd = await make_nsqd(max_deflate_level=4)
    reader, writer = await asyncio.open_connection("127.0.0.1", nsqd.tcp_port)
    writer.write(MAGIC_V2 + commands.identify({"feature_negotiation": True, "deflate": True, "deflate_level": 9}))
    size, _ = struct.unpack(">ii", await reader.readexactly(8))
    answer = json.loads(await reader.readexactly(size - 4))
    assert answer["deflate"] is True and answer["deflate_level"] == 4 and answer["snappy"] is False
    assert answer["tls_v1"] is False and answer["auth_required"] is False
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", nsqd.tcp_port)
    writer.write(MAGIC_V2 + commands.identify({"feature_negotiation": True, "deflate": True, "snappy": True}))
    size, ftype = struct.unpack(">ii", await reader.readexactly(8))
    assert ftype == 1
    assert await reader.readexactly(size - 4) == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    assert await reader.read() == b""  # closed
    writer.close()
    # --snappy=false: asked for, not granted
    nsqd2 = await make_nsqd(snappy=False)
    async with Producer(nsqd2.tcp_address, {"snappy": True}) as p:
        await p.publish("t", b"plain")
        assert p._conn.features["snappy"] is False


async def test_tls_upgrade_then_snappy_and_stats(make_nsqd, pki):
    nsqd = await make_nsqd(tls_cert=pki.server_cert, tls_key=pki.server_key)
    ctx = client_context(root_ca_file=pki.ca)
    await roundtrip(nsqd, {"tls_v1": True}, tls_context=ctx)
    await roundtrip(nsqd, {"tls_v1": True, "snappy": True}, tls_context=ctx)
    async with Producer(nsqd.tcp_address, {"tls_v1": True, "deflate": True}, tls_context=ctx) as p:
        await p.publish("t", b"x")
        stats = client_stats(nsqd)
        assert len(stats) == 1
        s = stats[0]
        assert s["tls"] is True and s["deflate"] is True and s["tls_version"].startswith("TLS1.")
        assert s["tls_cipher_suite"]
    # a client that does not trust the server's CA fails the handshake cleanly
    with pytest.raises(ssl.SSLError):
        async with Producer(nsqd.tcp_address, {"tls_v1": True}, tls_context=ssl.create_default_context()) as p:
            await p.publish("t", b"x")
    await asyncio.sleep(0.1)
    assert not nsqd.clients  # the failed connection is gone from the daemon


async def test_tls_required_refuses_plain_commands(make_nsqd, pki):
    nsqd = await make_nsqd(tls_cert=pki.server_cert, tls_key=pki.server_key, tls_required="tcp-https")
    with pytest.raises(ErrorResponse) as exc:
        async with Producer(nsqd.tcp_address) as p:
            await p.publish("t", b"x")
    assert str(exc.value) == "E_INVALID cannot PUB in current state (TLS required)"
    async with Producer(nsqd.tcp_address, {"tls_v1": True}, tls_context=client_context(root_ca_file=pki.ca)) as p:
        await p.publish("t", b"x")
    assert nsqd.topics["t"].message_count == 1


async def test_client_certificate_policy(make_nsqd, pki):
    nsqd = await make_nsqd(tls_cert=pki.server_cert, tls_key=pki.server_key, tls_root_ca_file=pki.ca,
                           tls_client_auth_policy="require-verify")
    assert nsqd.tls_required == "true"  # a client auth policy implies TLS required
    good = client_context(root_ca_file=pki.ca, cert=pki.client_cert, key=pki.client_key)
    async with Producer(nsqd.tcp_address, {"tls_v1": True}, tls_context=good) as p:
        await p.publish("t", b"x")
        assert next(iter(nsqd.clients.values())).features.tls_common_name == "client"
    for ctx in (client_context(root_ca_file=pki.ca),  # no certificate
                client_context(root_ca_file=pki.ca, cert=pki.other_cert, key=pki.other_key)):  # unknown CA
        # TLS 1.3: the client may finish its handshake before the server
        # refuses the certificate, so the refusal can show as a closed connection
        with pytest.raises((ssl.SSLError, ConnectionError, ConnectionClosedError, OSError)):
            async with Producer(nsqd.tcp_address, {"tls_v1": True}, tls_context=ctx) as p:
                await p.publish("t", b"x")
    assert nsqd.topics["t"].message_count == 1


async def test_https_listener_and_tls_required_http(make_nsqd, pki):
    nsqd = await make_nsqd(tls_cert=pki.server_cert, tls_key=pki.server_key, https_address="127.0.0.1:0",
                           tls_required="true")
    ctx = client_context(root_ca_file=pki.ca)
    async with aiohttp.ClientSession() as s:
        async with s.post(f"https://127.0.0.1:{nsqd.https_port}/pub?topic=t", data=b"hi", ssl=ctx) as r:
            assert r.status == 200 and await r.text() == "OK"
        async with s.get(f"http://127.0.0.1:{nsqd.http_port}/ping") as r:
            assert r.status == 403
            assert json.loads(await r.text()) == {"message": "TLS_REQUIRED", "https_port": nsqd.https_port}
    assert nsqd.topics["t"].message_count == 1


async def test_tls_config_errors(make_nsqd, pki):
    with pytest.raises(ValueError, match="cannot require TLS"):
        await make_nsqd(tls_required="true")
    with pytest.raises(ValueError, match="tls-cert and --tls-key"):
        await make_nsqd(tls_cert=pki.server_cert)
    with pytest.raises(ValueError, match="tls-min-version"):
        await make_nsqd(tls_cert=pki.server_cert, tls_key=pki.server_key, tls_min_version="tls9")


# -- AUTH ------------------------------------------------------------------------

@pytest.fixture
async def authd():
    async with serve_auth(AuthServer()) as server:
        yield server


async def test_auth_allows_denies_and_requeries(make_nsqd, authd):
    authd.answers["pub-only"] = {"ttl": 1, "identity": "alice", "identity_url": "https://id/alice",
                                 "authorizations": [{"permissions": ["publish"], "topic": "^events$",
                                                     "channels": [".*"]}]}
    authd.answers["sub"] = {"ttl": 3600, "identity": "bob", "authorizations": [
        {"permissions": ["subscribe"], "topic": "events", "channels": ["^archive$"]}]}
    authd.answers["none"] = {"ttl": 60, "authorizations": []}
    nsqd = await make_nsqd(auth_http_addresses=[authd.address])

    async with Producer(nsqd.tcp_address, auth_secret="pub-only") as p:
        await p.publish("events", b"1")
        assert p._conn.auth == {"identity": "alice", "identity_url": "https://id/alice", "permission_count": 1}
        stats = client_stats(nsqd)[0]
        assert stats["authed"] is True and stats["auth_identity"] == "alice"
        q = authd.queries[-1]
        assert q["secret"] == "pub-only" and q["remote_ip"] == "127.0.0.1" and q["tls"] == "false"
        assert "common_name" in q
        await asyncio.sleep(1.1)  # the ttl lapses: the next PUB asks again
        await p.publish("events", b"2")
        assert len(authd.queries) == 2
        with pytest.raises(ErrorResponse) as exc:
            await p.publish("other", b"3")
        assert str(exc.value) == 'E_UNAUTHORIZED AUTH failed for PUB on "other" ""'
    assert nsqd.topics["events"].message_count == 2

    got = []
    c = Consumer("events", "archive", lambda m: got.append(m.body), [nsqd.tcp_address], auth_secret="sub")
    await c.start()
    for _ in range(200):
        if len(got) == 2:
            break
        await asyncio.sleep(0.02)
    await c.close()
    assert sorted(got) == [b"1", b"2"]
    # subscribe on a channel the grant does not cover
    c = Consumer("events", "other", lambda m: None, [nsqd.tcp_address], auth_secret="sub")
    with pytest.raises(ErrorResponse, match='E_UNAUTHORIZED AUTH failed for SUB on "events" "other"'):
        await c.start()
    await c.close()
    # no authorizations; unknown secret; no AUTH at all
    with pytest.raises(ErrorResponse, match="E_UNAUTHORIZED AUTH no authorizations found"):
        async with Producer(nsqd.tcp_address, auth_secret="none") as p:
            await p.publish("events", b"x")
    with pytest.raises(ErrorResponse, match="^E_AUTH_FAILED AUTH failed$"):
        async with Producer(nsqd.tcp_address, auth_secret="who?") as p:
            await p.publish("events", b"x")
    reader, writer = await asyncio.open_connection("127.0.0.1", nsqd.tcp_port)
    writer.write(MAGIC_V2 + commands.pub("events", b"x"))
    size, ftype = struct.unpack(">ii", await reader.readexactly(8))
    assert ftype == 1 and await reader.readexactly(size - 4) == b"E_AUTH_FIRST AUTH required before PUB"
    writer.close()


async def test_auth_disabled_and_requeue_failure(make_nsqd, authd):
    nsqd = await make_nsqd()
    reader, writer = await asyncio.open_connection("127.0.0.1", nsqd.tcp_port)
    writer.write(MAGIC_V2 + commands.auth("x"))
    size, ftype = struct.unpack(">ii", await reader.readexactly(8))
    assert await reader.readexactly(size - 4) == b"E_AUTH_DISABLED AUTH disabled"
    writer.close()
    # the auth server fails when the ttl lapses: the command gets E_AUTH_FAILED
    authd.answers["s"] = {"ttl": 1, "authorizations": [{"permissions": ["publish"], "topic": ".*",
                                                        "channels": [".*"]}]}
    nsqd = await make_nsqd(auth_http_addresses=[authd.address])
    async with Producer(nsqd.tcp_address, auth_secret="s") as p:
        await p.publish("t", b"1")
        authd.status = 500
        await asyncio.sleep(1.1)
        with pytest.raises(ErrorResponse, match="^E_AUTH_FAILED AUTH failed$"):
            await p.publish("t", b"2")


async def test_sample_rate_delivers_about_that_share(make_nsqd):
    nsqd = await make_nsqd()
    n = 2000
    got = []
    c = Consumer("s", "c", lambda m: got.append(m.body), [nsqd.tcp_address], max_in_flight=100,
                 identify={"sample_rate": 30})
    await c.start()
    async with Producer(nsqd.tcp_address) as p:
        for i in range(0, n, 200):
            await p.multi_publish("s", [b"%d" % j for j in range(i, i + 200)])
    ch = nsqd.topics["s"].channels["c"]
    deadline = asyncio.get_running_loop().time() + 10
    while (ch.depth or ch.in_flight) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    await c.close()
    assert ch.depth == 0 and not ch.in_flight  # the rest is skipped, as Go's messagePump does
    # Go keeps a message when rand(100) <= rate: 31% expected; 2000 draws: sd ~21
    assert 0.25 * n < len(got) < 0.37 * n, len(got)
    assert len(set(got)) == len(got)


@pytest.mark.parametrize("features", [{"snappy": True}, {"deflate": True}])
async def test_compressed_mpub_answered_before_its_deliveries(make_nsqd, monkeypatch, features):
    """On a compressed connection a large MPUB's OK is written before the
    messages it delivered (their compression waits for the end of the turn)."""
    from nsq.server.nsqd.tcp.client_v2 import ClientV2

    nsqd = await make_nsqd()
    writes: list[ClientV2] = []
    real = ClientV2.flush

    def flush(self: ClientV2) -> None:
        if self.out and self._waiting is None:
            writes.append(self)
        real(self)

    got: list[bytes] = []
    c = Consumer("order", "c", lambda m: got.append(m.body), [nsqd.tcp_address], max_in_flight=500,
                 identify=features)
    await c.start()
    async with Producer(nsqd.tcp_address, features) as p:
        await p.publish("order", b"warm")
        deadline = asyncio.get_running_loop().time() + 10
        while not got and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        consumer = next(cl for cl in nsqd.clients.values() if cl.channel is not None)
        monkeypatch.setattr(ClientV2, "flush", flush)
        bodies = [b"%04d" % i + b"x" * 300 for i in range(100)]  # 30 KB: past the publish lane
        await p.multi_publish("order", bodies)
        while len(got) < 101 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
    await c.close()
    assert got[1:] == bodies
    assert consumer in writes
    producer = next(w for w in writes if w is not consumer)
    assert writes.index(producer) < writes.index(consumer)
