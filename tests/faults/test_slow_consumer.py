"""A consumer behind a 1 Mbit/s link taking 10 KB messages.

3 nsqds (``--mem-queue-size=100``). ``nsq tail`` in a host of its own
reads channel "slow" of the three through a link shaped to 1 Mbit/s
(``tc qdisc ... tbf rate 1mbit burst 32kbit latency 400ms`` on what the
host receives; about 12 messages a second), while our Consumer in the
tester reads channel "fast" of the same topic at full speed. 10 KB
messages are published at 150 per second (1.5 MB/s).

What must hold: the fast channel is not slowed (every message there within
a second of its publish, no gap over a second); each nsqd's memory stays
bounded while the slow channel's backlog grows (it goes to the disk queue
past ``--mem-queue-size``; what nsqd writes to the slow client is bounded
by its RDY count and by the transport's flow control,
``pause_writing``/``resume_writing``); once the link is fast again the slow
channel gets every message.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

RATE = 150.0
LOAD = 20.0
PAD = 10_000
MAX_LATENCY = 1.0
MAX_GAP = 1.0
#: RSS growth per nsqd (MiB). The slow channel's backlog is ~8.5 MiB per
#: nsqd by the end: held in memory (as with --mem-queue-size=10000) it
#: measured +8.4 to +8.9 MiB, spilled to disk +1.5 to +2.7
MAX_GROWTH = 6.0


async def test_slow_consumer_link(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=0, clients=("c0",), nsqd_flags=["--mem-queue-size=100"],
                           need_tc=True)
    c0 = cluster.clients["c0"]
    topic = "sl"
    for n in cluster.nsqds:
        n.create(topic, "fast", "slow")
    published = Stream("sl")
    fast = published.view("fast channel, full-speed link")
    slow = published.view("slow channel, 1 Mbit/s link")
    latencies: list[float] = []

    def handle(msg):
        latencies.append(time.time() - msg.timestamp / 1e9)
        fast.got(msg.body)

    consumer = Consumer(topic, "fast", handle, cluster.nsqd_tcp, max_in_flight=200,
                        identify={"heartbeat_interval": 1000})
    cluster.net.slow(c0, "1mbit", "32kbit", "400ms")
    tail = cluster.nsq(c0, "tail", "tail", f"--topic={topic}", "--channel=slow",
                       *(f"--nsqd-tcp-address={a}" for a in cluster.nsqd_tcp), "--max-in-flight=200")
    slow.attach(tail)
    publisher = FailoverPublisher(cluster.nsqd_tcp)
    stop = asyncio.Event()
    try:
        await consumer.start()
        # warm up (imports, first buffers), then the baseline
        for _ in range(30):
            body = published.next_body(PAD)
            await publisher.publish(topic, body)
            published.ack(body)
        await asyncio.sleep(1)
        base = [n.rss() for n in cluster.nsqds]
        peak = list(base)

        load = asyncio.ensure_future(publisher.run(topic, published, RATE, stop, pad=PAD))
        t_load = time.monotonic()
        n_lat = len(latencies)
        while time.monotonic() - t_load < LOAD:
            await asyncio.sleep(0.25)
            peak = [max(p, n.rss()) for p, n in zip(peak, cluster.nsqds)]
        stop.set()
        await load
        t_end = time.monotonic()
        await publisher.drain()
        await fast.wait_delivered(15)
        during = sorted(latencies[n_lat:])
        slow_during = len(slow.delivered())
        backlog = await asyncio.to_thread(lambda: sum(n.channel_depth(topic, "slow") for n in cluster.nsqds))

        cluster.net.unslow(c0)
        t_fast = time.monotonic()
        drained = await slow.wait_delivered(60)
        drain_s = time.monotonic() - t_fast
        gap = fast.longest_gap(t_load + 1, t_end)
        growth = [p - b for p, b in zip(peak, base)]
        p99 = during[int(len(during) * 0.99) - 1] if during else None
        report(fast.row("consumer on a 1 Mbit/s link, 10 KB messages", gap, None,
                        f"latency p99 {p99:.3f} s, max {during[-1]:.3f} s; nsqd RSS +"
                        + "/".join(f"{g:.1f}" for g in growth) + " MiB"))
        report(slow.row("consumer on a 1 Mbit/s link, 10 KB messages", None, drain_s,
                        f"{slow_during} read while slow, backlog {backlog} drained after the link was fast"))
        assert published.acked and during, "nothing was published or consumed"
        assert not fast.lost(), f"fast channel: {len(fast.lost())} acknowledged messages never delivered"
        assert during[-1] <= MAX_LATENCY, f"fast channel: a message took {during[-1]:.2f} s"
        assert gap <= MAX_GAP, f"fast channel: a {gap:.2f} s gap"
        assert max(growth) <= MAX_GROWTH, f"nsqd RSS grew {growth} MiB"
        assert 0 < slow_during < len(published.acked) / 2, f"the link was not slow ({slow_during} read)"
        assert drained, f"slow channel: {len(slow.lost())} acknowledged messages never delivered"
    finally:
        stop.set()
        await publisher.close()
        await consumer.close(timeout=1)
