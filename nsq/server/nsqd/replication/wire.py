"""The replication stream's frames (sans-IO; docs/operations/replication.md).

A replica opens a WebSocket to its leader's ``GET /replica/stream``. Control
messages are JSON text frames (``{"type": ...}``); the records are binary
frames::

    [u8 kind = 1][u16 topic length][topic][u64 first offset][u64 segment base][u32 count][records]

``records`` are ``count`` framed records exactly as the leader's topic log
holds them (:mod:`nsq.server.nsqd.storage.logsegment`), the first at ``first
offset``, all in the leader's segment that starts at ``segment base``.
"""

from __future__ import annotations

import struct

__all__ = ["RECORDS", "encode_records", "decode_records", "WireError"]

RECORDS = 1
_HEAD = struct.Struct(">BH")
_POS = struct.Struct(">QQI")


class WireError(ValueError):
    """A frame that is not what the stream sends (truncated, unknown kind)."""


def encode_records(topic: str, first: int, segment_base: int, count: int, data: bytes) -> bytes:
    """One binary frame of ``count`` records of ``topic`` (bytes)."""
    name = topic.encode()
    return b"".join((_HEAD.pack(RECORDS, len(name)), name, _POS.pack(first, segment_base, count), data))


def decode_records(frame: bytes) -> tuple[str, int, int, int, bytes]:
    """``(topic, first offset, segment base, count, records)`` of a binary frame.

    Raises:
        WireError: a truncated frame or an unknown kind.
    """
    if len(frame) < _HEAD.size:
        raise WireError(f"a frame of {len(frame)} bytes")
    kind, n = _HEAD.unpack_from(frame, 0)
    if kind != RECORDS:
        raise WireError(f"unknown frame kind {kind}")
    pos = _HEAD.size + n
    if len(frame) < pos + _POS.size:
        raise WireError("a truncated records frame")
    try:
        topic = frame[_HEAD.size:pos].decode()
    except UnicodeDecodeError:
        raise WireError("a topic name that is not UTF-8") from None
    first, base, count = _POS.unpack_from(frame, pos)
    return topic, first, base, count, frame[pos + _POS.size:]
