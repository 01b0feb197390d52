"""The two storage engines side by side: every scenario runs once with
``--storage=diskqueue`` and once with ``--storage=wal``, and the whole
``/stats`` document (JSON and text), every ``nsq_*`` sample of
``/metrics`` and every statsd line must come out the same at each step.

What only one engine has (the topic log's offsets and retention) and what
changes from run to run (times, addresses, memory) is left out, and listed
in one place: :data:`ENGINE_ONLY` and :data:`VOLATILE`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from nsq.protocol import commands as c
from nsq.testing import start_nsqd

from .helpers import HTTP, Conn

#: fields only the topic log has (docs/reference/http.md): added to its
#: /stats, never in place of one both engines have
ENGINE_ONLY = {
    "top": {"replication"},  # a topic log can be replicated (docs/operations/replication.md)
    "text": [re.compile(r"\n\nReplication: [^\n]*(\n   \[[^\n]*)*")],
    "topic": {"head_offset", "synced_offset", "first_offset", "retained_bytes", "oldest_timestamp", "retention_time",
              "retention_bytes"},
    "channel": {"offset", "committed_offset"},
    "statsd": (".head_offset:", ".retained_bytes:", ".offset:", "replication."),
    "metrics": {"nsq_topic_head_offset", "nsq_topic_synced_offset", "nsq_topic_first_offset",
                "nsq_topic_retained_bytes", "nsq_topic_retention_seconds", "nsq_topic_retention_bytes",
                "nsq_topic_oldest_timestamp_seconds", "nsq_channel_offset", "nsq_channel_committed_offset",
                "nsq_replication_leader", "nsq_replication_epoch", "nsq_replication_replicas",
                "nsq_replication_lag_messages", "nsq_replication_lag_seconds"},
}
#: fields that differ between any two runs, whatever the engine
VOLATILE = {
    "top": {"start_time", "memory"},
    "client": {"remote_address", "connect_ts"},
    "text": [re.compile(r"^(start_time|uptime) .*$", re.M), re.compile(r"^   (heap|gc|next_gc)\S*\s+\d+$", re.M),
             re.compile(r"connected: \S+")],
}

#: how many fields were compared, by scenario (printed by the last test)
COMPARED: dict[str, int] = {}


def normalize(stats: dict[str, Any]) -> dict[str, Any]:
    """``stats`` without :data:`ENGINE_ONLY` and :data:`VOLATILE` fields."""
    out = {k: v for k, v in stats.items() if k not in VOLATILE["top"] and k not in ENGINE_ONLY["top"]}
    out["producers"] = [_client(p) for p in stats.get("producers") or []]
    topics = []
    for t in stats.get("topics") or []:
        t = {k: v for k, v in t.items() if k not in ENGINE_ONLY["topic"]}
        t["channels"] = [
            {k: ([_client(x) for x in v] if k == "clients" else v)
             for k, v in ch.items() if k not in ENGINE_ONLY["channel"]}
            for ch in t["channels"]
        ]
        topics.append(t)
    out["topics"] = topics
    return out


def _client(client: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in client.items() if k not in VOLATILE["client"]}


def scrub_text(text: str) -> str:
    for pattern in [*VOLATILE["text"], *ENGINE_ONLY["text"]]:
        text = pattern.sub("", text)
    return text


def nsq_samples(text: str) -> dict[str, str]:
    """``{name{labels}: value}`` of the ``nsq_*`` samples, less :data:`ENGINE_ONLY`."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("nsq_"):
            continue
        key, _, value = line.rpartition(" ")
        if key.partition("{")[0] not in ENGINE_ONLY["metrics"]:
            out[key] = value
    return out


def count_fields(doc: Any) -> int:
    if isinstance(doc, dict):
        return sum(count_fields(v) for v in doc.values()) or 1
    if isinstance(doc, list):
        return sum(count_fields(v) for v in doc) or 1
    return 1


class Node:
    """One nsqd with a data path, restartable, and its snapshots."""

    def __init__(self, session: aiohttp.ClientSession, data_path: str, storage: str, options: dict) -> None:
        self.session = session
        self.data_path = data_path
        self.storage = storage
        self.options = options
        self.nsqd: Any = None
        self.conns: list[Conn] = []
        self.snapshots: list[tuple[str, Any]] = []

    async def start(self) -> None:
        self.nsqd = await start_nsqd(data_path=self.data_path, storage=self.storage, **self.options)
        self.http = HTTP(self.session, self.nsqd.http_port)

    async def stop(self) -> None:
        for conn in self.conns:
            await conn.aclose()
        self.conns.clear()
        if self.nsqd is not None:
            await self.nsqd.stop()
            self.nsqd = None

    async def restart(self) -> None:
        """A clean stop (what SIGTERM runs) and a start on the same data path."""
        await self.stop()
        await self.start()

    async def conn(self) -> Conn:
        conn = await Conn.open(self.nsqd.tcp_port)
        self.conns.append(conn)
        return conn

    async def consumer(self, topic: str, channel: str, rdy: int) -> Conn:
        conn = await self.conn()
        await conn.subscribe(topic, channel, rdy=rdy)
        return conn

    async def publish(self, topic: str, *bodies: bytes, defer_ms: int = 0) -> None:
        conn = await self.conn()
        if defer_ms:
            for body in bodies:
                await conn.send(c.dpub(topic, defer_ms, body))
                await conn.expect_ok()
        elif len(bodies) == 1:
            await conn.publish(topic, bodies[0])
        else:
            await conn.send(c.mpub(topic, list(bodies)))
            await conn.expect_ok()

    async def post(self, path: str, **params: str) -> None:
        status, body = await self.http.post(path, **params)
        assert status == 200, (path, params, status, body)

    async def create_channel(self, topic: str, channel: str) -> None:
        await self.post("/topic/create", topic=topic)
        await self.post("/channel/create", topic=topic, channel=channel)

    async def channel(self, topic: str, channel: str) -> dict[str, Any]:
        return await self.http.channel_stats(topic, channel) or {}

    async def until(self, topic: str, channel: str, timeout: float = 10.0, **want: int) -> None:
        """Wait until the channel's /stats fields have the wanted values."""
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            ch = await self.channel(topic, channel)
            if all(ch.get(k) == v for k, v in want.items()):
                return
            assert loop.time() < deadline, f"{self.storage}: {topic}:{channel} never reached {want}: {ch}"
            await asyncio.sleep(0.02)

    async def snap(self, label: str) -> None:
        self.snapshots.append((label, {
            "json": normalize(await self.http.stats()),
            "text": scrub_text((await self.http.get("/stats"))[1].decode()),
            "metrics": nsq_samples((await self.http.get("/metrics"))[1].decode()),
            "statsd": self.statsd_lines(),
        }))

    def statsd_lines(self) -> list[str]:
        """What one statsd push would send (counters since nothing was
        pushed), less :data:`ENGINE_ONLY`."""
        from nsq.server.nsqd.stats.statsd import StatsdPusher

        pusher = StatsdPusher(self.nsqd)
        pusher.mem_stats = False
        pusher.prefix = "nsq."  # not the host:port, which differs between the runs
        lines = [line.decode() for line in pusher.metric_lines()]
        return [line for line in lines if not any(part in line for part in ENGINE_ONLY["statsd"])]


Scenario = Callable[[Node], Awaitable[None]]


async def compare(tmp_path, scenario: Scenario, name: str, **options: Any) -> None:
    nodes = []
    async with aiohttp.ClientSession() as session:
        for storage in ("diskqueue", "wal"):
            path = tmp_path / storage
            path.mkdir()
            node = Node(session, str(path), storage, options)
            await node.start()
            try:
                await scenario(node)
            finally:
                await node.stop()
            nodes.append(node)
    dq, wal = nodes
    assert [label for label, _ in dq.snapshots] == [label for label, _ in wal.snapshots]
    fields = 0
    for (label, a), (_, b) in zip(dq.snapshots, wal.snapshots):
        assert a["json"] == b["json"], f"{name}: /stats JSON differs at {label!r}:\n" + _diff(a["json"], b["json"])
        assert a["text"] == b["text"], f"{name}: /stats text differs at {label!r}"
        assert a["statsd"] == b["statsd"], f"{name}: statsd lines differ at {label!r}:\n" + _diff(a["statsd"],
                                                                                              b["statsd"])
        assert a["metrics"] == b["metrics"], f"{name}: /metrics differs at {label!r}:\n" + _diff(a["metrics"],
                                                                                             b["metrics"])
        fields += count_fields(a["json"]) + len(a["metrics"]) + a["text"].count("\n") + len(a["statsd"])
    COMPARED[name] = fields


def _diff(a: Any, b: Any) -> str:
    import difflib

    return "\n".join(difflib.unified_diff(json.dumps(a, indent=1, sort_keys=True).splitlines(),
                                          json.dumps(b, indent=1, sort_keys=True).splitlines(),
                                          "diskqueue", "wal", lineterm=""))


# -- the scenarios ------------------------------------------------------------------


async def finish(conn: Conn, n: int) -> list[bytes]:
    """Read ``n`` messages on ``conn``, FIN each; their bodies."""
    bodies = []
    for _ in range(n):
        m = await conn.read_message()
        bodies.append(m.body)
        await conn.send(c.fin(m.id))
    return bodies


async def publish(node: Node) -> None:
    await node.publish("t", b"one")
    await node.snap("PUB, no channel")
    await node.publish("t", b"a", b"b", b"c")
    await node.snap("MPUB, no channel")
    await node.publish("t", b"later", defer_ms=60_000)
    await node.snap("DPUB, no channel")
    await node.create_channel("t", "ch")
    await node.until("t", "ch", depth=4, deferred_count=1)
    await node.snap("channel created")
    await node.publish("t", b"d", b"e")
    await node.publish("t", b"f")
    await node.snap("published to the channel, nobody subscribed")


async def consume(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=100)
    await node.publish("t", b"a", b"b")
    got = [await conn.read_message() for _ in range(2)]
    await node.until("t", "ch", in_flight_count=2)
    await node.snap("MPUB of 2, in flight")
    for m in got:
        await conn.send(c.fin(m.id))
    await node.until("t", "ch", in_flight_count=0)
    await node.snap("FIN")
    for i in range(60):
        await node.publish("t", b"m%d" % i)
    await finish(conn, 60)
    await node.until("t", "ch", in_flight_count=0, message_count=62)
    await node.snap("60 more consumed")


async def dpub(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=10)
    await node.publish("t", b"an hour", defer_ms=3_600_000)
    await node.snap("DPUB: deferred at once")
    await node.publish("t", b"soon", defer_ms=50)
    m = await conn.read_message(timeout=5)
    assert m.body == b"soon"
    await conn.send(c.fin(m.id))
    await node.until("t", "ch", in_flight_count=0, deferred_count=1)
    await node.snap("a short DPUB delivered and finished")


async def dpub_backlog(node: Node) -> None:
    await node.create_channel("t", "ch")
    await node.publish("t", *[b"m%d" % i for i in range(30)])
    await node.publish("t", b"deferred", defer_ms=3_600_000)
    await node.snap("DPUB behind a backlog past --mem-queue-size")
    conn = await node.consumer("t", "ch", rdy=50)
    await finish(conn, 30)
    await node.until("t", "ch", in_flight_count=0, depth=0)
    await node.snap("backlog consumed")


async def req(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=10)
    await node.publish("t", b"a", b"b", b"c")
    got = [await conn.read_message() for _ in range(3)]
    await conn.send(c.req(got[0].id, 0))
    await conn.send(c.req(got[1].id, 60_000))
    await conn.send(c.fin(got[2].id))
    again = await conn.read_message()
    assert again.id == got[0].id and again.attempts == 2
    await node.until("t", "ch", in_flight_count=1, deferred_count=1, requeue_count=2)
    await node.snap("REQ without and with a delay")


async def timeout(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=2)
    await node.publish("t", b"a", b"b")
    got = [await conn.read_message() for _ in range(2)]
    await conn.send(c.fin(got[0].id))
    again = await conn.read_message(timeout=5)
    assert again.id == got[1].id
    await node.until("t", "ch", timeout_count=1, in_flight_count=1)
    await node.snap("timed out and delivered again")


async def touch(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=1)
    await node.publish("t", b"a")
    m = await conn.read_message()
    await conn.send(c.touch(m.id))
    await node.snap("TOUCH")
    await conn.send(c.fin(m.id))
    await node.until("t", "ch", in_flight_count=0)
    await node.snap("finished after TOUCH")


async def pause(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=10)
    await node.post("/channel/pause", topic="t", channel="ch")
    await node.publish("t", b"a", b"b")
    await node.snap("channel paused")
    await node.post("/channel/unpause", topic="t", channel="ch")
    await finish(conn, 2)
    await node.until("t", "ch", in_flight_count=0, depth=0)
    await node.post("/topic/pause", topic="t")
    await node.publish("t", b"c", b"d", b"e")
    await node.snap("topic paused")
    await node.post("/topic/unpause", topic="t")
    await finish(conn, 3)
    await node.until("t", "ch", in_flight_count=0, depth=0)
    await node.snap("both unpaused, all consumed")


async def empty(node: Node) -> None:
    await node.create_channel("t", "ch")
    await node.publish("t", *[b"m%d" % i for i in range(10)])
    await node.snap("10 queued")
    await node.post("/channel/empty", topic="t", channel="ch")
    await node.snap("channel emptied")
    await node.post("/topic/pause", topic="t")
    await node.publish("t", b"a", b"b")
    await node.post("/topic/empty", topic="t")
    await node.snap("topic emptied")
    await node.post("/topic/unpause", topic="t")
    await node.snap("unpaused")


async def delete(node: Node) -> None:
    await node.create_channel("t", "ch")
    await node.create_channel("t", "other")
    await node.publish("t", b"a", b"b")
    await node.post("/channel/delete", topic="t", channel="ch")
    await node.snap("channel deleted")
    await node.post("/topic/delete", topic="t")
    await node.snap("topic deleted")
    await node.publish("t", b"c")
    await node.snap("published again")


async def dead_letters(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=1)
    await node.publish("t", b"poison")
    for _ in range(2):
        m = await conn.read_message()
        await conn.send(c.req(m.id, 0))
    await node.until("t", "ch", dead_letter_count=1, in_flight_count=0)
    await node.snap("dead-lettered")


async def sigterm(node: Node) -> None:
    conn = await node.consumer("t", "ch", rdy=200)
    await node.publish("t", *[b"m%d" % i for i in range(150)])
    got = [await conn.read_message() for _ in range(150)]
    for m in got[100:]:
        await conn.send(c.req(m.id, 3_600_000))
    await node.until("t", "ch", in_flight_count=100, deferred_count=50)
    await node.snap("100 in flight, 50 deferred")
    await node.restart()
    await node.snap("after SIGTERM and a start")
    conn = await node.consumer("t", "ch", rdy=200)
    seen = set(await finish(conn, 100))
    assert seen == {b"m%d" % i for i in range(100)}
    await node.until("t", "ch", in_flight_count=0, depth=0)
    await node.snap("the in-flight ones delivered again")


async def restart(node: Node) -> None:
    await node.create_channel("t", "ch")
    await node.publish("t", *[b"m%d" % i for i in range(50)])
    await node.publish("t", b"d", defer_ms=3_600_000)
    await node.publish("held", *[b"h%d" % i for i in range(25)])
    await node.snap("before")
    await node.restart()
    await node.snap("after a restart")
    conn = await node.consumer("t", "ch", rdy=100)
    await finish(conn, 50)
    await node.until("t", "ch", in_flight_count=0, depth=0)
    await node.snap("backlog consumed")


SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    "publish": (publish, {}),
    "consume": (consume, {}),
    "dpub": (dpub, {}),
    "dpub behind a backlog": (dpub_backlog, {"mem_queue_size": 10}),
    "req": (req, {}),
    "timeout": (timeout, {"msg_timeout": 0.3}),
    "touch": (touch, {}),
    "pause": (pause, {}),
    "empty": (empty, {}),
    "delete": (delete, {}),
    "dead letters": (dead_letters, {"max_attempts": 2}),
    "sigterm with in flight and deferred": (sigterm, {}),
    "restart with a backlog": (restart, {"mem_queue_size": 10}),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_both_engines_report_the_same(tmp_path, name: str) -> None:
    scenario, options = SCENARIOS[name]
    await compare(tmp_path, scenario, name, **options)


def test_zz_report_what_was_compared() -> None:
    """Print the count of scenarios and fields compared (run after the others)."""
    if COMPARED:
        print(f"\nengine parity: {len(COMPARED)} scenarios, {sum(COMPARED.values())} fields compared, 0 differences")
