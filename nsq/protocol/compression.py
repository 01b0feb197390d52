"""Stream compression negotiated by IDENTIFY (sans-IO): snappy and deflate.

After the ``OK`` that follows a negotiated upgrade both directions of a V2
connection are compressed (https://nsq.io/clients/tcp_protocol_spec.html,
IDENTIFY ``snappy`` / ``deflate``; Go: nsqd/client_v2.go ``UpgradeDeflate``
and ``UpgradeSnappy``). Snappy is the snappy *framing* format (a stream
identifier chunk, then CRC-checked chunks of at most 64 KiB of stream
bytes); deflate is raw deflate (no zlib header) with a sync flush after
each write, so every frame sent is decodable at once. Each side keeps one
codec per connection.

A codec turns the bytes one side writes into wire bytes (:meth:`Codec.encode`)
and wire bytes received, in any split, back into the stream
(:meth:`Codec.decode`). Decoding is *bounded*: ``decode(data, limit)``
returns at most ``limit`` stream bytes and keeps the rest of the input
inside the codec, so a small compressed input that inflates to gigabytes
(a compression bomb) costs at most ``limit`` bytes of memory per call.
Go's nsqd gets the same bound from reading the inflating reader through a
16 KiB ``bufio.Reader`` (nsqd/client_v2.go ``defaultBufferSize``).

Draining pattern (all sizes in bytes)::

    out = codec.decode(wire_bytes, limit)     # <= limit bytes
    while codec.pending:                      # more output for input held
        out = codec.decode(b"", limit)        # <= limit bytes each
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = ["Codec", "DeflateCodec", "SnappyCodec", "CompressionError", "SNAPPY_MAX_CHUNK"]

#: largest snappy chunk of stream bytes (bytes); Go: golang/snappy
#: ``maxBlockSize`` / ``maxUncompressedChunkLen``
SNAPPY_MAX_CHUNK = 65536


class CompressionError(ValueError):
    """Wire bytes that do not decode (corrupt, not compressed, or data after
    the end of a deflate stream)."""


class Codec:
    """Interface of a stream codec.

    ``encode(bytes) -> bytes`` and ``decode(bytes, limit=None) -> bytes``;
    :attr:`pending` says whether input is held that may decode into more
    stream bytes without new wire bytes.
    """

    name = ""

    def encode(self, data: bytes | bytearray) -> bytes:  # pragma: no cover - interface
        """Bytes written by this side -> wire bytes (decodable at once)."""
        raise NotImplementedError

    def decode(self, data: bytes, limit: int | None = None) -> bytes:  # pragma: no cover - interface
        """Wire bytes, in any split -> stream bytes they complete.

        Args:
            data: wire bytes just received (``b""`` to drain held input).
            limit: the most stream bytes to return (bytes). None: no
                bound, everything ``data`` completes. ``<= 0``: decode
                nothing, only hold ``data``.

        Returns:
            At most ``limit`` stream bytes; input not decoded yet stays in
            the codec (see :attr:`pending`).

        Raises:
            CompressionError: corrupt input; the codec must not be used again.
        """
        raise NotImplementedError

    @property
    def pending(self) -> bool:  # pragma: no cover - interface
        """True while ``decode(b"", limit)`` may return more stream bytes."""
        raise NotImplementedError

    @property
    def pending_input(self) -> int:  # pragma: no cover - interface
        """Wire bytes (compressed) held and not decoded yet."""
        raise NotImplementedError


class DeflateCodec(Codec):
    """Raw deflate, sync-flushed (Go: ``compress/flate`` in nsqd/client_v2.go).

    Args:
        level: 1 (fastest) to 9 (smallest); nsqd bounds it by
            ``--max-deflate-level``.

    Bounded decoding uses zlib's ``max_length``: input the inflater did not
    reach stays in ``unconsumed_tail`` and is decoded by the next call.
    """

    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        self.level = level
        self._compress = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._decompress = zlib.decompressobj(-zlib.MAX_WBITS)
        self._tail = b""
        # the last bounded call filled its limit: the inflater may hold
        # output for input it has already consumed
        self._more = False

    def encode(self, data: bytes | bytearray) -> bytes:
        c = self._compress
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes, limit: int | None = None) -> bytes:
        d = self._decompress
        if self._tail:
            data = self._tail + data if data else self._tail
            self._tail = b""
        if d.eof:
            if data:
                raise CompressionError("deflate: data after the end of the stream")
            return b""
        if limit is not None and limit <= 0:
            self._tail = bytes(data)
            return b""
        if not data and not self._more:
            return b""
        try:
            if limit is None:
                out = d.decompress(data)
                self._more = False
            else:
                out = d.decompress(data, limit)
                self._tail = d.unconsumed_tail
                self._more = len(out) == limit
        except zlib.error as exc:
            raise CompressionError(f"deflate: {exc}") from None
        if d.eof and d.unused_data:
            raise CompressionError("deflate: data after the end of the stream")
        return out

    @property
    def pending(self) -> bool:
        return bool(self._tail) or self._more

    @property
    def pending_input(self) -> int:
        return len(self._tail)


# -- snappy framing ---------------------------------------------------------------
#
# https://github.com/google/snappy/blob/main/framing_format.txt, read as Go's
# golang/snappy decode.go Reader.Read reads it:
#
#   [type: 1 byte][length: 3 bytes little endian][length bytes]
#
#   0xff  stream identifier "sNaPpY" (must come first; may repeat)
#   0x00  compressed data:   [masked CRC-32C: 4][raw snappy block]
#   0x01  uncompressed data: [masked CRC-32C: 4][<= 65536 bytes]
#   0x02-0x7f  reserved, unskippable: an error
#   0x80-0xfe  skippable (0xfe padding): ignored
#
# Chunk lengths above Go's reader buffer (MaxEncodedLen(65536) + 4) are
# refused, as golang/snappy does (ErrUnsupported), so at most one chunk of
# wire bytes is ever held undecoded.

_SNAPPY_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_CHECKSUM = 4
#: golang/snappy MaxEncodedLen(65536) + checksumSize
_SNAPPY_MAX_CHUNK_LEN = 32 + SNAPPY_MAX_CHUNK + SNAPPY_MAX_CHUNK // 6 + _SNAPPY_CHECKSUM


def _snappy_decoded_len(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    value = 0
    for i in range(min(len(block), 5)):
        byte = block[i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value
    raise CompressionError("snappy: corrupt input (bad block length)")


class SnappyCodec(Codec):
    """The snappy framing format (python-snappy / cramjam).

    Args:
        max_chunk: the most stream bytes :meth:`encode` puts in one chunk
            (bytes, at most 65536).

    Decoding parses the framing itself and decodes one chunk at a time
    (each CRC-checked by cramjam), so one call never holds more than
    ``limit`` stream bytes plus one chunk (64 KiB); stream bytes of a chunk
    beyond ``limit`` wait in the codec for the next call.
    """

    name = "snappy"

    def __init__(self, max_chunk: int = 16 * 1024) -> None:
        import cramjam  # python-snappy's backend
        import snappy

        self.max_chunk = min(max(max_chunk, 1), SNAPPY_MAX_CHUNK)
        self._compress = snappy.StreamCompressor()
        self._frame_decode = cramjam.snappy.decompress
        self._frame_error = cramjam.DecompressionError
        self._in = bytearray()  # wire bytes not decoded yet
        self._out = b""  # decoded stream bytes not returned yet
        self._identified = False

    def encode(self, data: bytes | bytearray) -> bytes:
        """Frame ``data`` in chunks of at most ``max_chunk`` uncompressed
        bytes, as Go nsqd's buffered snappy writer does (one chunk per
        ``output_buffer_size`` flush; pynsq reads chunk by chunk)."""
        add: Callable[[bytes], bytes] = self._compress.add_chunk
        size = self.max_chunk
        if len(data) <= size:
            return add(bytes(data))
        view = memoryview(data)
        return b"".join(add(bytes(view[i:i + size])) for i in range(0, len(data), size))

    def decode(self, data: bytes, limit: int | None = None) -> bytes:
        if data:
            self._in += data
        if limit is not None and limit <= 0:
            return b""
        room = -1 if limit is None else limit  # -1: no bound
        parts: list[bytes] = []
        if self._out:
            out = self._out
            if room >= 0 and len(out) > room:
                self._out = out[room:]
                return out[:room]
            self._out = b""
            parts.append(out)
            if room >= 0:
                room -= len(out)
        buf = self._in
        pos = 0
        end = len(buf)
        try:
            while room != 0 and end - pos >= 4:
                kind = buf[pos]
                length = buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16
                if not self._identified and kind != 0xFF:
                    raise CompressionError("snappy: corrupt input (no stream identifier)")
                if length > _SNAPPY_MAX_CHUNK_LEN:
                    raise CompressionError(f"snappy: unsupported chunk length {length}")
                if end - pos - 4 < length:
                    break
                chunk_end = pos + 4 + length
                if kind == 0xFF:
                    if bytes(buf[pos:chunk_end]) != _SNAPPY_IDENTIFIER:
                        raise CompressionError("snappy: corrupt input (bad stream identifier)")
                    self._identified = True
                elif kind <= 0x01:
                    out = self._decode_chunk(kind, buf, pos, chunk_end)
                    if room >= 0 and len(out) > room:
                        self._out = out[room:]
                        out = out[:room]
                    parts.append(out)
                    if room >= 0:
                        room -= len(out)
                elif kind <= 0x7F:
                    raise CompressionError(f"snappy: unsupported chunk type {kind:#04x}")
                # else 0x80-0xfe: skippable
                pos = chunk_end
        finally:
            if pos:
                del buf[:pos]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _decode_chunk(self, kind: int, buf: bytearray, start: int, end: int) -> bytes:
        """Stream bytes of the data chunk ``buf[start:end]`` (header included)."""
        chunk = bytes(buf[start:end])
        if len(chunk) < 4 + _SNAPPY_CHECKSUM:
            raise CompressionError("snappy: corrupt input (chunk shorter than its checksum)")
        body = 4 + _SNAPPY_CHECKSUM
        size = _snappy_decoded_len(chunk[body:body + 5]) if kind == 0x00 else len(chunk) - body
        if size > SNAPPY_MAX_CHUNK:
            raise CompressionError(f"snappy: chunk of {size} bytes > {SNAPPY_MAX_CHUNK}")
        try:
            return bytes(self._frame_decode(_SNAPPY_IDENTIFIER + chunk))
        except self._frame_error as exc:
            raise CompressionError(f"snappy: {exc}") from None

    @property
    def pending(self) -> bool:
        if self._out:
            return True
        buf = self._in
        if len(buf) < 4:
            return False
        return len(buf) - 4 >= (buf[1] | buf[2] << 8 | buf[3] << 16)

    @property
    def pending_input(self) -> int:
        return len(self._in)
