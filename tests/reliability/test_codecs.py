"""Bounded decoding of the IDENTIFY compression codecs (pure).

A compression bomb -- a few KB of deflate or snappy that inflate to tens of
MB -- must never come out of ``decode(data, limit)`` in more than ``limit``
bytes at once; what is held back is drained by ``decode(b"", limit)``
while ``pending``. Round trips must survive any split of the wire bytes and
any limit; corrupt input raises CompressionError from the chunk header,
before a bad chunk's bytes are even buffered.
"""

from __future__ import annotations

import random
import struct
import tracemalloc
import zlib

import pytest

from nsq.protocol.compression import SNAPPY_MAX_CHUNK, CompressionError, DeflateCodec, SnappyCodec

MiB = 1024 * 1024
BOMB_SIZE = 64 * MiB
CODECS = [DeflateCodec, SnappyCodec]
IDENT = b"\xff\x06\x00\x00sNaPpY"


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """64 MiB of zeros, compressed by each codec (no newline anywhere)."""
    zeros = bytes(BOMB_SIZE)
    return {"deflate": DeflateCodec(9).encode(zeros), "snappy": SnappyCodec(SNAPPY_MAX_CHUNK).encode(zeros)}


def drain(codec, data: bytes, limit: int) -> tuple[int, int, int]:
    """(total stream bytes, largest single output, calls) decoding ``data`` with ``limit``."""
    sizes = [len(codec.decode(data, limit))]
    while codec.pending:
        sizes.append(len(codec.decode(b"", limit)))
    return sum(sizes), max(sizes), len(sizes)


@pytest.mark.parametrize("cls", CODECS, ids=lambda k: k.name)
def test_bomb_never_exceeds_the_limit_and_drains(cls, bombs):
    wire = bombs[cls.name]
    assert len(wire) < BOMB_SIZE // 20  # it is a bomb
    total, largest, calls = drain(cls(), wire, MiB)
    assert largest <= MiB
    assert total == BOMB_SIZE
    assert calls >= BOMB_SIZE // MiB


@pytest.mark.parametrize("cls", CODECS, ids=lambda k: k.name)
def test_bomb_in_small_pieces_holds_at_most_one_limit(cls, bombs):
    wire = bombs[cls.name]
    codec = cls()
    total = 0
    for i in range(0, len(wire), 4096):
        out = codec.decode(wire[i:i + 4096], 100_000)
        assert len(out) <= 100_000
        total += len(out)
        while codec.pending:
            out = codec.decode(b"", 100_000)
            assert len(out) <= 100_000
            total += len(out)
    assert total == BOMB_SIZE


@pytest.mark.parametrize("cls", CODECS, ids=lambda k: k.name)
def test_bomb_decode_allocates_about_the_limit(cls, bombs):
    """Python allocations while decoding a 64 MiB bomb with a 1 MiB limit
    stay within a few MiB (the one-argument, unbounded form needs 64 MiB)."""
    wire = bombs[cls.name]
    codec = cls()
    tracemalloc.start()
    try:
        out = codec.decode(wire, MiB)
        del out
        bounded_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        unbounded = cls().decode(wire)
        unbounded_peak = tracemalloc.get_traced_memory()[1]
        assert len(unbounded) == BOMB_SIZE
        del unbounded
    finally:
        tracemalloc.stop()
    assert bounded_peak < len(wire) + 4 * MiB, bounded_peak
    assert unbounded_peak >= BOMB_SIZE


@pytest.mark.parametrize("cls", CODECS, ids=lambda k: k.name)
@pytest.mark.parametrize("n", range(6))
def test_round_trip_in_any_split_and_limit(cls, n):
    rng = random.Random(n)
    enc, dec = cls(), cls()
    data = b"".join(rng.randbytes(rng.randint(0, 3000)) + bytes(rng.randint(0, 150_000)) + b"PUB t\n"
                    for _ in range(20))
    wire = b"".join(enc.encode(data[i:i + 50_000]) for i in range(0, len(data), 50_000))
    got = bytearray()
    i = 0
    while i < len(wire):
        n_in = rng.choice((1, 7, 100, 5000, 100_000))
        limit = rng.choice((None, 0, 1, 13, 4096, 70_000, MiB))
        out = dec.decode(wire[i:i + n_in], limit)
        assert limit is None or len(out) <= max(limit, 0)
        got += out
        i += n_in
        while dec.pending:
            got += dec.decode(b"", rng.choice((1, 1000, 65536, None)))
    assert not dec.pending
    assert bytes(got) == data


@pytest.mark.parametrize("cls", CODECS, ids=lambda k: k.name)
def test_one_argument_decode_returns_everything(cls):
    enc, dec = cls(), cls()
    data = b"x" * 300_000 + b"\n"
    assert dec.decode(enc.encode(data)) == data
    assert not dec.pending


@pytest.mark.parametrize("cls", CODECS, ids=lambda k: k.name)
def test_limit_zero_only_holds_the_input(cls):
    enc, dec = cls(), cls()
    wire = enc.encode(b"hello\n")
    assert dec.decode(wire, 0) == b""
    assert dec.pending
    assert dec.pending_input == len(wire)
    assert dec.decode(b"", 3) == b"hel"
    assert dec.decode(b"", 100) == b"lo\n"
    assert not dec.pending


def test_deflate_garbage_raises():
    with pytest.raises(CompressionError):
        DeflateCodec().decode(b"\xff" * 100, MiB)


def test_deflate_data_after_the_end_of_the_stream_raises():
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    ended = c.compress(b"NOP\n") + c.flush(zlib.Z_FINISH)
    dec = DeflateCodec()
    assert dec.decode(ended, MiB) == b"NOP\n"
    with pytest.raises(CompressionError):
        dec.decode(b"more", MiB)


def _chunk(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


@pytest.mark.parametrize("wire", [
    _chunk(0x00, b"\0" * 10),                           # data before the stream identifier
    IDENT + _chunk(0x02, b"x"),                         # reserved unskippable chunk
    IDENT + b"\x00\xff\xff\xff",                        # 16 MiB chunk: refused from its header
    IDENT + _chunk(0x01, b"\0\0\0\0" + b"x" * (SNAPPY_MAX_CHUNK + 1)),   # > 64 KiB of stream bytes
    IDENT + _chunk(0x00, b"\0\0\0\0" + b"\xff\xff\xff\xff\x0f"),         # block claiming 4 GiB
    IDENT + _chunk(0x00, b"\0\0\0\0\x05abc"),           # short block
    b"\xff\x06\x00\x00sNaPpZ",                          # bad identifier
    IDENT + _chunk(0x01, b"\0\0\0"),                    # shorter than its checksum
], ids=["no-identifier", "reserved", "huge-header", "big-uncompressed", "block-claims-4GiB",
        "short-block", "bad-identifier", "no-checksum"])
def test_snappy_corrupt_input_raises(wire):
    with pytest.raises(CompressionError):
        SnappyCodec().decode(wire, MiB)


def test_snappy_bad_checksum_raises():
    wire = bytearray(SnappyCodec().encode(b"hello world\n"))
    wire[len(IDENT) + 4] ^= 1  # first CRC byte of the first data chunk
    with pytest.raises(CompressionError):
        SnappyCodec().decode(bytes(wire), MiB)


def test_snappy_skippable_chunks_are_ignored():
    data = SnappyCodec().encode(b"NOP\n")
    wire = data[:len(IDENT)] + _chunk(0xFE, b"\0" * 100) + _chunk(0x80, b"x") + data[len(IDENT):]
    assert SnappyCodec().decode(wire, MiB) == b"NOP\n"


def test_snappy_holds_at_most_one_chunk_of_input():
    """A chunk header is checked on arrival, so an incomplete chunk is the
    most wire input ever held without output."""
    dec = SnappyCodec()
    wire = SnappyCodec(SNAPPY_MAX_CHUNK).encode(struct.pack(">Q", 7) * 8192)
    dec.decode(wire[:len(IDENT) + 4], MiB)
    assert not dec.pending
    assert dec.pending_input == 4
