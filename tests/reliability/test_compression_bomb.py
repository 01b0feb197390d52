"""Compression bombs against a subprocess nsqd.

Eight clients negotiate deflate or snappy (IDENTIFY ``feature_negotiation``,
then the compressed ``OK``) and send a stream that inflates to 64 MiB:

- ``line``: zeros, no newline. Go nsqd reads the inflated stream through a
  16 KiB ``bufio.Reader`` (nsqd/client_v2.go ``UpgradeDeflate`` /
  ``UpgradeSnappy``) and closes once ``ReadSlice`` fails with ``bufio:
  buffer full``; its RSS grows by a few MB;
- ``mpub``: a legal ``MPUB`` header declaring a --max-body-size body,
  then zeros: the body (5 MiB) must be read, refused (message count 0),
  and the rest never inflated.

nsqd must close each connection, grow its RSS by less than 32 MiB once
they are closed (and its VmHWM peak by less than 32 MiB, plus one
--max-body-size command per connection for ``mpub``), and go on serving
/ping and a plain PUB + SUB.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from nsq.protocol import commands as c
from nsq.protocol.compression import SNAPPY_MAX_CHUNK, DeflateCodec, SnappyCodec
from nsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE

from .daemons import MiB, NSQDDaemon, scale
from .rawclients import V2Client, send_quietly

CLIENTS = 8
BOMB = 64 * MiB
MAX_BODY = 5 * 1024 * 1024  # nsqd's default --max-body-size


def bomb_stream(shape: str) -> bytes:
    """The stream bytes to compress (a ``bytes`` of ``BOMB`` bytes)."""
    if shape == "line":
        return bytes(BOMB)
    header = b"MPUB bomb\n" + struct.pack(">i", MAX_BODY)
    return header + bytes(BOMB - len(header))


def compress(kind: str, stream: bytes) -> bytes:
    """``stream`` as the wire bytes a fresh codec of ``kind`` writes after the upgrade."""
    codec = DeflateCodec(9) if kind == "deflate" else SnappyCodec(SNAPPY_MAX_CHUNK)
    return codec.encode(stream)


def round_trip(d: NSQDDaemon, topic: str) -> None:
    """A plain PUB is acknowledged and delivered to a subscriber."""
    pub = V2Client(d.tcp_port)
    assert pub.identify(feature_negotiation=False) == b"OK"
    assert pub.command(c.pub(topic, b"after")) == (FRAME_TYPE_RESPONSE, b"OK")
    pub.close()
    sub = V2Client(d.tcp_port)
    sub.send(c.sub(topic, "ch"))
    assert sub.read_frame() == (FRAME_TYPE_RESPONSE, b"OK")
    sub.send(c.rdy(1))
    frame = sub.read_frame()
    assert frame is not None and frame[0] == FRAME_TYPE_MESSAGE and frame[1].endswith(b"after"), frame
    sub.close()


@pytest.mark.parametrize("shape", ["line", "mpub"])
@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_compression_bomb_is_refused_within_bounded_memory(kind, shape):
    wire = compress(kind, bomb_stream(shape))
    d = NSQDDaemon()
    try:
        # warm up the code paths the bomb takes (codec imports, topic creation)
        warm = V2Client(d.tcp_port)
        warm.identify(feature_negotiation=True, **{kind: True})
        assert warm.command(c.pub("warm-compressed", b"x")) == (FRAME_TYPE_RESPONSE, b"OK")
        warm.close()
        round_trip(d, "warm")
        time.sleep(0.2)
        rss_before = d.rss()

        results: list[tuple[bool, list]] = []
        errors: list[BaseException] = []

        def attack() -> None:
            try:
                conn = V2Client(d.tcp_port, timeout=20)
                answer = conn.identify(feature_negotiation=True, **{kind: True})
                assert answer[kind] is True
                # the precomputed bomb is what this connection's fresh codec would write
                sent_all = send_quietly(conn.sock, wire)
                frames = conn.read_until_closed(timeout=20)
                results.append((sent_all, frames))
                conn.close()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=attack) for _ in range(scale(CLIENTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors[:3]
        assert len(results) == len(threads)  # every connection was closed by nsqd
        rss_after, peak = d.rss(), d.peak_rss()
        print(f"\n{kind}/{shape}: wire {len(wire)} B x {len(threads)} -> {BOMB // MiB} MiB each; "
              f"RSS before {rss_before / MiB:.1f} MiB, after {rss_after / MiB:.1f} MiB, "
              f"peak {peak / MiB:.1f} MiB")
        # nsqd closes while the bomb is still arriving, so its RST may
        # overtake an error frame: at most the expected one is seen (that a
        # long line gets no frame at all is checked without compression)
        expected = {"line": b"E_BAD_PROTOCOL", "mpub": b"E_BAD_BODY MPUB invalid message count 0"}[shape]
        for _sent, frames in results:
            assert len(frames) <= 1, frames
            assert all(f[0] == FRAME_TYPE_ERROR and f[1].startswith(expected) for f in frames), frames
        assert d.alive()
        # a closed connection keeps nothing; while open, each may hold one
        # legal command (an MPUB body of --max-body-size), as Go's readMPUB does
        assert rss_after - rss_before < 32 * MiB
        assert peak - rss_before < 32 * MiB + (len(threads) * MAX_BODY if shape == "mpub" else 0)
        assert d.get("/ping") == b"OK"
        round_trip(d, "after")
    finally:
        d.stop()



@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_compressed_flood_of_answered_commands_is_flow_controlled(kind):
    """A few hundred KB of compressed ``FIN <unknown id>`` lines, each
    answered with an ``E_FIN_FAILED`` frame (the connection stays open),
    from a client that never reads: nsqd must stop decoding when its
    answers back up (Go blocks in its write, then drops the client after
    its 1 s write deadline), not inflate everything and buffer every
    answer (23 MiB of frames in one read). Its RSS grows by less than 16 MiB
    (answers go out, compressed, step by step; a client that does not read
    them pauses the connection), and other clients are served."""
    fins = scale(400_000)
    d = NSQDDaemon()
    try:
        round_trip(d, "warm")
        time.sleep(0.2)
        rss_before = d.rss()
        conn = V2Client(d.tcp_port, timeout=20)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        conn.identify(feature_negotiation=True, heartbeat_interval=60000, **{kind: True})
        assert conn.command(c.sub("flood", "ch")) == (FRAME_TYPE_RESPONSE, b"OK")
        stream = c.fin(b"0" * 16) * fins
        wire = conn.codec.encode(stream)
        assert send_quietly(conn.sock, wire)
        # nsqd logs each E_FIN_FAILED: wait until it has done what it will do
        answered, deadline = -1, time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = d.log_count("E_FIN_FAILED")
            if now == answered or now == fins:
                break
            answered = now
        rss_flood, peak = d.rss(), d.peak_rss()
        print(f"\n{kind} FIN flood: {fins} FINs, {len(stream) / MiB:.1f} MiB of stream in {len(wire)} B of wire "
              f"(answers {fins * 61 / MiB:.0f} MiB), {d.log_count('E_FIN_FAILED')} answered; RSS before {rss_before / MiB:.1f} MiB, during "
              f"{rss_flood / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB")
        assert d.alive()
        assert d.get("/ping") == b"OK"
        round_trip(d, "during-flood")
        assert peak - rss_before < 16 * MiB
        conn.close()
    finally:
        d.stop()
