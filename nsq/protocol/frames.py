"""V2 frames.

Sources: https://nsq.io/clients/tcp_protocol_spec.html ("Data Format"); nsqio/nsq
``nsqd/protocol_v2.go`` (``protocolV2.Send``) and nsqio/go-nsq ``protocol.go``
(``ReadResponse``, ``UnpackResponse``).

::

    [x][x][x][x][x][x][x][x][x][x][x][x]...
    |  (int32) ||  (int32) || (binary)
    |  4-byte  ||  4-byte  || N-byte
    ------------------------------------...
        size     frame type     data

``size`` counts the 4 frame-type bytes plus the data. Big endian.
"""

from __future__ import annotations

import struct

from nsq.protocol.errors import E_BAD_PROTOCOL, ProtocolError

__all__ = [
    "MAGIC_V2",
    "FRAME_TYPE_RESPONSE",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "HEARTBEAT",
    "OK",
    "CLOSE_WAIT",
    "encode_frame",
    "FrameReader",
]

MAGIC_V2 = b"  V2"
FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2
HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"

_FRAME_HDR = struct.Struct(">ii")
#: frames larger than this are treated as garbage by :class:`FrameReader`
DEFAULT_MAX_FRAME_SIZE = 1 << 30


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """Encode one frame: ``[size][frame type][data]`` as bytes."""
    return _FRAME_HDR.pack(len(data) + 4, frame_type) + data


class FrameReader:
    """Incremental client-side parser of the frames nsqd sends.

    Feed it bytes as they arrive; :meth:`next_frame` returns complete frames
    one at a time and ``None`` when more bytes are needed.

    Raises:
        ProtocolError: ``E_BAD_PROTOCOL`` for a size below 4, above
            ``max_frame_size`` or an unknown frame type.
    """

    __slots__ = ("_buf", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_frame(self) -> tuple[int, bytes] | None:
        """Return ``(frame_type, data)`` for the next complete frame, or None."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 8:
            self._compact()
            return None
        size, frame_type = _FRAME_HDR.unpack_from(buf, pos)
        if size < 4 or size > self.max_frame_size:
            raise ProtocolError(E_BAD_PROTOCOL, f"invalid frame size {size}")
        if frame_type not in (FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE):
            raise ProtocolError(E_BAD_PROTOCOL, f"invalid frame type {frame_type}")
        end = pos + 4 + size
        if len(buf) < end:
            self._compact()
            return None
        data = bytes(buf[pos + 8:end])
        self._pos = end
        return frame_type, data

    def take_rest(self) -> bytes:
        """Remove and return the bytes not yet parsed (a stream upgrade
        starts right after the frame just read)."""
        rest = bytes(self._buf[self._pos:])
        self._buf.clear()
        self._pos = 0
        return rest

    def frames(self) -> list[tuple[int, bytes]]:
        """All complete frames buffered so far."""
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
