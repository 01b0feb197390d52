"""nsqlookupd write-side flow control against a subprocess ``nsq lookupd``.

A client pipelines ``PING`` and never reads the ``OK`` answers. Go's
nsqlookupd IOLoop (nsqlookupd/lookup_protocol_v1.go) blocks in its own
``SendResponse`` write once the socket is full, so it stops reading that
client; ours must do the same (``pause_writing`` -> ``pause_reading``)
instead of buffering answers without bound. Then:

- the client's sends stall (lookupd no longer reads it);
- lookupd's RSS stays within 32 MiB of where it started;
- another nsqd connection and the HTTP API are served meanwhile;
- once the client reads, lookupd resumes and answers every PING, in order.
"""

from __future__ import annotations

import json
import select
import socket
import time

from nsq.protocol.lookupd import MAGIC_V1, encode_ping, encode_response

from .daemons import LookupdDaemon, MiB, scale
from .rawclients import V1Client

PING = encode_ping()
OK = encode_response(b"OK")


def test_a_client_that_never_reads_is_paused_and_others_are_served():
    d = LookupdDaemon()
    try:
        warm = V1Client(d.tcp_port)
        warm.identify()
        warm.close()
        time.sleep(0.2)
        rss_before = d.rss()

        greedy = socket.socket()
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        greedy.connect(("127.0.0.1", d.tcp_port))
        greedy.sendall(MAGIC_V1)
        greedy.setblocking(False)
        block = PING * (64 * 1024 // len(PING))
        limit = scale(64) * MiB
        sent = 0
        stalled = False
        started = time.monotonic()
        while sent < limit:
            off = sent % len(block)
            try:
                sent += greedy.send(block[off:])
            except BlockingIOError:
                if not select.select([], [greedy], [], 1.0)[1]:
                    stalled = True  # lookupd stopped reading us for a whole second
                    break
        greedy.setblocking(True)
        if sent % len(PING):  # finish the last PING
            rest = len(PING) - sent % len(PING)
            greedy.sendall(PING[-rest:])
            sent += rest
        pings = sent // len(PING)
        rss_paused = d.rss()
        print(f"\nsent {pings} PINGs ({sent / MiB:.1f} MiB) in {time.monotonic() - started:.1f}s "
              f"before stalling={stalled}; lookupd RSS before {rss_before / MiB:.1f} MiB, "
              f"paused {rss_paused / MiB:.1f} MiB, peak {d.peak_rss() / MiB:.1f} MiB")
        assert stalled, f"lookupd read {sent / MiB:.0f} MiB of PINGs without their answers being read"
        assert rss_paused - rss_before < 32 * MiB

        # others are served meanwhile
        other = V1Client(d.tcp_port, timeout=2)
        other.identify()
        other.register("flow", "c")
        assert other.command(PING) == b"OK"
        assert d.get("/ping", timeout=2) == b"OK"
        producers = json.loads(d.get("/lookup?topic=flow", timeout=2))["producers"]
        assert [p["remote_address"] for p in producers] == [other.local]
        other.close()

        # the greedy client reads: lookupd resumes and answers every PING
        greedy.settimeout(30)
        got = 0
        deadline = time.monotonic() + 60
        while got < pings * len(OK):
            assert time.monotonic() < deadline, f"{got // len(OK)} of {pings} answers"
            data = greedy.recv(1 << 20)
            assert data, f"closed after {got // len(OK)} of {pings} answers"
            off = got % len(OK)  # every answer is OK: the bytes repeat from where they left off
            assert data == (OK * (len(data) // len(OK) + 2))[off:off + len(data)]
            got += len(data)
        assert got == pings * len(OK)
        greedy.close()
        assert d.alive()
        assert d.get("/ping") == b"OK"
    finally:
        d.stop()
