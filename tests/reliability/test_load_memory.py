"""Memory under load: RSS flat under steady publish + FIN, and a client that
never reads cannot make nsqd buffer without bound (write-side flow control).
nsqd runs as a subprocess; sizes come from /proc."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

from .daemons import MiB, NSQDDaemon, scale
from .v2sock import FRAME_RESPONSE, V2Socket


def stats(d: NSQDDaemon) -> dict:
    return json.loads(d.get("/stats?format=json"))


def test_rss_flat_under_steady_publish_and_fin():
    """FINished messages release their memory at once, not at --msg-timeout."""
    d = NSQDDaemon()
    try:
        prod = V2Socket(d.tcp_port)
        cons = V2Socket(d.tcp_port)
        cons.sub("t", "c", 200)
        bodies = [b"%04d" % i + b"x" * 1020 for i in range(100)]
        seconds = 6.0 * scale(10) / 10
        samples: list[tuple[float, int]] = []
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds:
            assert prod.mpub("t", bodies) == (FRAME_RESPONSE, b"OK")
            for _ in range(len(bodies)):
                msg_id, _, _ = cons.read_message()
                cons.fin(msg_id)
            sent += len(bodies)
            if sent % 2000 == 0:
                samples.append((time.monotonic() - start, d.rss()))
        half = [rss for t, rss in samples if t >= seconds / 2]
        first = [rss for t, rss in samples if t < seconds / 2]
        growth = max(half) - min(first[len(first) // 2:] or first)
        rate = sent / seconds
        assert rate > 2000, f"only {rate:.0f} msg/s: the test did not load nsqd"
        # without the in-flight heap compaction this grows by ~1 KB per message
        # (tens of MB here); bound: 16 MB over the second half
        assert growth < 16 * MiB, (f"RSS grew {growth / MiB:.1f} MB in the second half "
                                   f"({sent} messages of 1 KB at {rate:.0f}/s)")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the last FINs are on their way
            channel = stats(d)["topics"][0]["channels"][0]
            if channel["in_flight_count"] == 0:
                break
            time.sleep(0.05)
        assert channel["in_flight_count"] == 0 and channel["depth"] == 0
        prod.close()
        cons.close()
    finally:
        d.stop()


def test_consumer_that_never_reads_gets_no_more_than_its_socket_holds():
    """RDY 2500 and 64 KB messages, never read: delivery stops once the socket
    is full (Go blocks on the write); reading again gets every message."""
    d = NSQDDaemon("--mem-queue-size=100")
    try:
        cons = V2Socket(d.tcp_port)
        cons.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        cons.sub("t", "c", 2500)
        rss_before = d.rss()
        prod = V2Socket(d.tcp_port)
        n = 1500
        body = b"y" * (64 << 10)
        for i in range(0, n, 50):
            assert prod.mpub("t", [b"%06d" % j + body for j in range(i, i + 50)]) == (FRAME_RESPONSE, b"OK")
        time.sleep(0.5)
        channel = stats(d)["topics"][0]["channels"][0]
        # kernel buffers hold a few MB at most; without flow control all 1500
        # would be in flight (RDY 2500) and buffered in nsqd (~96 MB)
        assert channel["in_flight_count"] < 400, channel["in_flight_count"]
        assert d.rss() - rss_before < 64 * MiB
        # another client is served meanwhile
        other = V2Socket(d.tcp_port)
        assert other.pub("t2", b"x") == (FRAME_RESPONSE, b"OK")
        other.close()
        seen = set()
        while len(seen) < n:
            msg_id, _, data = cons.read_message()
            seen.add(int(data[:6]))
            cons.fin(msg_id)
        assert seen == set(range(n))
        prod.close()
        cons.close()
    finally:
        d.stop()


def test_producer_that_never_reads_is_paused_not_buffered():
    """PUBs pipelined without reading the answers: nsqd stops reading that
    client once its answers are not taken (the client's send blocks), and
    keeps serving everyone else."""
    d = NSQDDaemon("--mem-queue-size=1000")
    try:
        sock = socket.create_connection(("127.0.0.1", d.tcp_port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"  V2")
        total = scale(2_000_000)
        cmd = b"PUB t\n" + struct.pack(">i", 1) + b"x"
        batch = cmd * 1000
        sent = 0

        def send() -> None:
            # the kernel may take all of it (nsqd's receive buffer can grow to
            # tcp_rmem's max), or block the sender: either way nsqd must stop
            nonlocal sent
            sock.settimeout(5.0)
            try:
                while sent < total:
                    sock.sendall(batch)
                    sent += 1000
            except (TimeoutError, OSError):
                pass

        t = threading.Thread(target=send, daemon=True)
        t.start()
        t.join(60)

        def published() -> int:
            return stats(d)["topics"][0]["message_count"]

        settled = published()
        time.sleep(0.5)
        assert published() == settled, "nsqd still reads a client whose answers are not taken"
        # the answers nsqd holds for it are bounded by the transport's
        # high-water mark plus the kernel buffers, not by what it sent
        assert settled < total and settled * 10 < 32 * MiB, (settled, sent)
        other = V2Socket(d.tcp_port)
        assert other.pub("t", b"x") == (FRAME_RESPONSE, b"OK")
        other.close()
        time.sleep(0.5)
        assert published() == settled + 1  # the paused client still is
        sock.close()
    finally:
        d.stop()
