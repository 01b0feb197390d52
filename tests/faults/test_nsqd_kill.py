"""An nsqd killed with SIGKILL under load, restarted 6 s later.

3 nsqds (``--mem-queue-size=0``: every acknowledged message is in the
disk queue, i.e. the page cache, which a killed process does not take with
it), 2 lookupds. Three producers that were each given the three nsqds:

- ``nsq pub`` reading stdin (``--rate``), round robin;
- our Producers behind a round robin that moves on after a failed publish;
- ``nsq to-nsq`` forwarding a topic of n0 to the three (``--mode hostpool``:
  a failed destination is skipped for a while; the message is REQueued,
  here with a 1 s delay instead of go-nsq's 90 s, and forwarded again);

and consumers of each stream (``nsq tail`` through the lookupds, our
Consumer given the three nsqds). What must hold: after the failed publish
the producers go on with the other nsqds, nothing acknowledged is lost
(a message the killed nsqd took without answering may come twice), the
consumers keep consuming from the others, and once the nsqd is back its
backlog is consumed. https://nsq.io/overview/design.html ("Simplifying
configuration and administration", "Guarantees")
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.traffic import FailoverPublisher, Stream

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

RATE = 100.0
LOAD = 20.0
KILL_AT = 5.0
DOWN = 6.0
MAX_GAP = 3.0
#: consumers reconnect within 2 s (Consumer) or one 2 s lookupd poll (nsq tail)
MAX_RECOVER = 10.0


async def test_nsqd_sigkill(make_cluster, report):
    from nsq.client import Consumer

    cluster = make_cluster(nsqds=3, lookupds=2, clients=("c0",), nsqd_flags=["--mem-queue-size=0"],
                           lookupd_flags=["--inactive-producer-timeout=20s"])
    n0, victim, _ = cluster.nsqds
    c0 = cluster.clients["c0"]
    for n in cluster.nsqds:
        n.create("kp", "tail")
        n.create("kr", "lib", "late")
        n.create("kf", "lib")
    n0.create("ks", "fwd")
    cluster.wait_registered("kp")

    pub_stream = Stream("kp").view("nsq pub -> nsq tail")
    rr_stream = Stream("kr").view("Producers round robin -> Consumer")
    late_stream = rr_stream.view("same, channel consumed after the restart")
    fwd_stream = Stream("ks").view("nsq to-nsq -> Consumer")

    tail = cluster.nsq(c0, "tail", "tail", "--topic=kp", "--channel=tail",
                       *(f"--lookupd-http-address={a}" for a in cluster.lookupd_http),
                       "--consumer-opt=lookupd_poll_interval,2s", "--consumer-opt=heartbeat_interval,1s")
    pub_stream.attach(tail)
    identify = {"heartbeat_interval": 1000}
    consumers = [
        Consumer("kr", "lib", lambda m: rr_stream.got(m.body), cluster.nsqd_tcp, max_in_flight=50,
                 identify=identify, reconnect_max_delay=2.0, connect_timeout=2.0),
        Consumer("kf", "lib", lambda m: fwd_stream.got(m.body), cluster.nsqd_tcp, max_in_flight=50,
                 identify=identify, reconnect_max_delay=2.0, connect_timeout=2.0),
    ]
    forwarder = cluster.nsq(c0, "to-nsq", "to-nsq", "--topic=ks", "--channel=fwd", f"--nsqd-tcp-address={n0.tcp}",
                            *(f"--destination-nsqd-tcp-address={a}" for a in cluster.nsqd_tcp),
                            "--destination-topic=kf", "--mode=hostpool", "--consumer-opt=heartbeat_interval,1s",
                            "--consumer-opt=default_requeue_delay,1s",
                            "--producer-opt=heartbeat_interval,1s", "--producer-opt=dial_timeout,2s")
    rr = FailoverPublisher(cluster.nsqd_tcp, identify)
    source = FailoverPublisher([n0.tcp], identify)
    stop = asyncio.Event()
    try:
        for c in consumers:
            await c.start()
        lines = pub_stream.numbered(int(RATE * LOAD))
        pub = cluster.nsq(c0, "pub", "pub", "--topic=kp", *(f"--nsqd-tcp-address={a}" for a in cluster.nsqd_tcp),
                          f"--rate={int(RATE)}", "--producer-opt=heartbeat_interval,1s", stdin=lines)
        loads = [asyncio.ensure_future(rr.run("kr", rr_stream, RATE, stop)),
                 asyncio.ensure_future(source.run("ks", fwd_stream, RATE, stop))]
        t_load = time.monotonic()
        await asyncio.sleep(KILL_AT)

        victim.kill()
        t_kill = time.monotonic()
        await asyncio.sleep(DOWN)
        victim.start()
        t_back = await asyncio.to_thread(victim.wait_ready)
        backlog = await asyncio.to_thread(victim.backlog, "kp", "kr", "kf", skip=["late"])
        late_kept = await asyncio.to_thread(victim.channel_depth, "kr", "late")
        # recovered: every consumer reads the restarted nsqd again and its
        # backlog (the late channel aside) is consumed
        recovered = None
        while time.monotonic() - t_back < MAX_RECOVER + 10:
            if all(victim.tcp in c.connections for c in consumers) and \
                    await asyncio.to_thread(victim.clients, "kp", "tail") and \
                    await asyncio.to_thread(victim.backlog, "kp", "kr", "kf", skip=["late"]) == 0:
                recovered = time.monotonic() - t_back
                break
            await asyncio.sleep(0.1)

        await asyncio.sleep(max(0.0, t_load + LOAD - time.monotonic()))
        stop.set()
        await asyncio.gather(*loads)
        t_end = time.monotonic()
        pub_status = await pub.wait(30)
        if pub_status == 0:
            pub_stream.ack_numbered(int(RATE * LOAD))
        await rr.drain()
        await source.drain()

        streams = (pub_stream, rr_stream, fwd_stream)
        for s in streams:
            await s.wait_delivered(15)
        # a channel nobody consumed during the run: every acknowledged
        # message must be there, the killed nsqd's share included
        late = Consumer("kr", "late", lambda m: late_stream.got(m.body), cluster.nsqd_tcp, max_in_flight=200,
                        identify=identify)
        consumers.append(late)
        t_late = time.monotonic()
        await late.start()
        await late_stream.wait_delivered(15)
        late_took = time.monotonic() - t_late
        gaps = {s.label: s.longest_gap(t_load + 1, t_end) for s in streams}
        notes = {pub_stream.label: f"nsq pub exit {pub_status}",
                 rr_stream.label: f"{rr.failures} failed publish attempts moved on",
                 fwd_stream.label: f"down {t_back - t_kill:.1f} s, backlog {backlog} at restart"}
        for s in streams:
            report(s.row("nsqd SIGKILL under load", gaps[s.label], recovered, notes[s.label]))
        report(late_stream.row("nsqd SIGKILL under load", None, late_took, f"{late_kept} kept by the killed nsqd"))

        assert pub_status == 0, f"nsq pub failed:\n{pub.stderr()}"
        for s in streams:
            s.check(gaps[s.label], MAX_GAP)
        assert recovered is not None, "consumers did not come back to the restarted nsqd, or its backlog stayed"
        assert not late_stream.lost(), f"{len(late_stream.lost())} acknowledged messages missing from a channel"
        assert forwarder.proc.poll() is None and tail.proc.poll() is None
    finally:
        stop.set()
        await rr.close()
        await source.close()
        for c in consumers:
            await c.close(timeout=1)

