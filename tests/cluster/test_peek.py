"""Peeking over the nsqds of a channel (nsq/cluster/peek.py and
``NSQDHTTPClient.peek``): the pure merge, targets and body text, then the
client against a real in-process nsqd (this project's ``/channel/peek``
and ``/topic/peek``; Go nsqd's HTTP API, https://nsq.io/components/nsqd.html#http-api,
has neither and answers 404 ``NOT_FOUND``)."""

from __future__ import annotations

import base64

import aiohttp
import pytest

from nsq.cluster import NSQDHTTPClient, NSQDHTTPError, PeekedMessage, merge_peeks
from nsq.cluster.model import ClusterSnapshot, NodeInfo, aggregate
from nsq.cluster.peek import PeekTarget, body_text, peek_nsqds, peek_targets


def msg(ts: int, node: str, mid: str = "", attempts: int = 0) -> PeekedMessage:
    return PeekedMessage(id=mid or f"{node[-1]}{ts:015d}", timestamp=ts, attempts=attempts, body=b"b", node=node)


def test_merge_is_oldest_first_over_nsqds_and_stable_for_ties():
    a = [msg(10, "a:1"), msg(30, "a:1"), msg(50, "a:1")]
    b = [msg(20, "b:2"), msg(30, "b:2"), msg(40, "b:2")]
    merged = merge_peeks([a, b])
    assert [(m.timestamp, m.node) for m in merged] == [
        (10, "a:1"), (20, "b:2"), (30, "a:1"), (30, "b:2"), (40, "b:2"), (50, "a:1")]
    assert merge_peeks([]) == [] and merge_peeks([[], b]) == b
    # a requeued message is older than its nsqd's next ones: it still sorts by its timestamp
    assert [m.timestamp for m in merge_peeks([[msg(5, "c:3"), msg(1, "c:3")]])] == [1, 5]


def test_peeked_message_from_json_and_its_age():
    obj = {"id": "0a1b2c3d4e5f6789", "timestamp": 1_700_000_000_500_000_000, "attempts": 2,
           "body": base64.b64encode(b"\xffhi").decode()}
    m = PeekedMessage.from_json(obj, "10.0.0.1:4151", "vm1")
    assert (m.id, m.attempts, m.body, m.where) == ("0a1b2c3d4e5f6789", 2, b"\xffhi", "vm1:4151")
    assert m.age(1_700_000_010.5) == 10.0 and m.age(0) == 0.0
    assert PeekedMessage.from_json(obj, "10.0.0.1:4151").where == "10.0.0.1:4151"
    for bad in ({**obj, "body": "***"}, {**obj, "timestamp": "soon"}, {"id": "x"}, ["not", "an", "object"]):
        with pytest.raises(ValueError):
            PeekedMessage.from_json(bad)


def test_body_text_is_one_line_or_hex():
    assert body_text(b'{"a": 1}') == ('{"a": 1}', True)
    assert body_text("l\u00e9\n\tx\x1b\u2028".encode()) == ("l\u00e9\\n\\tx\\x1b\\u2028", True)
    assert body_text(b"\xff\x00A") == ("ff 00 41", False)
    assert body_text(b"") == ("", True)


def test_targets_are_the_nsqds_with_the_channel_asked_where_the_app_was_told():
    nodes = [NodeInfo(hostname=f"vm{i}", broadcast_address=f"10.0.0.{i}", tcp_port=4150, http_port=4151,
                      version="1.2.1", address=f"https://nsqd{i}.example:4151" if i == 1 else "") for i in (1, 2)]

    def stats(channels: list[str]) -> dict:
        return {"topics": [{"topic_name": "t", "depth": 0, "channels": [{"channel_name": c} for c in channels]}]}

    snap = ClusterSnapshot(taken_at=0, nodes=nodes, topics=aggregate([(nodes[0], stats(["c", "d"])),
                                                                      (nodes[1], stats(["c"]))]))
    assert peek_targets(snap, "t", "c") == [PeekTarget("https://nsqd1.example:4151", "10.0.0.1:4151", "vm1"),
                                           PeekTarget("10.0.0.2:4151", "10.0.0.2:4151", "vm2")]
    assert [t.node for t in peek_targets(snap, "t", "d")] == ["10.0.0.1:4151"]
    assert [t.node for t in peek_targets(snap, "t")] == ["10.0.0.1:4151", "10.0.0.2:4151"]
    assert peek_targets(snap, "t", "gone") == [] and peek_targets(snap, "other", "c") == []


async def post(address: str, path: str, body: bytes = b"") -> None:
    async with aiohttp.ClientSession() as s, s.post(f"http://{address}{path}", data=body) as r:
        assert r.status == 200, await r.text()


async def test_client_peek_against_a_real_nsqd(make_nsqd, tmp_path):
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=1)
    address = f"127.0.0.1:{d.http_port}"
    await post(address, "/topic/create?topic=t")
    await post(address, "/channel/create?topic=t&channel=c")
    await post(address, "/mpub?topic=t", b"m0\nm1\nm2")  # one in memory, two on disk
    await post(address, "/mpub?topic=held", b"h0\nh1")  # no channel: held by the topic
    async with NSQDHTTPClient() as client:
        got = await client.peek(address, "t", "c", n=20, hostname="here")
        assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
        assert {m.node for m in got} == {address} and got[0].where == f"here:{d.http_port}"
        assert [m.body for m in await client.peek(address, "t", "c", n=2)] == [b"m0", b"m1"]
        assert [m.body for m in await client.peek(address, "t", "c", n=0)] == [b"m0"]  # clamped to 1..100
        assert [m.body for m in await client.peek(address, "held")] == [b"h0", b"h1"]
        with pytest.raises(NSQDHTTPError) as err:
            await client.peek(address, "t", "nope")
        assert err.value.status == 404 and "CHANNEL_NOT_FOUND" in err.value.reason

        targets = [PeekTarget(address, address, "here"), PeekTarget("127.0.0.1:1", "127.0.0.1:1")]
        peek = await peek_nsqds(client, targets, "t", "c")
        assert [m.body for m in peek.messages] == [b"m0", b"m1", b"m2"] and peek.asked == 2
        assert len(peek.notes) == 1 and "127.0.0.1:1" in peek.notes[0]
        gone = await peek_nsqds(client, targets[:1], "t", "nope")
        assert gone.messages == [] and gone.notes == [f"nsqd here ({address}): no longer has this channel"]
    channel = d.get_topic("t").channels["c"]
    assert (channel.depth, channel.backend.depth) == (3, 2)  # nothing changed
