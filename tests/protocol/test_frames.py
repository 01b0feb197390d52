"""V2 frames and FrameReader.

Sources: https://nsq.io/clients/tcp_protocol_spec.html ("Data Format"); nsqio/nsq
nsqd/protocol_v2.go ``protocolV2.Send``.
"""

from __future__ import annotations

import struct

import pytest

from nsq.protocol.errors import ProtocolError
from nsq.protocol.frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    OK,
    FrameReader,
    encode_frame,
)

FRAMES = [
    (FRAME_TYPE_RESPONSE, OK),
    (FRAME_TYPE_RESPONSE, HEARTBEAT),
    (FRAME_TYPE_ERROR, b"E_INVALID invalid command BOGUS"),
    (FRAME_TYPE_MESSAGE, b"\x00" * 26 + b"body"),
    (FRAME_TYPE_RESPONSE, b""),
    (FRAME_TYPE_RESPONSE, CLOSE_WAIT),
    (FRAME_TYPE_MESSAGE, bytes(range(256)) * 10),
]


def test_encode_frame_layout():
    assert encode_frame(FRAME_TYPE_RESPONSE, OK) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    assert encode_frame(FRAME_TYPE_ERROR, b"E") == b"\x00\x00\x00\x05\x00\x00\x00\x01E"
    assert encode_frame(FRAME_TYPE_MESSAGE, b"") == b"\x00\x00\x00\x04\x00\x00\x00\x02"


def test_reader_all_at_once():
    reader = FrameReader()
    reader.feed(b"".join(encode_frame(t, d) for t, d in FRAMES))
    assert reader.frames() == FRAMES
    assert reader.next_frame() is None


def test_reader_byte_by_byte():
    stream = b"".join(encode_frame(t, d) for t, d in FRAMES)
    reader = FrameReader()
    out = []
    for i in range(len(stream)):
        reader.feed(stream[i:i + 1])
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert out == FRAMES


@pytest.mark.parametrize("chunk", [2, 3, 7, 100])
def test_reader_chunks(chunk):
    stream = b"".join(encode_frame(t, d) for t, d in FRAMES) * 3
    reader = FrameReader()
    out = []
    for i in range(0, len(stream), chunk):
        reader.feed(stream[i:i + chunk])
        out += reader.frames()
    assert out == FRAMES * 3


def test_incomplete_frame_returns_none():
    reader = FrameReader()
    frame = encode_frame(FRAME_TYPE_RESPONSE, b"hello")
    reader.feed(frame[:7])
    assert reader.next_frame() is None
    reader.feed(frame[7:-1])
    assert reader.next_frame() is None
    reader.feed(frame[-1:])
    assert reader.next_frame() == (FRAME_TYPE_RESPONSE, b"hello")
    assert reader.next_frame() is None


@pytest.mark.parametrize("size", [0, 3, -1, -(2**31)])
def test_bad_size(size):
    reader = FrameReader()
    reader.feed(struct.pack(">ii", size, 0))
    with pytest.raises(ProtocolError) as info:
        reader.next_frame()
    assert info.value.code == "E_BAD_PROTOCOL"
    assert info.value.fatal is True


def test_size_above_max_frame_size():
    reader = FrameReader(max_frame_size=100)
    reader.feed(struct.pack(">ii", 101, 0))  # rejected before the data arrives
    with pytest.raises(ProtocolError):
        reader.next_frame()
    reader = FrameReader(max_frame_size=100)
    reader.feed(encode_frame(0, b"x" * 96))
    assert reader.next_frame() == (0, b"x" * 96)


@pytest.mark.parametrize("frame_type", [3, -1, 255, 2**31 - 1])
def test_bad_type(frame_type):
    reader = FrameReader()
    reader.feed(struct.pack(">ii", 10, frame_type))
    with pytest.raises(ProtocolError) as info:
        reader.next_frame()
    assert info.value.code == "E_BAD_PROTOCOL"


def test_bad_frame_after_good_one():
    reader = FrameReader()
    reader.feed(encode_frame(0, OK) + struct.pack(">ii", 2, 0))
    assert reader.next_frame() == (0, OK)
    with pytest.raises(ProtocolError):
        reader.next_frame()
