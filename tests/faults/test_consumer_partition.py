"""A consumer cut off while it holds messages in flight.

3 nsqds. A consumer in a host of its own (tests/faults/holder.py: our
Consumer, 1 s heartbeats, a 5 s message timeout, never answers a message)
holds up to 15 messages; another consumer of the same channel (our
Consumer in the tester) finishes what it gets. Then the holder's link goes
down (packets dropped, no RST).

What must hold (https://nsq.io/clients/tcp_protocol_spec.html, "IDENTIFY":
``heartbeat_interval``; https://nsq.io/overview/design.html, "Message
timeouts"): each nsqd closes the holder's connection after two missed
heartbeats; every message it held times out and reaches the other consumer
within the message timeout plus a few seconds of the cut; nothing
acknowledged is lost (every message ends at the other consumer, since the
holder never finishes one).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.cluster import PYTHON, ROOT
from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

RATE = 60.0
HEARTBEAT_MS = 1000
MSG_TIMEOUT_MS = 5000
#: two missed heartbeats, and slack for nsqd's timer
MAX_CLOSE = 2 * HEARTBEAT_MS / 1000 + 1.5
#: the held messages' timeout, and a few seconds
MAX_REDELIVER = MSG_TIMEOUT_MS / 1000 + 3.0
MAX_GAP = 3.0



async def test_consumer_partition(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=0, clients=("c0",))
    topic, channel = "cp", "work"
    for n in cluster.nsqds:
        n.create(topic, channel)
    published = Stream("cp")
    other = published.view("other consumer of the channel")
    holder = cluster.run(cluster.clients["c0"], "holder", PYTHON, str(ROOT / "tests/faults/holder.py"),
                         f"--topic={topic}", f"--channel={channel}", *(f"--nsqd={a}" for a in cluster.nsqd_tcp),
                         f"--heartbeat-ms={HEARTBEAT_MS}", f"--msg-timeout-ms={MSG_TIMEOUT_MS}")
    consumer = Consumer(topic, channel, lambda m: other.got(m.body), cluster.nsqd_tcp, max_in_flight=30,
                        identify={"heartbeat_interval": HEARTBEAT_MS})
    publisher = FailoverPublisher(cluster.nsqd_tcp)
    stop = asyncio.Event()
    try:
        deadline = time.monotonic() + 15
        while sum([await asyncio.to_thread(n.clients, topic, channel, "holder") for n in cluster.nsqds]) < 3:
            assert holder.proc.poll() is None, holder.stderr()
            assert time.monotonic() < deadline, "the holder did not connect to every nsqd"
            await asyncio.sleep(0.1)
        await consumer.start()
        load = asyncio.ensure_future(publisher.run(topic, published, RATE, stop))
        t_load = time.monotonic()
        await asyncio.sleep(7)  # the holder's first messages time out, it takes more

        cluster.net.partition(holder.host)
        t_cut = time.monotonic()
        # held at the cut: what the holder got in the last message timeout
        held = {Stream.key(line) for t, line in list(holder.lines) if t > t_cut - MSG_TIMEOUT_MS / 1000}
        closed_after = None
        while time.monotonic() - t_cut < MAX_REDELIVER + 2:
            if closed_after is None:
                counts = [await asyncio.to_thread(n.clients, topic, channel, "holder") for n in cluster.nsqds]
                if not any(counts):
                    closed_after = time.monotonic() - t_cut
            await asyncio.sleep(0.1)
        stop.set()
        await load
        t_end = time.monotonic()
        await publisher.drain()
        await other.wait_delivered(15)

        first_after = {}
        for t, body in other.deliveries:
            if body in held and t > t_cut and body not in first_after:
                first_after[body] = t - t_cut
        missing = held - set(first_after)
        redelivered_in = max(first_after.values(), default=None)
        gap = other.longest_gap(t_load + 1, t_end)
        report(other.row("consumer partitioned holding messages", gap, redelivered_in,
                         f"{len(held)} held at the cut; nsqd closed it after "
                         + (f"{closed_after:.1f} s" if closed_after is not None else "never")))
        assert held, "the holder held nothing at the cut"
        assert closed_after is not None and closed_after <= MAX_CLOSE, \
            f"nsqd did not close the cut-off consumer within {MAX_CLOSE} s ({closed_after})"
        assert not missing, f"{len(missing)} held messages never reached the other consumer"
        assert redelivered_in <= MAX_REDELIVER, f"held messages came back after {redelivered_in:.1f} s"
        assert not other.lost(), f"{len(other.lost())} acknowledged messages never delivered"
        assert gap <= MAX_GAP, f"a {gap:.1f} s gap at the other consumer"
    finally:
        stop.set()
        await publisher.close()
        await consumer.close(timeout=1)
