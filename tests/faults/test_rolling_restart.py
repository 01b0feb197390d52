"""Each nsqd restarted in turn (SIGTERM) under load.

3 nsqds (default flags: a clean stop writes memory, in-flight and deferred
messages to the disk queues), 2 lookupds. ``nsq pub`` and our Producers
behind a round robin publish to the three; ``nsq tail`` (through the
lookupds) and our Consumer (given the three) consume. nsqd n0, n1, n2 get
SIGTERM one after the other; each is started again as soon as it has
exited, and the next one goes once the consumers are back on it.

What must hold: 0 acknowledged lost (messages in flight at a stop come
again after the restart: duplicates), no gap over 5 s at any consumer,
every nsqd exits 0.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

RATE = 100.0
PUB_LINES = 2500
MAX_GAP = 5.0
MAX_BACK = 10.0



async def test_rolling_restart(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=2, clients=("c0",), lookupd_flags=["--inactive-producer-timeout=20s"])
    c0 = cluster.clients["c0"]
    for n in cluster.nsqds:
        n.create("rs", "lib")
        n.create("rp", "tail")
    cluster.wait_registered("rp")
    rr_stream = Stream("rs").view("Producers round robin -> Consumer")
    pub_stream = Stream("rp").view("nsq pub -> nsq tail")
    identify = {"heartbeat_interval": 1000}
    consumer = Consumer("rs", "lib", lambda m: rr_stream.got(m.body), cluster.nsqd_tcp, max_in_flight=50,
                        identify=identify, reconnect_max_delay=1.0, connect_timeout=2.0)
    tail = cluster.nsq(c0, "tail", "tail", "--topic=rp", "--channel=tail",
                       *(f"--lookupd-http-address={a}" for a in cluster.lookupd_http),
                       "--consumer-opt=lookupd_poll_interval,1s", "--consumer-opt=heartbeat_interval,1s")
    pub_stream.attach(tail)
    rr = FailoverPublisher(cluster.nsqd_tcp, identify)
    stop = asyncio.Event()
    try:
        await consumer.start()
        await cluster.wait_consumers(consumer, "rp", "tail")
        lines = pub_stream.numbered(PUB_LINES)
        pub = cluster.nsq(c0, "pub", "pub", "--topic=rp", *(f"--nsqd-tcp-address={a}" for a in cluster.nsqd_tcp),
                          f"--rate={int(RATE)}", stdin=lines)
        load = asyncio.ensure_future(rr.run("rs", rr_stream, RATE, stop))
        t_load = time.monotonic()
        await asyncio.sleep(3)

        backs: list[float] = []
        exits: list[int | None] = []
        for n in cluster.nsqds:
            exits.append(await asyncio.to_thread(n.stop))
            n.start()
            t_ready = await asyncio.to_thread(n.wait_ready)
            while not (n.tcp in consumer.connections and await asyncio.to_thread(n.clients, "rp", "tail")):
                assert time.monotonic() - t_ready < MAX_BACK + 10, f"consumers did not come back to {n.host}"
                await asyncio.sleep(0.05)
            backs.append(time.monotonic() - t_ready)
            await asyncio.sleep(2)

        pub_status = await pub.wait(max(5.0, t_load + PUB_LINES / RATE + 10 - time.monotonic()))
        stop.set()
        await load
        t_end = time.monotonic()
        if pub_status == 0:
            pub_stream.ack_numbered(PUB_LINES)
        await rr.drain()
        for s in (rr_stream, pub_stream):
            await s.wait_delivered(20)
        gaps = {s.label: s.longest_gap(t_load + 1, t_end) for s in (rr_stream, pub_stream)}
        note = "back after " + "/".join(f"{b:.1f}" for b in backs) + " s; exits " + "/".join(map(str, exits))
        for s in (rr_stream, pub_stream):
            report(s.row("each nsqd restarted in turn (SIGTERM)", gaps[s.label], max(backs), note))
        assert pub_status == 0, f"nsq pub failed ({pub_status}):\n{pub.stderr()}"
        assert exits == [0, 0, 0], f"nsqd exit statuses {exits}"
        for s in (rr_stream, pub_stream):
            s.check(gaps[s.label], MAX_GAP)
        assert max(backs) <= MAX_BACK
    finally:
        stop.set()
        await rr.close()
        await consumer.close(timeout=1)
