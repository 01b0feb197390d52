"""A deterministic fuzzer against a subprocess ``nsq lookupd`` (V1 protocol).

Valid V1 sessions (IDENTIFY, REGISTER, UNREGISTER, PING) are mutated
(:mod:`tests.reliability.fuzz`: flipped bytes, truncation, duplicated
slices, negative and huge IDENTIFY sizes, splices, garbage, 100 KB lines,
deeply nested JSON) and sent over a few thousand short connections
(:mod:`tests.reliability.barrage`). Afterwards nsqlookupd must be alive,
answer /ping, register a normal nsqd (seen by /lookup), list no producer of
a closed connection (/debug holds the live nsqd only), be back to its open
file descriptors of before and have grown its RSS by less than 64 MiB.

The connections go in four quarters with RSS sampled after each: past the
first quarter (allocator warm-up) RSS must stay flat. What a refused
connection left as a reference cycle (an IDENTIFY error kept in the frame
its traceback refers to, holding the connection and its buffered input)
grew it by ~7 MiB per quarter of 1,250 connections here, and only a full
cycle collection, which the daemon runs rarely, would free it.

``NSQ_SOAK_SCALE`` multiplies the number of connections; ``NSQ_FUZZ_SEED``
picks another deterministic run.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from nsq.protocol.lookupd import encode_ping

from .barrage import barrage
from .daemons import LookupdDaemon, MiB, scale
from .fuzz import FuzzedStreams, seeded_rng, v1_stream
from .rawclients import V1Client

CONNECTIONS = 5000


def test_fuzzed_v1_streams_leave_lookupd_serving_and_bounded():
    rng = seeded_rng()
    quarters = [FuzzedStreams(rng, scale(CONNECTIONS) // 4, v1_stream) for _ in range(4)]

    d = LookupdDaemon()
    try:
        warm = V1Client(d.tcp_port)
        warm.identify()
        warm.register("warm", "c")
        warm.close()
        time.sleep(0.3)
        fds_before, rss_before = d.fds(), d.rss()
        started = time.monotonic()
        rss_quarters = []
        outs = []
        for streams in quarters:
            outs.append(asyncio.run(barrage(d.tcp_port, streams, rng)))
            time.sleep(0.3)
            rss_quarters.append(d.rss())
        elapsed = time.monotonic() - started
        out = outs[0]
        for more in outs[1:]:
            out.connections += more.connections
            out.bytes_sent += more.bytes_sent
            out.bytes_received += more.bytes_received
            out.endings.update(more.endings)
        assert d.alive(), d.log_tail()
        assert d.get("/ping") == b"OK"
        fds_after = d.wait_fds(fds_before)
        rss_after, peak = d.rss(), d.peak_rss()
        commands = sum(q.commands for q in quarters)
        print(f"\nlookupd fuzz (NSQ_FUZZ_SEED={os.environ.get('NSQ_FUZZ_SEED', '1')}): {out.connections} connections, ~{commands} commands, "
              f"{out.bytes_sent / MiB:.1f} MiB sent, {out.bytes_received / MiB:.2f} MiB received in "
              f"{elapsed:.1f}s; endings {dict(out.endings)}; fds {fds_before} -> {fds_after}; RSS before "
              f"{rss_before / MiB:.1f} MiB, after each quarter {[round(r / MiB, 1) for r in rss_quarters]} MiB, peak {peak / MiB:.1f} MiB; "
              f"internal errors logged: {d.log_count('internal error')}")
        assert out.connections == sum(q.n for q in quarters)

        # a normal nsqd registers and is the only producer left anywhere
        live = V1Client(d.tcp_port)
        live.identify()
        live.register("after-fuzz", "c")
        assert live.command(encode_ping()) == b"OK"
        producers = json.loads(d.get("/lookup?topic=after-fuzz"))["producers"]
        assert [p["remote_address"] for p in producers] == [live.local]
        deadline = time.monotonic() + 5
        while True:
            debug = json.loads(d.get("/debug"))
            ids = {p["id"] for producers in debug.values() for p in producers}
            if ids == {live.local} or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert ids == {live.local}, f"producers of closed connections left: {sorted(ids - {live.local})[:5]}"
        nodes = json.loads(d.get("/nodes"))["producers"]
        assert [p["remote_address"] for p in nodes] == [live.local]
        live.close()

        assert fds_after <= fds_before, d.log_tail()
        assert rss_after - rss_before < 64 * MiB
        # flat past the first quarter: what closed connections leave is freed
        assert rss_quarters[-1] - rss_quarters[0] < 4 * MiB, [round(r / MiB, 1) for r in rss_quarters]
        assert d.log_count("internal error") == 0, d.log_tail()
    finally:
        d.stop()
