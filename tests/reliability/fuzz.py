"""Deterministic generators of hostile client streams (pure; ``random.Random`` only).

A stream starts as a *valid* command sequence -- V2 (nsqd,
https://nsq.io/clients/tcp_protocol_spec.html) or V1 (nsqlookupd, Go:
nsqlookupd/lookup_protocol_v1.go) -- and is then mutated: bytes flipped,
truncated, slices duplicated, size fields replaced by huge or negative
values, pieces of another stream spliced in, garbage and over-long lines
inserted. The same ``random.Random(n)`` gives the same streams, so a failure
is replayed by its number.
"""

from __future__ import annotations

import random
import struct

from nsq.protocol import commands as c
from nsq.protocol.frames import MAGIC_V2
from nsq.protocol.lookupd import MAGIC_V1, encode_identify, encode_ping, encode_register, encode_unregister

__all__ = ["TOPICS", "CHANNELS", "v2_stream", "v1_stream", "mutate", "FuzzedStreams", "seeded_rng"]

_I32 = struct.Struct(">i")

#: the names the valid commands use (mutations may still make new ones)
TOPICS = ("fz0", "fz1", "fz2#ephemeral")
CHANNELS = ("c0", "c1", "c2#ephemeral")

#: size fields a mutation writes: negative, zero, just over nsqd's defaults
#: (--max-msg-size 1 MiB, --max-body-size 5 MiB), huge
_SIZES = (-1, -(2**31), 0, 1, 3, 1048577, 5242881, 2**31 - 1, 64 * 1024 * 1024, 300_000)


def _body(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice((1, 5, 40, 200)))


def _msg_id(rng: random.Random) -> bytes:
    return b"%016x" % rng.getrandbits(64)


#: IDENTIFY fields: (values nsqd accepts, values it refuses or mistypes)
_IDENTIFY_FIELDS = (
    ("feature_negotiation", (True, False), ()),
    ("heartbeat_interval", (-1, 1000, 30000), (0, 10**9, "x")),
    ("output_buffer_size", (-1, 64, 16384), (0, 10**9)),
    ("output_buffer_timeout", (-1, 25, 250), (1, 10**9)),
    ("msg_timeout", (0, 1000, 60000), (10**12, -1)),
    ("sample_rate", (0, 1, 50, 99), (100, 101, -5)),
    ("deflate", (True, False), ()),
    ("deflate_level", (1, 6), (0, 10)),
    ("snappy", (True, False), ()),
    ("tls_v1", (False, True), ()),
    ("client_id", ("", "x" * 300), (5, None, [1])),
)


def _identify_v2(rng: random.Random) -> bytes:
    data: dict = {"client_id": "fuzz", "hostname": "fuzz", "user_agent": "fuzz/1",
                  "feature_negotiation": rng.random() < 0.5}
    for key, good, bad in _IDENTIFY_FIELDS:
        if rng.random() < 0.2:
            data[key] = rng.choice(bad if bad and rng.random() < 0.1 else good)
    return c.identify(data)


def _publish(rng: random.Random) -> bytes:
    topic = rng.choice(TOPICS)
    kind = rng.randrange(4)
    if kind == 0:
        return c.pub(topic, _body(rng))
    if kind == 1:
        return c.mpub(topic, [_body(rng) for _ in range(rng.randint(1, 5))])
    if kind == 2:
        return c.dpub(topic, 3600_001 if rng.random() < 0.05 else rng.choice((0, 10, 1000)), _body(rng))
    return c.nop()


def _consume(rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    if kind == 0:
        return c.rdy(2501 if rng.random() < 0.05 else rng.choice((0, 1, 5, 100, 2500)))
    if kind == 1:
        return c.fin(_msg_id(rng))
    if kind == 2:
        return c.req(_msg_id(rng), rng.choice((0, 10, 10**9)))
    if kind == 3:
        return c.touch(_msg_id(rng))
    return _publish(rng)


def _rare(rng: random.Random) -> bytes:
    """Commands that are errors in most states (each ends the connection)."""
    kind = rng.randrange(4)
    if kind == 0:
        return _identify_v2(rng)
    if kind == 1:
        return c.sub(rng.choice(TOPICS), rng.choice(CHANNELS))
    if kind == 2:
        return c.cls()
    return c.auth(rng.randbytes(rng.randint(1, 20)))


def v2_stream(rng: random.Random, max_commands: int = 12) -> bytes:
    """A V2 session as a client writes it: the magic, usually an IDENTIFY,
    publishing commands, and often a SUB followed by RDY / FIN / REQ / TOUCH
    and a final CLS; now and then a command that is invalid where it stands."""
    parts = [MAGIC_V2]
    if rng.random() < 0.7:
        parts.append(_identify_v2(rng))
    parts.extend(_publish(rng) for _ in range(rng.randint(0, max_commands // 2)))
    if rng.random() < 0.6:
        parts.append(c.sub(rng.choice(TOPICS), rng.choice(CHANNELS)))
        parts.append(c.rdy(rng.randint(0, 10)))
        parts.extend(_consume(rng) for _ in range(rng.randint(0, max_commands)))
        if rng.random() < 0.5:
            parts.append(c.cls())
    if rng.random() < 0.15:
        parts.insert(rng.randint(1, len(parts)), _rare(rng))
    return b"".join(parts)


def _identify_v1(rng: random.Random) -> bytes:
    info: dict = {"broadcast_address": "fuzz.example", "tcp_port": 4150, "http_port": 4151,
                  "version": "1.2.1", "hostname": "fuzz"}
    if rng.random() < 0.3:
        key = rng.choice(list(info))
        info[key] = rng.choice((None, "", 0, -1, 2**70, [], {}, "x" * 500, True))
    return encode_identify(info)


def v1_stream(rng: random.Random, max_commands: int = 12) -> bytes:
    """The magic, usually an IDENTIFY, then up to ``max_commands`` V1 commands."""
    parts = [MAGIC_V1]
    if rng.random() < 0.8:
        parts.append(_identify_v1(rng))
    for _ in range(rng.randint(1, max_commands)):
        kind = rng.randrange(5)
        topic, channel = rng.choice(TOPICS), rng.choice(("",) + CHANNELS)
        if kind == 0:
            parts.append(encode_ping())
        elif kind == 1:
            parts.append(encode_register(topic, channel))
        elif kind == 2:
            parts.append(encode_unregister(topic, channel))
        elif kind == 3:
            parts.append(_identify_v1(rng))
        else:
            parts.append(encode_register(topic))
    return b"".join(parts)


def _nested_json(rng: random.Random) -> bytes:
    depth = rng.choice((1000, 20_000, 100_000))
    opener = rng.choice((b"[", b'{"a":', b'[{"a":'))
    return opener * depth


#: how often each mutation of :func:`mutate` is picked (the big inserts rarely)
_WEIGHTS = (10, 6, 6, 8, 6, 6, 1, 1, 4)


def mutate(rng: random.Random, data: bytes, other: bytes, identify_line: bytes) -> bytes:
    """Apply 1-4 random mutations to ``data``.

    Args:
        other: another stream, for splices.
        identify_line: ``b"IDENTIFY\\n"`` of the protocol, to insert IDENTIFY
            commands with deeply nested JSON bodies.
    """
    buf = bytearray(data)
    for op in rng.choices(range(9), _WEIGHTS, k=rng.randint(1, 4)):
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del buf[pos:]
        elif op == 2 and buf:  # duplicate a slice
            start = rng.randrange(len(buf))
            end = min(len(buf), start + rng.randint(1, 200))
            buf[pos:pos] = buf[start:end]
        elif op == 3 and len(buf) >= 4:  # a size field (or any 4 bytes) becomes huge / negative
            i = rng.randrange(len(buf) - 3)
            nl = buf.find(b"\n", i)
            if nl >= 0 and nl + 5 <= len(buf) and rng.random() < 0.7:
                i = nl + 1  # the body size after a command line
            buf[i:i + 4] = _I32.pack(rng.choice(_SIZES))
        elif op == 4 and other:  # splice another stream in
            start = rng.randrange(len(other))
            buf[pos:pos] = other[start:start + rng.randint(1, 300)]
        elif op == 5:  # garbage
            buf[pos:pos] = rng.randbytes(rng.randint(1, 64))
        elif op == 6:  # an over-long line (no newline for a while)
            buf[pos:pos] = b"P" * rng.choice((4097, 16384, 70_000))
        elif op == 7:  # IDENTIFY with deeply nested JSON
            body = _nested_json(rng)
            buf[pos:pos] = identify_line + _I32.pack(len(body)) + body
        else:  # a size field that promises more than will ever come
            buf[pos:pos] = b"PUB fz0\n" + _I32.pack(rng.choice((100, 70_000, 1_000_000)))
    return bytes(buf)



class FuzzedStreams:
    """``n`` connection streams from ``make`` (``v2_stream`` or
    ``v1_stream``), 90 % of them mutated; iterate once. :attr:`commands`
    counts the command lines generated so far (bodies may add a few)."""

    def __init__(self, rng: random.Random, n: int, make, identify_line: bytes = b"IDENTIFY\n") -> None:
        self.rng = rng
        self.n = n
        self.make = make
        self.identify_line = identify_line
        self.commands = 0

    def __iter__(self):
        rng = self.rng
        for _ in range(self.n):
            a, b = self.make(rng), self.make(rng)
            self.commands += a.count(b"\n")
            yield mutate(rng, a, b, self.identify_line) if rng.random() < 0.9 else a


def seeded_rng() -> random.Random:
    """``random.Random`` seeded from ``NSQ_FUZZ_SEED`` (default 1): a failing
    run is repeated by setting the same seed."""
    import os

    return random.Random(int(os.environ.get("NSQ_FUZZ_SEED", "1")))
