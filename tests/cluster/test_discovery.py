"""Discovery over every lookupd (nsq/client/lookupd.py, nsq/cluster/lookupd.py,
nsq/cluster/nsqd.py) against real in-process lookupds and nsqds.

Semantics are Go's ``internal/clusterinfo/data.go`` (nsqio/nsq):
``GetLookupdTopicProducers`` / ``GetLookupdProducers`` ask every lookupd,
union the producers, collect the failures and fail only when no lookupd
answered; ``GetNSQDTopicProducers`` keeps the nsqds whose /stats has the
topic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest

from nsq.client.lookupd import HTTPAPIError, LookupdError, LookupdHTTPClient, LookupdQueryError
from nsq.cluster import (
    NSQDHTTPClient,
    StatPoller,
    lookupd_producers,
    nsqd_topic_producers,
    topic_nsqds,
    topic_producers,
)
from nsq.server.lookupd import NSQLookupd
from nsq.server.nsqd.nsqd import NSQD

#: a port nothing listens on (connections are refused at once)
DEAD = "127.0.0.1:1"


@dataclass
class Topology:
    """Lookupds and nsqds in this process; each nsqd registers with the
    lookupds it was started with."""

    lookupds: list[NSQLookupd] = field(default_factory=list)
    nsqds: list[NSQD] = field(default_factory=list)

    def lookupd_http(self, *which: int) -> list[str]:
        return [self.lookupds[i].http_address for i in (which or range(len(self.lookupds)))]


async def post(address: str, path: str, body: bytes = b"") -> None:
    async with aiohttp.ClientSession() as s, s.post(f"http://{address}{path}", data=body) as r:
        assert r.status == 200, await r.text()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def listed(lookupd: NSQLookupd, topic: str, nsqds: list[NSQD]) -> None:
    """Wait until ``lookupd``'s /lookup lists exactly ``nsqds`` for ``topic``."""
    want = {d.tcp_port for d in nsqds}

    async def check() -> bool:
        async with LookupdHTTPClient() as c:
            found = await c.lookup(lookupd.http_address, topic)
        return {p["tcp_port"] for p in found["producers"]} == want

    await eventually(check)


@pytest.fixture
def topology(make_lookupd, make_nsqd) -> Callable[..., Awaitable[Topology]]:
    """``await topology(lookupds=2, nsqds=[[0, 1], [1]])``: two lookupds,
    the first nsqd registered with both, the second with lookupd 1 only
    (the package's ``make_lookupd`` and ``make_nsqd``: they stop them)."""

    async def build(lookupds: int = 1, nsqds: list[list[int]] = ()) -> Topology:
        t = Topology()
        for _ in range(lookupds):
            t.lookupds.append(await make_lookupd())
        for registered in nsqds:
            t.nsqds.append(await make_nsqd(nsqlookupd_tcp_addresses=[t.lookupds[i].tcp_address
                                                                     for i in registered]))
        return t

    return build


# -- topic_producers (/lookup) --------------------------------------------------------


async def test_topic_producers_unions_every_lookupd_once_per_nsqd(topology):
    """nsqd 0 is known to both lookupds, nsqd 1 only to lookupd 1: each is
    listed once, with the addresses clients use."""
    t = await topology(lookupds=2, nsqds=[[0, 1], [1]])
    a, b = t.nsqds
    for d in (a, b):
        await post(d.http_address, "/topic/create?topic=orders")
    await listed(t.lookupds[0], "orders", [a])
    await listed(t.lookupds[1], "orders", [a, b])

    producers = await topic_producers(t.lookupd_http(), "orders")

    assert producers.errors == []
    assert sorted(p.tcp_port for p in producers) == sorted([a.tcp_port, b.tcp_port])
    by_port = {p.tcp_port: p for p in producers}
    assert by_port[a.tcp_port].tcp_address == f"127.0.0.1:{a.tcp_port}"
    assert by_port[a.tcp_port].http_address == f"127.0.0.1:{a.http_port}"
    assert by_port[b.tcp_port].hostname and by_port[b.tcp_port].version


async def test_topic_producers_only_lists_nsqds_with_the_topic(topology):
    t = await topology(lookupds=1, nsqds=[[0], [0]])
    a, b = t.nsqds
    await post(a.http_address, "/topic/create?topic=only_a")
    await listed(t.lookupds[0], "only_a", [a])

    producers = await topic_producers(t.lookupd_http(), "only_a")
    assert [p.tcp_port for p in producers] == [a.tcp_port]
    assert await topic_producers(t.lookupd_http(), "nobody_has_it") == []


async def test_one_lookupd_down_is_an_error_next_to_the_producers(topology):
    t = await topology(lookupds=1, nsqds=[[0]])
    (a,) = t.nsqds
    await post(a.http_address, "/topic/create?topic=partial")
    await listed(t.lookupds[0], "partial", [a])

    producers = await topic_producers([DEAD] + t.lookupd_http(), "partial")

    assert [p.tcp_port for p in producers] == [a.tcp_port]
    (err,) = producers.errors
    assert isinstance(err, LookupdError) and err.address == DEAD and err.status is None
    assert str(err).startswith(f"lookupd {DEAD}: ")


async def test_every_lookupd_down_raises_with_each_error():
    with pytest.raises(LookupdQueryError) as info:
        await topic_producers([DEAD, "127.0.0.1:2"], "t")
    assert [e.address for e in info.value.errors] == [DEAD, "127.0.0.1:2"]
    assert str(info.value).startswith("failed to query any nsqlookupd: ")
    assert isinstance(info.value, LookupdError)


async def test_no_lookupd_address_finds_nothing_and_asks_nobody():
    producers = await topic_producers([], "t")
    assert producers == [] and producers.errors == []


async def test_a_shared_client_is_used_and_left_open(topology):
    t = await topology(lookupds=1, nsqds=[[0]])
    (a,) = t.nsqds
    await post(a.http_address, "/topic/create?topic=shared")
    await listed(t.lookupds[0], "shared", [a])
    async with LookupdHTTPClient(user_agent="test/1") as client:
        first = await topic_producers(t.lookupd_http(), "shared", client=client)
        second = await topic_producers(["http://" + t.lookupd_http()[0] + "/"], "shared", client=client)
        assert first == second and len(first) == 1


# -- lookupd_producers (/nodes) and topic_nsqds --------------------------------------


async def test_lookupd_producers_lists_every_registered_nsqd(topology):
    t = await topology(lookupds=2, nsqds=[[0], [1], [0, 1]])
    await post(t.nsqds[0].http_address, "/topic/create?topic=x")
    await listed(t.lookupds[0], "x", [t.nsqds[0]])

    async def all_registered() -> bool:
        return len(await lookupd_producers(t.lookupd_http())) == 3

    await eventually(all_registered)
    nodes = await lookupd_producers(t.lookupd_http())
    assert sorted(p.tcp_port for p in nodes) == sorted(d.tcp_port for d in t.nsqds)
    assert {p.tcp_port: p.topics for p in nodes}[t.nsqds[0].tcp_port] == ("x",)

    with pytest.raises(LookupdQueryError):
        await lookupd_producers([DEAD])


async def test_topic_nsqds_keeps_a_tombstoned_producer(topology):
    """A tombstone hides an nsqd from /lookup; an admin action (delete)
    must still reach it, so topic_nsqds adds it back from /nodes."""
    t = await topology(lookupds=1, nsqds=[[0], [0]])
    a, b = t.nsqds
    for d in (a, b):
        await post(d.http_address, "/topic/create?topic=ts")
    await listed(t.lookupds[0], "ts", [a, b])
    await post(t.lookupd_http()[0], f"/topic/tombstone?topic=ts&node=127.0.0.1:{b.http_port}")
    await listed(t.lookupds[0], "ts", [a])

    assert [p.tcp_port for p in await topic_producers(t.lookupd_http(), "ts")] == [a.tcp_port]
    both = await topic_nsqds(t.lookupd_http(), "ts")
    assert sorted(p.tcp_port for p in both) == sorted([a.tcp_port, b.tcp_port]) and both.errors == []

    down = await topic_nsqds([DEAD], "ts")  # never raises: the failure is in errors
    assert down == [] and [e.address for e in down.errors] == [DEAD]


# -- without lookupd: the nsqds' /stats -------------------------------------------------


async def test_nsqd_topic_producers_asks_each_nsqd(topology):
    t = await topology(lookupds=0, nsqds=[[], []])
    a, b = t.nsqds
    await post(b.http_address, "/topic/create?topic=on_b")
    async with NSQDHTTPClient() as client:
        found, errors = await nsqd_topic_producers([a.http_address, b.http_address + "/", DEAD], "on_b", client)
    assert found == [b.http_address]
    (err,) = errors
    assert isinstance(err, HTTPAPIError) and str(err).startswith(f"nsqd {DEAD}: ")


# -- a tool on top: nsq stat through lookupd -------------------------------------------


async def test_stat_poller_finds_the_channel_through_the_lookupds(topology):
    t = await topology(lookupds=2, nsqds=[[0, 1], [1]])
    a, b = t.nsqds
    for d in (a, b):
        await post(d.http_address, "/topic/create?topic=st")
        await post(d.http_address, "/channel/create?topic=st&channel=c")
        await post(d.http_address, "/pub?topic=st", b"m")
    await listed(t.lookupds[1], "st", [a, b])
    poller = StatPoller("st", "c", lookupd=t.lookupd_http(), interval=1.0)
    try:
        report = await poller.poll()
    finally:
        await poller.close()
    assert report.error is None
    assert [n.address for n in report.nodes] == sorted([a.http_address, b.http_address])
    assert report.totals is not None and report.totals["depth"] == 2 and report.totals["message_count"] == 2

    poller = StatPoller("st", "c", lookupd=[DEAD], interval=1.0)
    try:
        report = await poller.poll()
    finally:
        await poller.close()
    assert report.error and report.error.startswith("failed to get topic producers - failed to query any nsqlookupd")
