"""A deterministic fuzzer against a subprocess ``nsq nsqd`` (V2 protocol).

Valid V2 command sequences (IDENTIFY, SUB, RDY, PUB, MPUB, DPUB, FIN, REQ,
TOUCH, NOP, CLS, AUTH) are mutated (:mod:`tests.reliability.fuzz`) and sent
over a few thousand short connections (:mod:`tests.reliability.barrage`).
Afterwards nsqd must be alive, answer /ping, do a normal PUB + SUB round
trip, hold no client of the barrage (in /stats), have grown its RSS by
less than 64 MiB, and -- once the topics the barrage created are deleted
(each channel keeps its deferred-message log open) -- be back to its open
file descriptors of before.

A second barrage negotiates deflate or snappy first and fuzzes what goes
through the codec (commands mutated before compression, or compressed
bytes mutated after it).

``NSQ_SOAK_SCALE`` multiplies the number of connections; ``NSQ_FUZZ_SEED``
picks another deterministic run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from nsq.protocol import commands as c
from nsq.protocol.compression import CompressionError
from nsq.protocol.errors import ProtocolError
from nsq.protocol.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, MAGIC_V2

from .barrage import barrage
from .daemons import MiB, NSQDDaemon, scale
from .fuzz import FuzzedStreams, mutate, seeded_rng, v2_stream
from .rawclients import V2Client, send_quietly

CONNECTIONS = 5000


def round_trip(d: NSQDDaemon, topic: str, body: bytes) -> None:
    pub = V2Client(d.tcp_port)
    assert pub.command(c.pub(topic, body)) == (FRAME_TYPE_RESPONSE, b"OK")
    pub.close()
    sub = V2Client(d.tcp_port)
    assert sub.identify(feature_negotiation=True, heartbeat_interval=1000)["max_rdy_count"] > 0
    sub.send(c.sub(topic, "ch"))
    assert sub.read_frame() == (FRAME_TYPE_RESPONSE, b"OK")
    sub.send(c.rdy(1))
    frame = sub.read_frame()
    assert frame is not None and frame[0] == FRAME_TYPE_MESSAGE and frame[1].endswith(body), frame
    sub.send(c.fin(frame[1][10:26]))
    sub.send(c.cls())
    assert sub.read_frame() == (FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")
    sub.close()


def clients_in_stats(d: NSQDDaemon) -> int:
    stats = json.loads(d.get("/stats?format=json"))
    return sum(len(ch["clients"] or []) for t in stats["topics"] or [] for ch in t["channels"] or [])


def test_fuzzed_v2_streams_leave_nsqd_serving_and_bounded():
    rng = seeded_rng()
    streams = FuzzedStreams(rng, scale(CONNECTIONS), v2_stream)

    d = NSQDDaemon()
    try:
        round_trip(d, "warm", b"warm")
        time.sleep(0.3)
        fds_before, rss_before = d.fds(), d.rss()
        started = time.monotonic()
        out = asyncio.run(barrage(d.tcp_port, streams, rng))
        elapsed = time.monotonic() - started
        assert d.alive(), d.log_tail()
        assert d.get("/ping") == b"OK"
        rss_after, peak = d.rss(), d.peak_rss()
        fds_with_topics = d.fds()
        topics = [t["topic_name"] for t in json.loads(d.get("/stats?format=json"))["topics"] or []]
        for topic in topics:
            d.post("/topic/delete?topic=" + urllib.parse.quote(topic, safe=""))
        fds_after = d.wait_fds(fds_before)
        print(f"\nnsqd fuzz (NSQ_FUZZ_SEED={os.environ.get('NSQ_FUZZ_SEED', '1')}): {out.connections} connections, ~{streams.commands} commands, "
              f"{out.bytes_sent / MiB:.1f} MiB sent, {out.bytes_received / MiB:.2f} MiB received in "
              f"{elapsed:.1f}s; endings {dict(out.endings)}; fds {fds_before} -> {fds_with_topics} with "
              f"{len(topics)} topics -> {fds_after} once deleted; RSS before "
              f"{rss_before / MiB:.1f} MiB, after {rss_after / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB; "
              f"internal errors logged: {d.log_count('internal error')}")
        assert out.connections == streams.n
        round_trip(d, "after-fuzz", b"after")
        deadline = time.monotonic() + 5
        while clients_in_stats(d) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert clients_in_stats(d) == 0
        assert fds_after <= fds_before, d.log_tail()
        assert rss_after - rss_before < 64 * MiB
        assert d.log_count("internal error") == 0, d.log_tail()
    finally:
        d.stop()


def _compressed_session(port: int, rng: random.Random, stats: Counter) -> None:
    """Negotiate deflate or snappy, then send a fuzzed session through the
    codec (commands mutated before compression) or fuzzed wire bytes
    (compressed bytes mutated after it)."""
    kind = rng.choice(("deflate", "snappy"))
    conn = V2Client(port, timeout=5)
    try:
        conn.identify(feature_negotiation=True, **{kind: True})
        stream = v2_stream(rng)[len(MAGIC_V2):]
        how = rng.choice(("plain", "commands", "wire"))
        if how == "commands":
            stream = mutate(rng, stream, v2_stream(rng), b"IDENTIFY\n")
        wire = conn.codec.encode(stream)
        if how == "wire":
            wire = mutate(rng, wire, v2_stream(rng), b"IDENTIFY\n")
        stats[f"{kind}/{how}"] += 1
        stats["bytes"] += len(stream)
        send_quietly(conn.sock, wire)
        try:
            conn.read_until_closed(timeout=0.3)
        except (TimeoutError, OSError, CompressionError, ProtocolError):
            pass  # left open (a partial command) or garbage back: we close
    finally:
        conn.close()


def test_fuzzed_compressed_sessions_leave_nsqd_serving_and_bounded():
    seed = int(os.environ.get("NSQ_FUZZ_SEED", "1"))
    rng = random.Random(seed)
    n = scale(400)
    stats: Counter = Counter()
    d = NSQDDaemon()
    try:
        round_trip(d, "warm", b"warm")
        time.sleep(0.3)
        rss_before = d.rss()
        rngs = [random.Random(rng.getrandbits(32)) for _ in range(n)]
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            for fut in [pool.submit(_compressed_session, d.tcp_port, r, stats) for r in rngs]:
                fut.result()
        elapsed = time.monotonic() - started
        assert d.alive(), d.log_tail()
        assert d.get("/ping") == b"OK"
        rss_after, peak = d.rss(), d.peak_rss()
        print(f"\nnsqd compressed fuzz (NSQ_FUZZ_SEED={os.environ.get('NSQ_FUZZ_SEED', '1')}): {n} connections, "
              f"{stats.pop('bytes') / MiB:.1f} MiB of stream in {elapsed:.1f}s; {dict(stats)}; RSS before "
              f"{rss_before / MiB:.1f} MiB, after {rss_after / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB; "
              f"internal errors logged: {d.log_count('internal error')}")
        round_trip(d, "after-compressed-fuzz", b"after")
        deadline = time.monotonic() + 5
        while clients_in_stats(d) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert clients_in_stats(d) == 0
        assert rss_after - rss_before < 64 * MiB
        assert d.log_count("internal error") == 0, d.log_tail()
    finally:
        d.stop()
