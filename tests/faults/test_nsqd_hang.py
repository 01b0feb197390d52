"""An nsqd hung (SIGSTOP) for 10 s under load, then resumed (SIGCONT).

A hung process is not a dead one: its kernel still takes TCP segments
and even accepts new connections into the listen backlog, so nothing
fails fast; only silence tells. 3 nsqds (``--msg-timeout=5s``); ``nsq
pub`` and our Producers behind a round robin publish to the three, our
Consumer and ``nsq tail`` read from the three, all with 1 s heartbeats and
a 2 s dial timeout.

What must hold: clients give up on the hung nsqd after two missed
heartbeats (a publish waiting for its ``OK`` goes to another nsqd), the
others keep delivering (no gap over 3 s), the consumers come back to it
after SIGCONT, and nothing acknowledged is lost (messages in flight at the
hang time out on it and come again: duplicates).
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

RATE = 100.0
PUB_LINES = 2000
HANG = 10.0
MAX_GAP = 3.0
MAX_BACK = 10.0


async def test_nsqd_sigstop(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=0, clients=("c0",), nsqd_flags=["--msg-timeout=5s"])
    c0 = cluster.clients["c0"]
    victim = cluster.nsqds[1]
    for n in cluster.nsqds:
        n.create("hr", "lib")
        n.create("hp", "tail")
    rr_stream = Stream("hr").view("Producers round robin -> Consumer")
    pub_stream = Stream("hp").view("nsq pub -> nsq tail")
    identify = {"heartbeat_interval": 1000}
    consumer = Consumer("hr", "lib", lambda m: rr_stream.got(m.body), cluster.nsqd_tcp, max_in_flight=50,
                        identify=identify, reconnect_max_delay=1.0, connect_timeout=2.0)
    tail = cluster.nsq(c0, "tail", "tail", "--topic=hp", "--channel=tail",
                       *(f"--nsqd-tcp-address={a}" for a in cluster.nsqd_tcp),
                       "--consumer-opt=heartbeat_interval,1s", "--consumer-opt=dial_timeout,2s")
    pub_stream.attach(tail)
    rr = FailoverPublisher(cluster.nsqd_tcp, identify)
    stop = asyncio.Event()
    try:
        await consumer.start()
        await cluster.wait_consumers(consumer, "hp", "tail")
        lines = pub_stream.numbered(PUB_LINES)
        pub = cluster.nsq(c0, "pub", "pub", "--topic=hp", *(f"--nsqd-tcp-address={a}" for a in cluster.nsqd_tcp),
                          f"--rate={int(RATE)}", "--producer-opt=heartbeat_interval,1s",
                          "--producer-opt=dial_timeout,2s", stdin=lines)
        load = asyncio.ensure_future(rr.run("hr", rr_stream, RATE, stop))
        t_load = time.monotonic()
        await asyncio.sleep(3)

        victim.signal(signal.SIGSTOP)
        t_hang = time.monotonic()
        noticed = None
        while time.monotonic() - t_hang < HANG:
            if noticed is None and victim.tcp not in consumer.connections:
                noticed = time.monotonic() - t_hang
            await asyncio.sleep(0.05)
        victim.signal(signal.SIGCONT)
        t_cont = time.monotonic()
        back = None
        while back is None and time.monotonic() - t_cont < MAX_BACK + 10:
            if victim.tcp in consumer.connections and await asyncio.to_thread(victim.clients, "hp", "tail"):
                back = time.monotonic() - t_cont
            await asyncio.sleep(0.05)

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
        note = (f"noticed in {noticed:.1f} s" if noticed is not None else "never noticed") + \
            f", {rr.failures} failed publish attempts moved on"
        report(rr_stream.row("nsqd hung 10 s (SIGSTOP)", gaps[rr_stream.label], back, note))
        report(pub_stream.row("nsqd hung 10 s (SIGSTOP)", gaps[pub_stream.label], back, f"nsq pub exit {pub_status}"))
        assert pub_status == 0, f"nsq pub failed ({pub_status}):\n{pub.stderr()}"
        assert noticed is not None and noticed <= 3.0, f"the consumer did not notice the hang ({noticed})"
        for s in (rr_stream, pub_stream):
            s.check(gaps[s.label], MAX_GAP)
        assert back is not None and back <= MAX_BACK, f"consumers did not come back to the resumed nsqd ({back})"
    finally:
        stop.set()
        await rr.close()
        await consumer.close(timeout=1)
