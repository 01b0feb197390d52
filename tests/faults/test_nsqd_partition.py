"""An nsqd cut off (not killed) for 40 s while a consumer holds messages of it in flight.

3 nsqds (``--msg-timeout=10s``), 2 lookupds. A Consumer given the three
nsqds directly takes 0.3 s per message (about 30 in flight at any time, a
third of them from the nsqd that is cut off); ``nsq tail`` finds the nsqds
through both lookupds. Both ask for 1 s heartbeats (IDENTIFY
``heartbeat_interval``), and publishers (Producers behind a round robin)
too.

What must hold (https://nsq.io/clients/building_client_libraries.html,
"Heartbeats": nsqd closes a client after two missed heartbeats; a client
should do the same and reconnect):

- the other nsqds keep delivering (no gap over 3 s);
- the client notices the dead connection by itself, from missed
  heartbeats (nothing arrives: no FIN, no RST), and reconnects after the
  heal;
- nothing acknowledged is lost: the messages in flight at the cut time
  out on the cut-off nsqd and come again after the heal (duplicates).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

PARTITION = 40.0
RATE = 100.0
HEARTBEAT_MS = 1000
MAX_GAP = 3.0
#: two missed heartbeats, and a second of slack
MAX_NOTICE = 2 * HEARTBEAT_MS / 1000 + 1.0
#: the consumer's reconnect delay (2 s at most here) plus its 2 s connect
#: timeout; nsq tail: nsqd's lookupd reconnect (up to 15 s) and a 2 s poll
MAX_RECOVER = 25.0



async def test_nsqd_partition(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=2, clients=("c0",), nsqd_flags=["--msg-timeout=10s"],
                           lookupd_flags=["--inactive-producer-timeout=20s"])
    topic = "np"
    for n in cluster.nsqds:
        n.create(topic, "lib", "tail")
    cluster.wait_registered(topic)
    victim = cluster.nsqds[1]

    published = Stream("np")
    lib = published.view("Consumer (3 nsqds, 1 s heartbeats)")
    tail_stream = published.view("nsq tail via 2 lookupds")

    async def handle(msg):
        lib.got(msg.body)
        await asyncio.sleep(0.3)

    identify = {"heartbeat_interval": HEARTBEAT_MS}
    consumer = Consumer(topic, "lib", handle, cluster.nsqd_tcp, max_in_flight=30, identify=identify,
                        reconnect_max_delay=2.0, connect_timeout=2.0)
    tail = cluster.nsq(cluster.clients["c0"], "tail", "tail", f"--topic={topic}", "--channel=tail",
                       *(f"--lookupd-http-address={a}" for a in cluster.lookupd_http),
                       "--consumer-opt=lookupd_poll_interval,2s", f"--consumer-opt=heartbeat_interval,{HEARTBEAT_MS}ms",
                       "--consumer-opt=dial_timeout,2s")
    tail_stream.attach(tail)
    publisher = FailoverPublisher(cluster.nsqd_tcp, identify)
    stop = asyncio.Event()
    try:
        await consumer.start()
        await cluster.wait_consumers(consumer, topic, "tail")

        load = asyncio.ensure_future(publisher.run(topic, published, RATE, stop))
        t_load = time.monotonic()
        await asyncio.sleep(4)

        held = consumer._in_flight.get(consumer.connections.get(victim.tcp), 0)
        cluster.net.partition(victim.host)
        t_cut = time.monotonic()
        noticed = None
        while time.monotonic() - t_cut < PARTITION:
            if noticed is None and victim.tcp not in consumer.connections:
                noticed = time.monotonic() - t_cut
            await asyncio.sleep(0.05)
        cluster.net.heal(victim.host)
        t_heal = time.monotonic()
        back = tail_back = None
        while back is None or tail_back is None:
            now = time.monotonic()
            if back is None and victim.tcp in consumer.connections:
                back = now - t_heal
            if tail_back is None:
                try:
                    if await asyncio.to_thread(victim.clients, topic, "tail"):
                        tail_back = now - t_heal
                except OSError:
                    pass
            if now - t_heal > MAX_RECOVER + 15:
                break
            await asyncio.sleep(0.1)

        await asyncio.sleep(3)
        stop.set()
        await load
        t_end = time.monotonic()
        await publisher.drain()
        for s in (lib, tail_stream):
            await s.wait_delivered(20)
        gaps = {s.label: s.longest_gap(t_load + 1, t_end) for s in (lib, tail_stream)}
        note = (f"noticed in {noticed:.1f} s" if noticed is not None else "never noticed") + \
               f", {held} held in flight at the cut, {publisher.failures} failed publish attempts moved on"
        report(lib.row("nsqd partitioned 40 s", gaps[lib.label], back, note))
        report(tail_stream.row("nsqd partitioned 40 s", gaps[tail_stream.label], tail_back))
        assert published.acked, f"nothing was acknowledged: {publisher.errors[:3]}"
        assert noticed is not None and noticed <= MAX_NOTICE, \
            f"the consumer did not notice the dead connection in {MAX_NOTICE} s (noticed: {noticed})"
        for s in (lib, tail_stream):
            s.check(gaps[s.label], MAX_GAP)
        assert back is not None and back <= MAX_RECOVER, f"the consumer did not reconnect ({back})"
        assert tail_back is not None and tail_back <= MAX_RECOVER, f"nsq tail did not reconnect ({tail_back})"
        assert tail.proc.poll() is None, tail.stderr()
    finally:
        stop.set()
        await publisher.close()
        await consumer.close(timeout=1)
