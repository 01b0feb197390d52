"""The topic log (``--storage=wal``): one append-only, segmented log per durable topic.

Go nsqd copies every message into each channel's own disk queue. The topic
log instead writes each message once; a channel is a cursor into it
(:mod:`nsq.server.nsqd.storage.cursor`). The design is the per-topic write-ahead
log NSQ's maintainers wrote down and never shipped (nsqio/nsq pull request
#625, issue #510); the segment layout follows Kafka's log (segments named
by their first offset, whole segments deleted from the front).

Files, under ``<data-path>/<topic>.wal/``::

    00000000000000000000.log   segment: records from offset 0
    00000000000000052113.log   the next segment: records from offset 52113
    00000000000000000000.index a sealed segment's sparse index (derived)
    topic.json                 the topic's own state (which offsets were
                               handed to channels)
    <channel>.cursor           each durable channel's checkpoint

An offset counts messages: the first message ever appended is offset 0,
the next 1, and so on; a segment's name is the offset of its first record,
so its record count is the next segment's name minus its own.

A record, 12 bytes of framing around the message as nsqd encodes it on
disk (Go: nsqd/message.go ``WriteTo``)::

    [u32 size][u32 crc32c][u32 defer ms][i64 timestamp ns][u16 attempts][16-byte id][body]
                \\________ crc32c and size cover all of these: the payload ____________/

The checksum is CRC-32C (Castagnoli, as Kafka's record batches use), from
``google-crc32c`` (0.10 us per 230-byte record here; zlib's CRC-32 0.25).

``defer ms`` is a DPUB's delay (0 for PUB/MPUB): the message is due at
timestamp + delay, so a deferred message is recovered from the log alone.

A torn tail (a crash mid-write) or garbage after the last whole record of
the newest segment is cut off at start, with a log line; nothing before it
is lost. A damaged record inside an older segment ends that segment for
readers (logged with the number of records skipped).

The class is synchronous and not thread-safe, like
:class:`~nsq.server.nsqd.storage.diskqueue.DiskQueue`, with the same sync policy
hooks (``--sync-every``, ``--sync-timeout``, the ``--sync-every=1``
barrier) so :class:`~nsq.server.nsqd.storage.datapath.DataPath` syncs it like any
queue.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from nsq.protocol.message import MIN_MESSAGE_LENGTH
from nsq.server.nsqd.storage.atomicfile import fsync_dir, write_all
from nsq.server.nsqd.storage.backend import BackendFull
from nsq.server.nsqd.storage.logsegment import (CHUNK, FRAME, HEAD, INDEX_EVERY, LAST_READ_MAX, SEGMENT_SUFFIX, LogRecord,
                                                 Segment, encode_batch, encode_record, parse_record, read_ended,
                                                 segment_name)
from nsq.server.nsqd.storage.syncpolicy import AppendFile

__all__ = ["TopicLog", "LogRecord", "encode_record", "encode_batch"]

log = logging.getLogger("nsq.nsqd")

class TopicLog(AppendFile):
    """The segmented log of one topic.

    Args:
        name: the topic name (for log lines).
        path: the log's directory (created if missing).
        max_bytes_per_file: a segment is rolled once it reaches this size
            (``--max-bytes-per-file``, bytes).
        sync_every: fsync after this many records (``--sync-every``; 1 =
            durable before the publish is answered).

    Attributes:
        head: the offset the next record gets (= records ever appended).
        synced: every record below it was fsynced (the records from there
            to ``head`` may be lost to a power cut; ``X-NSQ-Synced-Offset``
            of ``/topic/read``). At open: ``head``.
        first: the oldest offset still on disk.
        error: why the last append failed (a full or failing disk), None
            while appends succeed.

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(self, name: str, path: str, max_bytes_per_file: int, sync_every: int) -> None:
        super().__init__(sync_every)
        self.name = name
        self.subject = f"TOPIC({name})"
        self.path = path
        self.max_bytes_per_file = max(1, max_bytes_per_file)
        self.error: str | None = None
        self._closed = False
        self._wfd: int | None = None
        self._roll_next = False  # an fsync failed: the next append starts a new segment
        #: called after each append with (log, records as written, first offset, segment base)
        self.on_append: Callable[[TopicLog, bytes | memoryview, int, int], None] | None = None
        #: offset -> (segment base, byte position) where a read ended (:func:`read_ended`)
        self._read_ends: dict[int, tuple[int, int]] = {}
        self._last_read: tuple[Segment, int, bytes] | None = None  # a small read's (segment, position, bytes)
        #: directories whose new entries (the log's directory, a segment)
        #: are not known to be durable yet: synced before the next append
        self._unsynced_dirs: list[str] = []
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            self._unsynced_dirs.append(os.path.dirname(path))
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._open()
        try:
            self._sync_dirs()
        except OSError as exc:  # retried before the first append, which fails if it fails again
            log.error("TOPIC(%s): failed to sync the log directory - %s", self.name, exc)
        self.first = self._segments[0].base
        active = self._segments[-1]
        assert active.count is not None
        self.head = active.base + active.count
        self.synced = self.head

    def __repr__(self) -> str:
        return f"TopicLog({self.name})"

    # -- opening -------------------------------------------------------------------

    def _open(self) -> None:
        bases = sorted(int(f[:-len(SEGMENT_SUFFIX)]) for f in os.listdir(self.path)
                       if f.endswith(SEGMENT_SUFFIX) and f[:-len(SEGMENT_SUFFIX)].isdigit())
        for base in bases:
            path = os.path.join(self.path, segment_name(base))
            self._segments.append(Segment(base, path, os.path.getsize(path)))
        if not self._segments:
            self._segments.append(Segment(0, os.path.join(self.path, segment_name(0))))
            self._segments[0].index = []
            self._segments[0].count = 0
        else:
            self._scan(self._segments[-1], repair=True)
        self._bases = [s.base for s in self._segments]
        active = self._segments[-1]
        if not os.path.exists(active.path):
            self._unsynced_dirs.append(self.path)
        self._wfd = os.open(active.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _sync_dirs(self) -> None:
        """fsync the directories with new entries (a power cut keeps them).

        Raises:
            OSError: one failed (it stays owed).
        """
        while self._unsynced_dirs:
            fsync_dir(self._unsynced_dirs[0])
            self._unsynced_dirs.pop(0)

    def _scan(self, seg: Segment, repair: bool = False) -> None:
        """:meth:`Segment.scan` (count, index; with ``repair`` cut a torn tail), or a sealed one's saved index."""
        if repair or seg is self._segments[-1] or not seg.load_index():
            seg.scan(self.name, repair)

    # -- appending -----------------------------------------------------------------

    def append(self, records: list[bytes]) -> int:
        """Append framed records (:func:`encode_record`) with one write
        (:meth:`append_joined` of them).

        Returns:
            The offset of the first one.

        Raises:
            BackendFull: the log is closed or the write failed (a full or
                failing disk); nothing was appended (a partial write is cut
                back), :attr:`error` says why.
        """
        return self.append_joined(records[0] if len(records) == 1 else b"".join(records), len(records))

    def append_joined(self, data: bytes, count: int) -> int:
        """Append ``count`` framed records joined in ``data`` (bytes, as
        :func:`encode_batch` makes them) with one write.

        Returns:
            The offset of the first one.

        Raises:
            BackendFull: as :meth:`append`.
        """
        if self._closed:
            raise BackendFull(f"TOPIC({self.name}) log is closed")
        if self._unsynced_dirs:
            try:
                self._sync_dirs()
            except OSError as exc:
                self.error = f"failed to sync the log directory - {os.strerror(exc.errno or 0)}"
                raise BackendFull(self.error) from None
        if count > 1 and self._segments[-1].size + len(data) > self.max_bytes_per_file:
            return self._append_split(data)
        return self._append(data, count)

    def _append(self, data: bytes | memoryview, count: int, roll: bool = True) -> int:
        active = self._segments[-1]
        if self._roll_next or self._wfd is None or (roll and active.size >= self.max_bytes_per_file and active.count):
            self._roll()
            active = self._segments[-1]
        if not active.count:
            active.first_ts = HEAD.unpack_from(data, 8)[1]
        base = self.head
        assert self._wfd is not None
        try:
            size = len(data)
            write_all(self._wfd, data)
        except OSError as exc:
            self._cut_back(active)
            text = exc.strerror or str(exc)
            self.error = f"write {active.path}: {text[:1].lower()}{text[1:]}"  # Go's wording
            raise BackendFull(self.error) from None
        self.error = None
        had = active.count or 0
        index = active.index
        if index is not None and (not index or base - index[-1] >= INDEX_EVERY):
            index.append(base)  # a batch's first record: no walk over the batch
            active.index_pos.append(active.size)
        active.size += size
        active.count = had + count
        self.head = base + count
        try:
            self._wrote(count)
        except OSError as exc:  # written; the next sync retries
            log.error("TOPIC(%s): failed to sync the log - %s", self.name, exc)
        if self.on_append is not None:
            self.on_append(self, data, base, active.base)
        return base

    def _append_split(self, data: bytes) -> int:
        """:meth:`append_joined` of a batch that does not fit in the active
        segment: written in pieces, each segment filled up to at most one
        record past ``max_bytes_per_file``. If a later piece fails, the
        earlier ones stay appended (a refused publish may be delivered)."""
        first = -1
        pos = 0
        end = len(data)
        while pos < end:
            active = self._segments[-1]
            room = self.max_bytes_per_file - (active.size if active.size < self.max_bytes_per_file else 0)
            stop = pos
            n = 0
            while stop < end and (n == 0 or stop - pos < room):
                stop += 8 + FRAME.unpack_from(data, stop)[0]
                n += 1
            base = self._append(data[pos:stop], n)
            if first < 0:
                first = base
            pos = stop
        return first

    def roll_older_than(self, ts_ns: int) -> bool:
        """Start a new segment if the active one's first record was
        published before ``ts_ns`` (ns since the epoch), so time-based
        retention can delete it once the topic goes quiet (Kafka's
        ``segment.ms``). True if it rolled."""
        active = self._segments[-1]
        if self._closed or not active.count:
            return False
        if active.first_ts is None:
            records, _ = self.read(active.base, 1)
            active.first_ts = records[0][3] if records else 0
        if active.first_ts >= ts_ns:
            return False
        try:
            self._roll()
        except BackendFull as exc:
            log.error("TOPIC(%s): failed to roll the log by age - %s", self.name, exc)
            return False
        return True

    def _reopen_active(self) -> None:
        """A new write fd on the newest segment, which holds no record (a
        roll there would make a second segment at the same offset).

        Raises:
            BackendFull: it cannot be opened (the next append tries again).
        """
        seg = self._segments[-1]
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        try:
            if not os.path.exists(seg.path):
                self._unsynced_dirs.append(self.path)
            self._wfd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.ftruncate(self._wfd, seg.size)  # nothing of a failed write stays
        except OSError as exc:
            self._roll_next = True
            self.error = f"failed to open the log segment - {os.strerror(exc.errno or 0)}"
            raise BackendFull(self.error) from None
        self._roll_next = False
        self._file_gen += 1
        try:
            self._sync_dirs()
        except OSError as exc:
            self.error = f"failed to sync the log directory - {os.strerror(exc.errno or 0)}"
            raise BackendFull(self.error) from None

    def _cut_back(self, active: Segment) -> None:
        assert self._wfd is not None
        try:
            os.ftruncate(self._wfd, active.size)
        except OSError as exc:
            log.error("TOPIC(%s): failed to cut a partial write - %s", self.name, exc)
            self._roll_next = True

    def _roll(self) -> None:
        """Close the newest segment (fsynced in the disk thread) and start one at :attr:`head`.
        If the new file cannot be made, appends go on in the old one when it
        is sound (a roll for size), else none is possible until a later
        append's roll succeeds (:class:`BackendFull` meanwhile)."""
        prev = self._segments[-1]
        if prev.count == 0 and prev.base == self.head:
            self._reopen_active()  # the newest segment is empty: no new one, just a working fd
            return
        if self._wfd is not None:
            mark, clean = self.head, not self._roll_next  # not after a failed fsync
            self._sync_rolled(self._wfd).add_done_callback(lambda f: self._synced_to(f, mark, clean))
            os.close(self._wfd)
            self._wfd = None
            prev.save_index(self.name)
        seg = Segment(self.head, os.path.join(self.path, segment_name(self.head)))
        seg.index = []
        seg.count = 0
        try:
            self._wfd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            self.error = f"failed to start a new log segment - {os.strerror(exc.errno or 0)}"
            if not self._roll_next:  # the old segment is sound: appends go on there
                try:
                    self._wfd = os.open(prev.path, os.O_WRONLY | os.O_APPEND)
                except OSError:
                    self._roll_next = True  # no fd at all: the next append tries again
            raise BackendFull(self.error) from None
        self._roll_next = False
        self._file_gen += 1  # fsyncs of the new segment count again
        self._segments.append(seg)
        self._bases.append(seg.base)
        self._unsynced_dirs.append(self.path)
        try:
            self._sync_dirs()
        except OSError as exc:  # the new segment may not survive a power cut: nothing goes there until it is synced
            self.error = f"failed to sync the log directory - {os.strerror(exc.errno or 0)}"
            raise BackendFull(self.error) from None

    # -- syncing -------------------------------------------------------------------

    def _sync_fd(self) -> int | None:
        return self._wfd

    def _sync_failed(self, exc: OSError) -> None:
        self._roll_next = True  # the pages since the last good fsync may be gone: a new segment

    def sync(self) -> None:
        """fsync now; :attr:`synced` moves to the head.

        Raises:
            OSError: the fsync failed (:attr:`synced` stays).
        """
        mark = self.head
        super().sync()
        if mark > self.synced:
            self.synced = mark

    def sync_in_background(self) -> Future[None] | None:
        """:meth:`AppendFile.sync_in_background`; :attr:`synced` moves to
        the head of this moment once the disk thread's fsync succeeded."""
        mark = self.head
        dirty = self._dirty
        fut = super().sync_in_background()
        if fut is None:
            if dirty and not self._dirty and mark > self.synced:  # synced inline
                self.synced = mark
            return None

        fut.add_done_callback(lambda f: self._synced_to(f, mark))
        return fut

    def _synced_to(self, f: Future[None], mark: int, clean: bool = True) -> None:
        if clean and not f.cancelled() and f.exception() is None and mark > self.synced:
            self.synced = mark  # an int store: safe from the disk thread

    # -- reading -------------------------------------------------------------------

    def _segment_for(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def _position(self, seg: Segment, offset: int) -> int:
        """The byte position of ``offset`` in ``seg``: where a read ended
        there (:func:`read_ended`), 0 for the segment's first record, else
        walked to over record headers from the nearest sparse-index entry
        before it (the index is built by a scan of the segment on first use)."""
        known = self._read_ends.get(offset)
        if known is not None and known[0] == seg.base:
            return known[1]
        if offset == seg.base:
            # its first record, at byte 0: a reader moving on into a sealed segment (or starting
            # at one) needs no index, whose scan reads the whole segment on the event loop
            return 0
        if seg.index is None:
            self._scan(seg)
        assert seg.index is not None
        k = bisect.bisect_right(seg.index, offset) - 1
        if k < 0:
            return seg.size
        return seg.walk(seg.index_pos[k], offset - seg.index[k])

    def read(self, offset: int, n: int, max_bytes: int = CHUNK) -> tuple[list[LogRecord], int]:
        """Up to ``n`` records from ``offset``: fewer at the head, at a
        segment's end, or past about ``max_bytes`` bytes (at least one).

        Returns:
            ``(records, next offset)``: the next offset is past what was returned, and past a damaged
            rest of a segment, which is skipped with a log line (an offset below :attr:`first` reads
            from :attr:`first`).
        """
        offset = max(offset, self.first)
        if offset >= self.head or n <= 0:
            return [], offset
        i = self._segment_for(offset)
        seg = self._segments[i]
        seg_end = self._bases[i + 1] if i + 1 < len(self._bases) else self.head
        n = min(n, seg_end - offset)
        pos = self._position(seg, offset)
        if pos >= seg.size:
            return [], seg_end  # the rest of this segment was damaged
        last = self._last_read
        if (last is not None and last[0] is seg and 0 <= (rel := pos - last[1]) <= len(last[2]) - 8
                and rel + 8 + FRAME.unpack_from(last[2], rel)[0] <= len(last[2])):
            bpos, buf = last[1], last[2]  # the first record is whole in the last read's bytes: no pread
        else:
            want = min(max_bytes, seg.size - pos)
            if seg.count:  # about n records' bytes (a 1 MiB pread for 64 records cost more than parsing them)
                want = min(want, max(4096, n * (seg.size // seg.count + 1) * 5 // 4))
            buf = os.pread(seg.read_fd(), want, pos)
            if len(buf) >= 8:
                first_size = 8 + FRAME.unpack_from(buf, 0)[0]
                if len(buf) < first_size <= seg.size - pos:
                    buf = os.pread(seg.read_fd(), first_size, pos)  # one record bigger than max_bytes
            bpos, rel = pos, 0
            self._last_read = (seg, pos, buf) if n == 1 and len(buf) <= LAST_READ_MAX else None
        out: list[LogRecord] = []
        end = len(buf)
        unpack_head = HEAD.unpack_from
        while len(out) < n:
            parsed = parse_record(buf, rel, end)
            if parsed is None:
                have = end - rel
                need = 8 if have < 8 else 8 + FRAME.unpack_from(buf, rel)[0]
                on_disk = bpos + rel + need <= seg.size
                if have < need and on_disk and (have < 8 or need >= 8 + 4 + MIN_MESSAGE_LENGTH):
                    break  # whole on disk, past this read: the next read gets it
                if out:
                    break  # the next read starts at the damage and skips it
                log.error("TOPIC(%s): damaged record at offset %d in %s: the %d records left in that segment "
                          "are skipped", self.name, offset, seg.path, seg_end - offset)
                return [], seg_end
            start, stop = parsed
            defer_ms, ts, attempts = unpack_head(buf, start)
            out.append((offset, buf[start + 14:start + 30], buf[start + 30:stop], ts, attempts, defer_ms))
            offset += 1
            rel = stop
        if out:
            read_ended(self._read_ends, offset, seg.base, bpos + rel)
        return out, offset

    def read_raw(self, offset: int, max_bytes: int = CHUNK) -> tuple[bytes, int, int]:
        """Whole framed records from ``offset`` (or :attr:`first`) as on disk, in one segment, about
        ``max_bytes`` (at least one): ``(data, count, segment base)``; no records at the head
        (what a replica copies: docs/operations/replication.md)."""
        offset = max(offset, self.first)
        i = self._segment_for(offset)
        seg = self._segments[i]
        if offset >= self.head:
            return b"", 0, seg.base
        seg_end = self._bases[i + 1] if i + 1 < len(self._bases) else self.head
        pos = self._position(seg, offset)
        if seg.count is not None and 0 < seg.size - pos <= 4 * max_bytes:  # the segment's rest: no walk
            data = os.pread(seg.read_fd(), seg.size - pos, pos)
            if len(data) == seg.size - pos:
                read_ended(self._read_ends, seg.base + seg.count, seg.base, seg.size)
                return data, seg.base + seg.count - offset, seg.base
        buf = os.pread(seg.read_fd(), max(0, min(max_bytes, seg.size - pos)), pos)
        rel = count = 0
        while offset + count < seg_end and rel + 8 <= len(buf):
            stop = rel + 8 + FRAME.unpack_from(buf, rel)[0]
            if stop > len(buf):
                if count or stop > seg.size - pos:
                    break
                buf = os.pread(seg.read_fd(), stop, pos)  # one record bigger than max_bytes
                if len(buf) < stop:
                    break
            rel = stop
            count += 1
        read_ended(self._read_ends, offset + count, seg.base, pos + rel)
        return buf[:rel], count, seg.base

    # -- deleting ------------------------------------------------------------------

    def delete_before(self, floor: int) -> int:
        """Delete every segment whose records are all below ``floor`` (never
        the newest). Returns how many segments were deleted."""
        deleted = 0
        while len(self._segments) > 1 and self._bases[1] <= floor:
            seg = self._segments.pop(0)
            self._bases.pop(0)
            seg.close()
            try:
                seg.remove()
            except OSError as exc:
                log.error("TOPIC(%s): failed to delete %s - %s", self.name, seg.path, exc)
            deleted += 1
        self.first = self._segments[0].base
        if self.first < floor and len(self._segments) == 1 and self._segments[0].count == 0:
            self.first = floor
        return deleted

    def timestamp_at(self, offset: int) -> int | None:
        """The publish timestamp (ns) of the message at ``offset``, or None
        if it is not retained (or damaged)."""
        records, _ = self.read(offset, 1, 256)
        return records[0][3] if records and records[0][0] == offset else None

    def offset_for_time(self, ts_ns: int) -> int:
        """The first retained offset whose message was published at or
        after ``ts_ns`` (ns since the epoch); :attr:`head` if none.
        Timestamps are taken as non-decreasing (publish order): segments are
        searched by their first record, then read in order."""
        lo, hi = 0, len(self._segments) - 1
        while lo < hi:  # the last segment whose first message is before ts_ns
            mid = (lo + hi + 1) // 2
            first_ts = self.timestamp_at(max(self._bases[mid], self.first))
            if first_ts is not None and first_ts < ts_ns:
                lo = mid
            else:
                hi = mid - 1
        offset = max(self._bases[lo], self.first)
        while offset < self.head:
            records, nxt = self.read(offset, 1024)
            for record in records:
                if record[3] >= ts_ns:
                    return record[0]
            if nxt <= offset:
                break
            offset = nxt
        return self.head

    def segment_info(self) -> list[tuple[int, int, float]]:
        """``(first offset, bytes, mtime in Unix s)`` of each segment,
        oldest first (the mtime is when it was last appended to)."""
        out = []
        for seg in self._segments:
            try:
                mtime = os.stat(seg.path).st_mtime
            except OSError:
                mtime = 0.0
            out.append((seg.base, seg.size, mtime))
        return out

    def segments(self) -> Iterable[tuple[int, int]]:
        """``(first offset, bytes)`` of each segment, oldest first."""
        return [(s.base, s.size) for s in self._segments]

    @property
    def retained_bytes(self) -> int:
        """Bytes of every segment on disk."""
        return sum(s.size for s in self._segments)

    # -- closing -------------------------------------------------------------------

    def close(self) -> None:
        """Sync and close every file. Never raises (a failed sync is logged)."""
        if self._closed:
            return
        try:
            self.sync()
        except OSError as exc:
            log.error("TOPIC(%s): failed to sync the log at close - %s", self.name, exc)
        self._close_files()

    def _close_files(self) -> None:
        self._closed = True
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        """Close and remove every file of the log (topic deleted)."""
        self._close_files()
        shutil.rmtree(self.path, ignore_errors=True)
