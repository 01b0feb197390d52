"""The topic log's records and segment files (:mod:`nsq.server.nsqd.storage.topiclog`).

A record, 12 bytes of framing around the message as nsqd encodes it on
disk (Go: nsqd/message.go ``WriteTo``)::

    [u32 size][u32 crc32c][u32 defer ms][i64 timestamp ns][u16 attempts][16-byte id][body]
                \\________ crc32c and size cover all of these: the payload ____________/

A segment file ``<20-digit first offset>.log`` holds whole records back to
back; :class:`Segment` is what the log keeps of one (size, record count,
read fd, sparse index). A sealed segment's sparse index is also kept in
``<20-digit first offset>.index`` (:meth:`Segment.save_index`).
"""

from __future__ import annotations

import logging
import os
import struct

from google_crc32c import value as _crc

from nsq.protocol.message import MIN_MESSAGE_LENGTH

log = logging.getLogger("nsq.nsqd")

__all__ = ["LogRecord", "Segment", "encode_record", "encode_batch", "parse_record", "read_ended", "segment_name",
           "FRAME", "HEAD", "SEGMENT_SUFFIX", "INDEX_SUFFIX", "CHUNK", "INDEX_EVERY", "READ_ENDS",
           "LAST_READ_MAX"]

#: size, crc32 of the payload
FRAME = struct.Struct(">II")
#: the payload's head: defer ms, timestamp, attempts
HEAD = struct.Struct(">IqH")
SEGMENT_SUFFIX = ".log"
#: a sealed segment's sparse index (:meth:`Segment.save_index`)
INDEX_SUFFIX = ".index"
#: its head: magic, segment size (bytes), record count, entries; then the
#: entries (offset, byte position) as u64 pairs, then a u32 crc32c of all before
INDEX_HEAD = struct.Struct(">8sQQI")
INDEX_MAGIC = b"NSQIDX01"
#: bytes read per pread when scanning or reading a segment
CHUNK = 1 << 20
#: one sparse-index entry per this many records
INDEX_EVERY = 256
#: read ends a log keeps (:func:`read_ended`): one per sequential reader (a channel, a replica)
READ_ENDS = 1024
#: a one-record read's bytes up to this size are kept for the next reads (a RDY 1 worker's; one per log)
LAST_READ_MAX = 16 << 10

#: a record read back: (offset, id, body, timestamp, attempts, defer ms)
LogRecord = tuple[int, bytes, bytes, int, int, int]


def encode_record(msg_id: bytes, body: bytes, timestamp: int, attempts: int, defer_ms: int) -> bytes:
    """One framed record (bytes): see the module docstring."""
    payload = HEAD.pack(defer_ms, timestamp, attempts) + msg_id + body
    return FRAME.pack(len(payload), _crc(payload)) + payload


def encode_batch(ids: list[bytes], bodies: list[bytes], timestamp: int, defer_ms: int = 0) -> bytes:
    """The framed records of messages published together (one timestamp,
    attempts 0, one delay), joined: what :meth:`TopicLog.append_joined`
    writes. The per-record work is done by ``map`` in C (0.26 us per
    200-byte message here; a ``writev`` of the pieces instead of one join
    cost more in the kernel than the copy it saves)."""
    head = HEAD.pack(defer_ms, timestamp, 0)
    payloads = list(map(b"".join, zip([head] * len(ids), ids, bodies)))
    frames = list(map(FRAME.pack, map(len, payloads), map(_crc, payloads)))
    out: list[bytes] = [b""] * (2 * len(payloads))
    out[::2] = frames
    out[1::2] = payloads
    return b"".join(out)


def segment_name(base: int) -> str:
    """The file name of the segment whose first offset is ``base``."""
    return f"{base:020d}{SEGMENT_SUFFIX}"


class Segment:
    """One segment file: its first offset, size, read fd and sparse index."""

    __slots__ = ("base", "path", "size", "rfd", "index", "index_pos", "count", "first_ts")

    def __init__(self, base: int, path: str, size: int = 0) -> None:
        self.base = base
        self.path = path
        self.size = size
        self.rfd: int | None = None
        #: sparse index: offsets (ascending) of some records, at least one
        #: per INDEX_EVERY, or None until the segment is scanned ...
        self.index: list[int] | None = None
        #: ... and their byte positions
        self.index_pos: list[int] = []
        #: whole records (known for the newest segment and once scanned)
        self.count: int | None = None
        #: publish timestamp (ns) of its first record, once known
        self.first_ts: int | None = None

    def scan(self, topic: str, repair: bool = False) -> None:
        """Count the whole records and build the sparse index; with
        ``repair`` (the newest segment at start) cut a torn or damaged tail
        (logged, naming ``topic``)."""
        seg = self
        index: list[int] = []
        index_pos: list[int] = []
        count = 0
        size = seg.size
        try:
            fd = os.open(seg.path, os.O_RDONLY) if repair else seg.read_fd()
        except FileNotFoundError:
            seg.index, seg.index_pos, seg.count, seg.size = [], [], 0, 0
            return
        buf = b""
        buf_start = 0  # file position of buf[0]
        rel = 0
        try:
            while True:
                parsed = parse_record(buf, rel, len(buf))
                if parsed is None:
                    at = buf_start + rel
                    have = len(buf) - rel
                    need = 8 if have < 8 else 8 + FRAME.unpack_from(buf, rel)[0]
                    if at >= size or have >= need or buf_start + len(buf) >= size:
                        break  # the end, a damaged record, or a torn one
                    buf = os.pread(fd, max(CHUNK, need), at)
                    buf_start, rel = at, 0
                    continue
                if count % INDEX_EVERY == 0:
                    index.append(seg.base + count)
                    index_pos.append(buf_start + rel)
                count += 1
                rel = parsed[1]
        finally:
            if repair:
                os.close(fd)
        pos = buf_start + rel
        if pos < size:
            where = f"{seg.path} at byte {pos} of {size}"
            if repair:
                log.error("TOPIC(%s): the log's newest segment has a torn or damaged tail (%s): cut back to the "
                          "last whole record; the %d records before it are kept", topic, where, count)
                with open(seg.path, "r+b") as fh:
                    fh.truncate(pos)
            else:
                log.error("TOPIC(%s): damaged record in %s: the rest of that segment is skipped", topic, where)
            seg.size = pos
        seg.index = index
        seg.index_pos = index_pos
        seg.count = count

    @property
    def index_path(self) -> str:
        """Where :meth:`save_index` keeps the sparse index: ``<first offset>.index``."""
        return self.path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX

    def save_index(self, topic: str) -> None:
        """Write the sparse index of this segment, sealed by a roll, next to
        it (Kafka keeps an ``.index`` per segment): after a restart a read
        in its middle loads it (:meth:`load_index`) instead of scanning the
        whole segment on the event loop. Not fsynced: a lost, torn or stale
        file is refused by its checksum or its segment size, and the segment
        is scanned as before. A failure is logged (naming ``topic``)."""
        if self.index is None or self.count is None:
            return
        n = len(self.index)
        body = INDEX_HEAD.pack(INDEX_MAGIC, self.size, self.count, n) + struct.pack(
            f">{2 * n}Q", *[v for pair in zip(self.index, self.index_pos) for v in pair])
        try:
            with open(self.index_path, "wb") as fh:
                fh.write(body + struct.pack(">I", _crc(body)))
        except OSError as exc:
            log.error("TOPIC(%s): failed to write %s - %s", topic, self.index_path, exc)

    def load_index(self) -> bool:
        """Take the sparse index and record count from :meth:`save_index`'s
        file. False (nothing taken) if there is none, or it is damaged or
        not this segment's as it is now (another size)."""
        try:
            with open(self.index_path, "rb") as fh:
                data = fh.read()
        except OSError:
            return False
        if len(data) < INDEX_HEAD.size + 4 or _crc(data[:-4]) != struct.unpack_from(">I", data, len(data) - 4)[0]:
            return False
        magic, size, count, n = INDEX_HEAD.unpack_from(data)
        if magic != INDEX_MAGIC or size != self.size or len(data) != INDEX_HEAD.size + 16 * n + 4:
            return False
        values = struct.unpack_from(f">{2 * n}Q", data, INDEX_HEAD.size)
        index, index_pos = list(values[::2]), list(values[1::2])
        if n and (index[0] != self.base or index_pos[0] != 0):
            return False
        self.index, self.index_pos, self.count = index, index_pos, count
        return True

    def remove(self) -> None:
        """Delete the segment file and its index file (either may be gone already).

        Raises:
            OSError: the segment could not be deleted.
        """
        self.drop_index()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def drop_index(self) -> None:
        """Delete the index file, if any (the segment is about to change)."""
        try:
            os.remove(self.index_path)
        except OSError:
            pass

    def walk(self, pos: int, skip: int) -> int:
        """The byte position ``skip`` records after the record at byte
        ``pos`` (reading their headers), or :attr:`size` if the file ends
        first."""
        if skip:
            fd = self.read_fd()
            while skip:
                hdr = os.pread(fd, 8, pos)
                if len(hdr) < 8:
                    return self.size
                pos += 8 + FRAME.unpack(hdr)[0]
                skip -= 1
        return pos

    def read_fd(self) -> int:
        """The read fd, opened on first use."""
        if self.rfd is None:
            self.rfd = os.open(self.path, os.O_RDONLY)
        return self.rfd

    def close(self) -> None:
        """Close the read fd."""
        if self.rfd is not None:
            os.close(self.rfd)
            self.rfd = None


def read_ended(ends: dict[int, tuple[int, int]], offset: int, base: int, pos: int) -> None:
    """Note in ``ends`` that a read of a log ended at ``offset``, byte
    ``pos`` of its segment starting at offset ``base``: the reader's next
    read starts there without walking record headers from the sparse index
    (at most :data:`READ_ENDS` kept, the oldest dropped first)."""
    if len(ends) >= READ_ENDS:
        del ends[next(iter(ends))]
    ends[offset] = (base, pos)


def parse_record(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int] | None:
    """(payload start, payload end) of the whole, valid record at ``pos``
    of ``buf`` (at most ``end``), or None if it is torn or damaged."""
    if end - pos < 8:
        return None
    size, crc = FRAME.unpack_from(buf, pos)
    start = pos + 8
    stop = start + size
    if size < 4 + MIN_MESSAGE_LENGTH or stop > end:
        return None
    if _crc(buf[start:stop]) != crc:
        return None
    return start, stop
