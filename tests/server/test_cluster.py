"""A small cluster in one process: a real nsqlookupd and two nsqds registered
with it, plus the Consumer discovering producers through lookupd."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from nsq.client.consumer import Consumer
from nsq.server.lookupd import NSQLookupd
from nsq.server.nsqd.nsqd import NSQD
from .helpers import HTTP, Conn, wait_for

TOMBSTONE_LIFETIME = 0.5


@dataclass
class Cluster:
    session: aiohttp.ClientSession
    lookupd: NSQLookupd
    nsqds: list[NSQD]
    #: the ``make_lookupd`` fixture: lookupds it starts are stopped at teardown
    make_lookupd: Callable[..., Awaitable[NSQLookupd]]
    consumers: list[Consumer] = field(default_factory=list)
    conns: list[Conn] = field(default_factory=list)

    @property
    def lk(self) -> HTTP:
        return HTTP(self.session, self.lookupd.http_port)

    def lk_of(self, lookupd: NSQLookupd) -> HTTP:
        return HTTP(self.session, lookupd.http_port)

    def nsqd_http(self, d: NSQD) -> HTTP:
        return HTTP(self.session, d.http_port)

    async def start_lookupd(self, tcp: str = "127.0.0.1:0", http: str = "127.0.0.1:0") -> NSQLookupd:
        return await self.make_lookupd(tcp_address=tcp, http_address=http, tombstone_lifetime=TOMBSTONE_LIFETIME)

    def consumer(self, topic: str, channel: str, handler=None, **kw: Any) -> Consumer:
        kw.setdefault("lookupd_http_addresses", [self.lookupd.http_address])
        c = Consumer(topic, channel, handler or (lambda m: None), **kw)
        self.consumers.append(c)
        return c


def node(d: NSQD) -> str:
    """The tombstone ``node`` argument of an nsqd."""
    return f"127.0.0.1:{d.http_port}"


async def get_json(h: HTTP, path: str, **params: Any) -> tuple[int, Any]:
    status, body = await h.get(path, **params)
    return status, json.loads(body) if body else None


async def lookup_ports(h: HTTP, topic: str) -> set[int] | None:
    """tcp ports of /lookup's producers (None on 404)."""
    status, data = await get_json(h, "/lookup", topic=topic)
    if status == 404:
        return None
    assert status == 200, data
    return {p["tcp_port"] for p in data["producers"]}


async def node_ports(h: HTTP) -> set[int]:
    status, data = await get_json(h, "/nodes")
    assert status == 200, data
    return {p["tcp_port"] for p in data["producers"]}


async def channels(h: HTTP, topic: str) -> set[str]:
    status, data = await get_json(h, "/channels", topic=topic)
    assert status == 200, data
    return set(data["channels"])


async def topics(h: HTTP) -> set[str]:
    status, data = await get_json(h, "/topics")
    assert status == 200, data
    return set(data["topics"])


@pytest.fixture
async def cluster(make_lookupd, make_nsq_cluster) -> AsyncIterator[Cluster]:
    """A lookupd (tombstones last TOMBSTONE_LIFETIME s) and two nsqds, both
    identified before the test starts (the package's ``make_nsq_cluster``)."""
    local = await make_nsq_cluster(2, lookupd_options={"tombstone_lifetime": TOMBSTONE_LIFETIME})
    async with aiohttp.ClientSession() as session:
        cl = Cluster(session, local.lookupd, local.nsqds, make_lookupd)
        try:
            yield cl
        finally:
            for c in cl.consumers:
                await c.close(timeout=1)
            for conn in cl.conns:
                await conn.aclose()


async def _nodes_are(h: HTTP, ports: set[int]) -> bool:
    return await node_ports(h) == ports


# -- registration ------------------------------------------------------------------


async def test_topics_and_channels_of_both_nsqds_are_registered(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    d1.get_topic("shared").get_channel("c1")
    d2.get_topic("shared").get_channel("c2")
    d2.get_topic("only2")  # a topic without channels registers alone

    async def registered():
        return (await lookup_ports(lk, "shared") == {d1.tcp_port, d2.tcp_port}
                and {"c1", "c2"} <= await channels(lk, "shared")
                and await lookup_ports(lk, "only2") == {d2.tcp_port})

    await wait_for(registered, timeout=3)

    status, data = await get_json(lk, "/lookup", topic="shared")
    assert {"c1", "c2"} <= set(data["channels"])
    by_port = {p["tcp_port"]: p for p in data["producers"]}
    for d in (d1, d2):
        p = by_port[d.tcp_port]
        assert p["broadcast_address"] == "127.0.0.1"
        assert p["http_port"] == d.http_port
        assert p["remote_address"].startswith("127.0.0.1:")
    assert await channels(lk, "only2") == set()
    assert {"shared", "only2"} <= await topics(lk)

    status, data = await get_json(lk, "/nodes")
    nodes = {p["tcp_port"]: p for p in data["producers"]}
    assert set(nodes) == {d1.tcp_port, d2.tcp_port}
    assert "shared" in nodes[d1.tcp_port]["topics"] and "only2" not in nodes[d1.tcp_port]["topics"]
    assert {"shared", "only2"} <= set(nodes[d2.tcp_port]["topics"])
    for n in nodes.values():
        assert n["tombstones"] == [False] * len(n["topics"])

    # an unknown topic is a 404, not an empty producer list
    assert await lookup_ports(lk, "nope") is None


async def test_nsqd_deleting_a_topic_or_channel_unregisters_it(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    d1.get_topic("gone").get_channel("c")
    d2.get_topic("gone")
    await wait_for(lambda: _lookup_is(lk, "gone", {d1.tcp_port, d2.tcp_port}), timeout=3)
    d1.delete_topic("gone")
    await wait_for(lambda: _lookup_is(lk, "gone", {d2.tcp_port}), timeout=3)
    status, data = await get_json(lk, "/nodes")
    assert "gone" not in {n["tcp_port"]: n for n in data["producers"]}[d1.tcp_port]["topics"]

    t = d1.get_topic("gone2")
    t.get_channel("x")
    await wait_for(lambda: _debug_producers(lk, "channel:gone2:x", {d1.tcp_port}), timeout=3)
    t.delete_channel("x")
    # the channel loses its producer; a durable channel stays known (as Go's lookupd)
    await wait_for(lambda: _debug_producers(lk, "channel:gone2:x", set()), timeout=3)
    assert "x" in await channels(lk, "gone2")
    assert await lookup_ports(lk, "gone2") == {d1.tcp_port}


async def _debug_producers(h: HTTP, key: str, ports: set[int]) -> bool:
    status, data = await get_json(h, "/debug")
    assert status == 200
    return {p["tcp_port"] for p in data.get(key, [])} == ports


async def _lookup_is(h: HTTP, topic: str, ports: set[int] | None) -> bool:
    return await lookup_ports(h, topic) == ports


# -- discovery by the Consumer -----------------------------------------------------


async def test_consumer_with_lookupd_gets_messages_from_both_nsqds(cluster: Cluster):
    d1, d2 = cluster.nsqds
    for d in (d1, d2):
        d.get_topic("disc")
    await wait_for(lambda: _lookup_is(cluster.lk, "disc", {d1.tcp_port, d2.tcp_port}), timeout=3)

    got: list[bytes] = []
    consumer = cluster.consumer("disc", "ch", lambda m: got.append(m.body), max_in_flight=10,
                                lookupd_poll_interval=5)
    await consumer.start()
    await wait_for(lambda: _async(len(consumer.connections) == 2), timeout=3)
    assert set(consumer.connections) == {f"127.0.0.1:{d1.tcp_port}", f"127.0.0.1:{d2.tcp_port}"}

    d1.get_topic("disc").publish([b"from-1a", b"from-1b"])
    d2.get_topic("disc").publish([b"from-2"])
    await wait_for(lambda: _async(len(got) == 3), timeout=3)
    assert sorted(got) == [b"from-1a", b"from-1b", b"from-2"]
    # the channel the consumer created is registered on both
    await wait_for(lambda: _lookup_channels_has(cluster.lk, "disc", "ch"), timeout=3)
    await wait_for(lambda: _async(consumer.finish_count == 3), timeout=3)


async def _async(value):
    return value


async def _lookup_channels_has(h: HTTP, topic: str, channel: str) -> bool:
    return channel in await channels(h, topic)


async def test_consumer_drops_a_producer_lookupd_no_longer_lists(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    for d in (d1, d2):
        d.get_topic("drop")
    await wait_for(lambda: _lookup_is(lk, "drop", {d1.tcp_port, d2.tcp_port}), timeout=3)
    consumer = cluster.consumer("drop", "ch", lookupd_poll_interval=0.3, max_in_flight=4)
    await consumer.start()
    addr1, addr2 = f"127.0.0.1:{d1.tcp_port}", f"127.0.0.1:{d2.tcp_port}"
    await wait_for(lambda: _async(set(consumer.connections) == {addr1, addr2}), timeout=3)
    ch1 = d1.get_topic("drop").get_channel("ch")
    assert len(ch1.clients) == 1

    # long enough to see the drop for sure; the tombstone then lapses
    cluster.lookupd.options.tombstone_lifetime = 1.5
    status, body = await lk.post("/topic/tombstone", topic="drop", node=node(d1))
    assert status == 200, body
    await wait_for(lambda: _async(set(consumer.connections) == {addr2}), timeout=2)
    # the connection was really closed (CLS, then close): nsqd lost the client
    await wait_for(lambda: _async(len(ch1.clients) == 0), timeout=2)
    # messages still flow from the producer that remains
    got: list[bytes] = []
    consumer.handler = lambda m: got.append(m.body)
    d2.get_topic("drop").publish([b"still"])
    await wait_for(lambda: _async(got == [b"still"]), timeout=2)
    # listed again once the tombstone lapses: the consumer reconnects
    await wait_for(lambda: _async(set(consumer.connections) == {addr1, addr2}), timeout=3)
    await wait_for(lambda: _async(len(ch1.clients) == 1), timeout=2)


# -- nsqd leaving, tombstones --------------------------------------------------------


async def test_stopped_nsqd_disappears_from_lookup_and_nodes(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    for d in (d1, d2):
        d.get_topic("bye").get_channel("c")
    await wait_for(lambda: _lookup_is(lk, "bye", {d1.tcp_port, d2.tcp_port}), timeout=3)
    await d2.stop()
    await wait_for(lambda: _lookup_is(lk, "bye", {d1.tcp_port}), timeout=3)
    assert await node_ports(lk) == {d1.tcp_port}
    status, data = await get_json(lk, "/nodes")
    assert [n["tcp_port"] for n in data["producers"]] == [d1.tcp_port]
    # the durable topic and channel are still known, with the remaining producer
    assert "c" in await channels(lk, "bye")
    await d1.stop()
    await wait_for(lambda: _async_nodes_empty(lk), timeout=3)
    assert await lookup_ports(lk, "bye") == set()


async def _async_nodes_empty(h: HTTP) -> bool:
    return await node_ports(h) == set()


async def test_tombstone_hides_producer_then_lapses(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    for d in (d1, d2):
        d.get_topic("tomb")
    d1.get_topic("other")
    both = {d1.tcp_port, d2.tcp_port}
    await wait_for(lambda: _lookup_is(lk, "tomb", both), timeout=3)
    await wait_for(lambda: _lookup_is(lk, "other", {d1.tcp_port}), timeout=3)

    status, body = await lk.post("/topic/tombstone", topic="tomb", node=node(d1))
    assert status == 200, body
    assert await lookup_ports(lk, "tomb") == {d2.tcp_port}
    # only that topic: d1 still produces "other"
    assert await lookup_ports(lk, "other") == {d1.tcp_port}
    # /nodes still lists the tombstoned nsqd, flagging the topic
    status, data = await get_json(lk, "/nodes")
    nodes = {n["tcp_port"]: n for n in data["producers"]}
    assert set(nodes) == both
    n1 = nodes[d1.tcp_port]
    flags = dict(zip(n1["topics"], n1["tombstones"]))
    assert flags["tomb"] is True and flags["other"] is False
    assert dict(zip(nodes[d2.tcp_port]["topics"], nodes[d2.tcp_port]["tombstones"]))["tomb"] is False

    # a node that does not match (wrong port) tombstones nothing
    status, _ = await lk.post("/topic/tombstone", topic="tomb", node=f"127.0.0.1:{d2.tcp_port}")
    assert status == 200
    assert await lookup_ports(lk, "tomb") == {d2.tcp_port}

    await wait_for(lambda: _lookup_is(lk, "tomb", both), timeout=TOMBSTONE_LIFETIME + 2)


# -- deletes through lookupd ---------------------------------------------------------


async def test_lookupd_topic_delete_deletes_on_every_nsqd(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    d1.get_topic("del").get_channel("c1")
    d2.get_topic("del").publish([b"x"])
    d2.get_topic("keep")
    await wait_for(lambda: _lookup_is(lk, "del", {d1.tcp_port, d2.tcp_port}), timeout=3)
    await wait_for(lambda: _lookup_is(lk, "keep", {d2.tcp_port}), timeout=3)

    status, body = await lk.post("/topic/delete", topic="del")
    assert status == 200, body
    # done on the nsqds before lookupd answered
    assert d1.get_existing_topic("del") is None
    assert d2.get_existing_topic("del") is None
    assert "del" not in await topics(lk)
    assert await lookup_ports(lk, "del") is None
    assert await channels(lk, "del") == set()
    # the nsqds' own UNREGISTERs arriving later do not bring it back; others stay
    status, data = await get_json(lk, "/nodes")
    for n in data["producers"]:
        assert "del" not in n["topics"]
    assert await lookup_ports(lk, "keep") == {d2.tcp_port}
    assert d2.get_existing_topic("keep") is not None
    # the nsqd HTTP API agrees
    assert await cluster.nsqd_http(d2).topic_stats("del") is None


async def test_lookupd_channel_delete_deletes_on_every_nsqd(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    for d in (d1, d2):
        t = d.get_topic("cdel")
        t.get_channel("doomed")
        t.get_channel("kept")
    await wait_for(lambda: _lookup_is(lk, "cdel", {d1.tcp_port, d2.tcp_port}), timeout=3)
    assert {"doomed", "kept"} <= await channels(lk, "cdel")

    status, body = await lk.post("/channel/delete", topic="cdel", channel="doomed")
    assert status == 200, body
    for d in (d1, d2):
        t = d.get_existing_topic("cdel")
        assert t is not None
        assert set(t.channels) == {"kept"}
    assert await channels(lk, "cdel") == {"kept"}
    assert await lookup_ports(lk, "cdel") == {d1.tcp_port, d2.tcp_port}
    # unknown channel: 404
    status, body = await lk.post("/channel/delete", topic="cdel", channel="doomed")
    assert status == 404 and json.loads(body) == {"message": "CHANNEL_NOT_FOUND"}


async def test_ephemeral_channel_leaves_lookupd_with_its_last_consumer(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    d1.get_topic("eph").get_channel("durable")
    conns = []
    for d in (d1, d2):
        conn = await Conn.open(d.tcp_port)
        cluster.conns.append(conn)
        await conn.subscribe("eph", "e#ephemeral", rdy=1)
        conns.append(conn)
    await wait_for(lambda: _lookup_channels_has(lk, "eph", "e#ephemeral"), timeout=3)
    await wait_for(lambda: _lookup_is(lk, "eph", {d1.tcp_port, d2.tcp_port}), timeout=3)

    # one nsqd still has it: lookupd keeps listing it
    await conns[0].aclose()
    await wait_for(lambda: _async(d1.get_topic("eph").channels.get("e#ephemeral") is None), timeout=3)
    await _settle()
    assert "e#ephemeral" in await channels(lk, "eph")

    await conns[1].aclose()
    await wait_for(lambda: _channels_lack(lk, "eph", "e#ephemeral"), timeout=3)
    assert "durable" in await channels(lk, "eph")
    status, data = await get_json(lk, "/lookup", topic="eph")
    assert "e#ephemeral" not in data["channels"]


async def _channels_lack(h: HTTP, topic: str, channel: str) -> bool:
    return channel not in await channels(h, topic)


async def _settle() -> None:
    """Let queued REGISTER/UNREGISTERs reach lookupd (a short bounded pause)."""
    await asyncio.sleep(0.2)


# -- changing lookupds live -----------------------------------------------------------


async def test_put_config_lookupd_addresses_moves_the_nsqd(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk1 = cluster.lk
    lookupd2 = await cluster.start_lookupd()
    lk2 = cluster.lk_of(lookupd2)
    d1.get_topic("moved").get_channel("c")
    await wait_for(lambda: _lookup_is(lk1, "moved", {d1.tcp_port}), timeout=3)
    assert await node_ports(lk2) == set()

    h1 = cluster.nsqd_http(d1)
    status, body, _ = await h1.request("PUT", "/config/nsqlookupd_tcp_addresses",
                                       data=json.dumps([lookupd2.tcp_address]))
    assert status == 200, body
    assert json.loads(body) == [lookupd2.tcp_address]
    status, body = await h1.get("/config/nsqlookupd_tcp_addresses")
    assert json.loads(body) == [lookupd2.tcp_address]

    # registers everything with the new one ...
    await wait_for(lambda: _lookup_is(lk2, "moved", {d1.tcp_port}), timeout=3)
    assert "c" in await channels(lk2, "moved")
    assert await node_ports(lk2) == {d1.tcp_port}
    # ... and is gone from the old one (d2 stays)
    await wait_for(lambda: _nodes_are(lk1, {d2.tcp_port}), timeout=3)
    assert await lookup_ports(lk1, "moved") == set()
    # later registrations go to the new lookupd only
    d1.get_topic("after-move")
    await wait_for(lambda: _lookup_is(lk2, "after-move", {d1.tcp_port}), timeout=3)
    assert await lookup_ports(lk1, "after-move") is None

    status, body, _ = await h1.request("PUT", "/config/nsqlookupd_tcp_addresses", data="[]")
    assert status == 200, body
    assert json.loads(body) == []
    await wait_for(lambda: _nodes_are(lk2, set()), timeout=3)
    assert await lookup_ports(lk2, "moved") == set()
    assert await node_ports(lk1) == {d2.tcp_port}

    # a body that is not a list of strings is refused
    status, body, _ = await h1.request("PUT", "/config/nsqlookupd_tcp_addresses", data='"x:1"')
    assert status == 400


async def test_new_topic_gets_the_channels_lookupd_knows(cluster: Cluster):
    d1, d2 = cluster.nsqds
    lk = cluster.lk
    t1 = d1.get_topic("pre")
    t1.get_channel("a")
    t1.get_channel("b")
    conn = await Conn.open(d1.tcp_port)
    cluster.conns.append(conn)
    await conn.subscribe("pre", "tmp#ephemeral")
    await wait_for(lambda: _channels_are(lk, "pre", {"a", "b", "tmp#ephemeral"}), timeout=3)

    t2 = d2.get_topic("pre")
    # published right after creation, while lookupd is being asked
    t2.publish([b"first"])
    await wait_for(lambda: _async(set(t2.channels) == {"a", "b"} and not t2.starting), timeout=3)
    # every pre-created channel got the message; ephemeral channels are not pre-created
    for name in ("a", "b"):
        assert t2.channels[name].depth == 1, name
    assert t2.depth == 0
    # and d2 registers them in turn
    await wait_for(lambda: _lookup_is(lk, "pre", {d1.tcp_port, d2.tcp_port}), timeout=3)
    status, data = await get_json(lk, "/debug")
    assert status == 200
    producers = {p["tcp_port"] for p in data["channel:pre:a"]}
    assert producers == {d1.tcp_port, d2.tcp_port}


async def _channels_are(h: HTTP, topic: str, names: set[str]) -> bool:
    return await channels(h, topic) == names


async def test_nsqd_reregisters_after_lookupd_restart(cluster: Cluster):
    """nsqd notices the closed connection at once (not at its next 15 s
    PING, as Go would) and registers everything with the new lookupd."""
    d1, d2 = cluster.nsqds
    old = cluster.lookupd
    d1.get_topic("re").get_channel("c1")
    d2.get_topic("re2")
    await wait_for(lambda: _lookup_is(cluster.lk, "re", {d1.tcp_port}), timeout=3)
    await wait_for(lambda: _lookup_is(cluster.lk, "re2", {d2.tcp_port}), timeout=3)

    tcp, http = old.tcp_address, old.http_address
    await old.stop()
    cluster.lookupd = await cluster.start_lookupd(tcp, http)
    assert cluster.lookupd.tcp_port == old.tcp_port and cluster.lookupd.http_port == old.http_port
    lk = cluster.lk
    assert await topics(lk) == set()  # a new lookupd knows nothing

    await wait_for(lambda: _nodes_are(lk, {d1.tcp_port, d2.tcp_port}), timeout=5)
    await wait_for(lambda: _lookup_is(lk, "re", {d1.tcp_port}), timeout=3)
    await wait_for(lambda: _lookup_is(lk, "re2", {d2.tcp_port}), timeout=3)
    assert await channels(lk, "re") == {"c1"}
    # and goes on forwarding changes
    d2.get_topic("re").get_channel("c2")
    await wait_for(lambda: _channels_are(lk, "re", {"c1", "c2"}), timeout=3)
    await wait_for(lambda: _lookup_is(lk, "re", {d1.tcp_port, d2.tcp_port}), timeout=3)
