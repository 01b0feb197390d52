"""The replication stream's frames (sans-IO; docs/operations/replication.md).

A replica opens a WebSocket to its leader's ``GET /replica/stream``. The
hello, the state and the cut points are JSON text frames (``{"type": ...}``);
records and acknowledgements are binary frames::

    records (leader -> replica):
    [u8 1][u16 topic length][topic][u64 first offset][u64 segment base][u32 count]
    [u64 leader head][records][u32 crc32c of all before it, little-endian]

    ack (replica -> leader):
    [u8 2][u16 topic length][topic][u64 head]

``records`` are ``count`` framed records exactly as the leader's topic log
holds them (:mod:`nsq.server.nsqd.storage.logsegment`), the first at ``first
offset``, all in the leader's segment that starts at ``segment base``;
``leader head`` is the leader's head when it sent them (the replica's lag).

The trailing CRC-32C covers the whole frame before it, head and records (each
record also carries its own, which the replica does not check: one pass in C
instead of a loop). Stored little-endian, it makes the CRC-32C of the whole
frame a constant (:data:`RESIDUE`), so the replica checks the frame as it
came, in one pass, and writes its records from a view of it, with no copy.
A frame damaged anywhere, or cut short (the WebSocket delivers whole
messages; a cut one's last four bytes are not its CRC), fails the check.
"""

from __future__ import annotations

import struct

from google_crc32c import extend as crc32c_extend
from google_crc32c import value as crc32c

__all__ = ["VERSION", "RECORDS", "ACK", "RESIDUE", "encode_records", "records_frame", "decode_records", "encode_ack",
           "decode_ack", "WireError"]

#: the stream's version, in both hellos (``"version"``): a leader and a replica of
#: another version refuse each other with one line (2: the records CRC covers the head)
VERSION = 2
RECORDS = 1
ACK = 2
#: the CRC-32C of any bytes followed by their own CRC-32C, little-endian (the Castagnoli residue)
RESIDUE = 0x48674BC7
_HEAD = struct.Struct(">BH")
_POS = struct.Struct(">QQIQ")
_CRC = struct.Struct("<I")
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


def _records_parts(topic: str, first: int, segment_base: int, count: int, leader_head: int,
                   chunks: list[bytes]) -> tuple[bytes, bytes]:
    name = topic.encode()
    head = _HEAD.pack(RECORDS, len(name)) + name + _POS.pack(first, segment_base, count, leader_head)
    crc = crc32c(head)
    for chunk in chunks:
        crc = crc32c_extend(crc, chunk)
    return head, _CRC.pack(crc)


def encode_records(topic: str, first: int, segment_base: int, count: int, leader_head: int, data: bytes) -> bytes:
    """One records frame (bytes, the layout in the module docstring) of
    ``count`` framed records joined in ``data``, the first at offset
    ``first``, in the leader's segment starting at ``segment_base``;
    ``leader_head`` the leader's head (offsets are message counts).
    What :func:`records_frame` sends, as one bytes object (tests, tools)."""
    head, trailer = _records_parts(topic, first, segment_base, count, leader_head, [data])
    return head + data + trailer


def records_frame(topic: str, first: int, segment_base: int, count: int, leader_head: int,
                  chunks: list[bytes]) -> list[bytes]:
    """The WebSocket frame (unmasked, final, binary: a server's, RFC 6455
    5.2) carrying the records frame of the records joined from ``chunks``,
    as pieces for one ``writelines`` (the chunks as they are: no join, one
    CRC pass over them)."""
    head, trailer = _records_parts(topic, first, segment_base, count, leader_head, chunks)
    length = len(head) + sum(map(len, chunks)) + len(trailer)
    if length < 126:
        ws = _WS_TINY.pack(0x82, length)
    elif length < 65536:
        ws = _WS_SHORT.pack(0x82, 126, length)
    else:
        ws = _WS_LONG.pack(0x82, 127, length)
    return [ws + head, *chunks, trailer]


def decode_records(frame: bytes) -> tuple[str, int, int, int, int, memoryview]:
    """``(topic, first offset, segment base, count, leader head, records)``,
    the records a view of ``frame`` (bytes).

    Raises:
        WireError: a truncated or damaged frame, another kind.
    """
    if len(frame) < _HEAD.size + _CRC.size or crc32c(frame) != RESIDUE:
        raise WireError(f"a damaged or truncated records frame of {len(frame)} bytes")
    topic, pos = _name(frame, RECORDS)
    if len(frame) < pos + _POS.size + _CRC.size:
        raise WireError("a truncated records frame")
    first, base, count, head = _POS.unpack_from(frame, pos)
    return topic, first, base, count, head, memoryview(frame)[pos + _POS.size:-_CRC.size]


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
