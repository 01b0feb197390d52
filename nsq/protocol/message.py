"""Message encoding and IDs.

Sources: https://nsq.io/clients/tcp_protocol_spec.html ("Data Format"); nsqio/nsq
``nsqd/message.go`` (``Message.WriteTo``, ``decodeMessage``) and
``nsqd/guid.go`` (``guidFactory.NewGUID``, ``guid.Hex``).

A message frame's data, which is also the on-disk record::

    [x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x][x]...
    |       (int64)        ||    ||      (hex string encoded in ASCII)           || (binary)
    |       8-byte         ||    ||                 16-byte                      || N-byte
    ------------------------------------------------------------------------------...
      nanosecond timestamp    ^^                   message ID                       body
                           (uint16)
                            2-byte
                           attempts

IDs: ``ts = unix_nanos >> 20``;
``id = ((ts - 1288834974288) << 22) | (node_id << 12) | sequence``, written
as 16 lowercase hex characters of its 8 big-endian bytes.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import zlib
from typing import NamedTuple

from nsq.protocol.errors import E_BAD_MESSAGE, ProtocolError

__all__ = [
    "MSG_ID_LENGTH",
    "MIN_MESSAGE_LENGTH",
    "DecodedMessage",
    "encode_message",
    "encode_message_frame",
    "decode_message",
    "IDFactory",
    "default_node_id",
]

MSG_ID_LENGTH = 16
#: 8 timestamp + 2 attempts + 16 id
MIN_MESSAGE_LENGTH = 26

_MSG_HDR = struct.Struct(">qH")
#: a message frame's header before the id: frame size, frame type 2,
#: timestamp (ns), attempts (nsq.io/clients/tcp_protocol_spec.html)
MSG_FRAME_HDR = struct.Struct(">iiqH")
_MSG_FRAME_HDR = MSG_FRAME_HDR
_TWEPOCH = 1288834974288
_SEQ_HEX = [b"%03x" % i for i in range(4096)]


class DecodedMessage(NamedTuple):
    """A message as read off the wire or disk.

    Attributes:
        timestamp: nanoseconds since the Unix epoch when nsqd created it.
        attempts: delivery attempts, including this one.
        id: 16 ASCII hex bytes.
        body: the payload.
    """

    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def encode_message(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """Encode a message (frame data / disk record) as bytes."""
    return _MSG_HDR.pack(timestamp, attempts) + msg_id + body


def encode_message_frame(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """Encode a whole V2 message frame (frame header included)."""
    return _MSG_FRAME_HDR.pack(len(body) + 30, 2, timestamp, attempts) + msg_id + body


def decode_message(data: bytes) -> DecodedMessage:
    """Decode a message frame's data.

    Raises:
        ProtocolError: ``E_BAD_MESSAGE`` if shorter than 26 bytes.
    """
    if len(data) < MIN_MESSAGE_LENGTH:
        raise ProtocolError(E_BAD_MESSAGE, f"message too short {len(data)} < {MIN_MESSAGE_LENGTH}")
    ts, attempts = _MSG_HDR.unpack_from(data, 0)
    return DecodedMessage(ts, attempts, bytes(data[10:26]), bytes(data[26:]))


def default_node_id(hostname: str | None = None) -> int:
    """Go nsqd's default ``--node-id``: crc32(md5(hostname)) mod 1024."""
    if hostname is None:
        hostname = socket.gethostname()
    return zlib.crc32(hashlib.md5(hostname.encode()).digest()) % 1024


class IDFactory:
    """Generates message IDs as Go nsqd's guid.go does, without a clock.

    The caller passes the current time; the factory never reads it, so it is
    deterministic and testable. At most 4096 IDs exist per ~1.05 ms window
    (``2**20`` ns); when a window is exhausted :meth:`new_ids` returns fewer
    than asked and the caller retries with a later time.

    Args:
        node_id: 0 <= node_id < 1024.

    Raises:
        ValueError: node_id out of range.
    """

    __slots__ = ("node_id", "_last_ts", "_seq", "_prefix")

    def __init__(self, node_id: int) -> None:
        if not 0 <= node_id < 1024:
            raise ValueError(f"node id {node_id} out of range [0, 1024)")
        self.node_id = node_id
        self._last_ts = -1
        self._seq = 0
        self._prefix = b""

    def new_ids(self, now_ns: int, count: int = 1) -> list[bytes]:
        """Return up to ``count`` new 16-byte hex IDs for time ``now_ns`` (ns).

        Fewer are returned only when the current window's 4096 sequence
        numbers are used up.
        """
        ts = now_ns >> 20
        if ts > self._last_ts:
            self._new_window(ts)
        # a clock that went backwards keeps using the last window
        seq = self._seq
        n = min(count, 4096 - seq)
        prefix = self._prefix
        out = [prefix + _SEQ_HEX[s] for s in range(seq, seq + n)]
        self._seq = seq + n
        return out

    def new_id(self, now_ns: int) -> bytes | None:
        """One new 16-byte hex ID for time ``now_ns`` (ns), as
        :meth:`new_ids` with ``count=1``; None when the window's 4096
        sequence numbers are used up."""
        ts = now_ns >> 20
        if ts > self._last_ts:
            self._new_window(ts)
        seq = self._seq
        if seq >= 4096:
            return None
        self._seq = seq + 1
        return self._prefix + _SEQ_HEX[seq]

    def _new_window(self, ts: int) -> None:
        self._last_ts = ts
        self._seq = 0
        base = ((ts - _TWEPOCH) << 22) | (self.node_id << 12)
        self._prefix = (b"%016x" % base)[:13]
