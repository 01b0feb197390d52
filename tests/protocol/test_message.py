"""Message encoding and IDFactory (nsqd/message.go ``WriteTo``, nsqd/guid.go ``NewGUID``)."""

from __future__ import annotations

import hashlib
import re
import socket
import struct
import zlib

import pytest

from nsq.protocol.errors import ProtocolError
from nsq.protocol.frames import FRAME_TYPE_MESSAGE, FrameReader, encode_frame
from nsq.protocol.message import (
    MIN_MESSAGE_LENGTH,
    DecodedMessage,
    IDFactory,
    decode_message,
    default_node_id,
    encode_message,
    encode_message_frame,
)

TWEPOCH = 1288834974288
NOW_NS = 1_700_000_000_123_456_789
MSG_ID = b"0a1b2c3d4e5f6789"
ID_RE = re.compile(rb"[0-9a-f]{16}")


def expected_id(now_ns: int, node: int, seq: int) -> bytes:
    ts = now_ns >> 20
    value = ((ts - TWEPOCH) << 22) | (node << 12) | seq
    return value.to_bytes(8, "big").hex().encode()


# -- encoding ----------------------------------------------------------------

def test_encode_layout():
    data = encode_message(123456789, 3, MSG_ID, b"body")
    assert data == struct.pack(">qH", 123456789, 3) + MSG_ID + b"body"
    assert len(data) == MIN_MESSAGE_LENGTH + 4


@pytest.mark.parametrize("body", [b"", b"x", b"\x00\n\xff" * 100])
def test_round_trip(body):
    data = encode_message(NOW_NS, 65535, MSG_ID, body)
    msg = decode_message(data)
    assert msg == DecodedMessage(NOW_NS, 65535, MSG_ID, body)
    assert isinstance(msg.id, bytes) and isinstance(msg.body, bytes)


def test_decode_accepts_bytearray_and_memoryview():
    data = encode_message(-1, 0, MSG_ID, b"b")
    assert decode_message(bytearray(data)) == (-1, 0, MSG_ID, b"b")
    assert decode_message(memoryview(data)) == (-1, 0, MSG_ID, b"b")


@pytest.mark.parametrize("length", [0, 1, 10, 25])
def test_decode_too_short(length):
    data = encode_message(1, 1, MSG_ID, b"")[:length]
    with pytest.raises(ProtocolError) as info:
        decode_message(data)
    assert info.value.code == "E_BAD_MESSAGE"
    assert info.value.fatal is True


def test_decode_minimum_length_is_empty_body():
    assert decode_message(encode_message(5, 2, MSG_ID, b"")).body == b""


@pytest.mark.parametrize("body", [b"", b"hello", b"x" * 1000])
def test_encode_message_frame_equals_frame_of_message(body):
    frame = encode_message_frame(NOW_NS, 7, MSG_ID, body)
    assert frame == encode_frame(FRAME_TYPE_MESSAGE, encode_message(NOW_NS, 7, MSG_ID, body))
    reader = FrameReader()
    reader.feed(frame)
    assert reader.frames() == [(FRAME_TYPE_MESSAGE, encode_message(NOW_NS, 7, MSG_ID, body))]


# -- IDFactory ---------------------------------------------------------------

def test_ids_match_formula():
    node = 7
    factory = IDFactory(node)
    ids = factory.new_ids(NOW_NS, 3)
    assert ids == [expected_id(NOW_NS, node, s) for s in range(3)]
    for i in ids:
        assert ID_RE.fullmatch(i)


@pytest.mark.parametrize("node", [0, 1, 512, 1023])
def test_ids_formula_any_node(node):
    factory = IDFactory(node)
    assert factory.new_ids(NOW_NS) == [expected_id(NOW_NS, node, 0)]
    assert factory.new_ids(NOW_NS + 1) == [expected_id(NOW_NS, node, 1)]


def test_default_count_is_one():
    assert len(IDFactory(1).new_ids(NOW_NS)) == 1


def test_ids_unique_and_increasing_within_window():
    factory = IDFactory(3)
    ids = factory.new_ids(NOW_NS, 10) + factory.new_ids(NOW_NS + 100, 10)  # same 2**20 ns window
    assert len(set(ids)) == 20
    assert ids == sorted(ids)
    assert [int(i, 16) & 0xFFF for i in ids] == list(range(20))


def test_ids_unique_and_increasing_across_windows():
    factory = IDFactory(3)
    ids = []
    for window in range(5):
        ids += factory.new_ids(NOW_NS + window * (1 << 20), 5)
    assert len(set(ids)) == 25
    assert ids == sorted(ids)
    # the sequence restarts at 0 in each new window
    assert ids[5] == expected_id(NOW_NS + (1 << 20), 3, 0)


def test_4096_per_window_then_fewer():
    factory = IDFactory(9)
    ids = factory.new_ids(NOW_NS, 5000)
    assert len(ids) == 4096
    assert ids[-1] == expected_id(NOW_NS, 9, 4095)
    assert factory.new_ids(NOW_NS, 1) == []
    assert factory.new_ids(NOW_NS + 10, 3) == []  # still the same window
    nxt = factory.new_ids(NOW_NS + (1 << 20), 2)
    assert nxt == [expected_id(NOW_NS + (1 << 20), 9, 0), expected_id(NOW_NS + (1 << 20), 9, 1)]
    assert len(set(ids + nxt)) == 4098


def test_partial_window_exhaustion():
    factory = IDFactory(2)
    assert len(factory.new_ids(NOW_NS, 4000)) == 4000
    assert len(factory.new_ids(NOW_NS, 200)) == 96
    assert factory.new_ids(NOW_NS, 0) == []


def test_clock_going_backwards_keeps_ids_unique():
    factory = IDFactory(4)
    ids = factory.new_ids(NOW_NS + 5 * (1 << 20), 3)
    ids += factory.new_ids(NOW_NS, 3)  # earlier window: continue the last one
    assert len(set(ids)) == 6
    assert ids == sorted(ids)


@pytest.mark.parametrize("node", [-1, 1024, 5000])
def test_node_id_out_of_range(node):
    with pytest.raises(ValueError):
        IDFactory(node)


def test_default_node_id():
    expected = zlib.crc32(hashlib.md5(b"somehost").digest()) % 1024
    assert default_node_id("somehost") == expected
    assert default_node_id() == default_node_id(socket.gethostname())
    assert 0 <= default_node_id() < 1024
