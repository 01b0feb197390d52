"""Stream compression negotiated by IDENTIFY (sans-IO): snappy and deflate.

WIRE-FACTS "nsqd TCP": snappy is the snappy *framing* format (stream
identifier, then CRC-checked chunks), deflate is raw deflate (no zlib
header) with a sync flush after each write, so every frame sent is
decodable at once. Both directions of a connection are compressed after
the upgrade's ``OK``; each side keeps one codec per connection.

A codec turns the bytes one side writes into wire bytes (:meth:`encode`)
and wire bytes received, in any split, back into the stream
(:meth:`decode`).
"""

from __future__ import annotations

import zlib

__all__ = ["Codec", "DeflateCodec", "SnappyCodec", "CompressionError"]


class CompressionError(ValueError):
    """Wire bytes that do not decode (corrupt or not compressed)."""


class Codec:
    """Interface: ``encode(bytes) -> bytes``, ``decode(bytes) -> bytes``."""

    name = ""

    def encode(self, data: bytes) -> bytes:  # pragma: no cover - interface
        """Bytes written by this side -> wire bytes (decodable at once)."""
        raise NotImplementedError

    def decode(self, data: bytes) -> bytes:  # pragma: no cover - interface
        """Wire bytes, in any split -> the stream bytes they complete.

        Raises:
            CompressionError: corrupt input.
        """
        raise NotImplementedError


class DeflateCodec(Codec):
    """Raw deflate, sync-flushed.

    Args:
        level: 1 (fastest) to 9 (smallest); nsqd bounds it by
            ``--max-deflate-level``.
    """

    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        self.level = level
        self._compress = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._decompress = zlib.decompressobj(-zlib.MAX_WBITS)

    def encode(self, data: bytes) -> bytes:
        c = self._compress
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        try:
            return self._decompress.decompress(data)
        except zlib.error as exc:
            raise CompressionError(f"deflate: {exc}") from None


class SnappyCodec(Codec):
    """The snappy framing format (python-snappy's stream classes)."""

    name = "snappy"

    def __init__(self, max_chunk: int = 16 * 1024) -> None:
        import snappy

        self.max_chunk = max(max_chunk, 1)
        self._compress = snappy.StreamCompressor()
        self._decompress = snappy.StreamDecompressor()

    def encode(self, data: bytes) -> bytes:
        """Frame ``data`` in chunks of at most ``max_chunk`` uncompressed
        bytes, as Go nsqd's buffered snappy writer does (one chunk per
        ``output_buffer_size`` flush; pynsq reads chunk by chunk)."""
        add = self._compress.add_chunk
        size = self.max_chunk
        if len(data) <= size:
            return add(bytes(data))
        view = memoryview(data)
        return b"".join(add(bytes(view[i:i + size])) for i in range(0, len(data), size))

    def decode(self, data: bytes) -> bytes:
        try:
            return self._decompress.decompress(data)
        except Exception as exc:  # python-snappy raises several types for bad input
            raise CompressionError(f"snappy: {exc}") from None
