"""nsqlookupd on loopback: raw V1 TCP connections and the HTTP API.

Behaviour is Go nsqlookupd v1.2.1's (nsqlookupd/lookup_protocol_v1.go and
nsqlookupd/http.go): every TCP error is answered, then the connection closed;
registrations show in /lookup, /topics, /channels, /nodes and /debug and go
with their producer; tombstones and the inactive-producer timeout hide a
producer from /lookup.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from nsq import NSQ_VERSION
from nsq.commands.lookupd import build_options, lookupd as lookupd_command
from nsq.protocol.lookupd import (
    MAGIC_V1,
    V1ClientParser,
    encode_identify,
    encode_ping,
    encode_register,
    encode_unregister,
)
from nsq.server.lookupd import NSQLookupd
from .helpers import HTTP, RawConn, error_json, wait_for


def peer(**over: Any) -> dict[str, Any]:
    """An IDENTIFY body as nsqd sends it."""
    return {"broadcast_address": "nsqd.example", "tcp_port": 4150, "http_port": 4151,
            "version": "1.2.1", "hostname": "box", **over}


class LConn(RawConn):
    """One raw V1 TCP connection to nsqlookupd."""

    MAGIC = MAGIC_V1

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer, V1ClientParser())
        self.info: dict[str, Any] | None = None

    @property
    def local(self) -> str:
        """This connection's ``ip:port``: lookupd's producer id and remote_address."""
        host, port = self.writer.get_extra_info("sockname")[:2]
        return f"{host}:{port}"

    def _take(self) -> bytes | None:
        return self.parser.next_response()

    async def read(self, timeout: float = 1.0) -> bytes:
        """The next ``[size][data]`` answer; raises TimeoutError or Closed."""
        return await self._next(timeout)

    async def command(self, data: bytes) -> bytes:
        await self.send(data)
        return await self.read()

    async def identify(self, **over: Any) -> dict[str, Any]:
        self.info = peer(**over)
        answer = await self.command(encode_identify(self.info))
        return json.loads(answer)

    async def register(self, topic: str, channel: str = "") -> None:
        assert await self.command(encode_register(topic, channel)) == b"OK"

    async def unregister(self, topic: str, channel: str = "") -> None:
        assert await self.command(encode_unregister(topic, channel)) == b"OK"

    async def ping(self) -> None:
        assert await self.command(encode_ping()) == b"OK"

    def producer_json(self) -> dict[str, Any]:
        """How /lookup shows this connection's nsqd."""
        assert self.info is not None
        return {"remote_address": self.local, "hostname": self.info["hostname"],
                "broadcast_address": self.info["broadcast_address"], "tcp_port": self.info["tcp_port"],
                "http_port": self.info["http_port"], "version": self.info["version"]}



# -- fixtures --------------------------------------------------------------------------


# ``make_lookupd`` and ``lookupd`` (127.0.0.1 port 0, broadcast 127.0.0.1) are
# the package's pytest fixtures (nsq/pytest_plugin.py)


@pytest.fixture
def lk(lookupd: NSQLookupd, session: aiohttp.ClientSession) -> HTTP:
    """HTTP to ``lookupd``; every answer is checked for X-NSQ-Content-Type."""
    return HTTP(session, lookupd.http_port)


@pytest.fixture
async def connect(lookupd: NSQLookupd) -> AsyncIterator[Callable[..., Awaitable[LConn]]]:
    conns: list[LConn] = []

    async def factory(port: int | None = None, **kw: Any) -> LConn:
        conn = await LConn.open(port or lookupd.tcp_port, **kw)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        await conn.aclose()


async def get_json(http: HTTP, path: str, **params: Any) -> Any:
    status, body = await http.get(path, **params)
    assert status == 200, (path, status, body)
    return json.loads(body)


async def lookup(http: HTTP, topic: str) -> dict[str, Any] | None:
    """/lookup?topic=, or None for 404 TOPIC_NOT_FOUND."""
    status, body = await http.get("/lookup", topic=topic)
    if status == 404:
        assert body == error_json("TOPIC_NOT_FOUND")
        return None
    assert status == 200, body
    return json.loads(body)


async def lookup_ids(http: HTTP, topic: str) -> list[str] | None:
    data = await lookup(http, topic)
    return None if data is None else sorted(p["remote_address"] for p in data["producers"])


async def nodes(http: HTTP) -> dict[str, dict[str, Any]]:
    """/nodes producers by remote_address."""
    data = await get_json(http, "/nodes")
    assert set(data) == {"producers"}
    return {p["remote_address"]: p for p in data["producers"]}


async def topics(http: HTTP) -> list[str]:
    return sorted((await get_json(http, "/topics"))["topics"])


async def channels(http: HTTP, topic: str) -> list[str]:
    return sorted((await get_json(http, "/channels", topic=topic))["channels"])


# -- TCP: IDENTIFY, PING, errors -------------------------------------------------------------


async def test_identify_answer(lookupd, connect):
    conn = await connect()
    answer = await conn.identify()
    assert answer == {"tcp_port": lookupd.tcp_port, "http_port": lookupd.http_port, "version": NSQ_VERSION,
                      "broadcast_address": "127.0.0.1", "hostname": socket.gethostname()}
    await conn.ping()


async def test_ping_before_identify_keeps_the_connection(connect, lk):
    conn = await connect()
    await conn.ping()
    await conn.ping()
    assert await nodes(lk) == {}  # a PING does not make a producer
    await conn.identify()
    await conn.ping()
    assert list(await nodes(lk)) == [conn.local]


async def test_pipelined_commands_answer_in_order(connect, lk):
    conn = await connect(magic=None)
    await conn.send(MAGIC_V1 + encode_ping() + encode_identify(peer()) + encode_register("t", "c")
                    + encode_ping())
    assert await conn.read() == b"OK"
    assert json.loads(await conn.read())["version"] == NSQ_VERSION
    assert await conn.read() == b"OK"
    assert await conn.read() == b"OK"
    assert await lookup_ids(lk, "t") == [conn.local]


IDENT = encode_identify(peer())

TCP_ERRORS = [
    ("bad magic", b"  V2", b"", "E_BAD_PROTOCOL"),
    ("register before identify", MAGIC_V1, b"REGISTER t c\n", "E_INVALID client must IDENTIFY"),
    ("unregister before identify", MAGIC_V1, b"UNREGISTER t\n", "E_INVALID client must IDENTIFY"),
    ("second identify", MAGIC_V1 + IDENT, IDENT, "E_INVALID cannot IDENTIFY again"),
    ("missing fields", MAGIC_V1, encode_identify({"broadcast_address": "a", "tcp_port": 1, "http_port": 2}),
     "E_BAD_BODY IDENTIFY missing fields"),
    ("bad json", MAGIC_V1, b"IDENTIFY\n\x00\x00\x00\x03{x}", "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ("wrong json type", MAGIC_V1, encode_identify(peer(tcp_port="4150")),
     "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ("register no params", MAGIC_V1 + IDENT, b"REGISTER\n", "E_INVALID REGISTER insufficient number of params"),
    ("unregister no params", MAGIC_V1 + IDENT, b"UNREGISTER\n",
     "E_INVALID UNREGISTER insufficient number of params"),
    ("bad topic", MAGIC_V1 + IDENT, b"REGISTER x!\n", "E_BAD_TOPIC REGISTER topic name 'x!' is not valid"),
    ("bad channel", MAGIC_V1 + IDENT, b"REGISTER t c!\n", "E_BAD_CHANNEL REGISTER channel name 'c!' is not valid"),
    ("unregister bad channel", MAGIC_V1 + IDENT, b"UNREGISTER t c!\n",
     "E_BAD_CHANNEL UNREGISTER channel name 'c!' is not valid"),
    ("unknown command", MAGIC_V1, b"FOO\n", "E_INVALID invalid command FOO"),
    ("unknown command identified", MAGIC_V1 + IDENT, b"FOO bar\n", "E_INVALID invalid command FOO"),
]


@pytest.mark.parametrize("setup,bad,text", [c[1:] for c in TCP_ERRORS], ids=[c[0] for c in TCP_ERRORS])
async def test_tcp_error_is_answered_then_connection_closed(connect, setup, bad, text):
    conn = await connect(magic=None)
    await conn.send(setup)
    if setup == MAGIC_V1 + IDENT:
        assert json.loads(await conn.read())["version"] == NSQ_VERSION
    await conn.send(bad)
    assert await conn.expect_closed() == [text.encode()]


async def test_error_closes_and_unregisters_and_later_commands_are_not_run(connect, lk):
    conn = await connect()
    await conn.identify()
    await conn.register("t", "c")
    other = await connect()
    await other.identify(broadcast_address="other.example")
    await other.register("t")
    # one write: the error, then a REGISTER that must not be executed
    await conn.send(b"FOO\n" + encode_register("t2"))
    assert await conn.expect_closed() == [b"E_INVALID invalid command FOO"]
    assert await wait_for(lambda: _eq(lookup_ids(lk, "t"), [other.local]))
    assert "t2" not in await topics(lk)
    assert list(await nodes(lk)) == [other.local]


async def _eq(coro, expected) -> bool:
    return (await coro) == expected


# -- registrations over HTTP ---------------------------------------------------------------


async def test_empty_lookupd(lk):
    assert await get_json(lk, "/topics") == {"topics": []}
    assert await get_json(lk, "/nodes") == {"producers": []}
    assert await get_json(lk, "/channels", topic="t") == {"channels": []}
    assert await lookup(lk, "t") is None
    assert await get_json(lk, "/debug") == {}


async def test_registration_visible_everywhere(connect, lk):
    conn = await connect()
    await conn.identify(broadcast_address="a.example", tcp_port=1111, http_port=2222, hostname="hosta")
    await conn.register("t", "c2")
    await conn.register("t", "c1")
    await conn.register("t2")
    await conn.register("t", "c1")  # again: no duplicate

    data = await lookup(lk, "t")
    assert sorted(data["channels"]) == ["c1", "c2"]
    assert data["producers"] == [conn.producer_json()]
    assert data["producers"][0] == {"remote_address": conn.local, "hostname": "hosta",
                                    "broadcast_address": "a.example", "tcp_port": 1111, "http_port": 2222,
                                    "version": "1.2.1"}
    assert await lookup(lk, "t2") == {"channels": [], "producers": [conn.producer_json()]}
    assert await topics(lk) == ["t", "t2"]
    assert await channels(lk, "t") == ["c1", "c2"]
    assert await channels(lk, "t2") == []

    ns = await nodes(lk)
    assert list(ns) == [conn.local]
    node = ns[conn.local]
    assert {k: node[k] for k in conn.producer_json()} == conn.producer_json()
    assert set(node) == set(conn.producer_json()) | {"tombstones", "topics"}
    assert sorted(node["topics"]) == ["t", "t2"]
    assert node["tombstones"] == [False, False]


async def test_identified_producer_without_topics_in_nodes(connect, lk):
    conn = await connect()
    await conn.identify()
    node = (await nodes(lk))[conn.local]
    assert node["topics"] == [] and node["tombstones"] == []


async def test_two_producers_and_disconnect(connect, lk):
    a = await connect()
    await a.identify(broadcast_address="a.example")
    b = await connect()
    await b.identify(broadcast_address="b.example")
    for conn in (a, b):
        await conn.register("t", "c")
    assert await lookup_ids(lk, "t") == sorted([a.local, b.local])
    assert sorted(await nodes(lk)) == sorted([a.local, b.local])

    await a.aclose()
    await wait_for(lambda: _eq(lookup_ids(lk, "t"), [b.local]))
    assert list(await nodes(lk)) == [b.local]
    debug = await get_json(lk, "/debug")
    assert [p["id"] for p in debug["channel:t:c"]] == [b.local]
    assert [p["id"] for p in debug["client::"]] == [b.local]

    await b.aclose()
    await wait_for(lambda: _eq(lookup_ids(lk, "t"), []))
    # as Go: a non-ephemeral topic and channel stay known without producers
    assert await lookup(lk, "t") == {"channels": ["c"], "producers": []}
    assert await topics(lk) == ["t"]
    assert await nodes(lk) == {}
    assert await get_json(lk, "/debug") == {}


async def test_unregister_channel_keeps_topic_and_channel_names(connect, lk):
    conn = await connect()
    await conn.identify()
    await conn.register("t", "c")
    await conn.unregister("t", "c")
    debug = await get_json(lk, "/debug")
    assert "channel:t:c" not in debug  # no producer left there
    assert [p["id"] for p in debug["topic:t:"]] == [conn.local]
    assert await lookup(lk, "t") == {"channels": ["c"], "producers": [conn.producer_json()]}


async def test_unregister_topic_removes_this_producer_from_its_channels(connect, lk):
    a = await connect()
    await a.identify(broadcast_address="a.example")
    b = await connect()
    await b.identify(broadcast_address="b.example")
    for conn in (a, b):
        await conn.register("t", "c1")
        await conn.register("t", "c2")
    await a.register("u", "c1")

    await a.unregister("t")
    debug = await get_json(lk, "/debug")
    for key in ("topic:t:", "channel:t:c1", "channel:t:c2"):
        assert [p["id"] for p in debug[key]] == [b.local], key
    assert [p["id"] for p in debug["channel:u:c1"]] == [a.local]  # other topics untouched
    assert await lookup_ids(lk, "t") == [b.local]
    assert (await nodes(lk))[a.local]["topics"] == ["u"]


async def test_ephemeral_registrations_vanish_on_unregister(connect, lk):
    a = await connect()
    await a.identify(broadcast_address="a.example")
    b = await connect()
    await b.identify(broadcast_address="b.example")
    await a.register("t", "e#ephemeral")
    await b.register("t", "e#ephemeral")
    await a.register("t", "plain")

    await a.unregister("t", "e#ephemeral")
    assert await channels(lk, "t") == ["e#ephemeral", "plain"]  # b still has it
    await b.unregister("t", "e#ephemeral")
    assert await channels(lk, "t") == ["plain"]
    await a.unregister("t", "plain")
    assert await channels(lk, "t") == ["plain"]  # not ephemeral: stays

    await a.register("x#ephemeral", "c")
    await a.register("x#ephemeral", "d#ephemeral")
    assert await topics(lk) == ["t", "x#ephemeral"]
    await a.unregister("x#ephemeral")  # topic unregistration: channels too
    assert await topics(lk) == ["t"]
    assert await lookup(lk, "x#ephemeral") is None
    assert await channels(lk, "x#ephemeral") == ["c"]  # the plain channel stays, as in Go


async def test_ephemeral_registrations_vanish_on_disconnect(connect, lk):
    a = await connect()
    await a.identify(broadcast_address="a.example")
    b = await connect()
    await b.identify(broadcast_address="b.example")
    await a.register("t#ephemeral", "c#ephemeral")
    await a.register("u", "c#ephemeral")
    await a.register("u", "keep")
    await a.register("shared#ephemeral", "s#ephemeral")
    await b.register("shared#ephemeral", "s#ephemeral")

    await a.aclose()
    await wait_for(lambda: _eq(topics(lk), ["shared#ephemeral", "u"]))
    assert await channels(lk, "u") == ["keep"]
    assert await channels(lk, "t#ephemeral") == []
    assert await lookup(lk, "t#ephemeral") is None
    assert await lookup(lk, "u") == {"channels": ["keep"], "producers": []}
    assert await lookup(lk, "shared#ephemeral") == {"channels": ["s#ephemeral"],
                                                    "producers": [b.producer_json()]}

    await b.aclose()
    await wait_for(lambda: _eq(topics(lk), ["u"]))


async def test_stop_closes_nsqd_connections(make_lookupd):
    lookupd = await make_lookupd()
    conn = await LConn.open(lookupd.tcp_port)
    try:
        await conn.identify()
        await lookupd.stop()
        assert await conn.expect_closed() == []
    finally:
        await conn.aclose()


# -- tombstones and inactive producers --------------------------------------------------------


async def test_tombstone_hides_from_lookup_then_lapses(make_lookupd, session):
    lookupd = await make_lookupd(tombstone_lifetime=0.5)
    lk = HTTP(session, lookupd.http_port)
    a = await LConn.open(lookupd.tcp_port)
    b = await LConn.open(lookupd.tcp_port)
    try:
        await a.identify(broadcast_address="a.example", http_port=4151)
        await b.identify(broadcast_address="b.example", http_port=4151)
        for conn in (a, b):
            await conn.register("t", "c")
        await a.register("t2")

        for params in ({"node": "a.example:4151"}, {"topic": "t"}):
            status, body = await lk.post("/topic/tombstone", **params)
            assert status == 400
            assert body == error_json("MISSING_ARG_TOPIC" if "node" in params else "MISSING_ARG_NODE")
        # a node that matches no producer, or another topic: nothing changes
        assert await lk.post("/topic/tombstone", topic="t", node="a.example:9999") == (200, b"")
        assert await lk.post("/topic/tombstone", topic="nope", node="a.example:4151") == (200, b"")
        assert await lookup_ids(lk, "t") == sorted([a.local, b.local])

        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await lk.post("/topic/tombstone", topic="t", node="a.example:4151") == (200, b"")
        assert await lookup_ids(lk, "t") == [b.local]
        assert await lookup_ids(lk, "t2") == [a.local]  # only that topic
        ns = await nodes(lk)
        assert sorted(ns) == sorted([a.local, b.local])  # /nodes still lists it
        assert dict(zip(ns[a.local]["topics"], ns[a.local]["tombstones"])) == {"t": True, "t2": False}
        assert ns[b.local]["tombstones"] == [False]
        debug = await get_json(lk, "/debug")
        assert [p["tombstoned"] for p in debug["topic:t:"] if p["id"] == a.local] == [True]
        assert [p["tombstoned"] for p in debug["topic:t2:"]] == [False]

        await wait_for(lambda: _eq(lookup_ids(lk, "t"), sorted([a.local, b.local])), timeout=2.0)
        assert loop.time() - t0 >= 0.45
        ns = await nodes(lk)
        assert ns[a.local]["tombstones"] == [False, False]
    finally:
        await a.aclose()
        await b.aclose()


async def test_inactive_producer_timeout(make_lookupd, session):
    lookupd = await make_lookupd(inactive_producer_timeout=0.3)
    lk = HTTP(session, lookupd.http_port)
    pinger = await LConn.open(lookupd.tcp_port)
    idle = await LConn.open(lookupd.tcp_port)
    stop = asyncio.Event()

    async def keep_pinging() -> None:
        while not stop.is_set():
            await pinger.ping()
            try:
                await asyncio.wait_for(stop.wait(), 0.05)
            except asyncio.TimeoutError:
                pass

    try:
        await pinger.identify(broadcast_address="a.example")
        await idle.identify(broadcast_address="b.example")
        await pinger.register("t")
        await idle.register("t")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await lookup_ids(lk, "t") == sorted([pinger.local, idle.local])
        task = asyncio.create_task(keep_pinging())
        try:
            await wait_for(lambda: _eq(lookup_ids(lk, "t"), [pinger.local]), timeout=2.0)
            assert loop.time() - t0 >= 0.25
            assert list(await nodes(lk)) == [pinger.local]
            # the idle one is only hidden: still registered, and a PING brings it back
            assert [p["id"] for p in (await get_json(lk, "/debug"))["topic:t:"]] == [pinger.local, idle.local]
            await idle.ping()
            assert await lookup_ids(lk, "t") == sorted([pinger.local, idle.local])
            assert sorted(await nodes(lk)) == sorted([pinger.local, idle.local])
            await asyncio.sleep(0.35)  # longer than the timeout: only pinging kept it
            assert pinger.local in await lookup_ids(lk, "t")
        finally:
            stop.set()
            await task
        await wait_for(lambda: _eq(lookup_ids(lk, "t"), []), timeout=2.0)
        assert await nodes(lk) == {}
    finally:
        await pinger.aclose()
        await idle.aclose()


# -- HTTP API --------------------------------------------------------------------------------


async def test_ping_info_and_content_type(lk):
    status, body, headers = await lk.request("GET", "/ping")
    assert (status, body) == (200, b"OK")
    status, body, headers = await lk.request("GET", "/info")
    assert status == 200 and json.loads(body) == {"version": "1.2.1"}
    assert headers["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/lookup", "/channels"])
async def test_missing_topic_arg(lk, path):
    assert await lk.get(path) == (400, error_json("MISSING_ARG_TOPIC"))


async def test_lookup_unknown_topic_is_404(lk):
    assert await lk.get("/lookup", topic="nope") == (404, error_json("TOPIC_NOT_FOUND"))
    assert await lk.get("/lookup", topic="bad!") == (404, error_json("TOPIC_NOT_FOUND"))


@pytest.mark.parametrize("method,path", [("GET", "/nope"), ("POST", "/nope"), ("GET", "/topic/create/x")])
async def test_unknown_path_is_404(lk, method, path):
    status, body, _ = await lk.request(method, path)
    assert (status, body) == (404, error_json("NOT_FOUND"))


@pytest.mark.parametrize("method,path", [
    ("POST", "/lookup"), ("POST", "/ping"), ("PUT", "/nodes"), ("GET", "/topic/create"),
    ("GET", "/topic/delete"), ("GET", "/channel/create"), ("GET", "/channel/delete"),
    ("GET", "/topic/tombstone"), ("DELETE", "/topics"),
])
async def test_wrong_method_is_405(lk, method, path):
    status, body, _ = await lk.request(method, path, params={"topic": "t", "channel": "c"})
    assert (status, body) == (405, error_json("METHOD_NOT_ALLOWED"))
    assert await lookup(lk, "t") is None  # nothing was created


async def test_topic_create_and_delete(lk):
    assert await lk.post("/topic/create") == (400, error_json("MISSING_ARG_TOPIC"))
    assert await lk.post("/topic/create", topic="bad!") == (400, error_json("INVALID_ARG_TOPIC"))
    assert await lk.post("/topic/create", topic="a" * 65) == (400, error_json("INVALID_ARG_TOPIC"))
    assert await topics(lk) == []

    assert await lk.post("/topic/create", topic="t") == (200, b"")
    assert await lk.post("/topic/create", topic="t") == (200, b"")
    assert await topics(lk) == ["t"]
    assert await lookup(lk, "t") == {"channels": [], "producers": []}

    assert await lk.post("/channel/create", topic="t", channel="c") == (200, b"")
    assert await lk.post("/topic/delete") == (400, error_json("MISSING_ARG_TOPIC"))
    assert await lk.post("/topic/delete", topic="t") == (200, b"")
    assert await topics(lk) == []
    assert await channels(lk, "t") == []
    assert await lookup(lk, "t") is None
    assert await lk.post("/topic/delete", topic="never") == (200, b"")


async def test_channel_create_and_delete(lk):
    assert await lk.post("/channel/create", topic="t", channel="c") == (200, b"")
    assert await topics(lk) == ["t"]  # the topic too
    assert await channels(lk, "t") == ["c"]
    assert await lookup(lk, "t") == {"channels": ["c"], "producers": []}
    assert await lk.post("/channel/create", topic="t", channel="d#ephemeral") == (200, b"")
    assert await channels(lk, "t") == ["c", "d#ephemeral"]

    assert await lk.post("/channel/delete", topic="t", channel="c") == (200, b"")
    assert await channels(lk, "t") == ["d#ephemeral"]
    assert await topics(lk) == ["t"]  # the topic stays
    assert await lk.post("/channel/delete", topic="t", channel="c") == (404, error_json("CHANNEL_NOT_FOUND"))
    assert await lk.post("/channel/delete", topic="other", channel="d#ephemeral") == (
        404, error_json("CHANNEL_NOT_FOUND"))


@pytest.mark.parametrize("path", ["/channel/create", "/channel/delete"])
@pytest.mark.parametrize("params,text", [
    ({}, "MISSING_ARG_TOPIC"),
    ({"channel": "c"}, "MISSING_ARG_TOPIC"),
    ({"topic": "bad!", "channel": "c"}, "INVALID_ARG_TOPIC"),
    ({"topic": "bad!"}, "INVALID_ARG_TOPIC"),
    ({"topic": "t"}, "MISSING_ARG_CHANNEL"),
    ({"topic": "t", "channel": "c!"}, "INVALID_ARG_CHANNEL"),
    ({"topic": "t", "channel": ""}, "INVALID_ARG_CHANNEL"),
])
async def test_channel_endpoint_arg_errors(lk, path, params, text):
    assert await lk.post(path, **params) == (400, error_json(text))
    assert await topics(lk) == []


@pytest.fixture
async def fake_nsqd() -> AsyncIterator[tuple[int, list[tuple[str, str, dict[str, str]]]]]:
    """An HTTP server standing in for an nsqd: records (method, path, query)."""
    calls: list[tuple[str, str, dict[str, str]]] = []

    async def handler(request: web.Request) -> web.Response:
        calls.append((request.method, request.path, dict(request.query)))
        return web.Response(text="")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield port, calls
    await runner.cleanup()


async def test_deletes_reach_registered_nsqds(connect, lk, fake_nsqd):
    port, calls = fake_nsqd
    conn = await connect()
    await conn.identify(broadcast_address="127.0.0.1", http_port=port)
    await conn.register("t", "c")
    await conn.register("t", "d")

    assert await lk.post("/channel/delete", topic="t", channel="c") == (200, b"")
    assert calls == [("POST", "/channel/delete", {"topic": "t", "channel": "c"})]
    assert await channels(lk, "t") == ["d"]

    assert await lk.post("/topic/delete", topic="t") == (200, b"")
    assert calls[1:] == [("POST", "/topic/delete", {"topic": "t"})]
    assert await lookup(lk, "t") is None
    assert await channels(lk, "t") == []


async def test_debug_shape(connect, lk):
    conn = await connect()
    await conn.identify(broadcast_address="a.example", tcp_port=1, http_port=2, hostname="h", version="v")
    before = time.time_ns()
    await conn.ping()
    after = time.time_ns()
    await conn.register("t", "c")
    assert await lk.post("/topic/create", topic="empty") == (200, b"")

    debug = await get_json(lk, "/debug")
    assert set(debug) == {"client::", "topic:t:", "channel:t:c"}  # no producer, no key
    for key, entries in debug.items():
        assert len(entries) == 1, key
        entry = entries[0]
        assert set(entry) == {"id", "hostname", "broadcast_address", "tcp_port", "http_port", "version",
                              "last_update", "tombstoned", "tombstoned_at"}
        assert {k: entry[k] for k in ("id", "hostname", "broadcast_address", "tcp_port", "http_port",
                                      "version", "tombstoned")} == {
            "id": conn.local, "hostname": "h", "broadcast_address": "a.example", "tcp_port": 1,
            "http_port": 2, "version": "v", "tombstoned": False}
        # last_update: wall-clock nanoseconds of the PING
        assert before - 50_000_000 <= entry["last_update"] <= after + 50_000_000, key

    t0 = time.time_ns()
    assert await lk.post("/topic/tombstone", topic="t", node="a.example:2") == (200, b"")
    t1 = time.time_ns()
    entry = (await get_json(lk, "/debug"))["topic:t:"][0]
    assert entry["tombstoned"] is True
    assert t0 - 50_000_000 <= entry["tombstoned_at"] <= t1 + 50_000_000


# -- configuration ---------------------------------------------------------------------------


def test_build_options_config_file_and_flags(tmp_path):
    cfg = tmp_path / "nsqlookupd.toml"
    cfg.write_text('tombstone_lifetime = "10s"\ninactive_producer_timeout = 60000\n'
                   'tcp_address = "127.0.0.1:5160"\n')
    opts = build_options(str(cfg), {})
    assert opts.tombstone_lifetime == 10.0
    assert opts.inactive_producer_timeout == 60.0  # a TOML number is milliseconds, as in Go
    assert opts.tcp_address == "127.0.0.1:5160"
    assert opts.http_address == "0.0.0.0:4161"  # default

    opts = build_options(str(cfg), {"opt_tombstone_lifetime": 5.0, "opt_http_address": "127.0.0.1:5161"})
    assert opts.tombstone_lifetime == 5.0  # the flag beats the file
    assert opts.http_address == "127.0.0.1:5161"
    assert opts.inactive_producer_timeout == 60.0

    assert build_options(None, {}).tombstone_lifetime == 45.0
    assert build_options(None, {}).inactive_producer_timeout == 300.0


def test_command_line_durations_are_seconds(tmp_path):
    cfg = tmp_path / "nsqlookupd.toml"
    cfg.write_text('tombstone_lifetime = "10s"\n')
    ctx = lookupd_command.make_context(
        "lookupd", [f"--config={cfg}", "--tombstone-lifetime", "5s", "-inactive-producer-timeout=1m30s"])
    params = dict(ctx.params)
    opts = build_options(params.pop("config"), params)
    assert opts.tombstone_lifetime == 5.0
    assert opts.inactive_producer_timeout == 90.0
