"""A lookupd cut off from the cluster for 30 s.

3 nsqds registered with 2 lookupds (``--inactive-producer-timeout=20s``,
above nsqd's fixed 15 s PING, so the cut-off lookupd stops listing them
during the partition). Consumers that know both lookupds (our Consumer, and
``nsq tail`` in a host of its own) keep consuming from every nsqd: their
connections do not depend on a lookupd, and a lookupd that does not answer
is not taken as "no producers". After the heal, every nsqd reconnects to the
lookupd and is listed again (nsqd/lookup.py: PING every 15 s, reconnect
1 s doubling to 15 s). https://nsq.io/components/nsqlookupd.html
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

PARTITION = 30.0
RATE = 100.0
MAX_GAP = 3.0
#: nsqd's lookupd reconnect backoff reaches 15 s, plus its 5 s connect timeout
MAX_RELIST = 25.0


async def test_lookupd_partition(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=2, clients=("c0",), lookupd_flags=["--inactive-producer-timeout=20s"])
    lk0, lk1 = cluster.lookupds
    topic = "lk"
    for n in cluster.nsqds:
        n.create(topic, "lib", "tail")
    cluster.wait_registered(topic)
    want = {n.host.ip for n in cluster.nsqds}

    published = Stream("lk")
    lib = published.view("Consumer via 2 lookupds")
    tail_stream = published.view("nsq tail via 2 lookupds")

    def handle(msg):
        lib.got(msg.body)

    consumer = Consumer(topic, "lib", handle, lookupd_http_addresses=cluster.lookupd_http, lookupd_poll_interval=2.0,
                        max_in_flight=50, identify={"heartbeat_interval": 1000})
    tail = cluster.nsq(cluster.clients["c0"], "tail", "tail", f"--topic={topic}", "--channel=tail",
                       *(f"--lookupd-http-address={a}" for a in cluster.lookupd_http),
                       "--consumer-opt=lookupd_poll_interval,2s", "--consumer-opt=heartbeat_interval,1s")
    tail_stream.attach(tail)
    publisher = FailoverPublisher(cluster.nsqd_tcp)
    stop = asyncio.Event()
    try:
        await consumer.start()
        deadline = time.monotonic() + 15
        while len(consumer.connections) < 3 or sum(n.clients(topic, "tail") for n in cluster.nsqds) < 3:
            assert time.monotonic() < deadline, "consumers did not connect to every nsqd"
            await asyncio.sleep(0.1)

        load = asyncio.ensure_future(publisher.run(topic, published, RATE, stop))
        t_load = time.monotonic()
        await asyncio.sleep(3)

        cluster.net.partition(lk0.host)
        t_cut = time.monotonic()
        delisted_at = None
        while time.monotonic() - t_cut < PARTITION:
            await asyncio.sleep(1)
            # asked from inside the cut-off host: what it still lists
            listed = await asyncio.to_thread(lk0.node_addresses, lk0.host)
            if delisted_at is None and not listed & want:
                delisted_at = time.monotonic() - t_cut
            assert await asyncio.to_thread(lk1.lookup, topic) >= want, "the other lookupd lost a producer"
        cluster.net.heal(lk0.host)
        t_heal = time.monotonic()
        relisted = None
        while relisted is None:
            try:
                if await asyncio.to_thread(lk0.lookup, topic) >= want:
                    relisted = time.monotonic() - t_heal
                    break
            except OSError:
                pass
            assert time.monotonic() - t_heal < MAX_RELIST + 10, "nsqds not listed again by the healed lookupd"
            await asyncio.sleep(0.1)
        assert await asyncio.to_thread(lk0.node_addresses) >= want

        await asyncio.sleep(2)
        stop.set()
        await load
        t_end = time.monotonic()
        await publisher.drain()
        for s in (lib, tail_stream):
            await s.wait_delivered(15)
        assert tail.proc.poll() is None, tail.stderr()
        gaps = {s.label: s.longest_gap(t_load + 1, t_end) for s in (lib, tail_stream)}
        for s in (lib, tail_stream):
            report(s.row("lookupd partitioned 30 s", gaps[s.label], relisted,
                         f"delisted after {delisted_at:.1f} s" if delisted_at is not None else "never delisted"))
        assert published.acked, f"nothing was acknowledged: {publisher.errors[:3]}"
        for s in (lib, tail_stream):
            s.check(gaps[s.label], MAX_GAP)
        assert delisted_at is not None, "the cut-off lookupd still listed the nsqds after 30 s"
        assert relisted <= MAX_RELIST
    finally:
        stop.set()
        await publisher.close()
        await consumer.close(timeout=1)


