"""AUTH on nsqd's HTTP(S) API (``--http-auth-required``, beyond Go nsqd):
the middleware of :mod:`nsq.server.nsqd.http.auth` against a local auth
server, on an aiohttp app of its own and on a real nsqd (plain HTTP and
HTTPS with a client certificate), the ``/stats`` filter, and the clients
(``NSQDHTTPClient``, ``Cluster``, ``nsq admin`` / ``nsq stat`` flags).

The tests marked ``nsqd`` need the middleware wired into
``nsq/server/nsqd/http/api.py`` (``NSQDHTTPServer``: the middleware after
``_tls_required``, :func:`filter_stats` in the ``/stats`` handler).
"""

from __future__ import annotations

import asyncio
import json
import types
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from .helpers import AuthServer, serve_auth
from aiohttp import web
from click.testing import CliRunner

from nsq.client.tls import client_context
from nsq.cluster.nsqd import NSQDHTTPClient, NSQDHTTPError
from nsq.cluster.poller import Cluster
from nsq.server.httpapi import HTTPListener, json_response
from nsq.server.nsqd.tcp.auth import parse_auth_response
from nsq.server.nsqd.http.auth import (
    AUTH_KEY,
    HTTPAuthCache,
    auth_middleware,
    bearer_secret,
    filter_stats,
    may_subscribe_topic,
    required_grant,
)
from nsq.server.nsqd.stats.memstats import MemoryStats
from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.options import ConfigError, NSQDOptions, load_config
from nsq.server.nsqd.stats.collect import (
    ChannelStats,
    ClientStats,
    E2ELatency,
    NSQDStats,
    PubCount,
    TopicStats,
)
from tests.tlsutil import make_pki

# -- a local auth server -----------------------------------------------------------

ALICE = {"ttl": 3600, "identity": "alice", "identity_url": "https://id/alice", "authorizations": [
    {"permissions": ["publish"], "topic": "^events$", "channels": [".*"]},
    {"permissions": ["subscribe"], "topic": "^events$", "channels": ["^archive$"]},
]}
READER = {"ttl": 3600, "identity": "reader", "authorizations": [
    {"permissions": ["subscribe"], "topic": ".*", "channels": [".*"]}]}
NOBODY = {"ttl": 3600, "identity": "nobody", "authorizations": []}
SHORT = {"ttl": 1, "identity": "short", "authorizations": [
    {"permissions": ["publish"], "topic": ".*", "channels": [".*"]}]}


@pytest.fixture
async def authd():
    async with serve_auth(AuthServer({"alice": ALICE, "reader": READER, "nobody": NOBODY, "short": SHORT})) as server:
        yield server


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


async def call(session: aiohttp.ClientSession, method: str, url: str, secret: str | None = None,
               **kw: Any) -> tuple[int, Any, Any]:
    """(status, JSON body or text, headers) of one request, with ``Authorization: Bearer secret``."""
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    async with session.request(method, url, headers=headers, **kw) as r:
        text = await r.text()
        try:
            body = json.loads(text)
        except ValueError:
            body = text
        return r.status, body, r.headers


# -- the pure parts ------------------------------------------------------------------


def test_bearer_secret_and_grants():
    assert bearer_secret("Bearer s3cret") == "s3cret"
    assert bearer_secret("bearer   s3cret ") == "s3cret"
    for value in (None, "", "Bearer", "Bearer ", "Basic dXNlcjpwdw==", "s3cret"):
        assert bearer_secret(value) == ""
    assert [required_grant(p) for p in ("/ping", "/info", "/metrics")] == ["open"] * 3
    assert [required_grant(p) for p in ("/pub", "/mpub", "/topic/create", "/topic/delete", "/topic/empty",
                                        "/topic/pause", "/topic/unpause")] == ["publish"] * 7
    assert required_grant("/topic/peek") == "subscribe-topic"
    assert {required_grant(f"/channel/{op}") for op in ("create", "delete", "empty", "pause", "unpause",
                                                        "config", "peek")} == {"subscribe"}
    for path in ("/stats", "/config/{opt}", "/debug/pprof", "/drain", "/nope"):
        assert required_grant(path) == "identity"
    alice = parse_auth_response(json.dumps(ALICE).encode())
    assert may_subscribe_topic(alice, "events") and not may_subscribe_topic(alice, "other")
    # publish only, or subscribe without any channel regex: not a subscriber of the topic
    pub_only = parse_auth_response(json.dumps(SHORT).encode())
    assert not may_subscribe_topic(pub_only, "events")
    no_channels = parse_auth_response(b'{"ttl": 1, "authorizations": [{"permissions": ["subscribe"], '
                                      b'"topic": ".*", "channels": []}]}')
    assert not may_subscribe_topic(no_channels, "events")


def _stats() -> NSQDStats:
    def latency(topic: str, channel: str = "") -> E2ELatency:
        return E2ELatency(0, None, topic, channel, "h")

    def channel(topic: str, name: str) -> ChannelStats:
        return ChannelStats(name, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, [], False, latency(topic, name))

    def topic(name: str, channels: list[str], depth: int) -> TopicStats:
        return TopicStats(name, [channel(name, c) for c in channels], depth, 0, 0, 0, False, latency(name))

    def producer(client_id: str, counts: dict[str, int]) -> ClientStats:
        return ClientStats(client_id, "h", "V2", "10.0.0.1:5000", 0, 0, 0, 0, 0, 0, 1, 0, False, False, "", False,
                           "", "", "", False, pub_counts=[PubCount(t, n) for t, n in counts.items()])

    return NSQDStats(
        version="1.2.1", health="OK", start_time=1,
        topics=[topic("events", ["archive", "secret"], 2), topic("other", ["c"], 3)],
        memory=MemoryStats(1, 0, 0, 0, 0, 0, 0, 0, 0),
        producers=[producer("p1", {"events": 5, "other": 1}), producer("p2", {"other": 7})],
    )


def test_filter_stats():
    alice = parse_auth_response(json.dumps(ALICE).encode())
    stats = _stats()
    before = json.dumps(stats.to_json())
    out = filter_stats(stats, alice)
    assert json.dumps(stats.to_json()) == before  # the input is not changed
    assert out.topics is not None and [t.topic_name for t in out.topics] == ["events"]
    assert [c.channel_name for c in out.topics[0].channels] == ["archive"]
    assert out.producers is not None and [p.client_id for p in out.producers] == ["p1"]
    assert out.producers[0].pub_counts == [PubCount("events", 5)]
    assert out.memory == stats.memory and out.health == "OK"
    assert filter_stats(stats, None) is stats
    assert stats.topics is not None
    # a hidden topic named by the filter looks absent (null, as Go's for no such topic)
    assert filter_stats(replace(stats, topics=[stats.topics[1]]), alice, topic="other").topics is None
    # a hidden channel named by the filter drops the topic (as a topic without it)
    assert filter_stats(replace(stats, topics=[stats.topics[0]]), alice, "events", "secret").topics == []
    nobody = parse_auth_response(json.dumps(NOBODY).encode())
    assert filter_stats(stats, nobody) == replace(stats, topics=[], producers=None)
    assert filter_stats(replace(stats, topics=None, producers=None), alice).topics is None


async def test_option_needs_an_auth_server(tmp_path):
    d = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", http_auth_required=True))
    with pytest.raises(ConfigError, match="--http-auth-required needs --auth-http-address"):
        await d.start()
    await d.stop()
    conf = tmp_path / "nsqd.cfg"
    conf.write_text('http_auth_required = true\nauth_http_address = ["127.0.0.1:4181"]\n')
    assert load_config(str(conf))["http_auth_required"] is True
    assert NSQDOptions().http_auth_required is False  # Go's behaviour by default
    from nsq.cli import cli

    r = CliRunner().invoke(cli, ["nsqd", "--help"])
    assert "--http-auth-required" in r.output


# -- the middleware on an app of its own -------------------------------------------------


@pytest.fixture
async def app_server(authd):
    """An HTTPListener with the auth middleware and echo routes at nsqd's paths."""
    session = aiohttp.ClientSession()
    nsqd = types.SimpleNamespace(options=NSQDOptions(http_auth_required=True, auth_http_addresses=[authd.address]),
                                 auth_session=lambda: session)
    middleware = auth_middleware(nsqd)
    listener = HTTPListener(middlewares=(middleware,))

    async def echo(request: web.Request) -> web.Response:
        state = request.get(AUTH_KEY)
        return json_response({"path": request.path, "identity": state.identity if state else None})

    async def stats(request: web.Request) -> web.Response:
        q = request.query
        return json_response(filter_stats(_stats(), request.get(AUTH_KEY), q.get("topic", ""),
                                          q.get("channel", "")).to_json())

    r = listener.router
    for path in ("/ping", "/info", "/topic/peek", "/channel/peek", "/channel/config", "/config/{opt}"):
        r.add_get(path, echo)
    for path in ("/pub", "/mpub", "/topic/create", "/topic/delete", "/channel/create", "/channel/delete", "/drain"):
        r.add_post(path, echo)
    r.add_get("/stats", stats)
    host, port = await listener.start("127.0.0.1:0")
    server = types.SimpleNamespace(url=f"http://{host}:{port}", nsqd=nsqd, cache=middleware.cache,
                                   authd=authd)
    async with aiohttp.ClientSession() as client:
        server.client = client
        yield server
    await listener.stop()
    await session.close()


async def test_middleware_refusals_and_grants(app_server):
    s, url, authd = app_server.client, app_server.url, app_server.authd
    # open paths: no secret, no query
    for path in ("/ping", "/info"):
        assert (await call(s, "GET", url + path))[:2] == (200, {"path": path, "identity": None})
    assert authd.queries == []
    # no secret, another scheme, an empty secret: 401 AUTH_REQUIRED with a challenge
    for headers in ({}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer "}):
        async with s.post(url + "/pub?topic=events", data=b"x", headers=headers) as r:
            assert r.status == 401 and await r.json() == {"message": "AUTH_REQUIRED"}
            assert r.headers["WWW-Authenticate"] == 'Bearer realm="nsqd"'
            assert r.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert authd.queries == []
    # an unknown secret: 401 AUTH_FAILED (not cached: asked again)
    for _ in range(2):
        status, body, headers = await call(s, "POST", url + "/pub?topic=events", "who?", data=b"x")
        assert (status, body) == (401, {"message": "AUTH_FAILED"}) and "WWW-Authenticate" in headers
    assert len(authd.queries) == 2
    q = authd.queries[0]
    assert q == {"common_name": "", "remote_ip": "127.0.0.1", "secret": "who?", "tls": "false"}
    # publish granted / denied
    assert (await call(s, "POST", url + "/pub?topic=events", "alice", data=b"x"))[:2] == (
        200, {"path": "/pub", "identity": "alice"})
    assert (await call(s, "POST", url + "/mpub?topic=other", "alice", data=b"x"))[:2] == (
        403, {"message": "UNAUTHORIZED"})
    assert (await call(s, "POST", url + "/topic/create?topic=events", "alice"))[0] == 200
    assert (await call(s, "POST", url + "/topic/delete?topic=events", "reader"))[0] == 403  # subscribe only
    # channel operations need subscribe on topic and channel
    assert (await call(s, "POST", url + "/channel/create?topic=events&channel=archive", "alice"))[0] == 200
    assert (await call(s, "POST", url + "/channel/delete?topic=events&channel=other", "alice"))[0] == 403
    assert (await call(s, "GET", url + "/channel/peek?topic=events&channel=archive", "alice"))[0] == 200
    assert (await call(s, "GET", url + "/channel/config?topic=x&channel=y", "alice"))[0] == 403
    assert (await call(s, "GET", url + "/channel/config?topic=x&channel=y", "reader"))[0] == 200
    # topic peek: subscribe on the topic, any channel
    assert (await call(s, "GET", url + "/topic/peek?topic=events", "alice"))[0] == 200
    assert (await call(s, "GET", url + "/topic/peek?topic=other", "alice"))[0] == 403
    # missing arguments go on to the endpoint (its 400); /config, /drain: any identity
    assert (await call(s, "POST", url + "/pub", "alice", data=b"x"))[0] == 200
    assert (await call(s, "GET", url + "/config/log_level", "alice"))[0] == 200
    assert (await call(s, "POST", url + "/drain", "reader"))[0] == 200
    # unknown paths need an identity before their 404
    assert (await call(s, "GET", url + "/nope"))[:2] == (401, {"message": "AUTH_REQUIRED"})
    assert (await call(s, "GET", url + "/nope", "alice"))[:2] == (404, {"message": "NOT_FOUND"})
    # an identity without authorizations: refused everywhere, even /stats and /config
    for method, path in (("GET", "/stats"), ("GET", "/config/log_level"), ("POST", "/pub?topic=x")):
        assert (await call(s, method, url + path, "nobody"))[:2] == (403, {"message": "UNAUTHORIZED"})
    # one query per secret (and address): the answers are cached for their ttl
    assert sorted(q["secret"] for q in authd.queries) == ["alice", "nobody", "reader", "who?", "who?"]


async def test_middleware_stats_filter(app_server):
    s, url = app_server.client, app_server.url
    _, body, _ = await call(s, "GET", url + "/stats", "alice")
    assert [t["topic_name"] for t in body["topics"]] == ["events"]
    assert [c["channel_name"] for t in body["topics"] for c in t["channels"]] == ["archive"]
    _, body, _ = await call(s, "GET", url + "/stats", "reader")
    assert [t["topic_name"] for t in body["topics"]] == ["events", "other"]
    _, body, _ = await call(s, "GET", url + "/stats?topic=other", "alice")
    assert body["topics"] is None


async def test_middleware_ttl_cache_and_failures(app_server):
    s, url, authd, cache = app_server.client, app_server.url, app_server.authd, app_server.cache
    # concurrent requests with one secret share one query
    authd.delay = 0.2
    results = await asyncio.gather(*(call(s, "POST", url + "/pub?topic=t", "short", data=b"x") for _ in range(5)))
    assert [r[0] for r in results] == [200] * 5
    assert len(authd.queries) == 1 and cache.queries == 1 and len(cache) == 1
    authd.delay = 0
    assert (await call(s, "POST", url + "/pub?topic=t", "short", data=b"x"))[0] == 200
    assert len(authd.queries) == 1
    # the ttl lapses: asked again
    for state in cache._entries.values():
        state.expires = 0
    assert (await call(s, "POST", url + "/pub?topic=t", "short", data=b"x"))[0] == 200
    assert len(authd.queries) == 2
    # the auth server fails when the ttl lapses: 401 AUTH_FAILED, then fine again once it is back
    for state in cache._entries.values():
        state.expires = 0
    authd.status = 500
    assert (await call(s, "POST", url + "/pub?topic=t", "short", data=b"x"))[:2] == (
        401, {"message": "AUTH_FAILED"})
    assert len(cache) == 0
    authd.status = 200
    assert (await call(s, "POST", url + "/pub?topic=t", "short", data=b"x"))[0] == 200
    # an auth server that is not there at all
    app_server.nsqd.options.auth_http_addresses = ["127.0.0.1:1"]
    cache.clear()
    assert (await call(s, "POST", url + "/pub?topic=t", "short", data=b"x"))[:2] == (
        401, {"message": "AUTH_FAILED"})
    # the option off: the middleware lets everything through (Go's open API)
    app_server.nsqd.options.http_auth_required = False
    assert (await call(s, "POST", url + "/pub?topic=t", data=b"x"))[:2] == (
        200, {"path": "/pub", "identity": None})


async def test_cache_bound(authd):
    async with aiohttp.ClientSession() as session:
        nsqd = types.SimpleNamespace(options=NSQDOptions(auth_http_addresses=[authd.address]),
                                     auth_session=lambda: session)
        cache = HTTPAuthCache(nsqd, max_entries=2)
        for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.3"):
            await cache.get("reader", ip, False, "")
        assert len(cache) == 2 and cache.queries == 3  # 10.0.0.2 was the least recently used
        await cache.get("reader", "10.0.0.1", False, "")
        assert cache.queries == 3
        await cache.get("reader", "10.0.0.2", True, "client")  # tls and CN are part of the key
        assert cache.queries == 4
        assert authd.queries[-1] == {"common_name": "client", "remote_ip": "10.0.0.2", "secret": "reader",
                                     "tls": "true"}


async def test_nsqd_http_client_sends_the_secret(app_server):
    url = app_server.url
    async with NSQDHTTPClient(auth_secret="alice") as client:
        stats = await client.stats(url)
        assert [t["topic_name"] for t in stats["topics"]] == ["events"]
        assert await client.post(url, "/channel/create", topic="events", channel="archive") is True
        with pytest.raises(NSQDHTTPError) as info:
            await client.post(url, "/topic/create", topic="other")
        assert info.value.status == 403 and "UNAUTHORIZED" in str(info.value)
    async with NSQDHTTPClient() as client:
        with pytest.raises(NSQDHTTPError) as info:
            await client.stats(url)
        assert info.value.status == 401 and "AUTH_REQUIRED" in str(info.value)
        assert (await client.info(url))["path"] == "/info"


# -- the commands' flags -----------------------------------------------------------------


def test_admin_flag_and_env(monkeypatch):
    import nsq.commands.admin as admin_cmd
    from nsq.cli import cli

    r = CliRunner().invoke(cli, ["admin", "--help"])
    assert "--http-auth-secret" in r.output and "NSQ_AUTH_SECRET" in r.output
    seen = []
    monkeypatch.setattr(admin_cmd, "_run", lambda *a: seen.append(a[-1]) or 0)
    runner = CliRunner()
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2"]).exit_code == 0
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2", "--http-auth-secret=s1"]).exit_code == 0
    monkeypatch.setenv("NSQ_AUTH_SECRET", "s2")
    assert runner.invoke(cli, ["admin", "--nsqd-http-address=b:2"]).exit_code == 0
    assert runner.invoke(cli, ["admin", "-nsqd-http-address=b:2", "-http-auth-secret=s3"]).exit_code == 0
    assert seen == ["", "s1", "s2", "s3"]


def test_stat_flag_and_env(monkeypatch):
    import nsq.apps.stat as stat_app
    from nsq.cli import cli

    r = CliRunner().invoke(cli, ["stat", "--help"])
    assert "--http-auth-secret" in r.output and "NSQ_AUTH_SECRET" in r.output
    seen = []

    def fake_poller(*args: Any, **kwargs: Any):
        seen.append(kwargs.get("auth_secret", ""))
        raise SystemExit(0)

    monkeypatch.setattr(stat_app, "StatPoller", fake_poller)
    runner = CliRunner()
    base = ["stat", "--topic=t", "--channel=c", "--nsqd-http-address=b:2", "--plain"]
    assert runner.invoke(cli, base).exit_code == 0
    assert runner.invoke(cli, [*base, "--http-auth-secret=s1"]).exit_code == 0
    monkeypatch.setenv("NSQ_AUTH_SECRET", "s2")
    assert runner.invoke(cli, base).exit_code == 0
    assert seen == ["", "s1", "s2"]


# -- a real nsqd (needs the middleware wired into nsqd's HTTP server) ------------------------


def _wired(nsqd: NSQD) -> None:
    assert any(hasattr(m, "cache") for m in nsqd._http.app.middlewares), \
        "the HTTP auth middleware is not wired into nsq/server/nsqd/http/api.py"


async def test_nsqd_open_by_default(make_nsqd, authd):
    # auth servers alone do not close the HTTP API (Go's behaviour)
    nsqd = await make_nsqd(auth_http_addresses=[authd.address])
    async with aiohttp.ClientSession() as s:
        assert (await call(s, "POST", f"http://{nsqd.http_address}/pub?topic=t", data=b"x"))[0] == 200
        assert (await call(s, "GET", f"http://{nsqd.http_address}/stats?format=json"))[0] == 200
    assert authd.queries == []


async def test_nsqd_http_auth(make_nsqd, authd):
    nsqd = await make_nsqd(http_auth_required=True, auth_http_addresses=[authd.address])
    _wired(nsqd)
    url = f"http://{nsqd.http_address}"
    async with aiohttp.ClientSession() as s:
        # open: /ping, /info
        assert (await call(s, "GET", url + "/ping"))[:2] == (200, "OK")
        assert (await call(s, "GET", url + "/info"))[0] == 200
        # no secret, unknown secret
        status, body, headers = await call(s, "POST", url + "/pub?topic=events", data=b"m1")
        assert (status, body) == (401, {"message": "AUTH_REQUIRED"})
        assert headers["WWW-Authenticate"] == 'Bearer realm="nsqd"'
        assert (await call(s, "POST", url + "/pub?topic=events", "who?", data=b"m1"))[:2] == (
            401, {"message": "AUTH_FAILED"})
        assert "events" not in nsqd.topics
        # publish granted / denied
        assert (await call(s, "POST", url + "/pub?topic=events", "alice", data=b"m1"))[:2] == (200, "OK")
        assert (await call(s, "POST", url + "/mpub?topic=events", "alice", data=b"m2\nm3"))[:2] == (200, "OK")
        assert (await call(s, "POST", url + "/pub?topic=other", "alice", data=b"m1"))[:2] == (
            403, {"message": "UNAUTHORIZED"})
        assert "other" not in nsqd.topics and nsqd.topics["events"].message_count == 3
        assert (await call(s, "POST", url + "/topic/create?topic=other", "reader"))[0] == 403
        assert "other" not in nsqd.topics
        nsqd.get_topic("other").get_channel("c")
        # channel operations
        for op in ("create", "pause", "unpause", "empty"):
            assert (await call(s, "POST", url + f"/channel/{op}?topic=events&channel=archive", "alice"))[0] == 200
        assert (await call(s, "POST", url + "/channel/create?topic=events&channel=secret", "alice"))[0] == 403
        assert "secret" not in nsqd.topics["events"].channels
        assert (await call(s, "GET", url + "/channel/config?topic=events&channel=archive", "alice"))[0] == 200
        assert (await call(s, "GET", url + "/channel/peek?topic=events&channel=archive", "alice"))[0] == 200
        assert (await call(s, "GET", url + "/topic/peek?topic=events", "alice"))[0] == 200
        assert (await call(s, "GET", url + "/topic/peek?topic=other", "alice"))[0] == 403
        assert (await call(s, "POST", url + "/channel/delete?topic=other&channel=c", "alice"))[0] == 403
        assert (await call(s, "POST", url + "/channel/delete?topic=other&channel=c", "reader"))[0] == 200
        nsqd.topics["events"].get_channel("secret")
        # missing arguments: the endpoint's own 400 once the identity is valid
        assert (await call(s, "POST", url + "/channel/create?topic=events", "alice"))[:2] == (
            400, {"message": "MISSING_ARG_CHANNEL"})
        # /config: any identity
        assert (await call(s, "GET", url + "/config/log_level"))[0] == 401
        assert (await call(s, "GET", url + "/config/log_level", "alice"))[:2] == (200, "info")
        assert (await call(s, "GET", url + "/config/http_auth_required", "alice"))[:2] == (200, True)
        # /stats filtered, JSON and text
        _, stats, _ = await call(s, "GET", url + "/stats?format=json", "alice")
        assert [(t["topic_name"], [c["channel_name"] for c in t["channels"]]) for t in stats["topics"]] == [
            ("events", ["archive"])]
        _, stats, _ = await call(s, "GET", url + "/stats?format=json", "reader")
        assert [(t["topic_name"], [c["channel_name"] for c in t["channels"]]) for t in stats["topics"]] == [
            ("events", ["archive", "secret"]), ("other", [])]
        _, stats, _ = await call(s, "GET", url + "/stats?format=json&topic=other", "alice")
        assert stats["topics"] is None
        status, text, _ = await call(s, "GET", url + "/stats", "alice")
        assert status == 200 and "[events" in text and "[archive" in text
        assert "[other" not in text and "[secret" not in text
        assert (await call(s, "GET", url + "/stats", "nobody"))[:2] == (403, {"message": "UNAUTHORIZED"})
        # what the auth server was asked
        q = next(q for q in authd.queries if q["secret"] == "alice")
        assert q == {"common_name": "", "remote_ip": "127.0.0.1", "secret": "alice", "tls": "false"}
        assert [q["secret"] for q in authd.queries].count("alice") == 1  # cached


async def test_nsqd_ttl_requery(make_nsqd, authd):
    nsqd = await make_nsqd(http_auth_required=True, auth_http_addresses=[authd.address])
    _wired(nsqd)
    url = f"http://{nsqd.http_address}/pub?topic=t"
    async with aiohttp.ClientSession() as s:
        assert (await call(s, "POST", url, "short", data=b"x"))[0] == 200
        assert (await call(s, "POST", url, "short", data=b"x"))[0] == 200
        assert len(authd.queries) == 1
        await asyncio.sleep(1.1)  # ttl 1 s
        assert (await call(s, "POST", url, "short", data=b"x"))[0] == 200
        assert len(authd.queries) == 2
        await asyncio.sleep(1.1)
        authd.status = 500
        assert (await call(s, "POST", url, "short", data=b"x"))[:2] == (401, {"message": "AUTH_FAILED"})
    assert nsqd.topics["t"].message_count == 3


async def test_nsqd_https_with_client_certificate(make_nsqd, authd, pki):
    nsqd = await make_nsqd(http_auth_required=True, auth_http_addresses=[authd.address], tls_cert=pki.server_cert,
                           tls_key=pki.server_key, tls_root_ca_file=pki.ca, tls_client_auth_policy="require-verify")
    _wired(nsqd)
    ctx = client_context(root_ca_file=pki.ca, cert=pki.client_cert, key=pki.client_key)
    url = f"https://127.0.0.1:{nsqd.https_port}"
    async with aiohttp.ClientSession() as s:
        assert (await call(s, "POST", url + "/pub?topic=events", data=b"x", ssl=ctx))[:2] == (
            401, {"message": "AUTH_REQUIRED"})
        assert (await call(s, "POST", url + "/pub?topic=events", "alice", data=b"x", ssl=ctx))[:2] == (200, "OK")
        assert authd.queries == [{"common_name": "client", "remote_ip": "127.0.0.1", "secret": "alice",
                                  "tls": "true"}]
        # plain HTTP: --tls-required comes first
        status, body, _ = await call(s, "POST", f"http://{nsqd.http_address}/pub?topic=events", "alice", data=b"x")
        assert (status, body["message"]) == (403, "TLS_REQUIRED")
    # the tools' client over HTTPS
    async with NSQDHTTPClient(ssl_context=ctx, auth_secret="alice") as client:
        stats = await client.stats(url)
        assert [t["topic_name"] for t in stats["topics"]] == ["events"]
    assert nsqd.topics["events"].message_count == 1


async def test_cluster_with_auth_secret(make_nsqd, authd):
    nsqd = await make_nsqd(http_auth_required=True, auth_http_addresses=[authd.address])
    _wired(nsqd)
    nsqd.get_topic("events").get_channel("archive")
    nsqd.get_topic("hidden").get_channel("c")
    async with Cluster([], [nsqd.http_address], auth_secret="alice") as cluster:
        snapshot = await cluster.fetch()
        assert not snapshot.errors
        assert [t.name for t in snapshot.topics] == ["events"]
    async with Cluster([], [nsqd.http_address]) as cluster:
        snapshot = await cluster.fetch()
        assert snapshot.errors and "AUTH_REQUIRED" in snapshot.errors[0].message
