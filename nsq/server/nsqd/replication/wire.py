"""The replication stream's frames (sans-IO; docs/operations/replication.md).

A replica opens a WebSocket to its leader's ``GET /replica/stream``. The
hello, the state and the cut points are JSON text frames (``{"type": ...}``);
records and acknowledgements are binary frames::

    records (leader -> replica):
    [u8 1][u16 topic length][topic][u64 first offset][u64 segment base][u32 count]
    [u64 leader head][u32 crc32c of the records][records]

    ack (replica -> leader):
    [u8 2][u16 topic length][topic][u64 head]

``records`` are ``count`` framed records exactly as the leader's topic log
holds them (:mod:`nsq.server.nsqd.storage.logsegment`), the first at ``first
offset``, all in the leader's segment that starts at ``segment base``;
``leader head`` is the leader's head when it sent them (the replica's lag).
The page's CRC-32C (one pass in C; each record also carries its own)
catches a page damaged or cut short on the way.
"""

from __future__ import annotations

import struct

from google_crc32c import extend as crc32c_extend
from google_crc32c import value as crc32c

__all__ = ["RECORDS", "ACK", "encode_records", "records_head", "ws_binary_head", "decode_records", "encode_ack",
           "decode_ack", "WireError"]

RECORDS = 1
ACK = 2
_HEAD = struct.Struct(">BH")
_POS = struct.Struct(">QQIQI")
_ACK = struct.Struct(">Q")
_WS_TINY = struct.Struct(">BB")
_WS_SHORT = struct.Struct(">BBH")
_WS_LONG = struct.Struct(">BBQ")


class WireError(ValueError):
    """A frame that is not what the stream sends (truncated, damaged, unknown kind)."""


def _name(frame: bytes, kind: int) -> tuple[str, int]:
    if len(frame) < _HEAD.size:
        raise WireError(f"a frame of {len(frame)} bytes")
    got, n = _HEAD.unpack_from(frame, 0)
    if got != kind:
        raise WireError(f"frame kind {got}, expected {kind}")
    pos = _HEAD.size + n
    try:
        return frame[_HEAD.size:pos].decode(), pos
    except UnicodeDecodeError:
        raise WireError("a topic name that is not UTF-8") from None


def encode_records(topic: str, first: int, segment_base: int, count: int, leader_head: int, data: bytes) -> bytes:
    """One records frame (bytes)."""
    return records_head(topic, first, segment_base, count, leader_head, [data]) + data


def records_head(topic: str, first: int, segment_base: int, count: int, leader_head: int,
                 chunks: list[bytes]) -> bytes:
    """A records frame up to its records (bytes), for the records joined
    from ``chunks`` (sent after it as they are: no join, one CRC pass)."""
    crc = crc32c(chunks[0])
    for chunk in chunks[1:]:
        crc = crc32c_extend(crc, chunk)
    name = topic.encode()
    return _HEAD.pack(RECORDS, len(name)) + name + _POS.pack(first, segment_base, count, leader_head, crc)


def ws_binary_head(length: int) -> bytes:
    """The head of one unmasked, final, binary WebSocket frame (RFC 6455
    5.2, a server's) of ``length`` payload bytes."""
    if length < 126:
        return _WS_TINY.pack(0x82, length)
    if length < 65536:
        return _WS_SHORT.pack(0x82, 126, length)
    return _WS_LONG.pack(0x82, 127, length)


def decode_records(frame: bytes) -> tuple[str, int, int, int, int, bytes]:
    """``(topic, first offset, segment base, count, leader head, records)``.

    Raises:
        WireError: a truncated or damaged frame, another kind.
    """
    topic, pos = _name(frame, RECORDS)
    if len(frame) < pos + _POS.size:
        raise WireError("a truncated records frame")
    first, base, count, head, crc = _POS.unpack_from(frame, pos)
    data = frame[pos + _POS.size:]
    if crc32c(data) != crc:
        raise WireError(f"TOPIC({topic}): a damaged page of {count} records from offset {first}")
    return topic, first, base, count, head, data


def encode_ack(topic: str, head: int) -> bytes:
    """One ack frame: the replica has every record of ``topic`` below ``head``."""
    name = topic.encode()
    return _HEAD.pack(ACK, len(name)) + name + _ACK.pack(head)


def decode_ack(frame: bytes) -> tuple[str, int]:
    """``(topic, head)`` of an ack frame.

    Raises:
        WireError: a truncated frame or another kind.
    """
    topic, pos = _name(frame, ACK)
    if len(frame) != pos + _ACK.size:
        raise WireError("a truncated ack frame")
    return topic, _ACK.unpack_from(frame, pos)[0]
