"""nsqd's statsd push: a real UDP socket receives what a real nsqd sends.

https://nsq.io/components/nsqd.html#statsd--graphite-integration; Go nsqd v1.2.1 nsqd/statsd.go,
internal/statsd, internal/writers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.options import OPTION_SPECS, ConfigError, NSQDOptions
from nsq.server.nsqd.stats.statsd import host_key, metric_line, pack_lines, resolve_prefix

from .helpers import HTTP, Conn, c, wait_for

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages


MEM_GAUGES = ["heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
              "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes"]


class Receiver(asyncio.DatagramProtocol):
    """A statsd stand-in: every datagram on 127.0.0.1:<port>."""

    def __init__(self) -> None:
        self.datagrams: list[bytes] = []
        self.port = 0

    def datagram_received(self, data: bytes, addr) -> None:
        self.datagrams.append(data)

    def take(self) -> list[bytes]:
        out, self.datagrams = self.datagrams, []
        return out


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(Receiver, local_addr=("127.0.0.1", 0))
    proto.port = transport.get_extra_info("sockname")[1]
    yield proto
    transport.close()


def parse(datagrams: list[bytes]) -> list[tuple[str, int, str]]:
    """(name, value, type) per line; every datagram is whole lines."""
    out = []
    for data in datagrams:
        assert data.endswith(b"\n"), data
        for line in data.decode().splitlines():
            name, _, rest = line.rpartition(":")
            value, _, kind = rest.partition("|")
            assert kind in ("c", "g"), line
            out.append((name, int(value), kind))
    return out


def by_name(metrics: list[tuple[str, int, str]]) -> dict[str, tuple[int, str]]:
    out = {}
    for name, value, kind in metrics:
        assert name not in out, f"{name} sent twice in one push"
        out[name] = (value, kind)
    return out


async def create(http: HTTP, topic: str, channel: str) -> None:
    assert (await http.post("/topic/create", topic=topic))[0] == 200
    assert (await http.post("/channel/create", topic=topic, channel=channel))[0] == 200


async def push_and_receive(nsqd: NSQD, receiver: Receiver) -> dict[str, tuple[int, str]]:
    """One push now (no spreading); the metrics it sent."""
    receiver.take()
    sent = await nsqd.statsd.push(spread=0)
    assert sent > 0

    async def arrived():
        return len(receiver.datagrams) >= sent

    await wait_for(arrived, timeout=10)
    return by_name(parse(receiver.take()))


# -- pure helpers ----------------------------------------------------------------------------


def test_prefix_and_host_key():
    assert host_key("10.0.0.1:4151") == "10_0_0_1_4151"
    assert resolve_prefix("nsq.%s", "10.0.0.1", 4151) == "nsq.10_0_0_1_4151."
    assert resolve_prefix("nsq.%s.", "host.example.com", 80) == "nsq.host_example_com_80."
    assert resolve_prefix("nsq.%s", "::1", 4151) == "nsq.[__1]_4151."
    assert resolve_prefix("fixed", "h", 1) == "fixed."
    assert resolve_prefix("", "h", 1) == ""


def test_metric_line_and_packing():
    assert metric_line("p.", "a.b", 3, "c") == b"p.a.b:3|c\n"
    assert metric_line("", "g", -1, "g") == b"g:-1|g\n"
    lines = [b"x" * 9 + b"\n"] * 5 + [b"y" * 40 + b"\n"] + [b"z\n"]
    packets = pack_lines(lines, 30)
    assert b"".join(packets) == b"".join(lines)  # order kept, nothing split or lost
    assert packets == [b"x" * 9 + b"\n" + b"x" * 9 + b"\n" + b"x" * 9 + b"\n",
                       b"x" * 9 + b"\n" + b"x" * 9 + b"\n", b"y" * 40 + b"\n", b"z\n"]
    assert pack_lines([], 508) == []
    assert pack_lines([b"abc\n"], 4) == [b"abc\n"]  # exactly full fits


def test_flags_are_effective():
    for spec in OPTION_SPECS:
        if spec.flag.startswith(("statsd-", "e2e-")):
            assert "later release" not in spec.help, spec.flag


@pytest.mark.parametrize("changes, text", [
    ({"statsd_interval": 0}, "--statsd-interval must be positive"),
    ({"statsd_udp_packet_size": 0}, "--statsd-udp-packet-size must be positive"),
])
async def test_bad_statsd_options_refused(changes, text):
    d = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                         statsd_address="127.0.0.1:8125", **changes))
    with pytest.raises(ConfigError) as info:
        await d.start()
    assert str(info.value) == text
    await d.stop()


# -- a real nsqd -----------------------------------------------------------------------------


async def test_metric_names_types_and_values(make_nsqd, receiver, session):
    nsqd = await make_nsqd(statsd_address=f"127.0.0.1:{receiver.port}", statsd_interval=3600,
                           statsd_mem_stats=False, broadcast_address="127.0.0.1")
    prefix = f"nsq.127_0_0_1_{nsqd.http_port}."
    assert nsqd.options.statsd_prefix == prefix  # Go's New() rewrites the option
    http = HTTP(session, nsqd.http_port)
    status, body = await http.get("/config/statsd_prefix")
    assert json.loads(body) == prefix
    await create(http, "orders", "billing")
    for body in (b"one", b"two", b"three"):
        assert (await http.post("/pub", body, topic="orders"))[0] == 200

    metrics = await push_and_receive(nsqd, receiver)
    t, ch = prefix + "topic.orders", prefix + "topic.orders.channel.billing"
    assert metrics == {
        f"{t}.message_count": (3, "c"),
        f"{t}.message_bytes": (11, "c"),
        f"{t}.depth": (0, "g"),
        f"{t}.backend_depth": (0, "g"),
        f"{ch}.message_count": (3, "c"),
        f"{ch}.depth": (3, "g"),
        f"{ch}.backend_depth": (0, "g"),
        f"{ch}.in_flight_count": (0, "g"),
        f"{ch}.deferred_count": (0, "g"),
        f"{ch}.requeue_count": (0, "c"),
        f"{ch}.timeout_count": (0, "c"),
        f"{ch}.clients": (0, "g"),
    }

    # counters are the change since the last push; gauges the current value
    conn = await Conn.open(nsqd.tcp_port)
    try:
        await conn.subscribe("orders", "billing", rdy=1)
        msg = await conn.read_message(timeout=10)
        await conn.send(c.req(msg.id, 0))

        async def requeued():
            return nsqd.topics["orders"].channels["billing"].requeue_count == 1

        await wait_for(requeued, timeout=10)
        assert (await http.post("/pub", b"four", topic="orders"))[0] == 200
        assert (await http.post("/topic/create", topic="audit"))[0] == 200

        async def settled():  # the requeued message went out again
            return len(nsqd.topics["orders"].channels["billing"].in_flight) == 1

        await wait_for(settled, timeout=10)
        metrics = await push_and_receive(nsqd, receiver)
    finally:
        await conn.aclose()
    assert metrics[f"{t}.message_count"] == (1, "c")
    assert metrics[f"{t}.message_bytes"] == (4, "c")
    assert metrics[f"{ch}.message_count"] == (1, "c")
    assert metrics[f"{ch}.requeue_count"] == (1, "c")
    assert metrics[f"{ch}.in_flight_count"] == (1, "g")
    assert metrics[f"{ch}.depth"] == (3, "g")
    assert metrics[f"{ch}.clients"] == (1, "g")
    # a topic without channels: topic metrics only, its messages held in it
    a = prefix + "topic.audit"
    assert {k: v for k, v in metrics.items() if k.startswith(a)} == {
        f"{a}.message_count": (0, "c"), f"{a}.message_bytes": (0, "c"),
        f"{a}.depth": (0, "g"), f"{a}.backend_depth": (0, "g"),
    }
    metrics = await push_and_receive(nsqd, receiver)
    assert metrics[f"{t}.message_count"] == (0, "c")
    assert metrics[f"{ch}.requeue_count"] == (0, "c")


async def test_periodic_push_counts_every_message_once(make_nsqd, receiver, session):
    nsqd = await make_nsqd(statsd_address=f"127.0.0.1:{receiver.port}", statsd_interval=0.2,
                           statsd_prefix="", statsd_mem_stats=False)
    http = HTTP(session, nsqd.http_port)
    published = 0
    for round_ in range(5):
        for _ in range(round_ + 1):
            assert (await http.post("/pub", b"x", topic="ticks"))[0] == 200
            published += 1
        await asyncio.sleep(0.1)

    def counted() -> int:
        return sum(v for name, v, kind in parse(list(receiver.datagrams)) if name == "topic.ticks.message_count")

    async def all_counted():
        return counted() >= published

    await wait_for(all_counted, timeout=30)
    pushes = nsqd.statsd.pushes

    async def two_more():
        return nsqd.statsd.pushes >= pushes + 2

    await wait_for(two_more, timeout=30)
    await asyncio.sleep(0.1)
    assert counted() == published  # later pushes add 0: nothing counted twice
    depths = []
    for name, value, kind in parse(receiver.take()):
        assert not name.startswith("nsq.")  # empty prefix: bare names
        if name == "topic.ticks.depth":
            assert kind == "g"
            depths.append(value)
    assert depths[-1] == published  # no channel: all held in the topic
    assert depths == sorted(depths)


async def test_packets_never_exceed_packet_size(make_nsqd, receiver, session):
    size = 120
    nsqd = await make_nsqd(statsd_address=f"127.0.0.1:{receiver.port}", statsd_interval=3600,
                           statsd_udp_packet_size=size, broadcast_address="127.0.0.1")
    http = HTTP(session, nsqd.http_port)
    long_name = "t" * 64  # longest valid topic name: its lines exceed 120 bytes
    for topic in ("a", "bb", long_name):
        await create(http, topic, "c")
    receiver.take()
    sent = await nsqd.statsd.push(spread=0)

    async def arrived():
        return len(receiver.datagrams) >= sent

    await wait_for(arrived, timeout=10)
    datagrams = receiver.take()
    assert len(datagrams) == sent > 5
    for data in datagrams:
        lines = data.splitlines(keepends=True)
        assert len(data) <= size or len(lines) == 1, data
    metrics = by_name(parse(datagrams))
    assert any(long_name in name for name in metrics)
    # memory stats are on by default: Go's names and types
    mem = {name.split(".mem.", 1)[1]: v for name, v in metrics.items() if ".mem." in name}
    assert set(mem) == set(MEM_GAUGES) | {"gc_runs"}
    assert all(kind == "g" for key, (value, kind) in mem.items() if key != "gc_runs")
    assert mem["gc_runs"][1] == "c" and mem["gc_runs"][0] >= 0
    assert mem["heap_in_use_bytes"][0] > 0 and mem["heap_objects"][0] > 0


async def test_e2e_percentile_gauges(make_nsqd, receiver, session):
    nsqd = await make_nsqd(statsd_address=f"127.0.0.1:{receiver.port}", statsd_interval=3600,
                           statsd_mem_stats=False, statsd_prefix="x.%s.y",
                           broadcast_address="127.0.0.1", e2e_processing_latency_percentiles=[0.5, 0.99])
    prefix = f"x.127_0_0_1_{nsqd.http_port}.y."
    http = HTTP(session, nsqd.http_port)
    conn = await Conn.open(nsqd.tcp_port)
    try:
        await conn.subscribe("lat", "ch", rdy=10)
        assert (await http.post("/mpub", b"a\nb\nc", topic="lat"))[0] == 200
        for _ in range(3):
            msg = await conn.read_message(timeout=10)
            await conn.send(c.fin(msg.id))

        async def finished():
            ch = await http.channel_stats("lat", "ch")
            return ch["e2e_processing_latency"]["count"] == 3

        await wait_for(finished, timeout=10)
        metrics = await push_and_receive(nsqd, receiver)
    finally:
        await conn.aclose()
    for key in (f"{prefix}topic.lat", f"{prefix}topic.lat.channel.ch"):
        p99, kind99 = metrics[f"{key}.e2e_processing_latency_99"]
        p50, kind50 = metrics[f"{key}.e2e_processing_latency_50"]
        assert kind99 == kind50 == "g"
        assert p99 >= p50 > 0


async def test_unusable_address_logs_and_skips(make_nsqd, caplog):
    nsqd = await make_nsqd(statsd_address="no-port-here", statsd_interval=3600)
    assert await nsqd.statsd.push(spread=0) == 0
    assert "failed to create UDP socket to statsd(no-port-here)" in caplog.text


async def test_stop_ends_the_loop_promptly(receiver):
    d = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                         statsd_address=f"127.0.0.1:{receiver.port}", statsd_interval=3600))
    await d.start()
    task = d.statsd._task
    assert task is not None and not task.done()
    await asyncio.wait_for(d.stop(), 10)
    assert task.done()
