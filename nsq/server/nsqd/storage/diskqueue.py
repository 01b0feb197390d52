"""A disk-backed FIFO queue in the go-diskqueue file format.

nsqd overflows each durable topic and channel to one of these queues (see
:mod:`nsq.server.nsqd.storage.backend`). Files are byte-for-byte what Go nsqd 1.2
(``github.com/nsqio/go-diskqueue``) writes, so a data directory can move
between Go nsqd and this one in either direction.

Files, all in ``data_path`` (``name`` is ``topic`` or ``topic:channel``)::

    <name>.diskqueue.000000.dat     data files, numbered %06d from 0
    <name>.diskqueue.000001.dat
    <name>.diskqueue.meta.dat       metadata (text)

A data file is a sequence of records, nothing else (no header)::

    +--------------------------+-----------------------+
    | size: int32, big-endian  | payload: <size> bytes |  ... next record
    +--------------------------+-----------------------+

For nsqd the payload is an encoded message (8-byte timestamp, 2-byte
attempts, 16-byte id, body), so ``min_msg_size`` is 26. A size outside
``[min_msg_size, max_msg_size]`` on read means the file is corrupt.

The meta file (depth and the read and write positions) and its recovery
by scanning are in :mod:`nsq.server.nsqd.storage.diskqueue_meta`.

Faults. A failed write leaves the queue state as it was (the caller refuses
the publish) and sets :attr:`DiskQueue.error` until a write succeeds again.
After a failed fsync the pages written since the last good one may be gone
although the file looks whole, so the next write starts a new data file:
records acknowledged later never sit behind a damaged stretch.

Rules. go-diskqueue changed its roll rule around the time of nsqd 1.2.1:

- v1.0.0-era writer: roll *after* a write that brings ``writePos`` to
  ``>= maxBytesPerFile`` (files run a little past the limit).
- v1.1.0 writer (https://github.com/nsqio/go-diskqueue/issues/30): roll *before* a write when
  ``writePos > 0 && writePos + 4 + len > maxBytesPerFile``.
- Both readers (since go-diskqueue PR #23): for a completed file (read file
  number < write file number) read up to the file's size
  (``maxBytesPerFileRead = stat.Size()``), then go on with the next file.

This writer uses the v1.1.0 rule, so a file never exceeds
``max_bytes_per_file`` unless it holds one oversized record. This reader
stops at ``write_pos`` on the write file and at the file size on a completed
file, deleting it once fully read, so it accepts files written under either
rule. A record that cannot be read (bad size, torn/short) renames the file to
``<file>.bad``, logs, and continues with the next file; if it was the write
file, the writer moves to a new file too (go-diskqueue ``handleReadError``).

Differences from Go that do not affect the files: writes are ``pwrite`` at
``write_pos`` and a rolled file is truncated to the roll position, so stale
bytes past the last record (left by a crash before a sync) are dropped instead
of being read as garbage later; a reader that has caught up with the writer
follows it to the next file without the spurious ``.bad`` file of
https://github.com/nsqio/go-diskqueue/issues/42; a meta file that cannot be parsed is rebuilt by
scanning the data files instead of being half-applied; whole records after
the meta file's write position (written before a crash, after the last
sync) are counted at start instead of being overwritten, so a ``kill -9``
loses nothing that reached the file.

The class is synchronous and not thread-safe: call it from one thread (the
event loop). The one exception is fsync: with :attr:`DiskQueue.background`
set (nsqd gives every queue one shared disk thread),
:meth:`DiskQueue.sync_in_background` fsyncs a dup of the write file and
writes a meta snapshot in that thread, so the event loop never waits for the
disk; ``--sync-every`` > 1 and the periodic sync use it. With
``--sync-every=1`` the sync stays inline so a publish is on disk before nsqd
answers OK. ``sync_timeout`` is only stored; the owner runs the timer.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from itertools import chain

from .backend import BackendFull, BackendQueue
from .atomicfile import fsync_dir
from .diskqueue_meta import MetaFile, cut_tail, format_meta, listdir, scan_data_files, scan_records
from .readhold import HeldReads
from .syncpolicy import after_writes

__all__ = ["DiskQueue"]

logger = logging.getLogger("nsq.nsqd")

_SIZE = struct.Struct(">i")
_READ_CHUNK = 1 << 20  # read ahead this much per syscall
def _strerror(e: OSError) -> str:
    """``e``'s text as Go prints an errno (``no space left on device``)."""
    text = e.strerror or str(e)
    return text[:1].lower() + text[1:]


class DiskQueue(BackendQueue):
    """A FIFO of byte records in go-diskqueue files.

    Attributes (the persisted state; read-only for callers):
        depth: records stored and not yet read.
        read_file_num, read_pos: where the next record is read.
        write_file_num, write_pos: where the next record is appended.
    """

    accepts_overflow = True

    def __init__(self, name: str, data_path: str, max_bytes_per_file: int, min_msg_size: int,
                 max_msg_size: int, sync_every: int, sync_timeout: float) -> None:
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.min_msg_size = min_msg_size
        self.max_msg_size = max_msg_size
        self.sync_every = max(1, sync_every)
        self.sync_timeout = sync_timeout

        self.read_file_num = 0
        self.read_pos = 0
        self.write_file_num = 0
        self.write_pos = 0
        self.depth = 0

        #: reads handed out and not finished (:meth:`read_held`; a channel's
        #: queue): the meta file's read position stays at the oldest
        self.held = HeldReads()
        self._retired: list[int] = []  # read files kept for them
        #: held reads whose records were written again at the tail: released
        #: once a sync covers that write (then queued here by the disk thread)
        self._release_after_sync: list[int] = []
        self._synced_releases: deque[int] = deque()
        self._closed = False
        self._dirty = False  # state changed since the last sync
        self._writes_since_sync = 0
        #: runs a callable in the owner's disk thread (``executor.submit``);
        #: None syncs inline. See :meth:`sync_in_background`.
        self.background: Callable[[Callable[[], None]], Future[None]] | None = None
        #: with ``sync_every == 1``: called with this queue after each write
        #: instead of an inline sync; the owner must sync before answering OK
        self.strict_hook: Callable[[DiskQueue], None] | None = None
        self._bg_failed = False
        #: why the last write failed (None once a write succeeds again)
        self.error: str | None = None
        self._roll_next = False  # an fsync failed: start a new file at the next write
        #: the write file's generation; an fsync of a file that failed once
        #: never counts again (see AppendFile): its syncs fail until the roll
        self._file_gen = 0
        self._failed_gen = -1
        self._lost = False  # a roll's fsync of the old file failed: the next sync fails
        self._meta_lock = threading.Lock()
        self._meta_gen = 0  # snapshots taken
        self._meta_written_gen = 0  # newest snapshot on disk

        self._wfd: int | None = None  # open write file (number write_file_num)

        self._rfd: int | None = None  # open read file ...
        self._rfd_num = -1  # ... and its number
        self._rsize: int | None = None  # size of the read file once it is complete
        self._rbuf = b""  # read-ahead: file bytes from offset _rbuf_start
        self._rbuf_start = 0

        self._meta_path = os.path.join(data_path, f"{name}.diskqueue.meta.dat")
        #: with --sync-every=1 a sync writes one of its two slots in place
        self._meta = MetaFile(self._meta_path, f"DISKQUEUE({name})", in_place=self.sync_every == 1)
        #: data files created, removed or renamed (a count), and how many of
        #: those changes a directory fsync covers: a meta slot written in
        #: place must not name a file whose name is not durable yet
        self._dir_gen = 0
        self._dir_synced = 0
        self._data_re = re.compile(re.escape(name) + r"\.diskqueue\.(\d{6,})\.dat")
        self._retrieve_meta()

    # ----------------------------------------------------------- public API

    @property
    def needs_sync(self) -> bool:
        """True if anything (writes, reads, file changes) happened since the last sync."""
        return self._dirty or self._bg_failed

    def put(self, record: bytes) -> None:
        """Append one record (:meth:`put_many` of one).

        Raises:
            ValueError: the record is shorter than ``min_msg_size`` or longer
                than ``max_msg_size`` (nothing is written).
            BackendFull: the queue is closed or the write failed (disk full,
                I/O error); the queue state is unchanged.
        """
        self.put_many([record])

    def _after_write(self) -> None:
        if self._writes_since_sync >= self.sync_every:
            try:
                after_writes(self)
            except OSError as e:  # the record is written; the next sync retries
                logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)

    def put_many(self, records: list[bytes]) -> None:
        """Append records in order: one ``pwrite`` per data file touched.

        The same roll rule and sync policy as :meth:`put` (``--sync-every``
        counts records; a sync due is done once, after the last write).

        Raises:
            ValueError: a record of invalid size; nothing is written.
            BackendFull: the queue is closed or a write failed; ``stored``
                tells how many records were stored before it.
        """
        if self._closed:
            raise BackendFull(f"DISKQUEUE({self.name}) is closed")
        sizes = list(map(len, records))
        if not sizes:
            return
        if min(sizes) < self.min_msg_size or max(sizes) > self.max_msg_size:
            bad = next(z for z in sizes if z < self.min_msg_size or z > self.max_msg_size)
            raise ValueError(f"invalid message write size ({bad}) minMsgSize={self.min_msg_size} "
                             f"maxMsgSize={self.max_msg_size}")
        n = len(records)
        limit = self.max_bytes_per_file
        done = 0
        if self._roll_next and self.write_pos > 0:
            self._roll_write_file()
        while done < n:
            # go-diskqueue v1.1.0: roll before a write that would pass the limit
            if self.write_pos > 0 and self.write_pos + 4 + sizes[done] > limit:
                self._roll_write_file()
            end = done + 1
            pos = self.write_pos + 4 + sizes[done]
            while end < n and pos + 4 + sizes[end] <= limit:
                pos += 4 + sizes[end]
                end += 1
            data = b"".join(chain.from_iterable(zip(map(_SIZE.pack, sizes[done:end]), records[done:end])))
            try:
                fd = self._open_write_file()
                at = self.write_pos
                view = memoryview(data)
                while view:
                    w = os.pwrite(fd, view, at)
                    if w <= 0:
                        raise OSError("short write")
                    view = view[w:]
                    at += w
            except OSError as e:
                logger.error("DISKQUEUE(%s) failed to write %s at %d - %s",
                             self.name, self._file_name(self.write_file_num), self.write_pos, e)
                # Go's text: "write <file>: no space left on device"
                self.error = f"write {self._file_name(self.write_file_num)}: {_strerror(e)}"
                exc = BackendFull(self.error)
                exc.stored = done
                raise exc from e
            self.write_pos += len(data)
            self.depth += end - done
            self._dirty = True
            self._writes_since_sync += end - done
            done = end
        self.error = None
        self._after_write()

    def read(self) -> bytes | None:
        """Pop the oldest record, or None when the queue is empty.

        Advances the read position (persisted at the next :meth:`sync`) and
        deletes a data file once it is fully read. Corrupt records are
        skipped file-wise as described in the module docstring.
        """
        if self._closed:
            return None
        while True:
            rnum = self.read_file_num
            if rnum > self.write_file_num or (rnum == self.write_file_num
                                              and self.read_pos >= self.write_pos):
                self._check_tail_corruption()
                return None

            if self._rfd is None or self._rfd_num != rnum:
                self._close_read_file()
                try:
                    self._rfd = os.open(self._file_name(rnum), os.O_RDONLY)
                except OSError as e:
                    self._handle_read_error(str(e))
                    continue
                self._rfd_num = rnum
                self._rsize = None
                self._rbuf = b""
                self._rbuf_start = self.read_pos

            completed = rnum < self.write_file_num
            if completed:
                if self._rsize is None:
                    self._rsize = os.fstat(self._rfd).st_size
                limit = self._rsize
                if self.read_pos >= limit:  # end of a completed file
                    self._advance_read_file()
                    continue
            else:
                limit = self.write_pos

            pos = self.read_pos
            if not self._fill(pos + 4, limit):
                self._handle_read_error(f"short read of record size (file ends before {pos + 4})")
                continue
            off = pos - self._rbuf_start
            (size,) = _SIZE.unpack_from(self._rbuf, off)
            if size < self.min_msg_size or size > self.max_msg_size:
                self._handle_read_error(f"invalid message read size ({size})")
                continue
            end = pos + 4 + size
            if end > limit or not self._fill(end, limit):
                self._handle_read_error(f"short read of {size}-byte record")
                continue
            off = pos - self._rbuf_start
            payload = self._rbuf[off + 4:off + 4 + size]

            self.read_pos = end
            self.depth -= 1
            self._dirty = True
            if completed and end >= limit:
                self._advance_read_file()
            self._check_tail_corruption()
            return payload

    def peek(self, n: int) -> list[bytes]:
        """The next ``n`` records without reading them: no position, depth,
        read buffer or file changes (files are opened apart and closed)."""
        out: list[bytes] = []
        num, pos = self.read_file_num, self.read_pos
        while len(out) < n and (num, pos) < (self.write_file_num, self.write_pos) and not self._closed:
            try:
                fd = os.open(self._file_name(num), os.O_RDONLY)
            except OSError:
                break
            try:
                limit = self.write_pos if num == self.write_file_num else os.fstat(fd).st_size
                while len(out) < n and pos + 4 <= limit:
                    (size,) = _SIZE.unpack(os.pread(fd, 4, pos))
                    if size < self.min_msg_size or size > self.max_msg_size or pos + 4 + size > limit:
                        return out  # corrupt: the reader will deal with it
                    record = os.pread(fd, size, pos + 4)
                    if len(record) < size:
                        return out
                    out.append(record)
                    pos += 4 + size
            finally:
                os.close(fd)
            if num >= self.write_file_num:
                break
            num, pos = num + 1, 0
        return out

    def read_held(self, n: int) -> tuple[list[bytes], int]:
        """:meth:`read_many`, the batch held until each record is
        :meth:`release`d: the persisted read position stays at the oldest
        held batch (:mod:`~nsq.server.nsqd.storage.readhold`). Returns the
        records and the batch's token (-1 when nothing was read)."""
        if self._synced_releases:
            self._take_synced_releases()
        num, pos = self.read_file_num, self.read_pos
        if n == 1 and self._rfd_num == num:  # a RDY 1 worker's read: _take_buffered of one, without its loop
            limit, off = self._buffered_limit(), pos - self._rbuf_start
            if pos + 4 <= limit and off >= 0:
                (size,) = _SIZE.unpack_from(self._rbuf, off)
                end = pos + 4 + size
                if self.min_msg_size <= size <= self.max_msg_size and end <= limit:
                    self.read_pos = end
                    self.depth -= 1
                    self._dirty = True
                    if num >= self.write_file_num and (end >= self.write_pos or num > self.write_file_num):
                        self._check_tail_corruption()  # at the tail only, as _check_tail_corruption's own test
                    return [self._rbuf[off + 4:off + 4 + size]], self.held.take(num, pos, 1)
        records: list[bytes] = []
        if self._rfd_num == num:  # whole records read ahead: no read() for them
            self._take_buffered(records, n)
            if len(records) == n:
                return records, self.held.take(num, pos, n)
        # held before reading on: a file read to its end meanwhile is kept
        token = self.held.take(num, pos)
        records += self.read_many(n - len(records))
        self.held.count(token, len(records))
        if not records:
            self._remove_retired()
            return records, -1
        return records, token

    def release(self, token: int) -> None:
        """One record of held batch ``token`` is finished."""
        if self._synced_releases:
            self._take_synced_releases()
        if self.held.release(token):
            self._dirty = True
            self._remove_retired()

    def release_when_synced(self, token: int) -> None:
        """One record of held batch ``token`` was written again at the
        tail: released once a sync covers that write (before it, a power cut
        could lose the copy after the original's file went)."""
        self._release_after_sync.append(token)

    def _take_synced_releases(self) -> None:
        synced = self._synced_releases
        while synced:
            if self.held.release(synced.popleft()):
                self._dirty = True
        self._remove_retired()

    def release_all_when_synced(self) -> None:
        """Every held record was written again at the tail (the exit
        flush): :meth:`release_all` once :meth:`close` has synced that."""
        self._release_all_synced = True

    #: set by release_all_when_synced
    _release_all_synced = False
    #: a sync of records stored again failed: their originals are never released
    _copies_lost = False

    def release_all(self) -> None:
        """Every held record is finished or stored again (exit, empty);
        not after a sync of such a copy failed (the originals stay held)."""
        self._release_after_sync.clear()
        self._synced_releases.clear()
        if self._copies_lost:
            return
        if self.held:
            self.held.clear()
            self._dirty = True
        self._remove_retired()

    def _remove_retired(self) -> None:
        if not self._retired:
            return
        oldest = self.held.oldest()
        keep = oldest[0] if oldest is not None else self.read_file_num
        while self._retired and self._retired[0] < keep:
            self._remove(self._file_name(self._retired.pop(0)))

    def read_many(self, n: int) -> list[bytes]:
        """Pop up to ``n`` records (fewer if the queue runs out).

        Each :meth:`read` (which opens files, reads ahead, moves to the next
        file and reports corruption) is followed by the records already
        whole in its read-ahead buffer, taken in one loop with the same size
        checks; the last record of a completed file, and anything odd, is
        left to :meth:`read`."""
        out: list[bytes] = []
        while len(out) < n:
            rec = self.read()
            if rec is None:
                break
            out.append(rec)
            if len(out) < n and self._rfd is not None and self._rfd_num == self.read_file_num:
                self._take_buffered(out, n)
        return out

    def _buffered_limit(self) -> int:
        """The file position (bytes) up to which whole records may be taken
        from the read file's read-ahead buffer: its end, the write position
        in the write file, short of a completed file's last record (that one
        goes through :meth:`read`, which moves on); -1 while that is unknown."""
        if self.read_file_num < self.write_file_num:
            if self._rsize is None:
                return -1
            limit = self._rsize - 1
        else:
            limit = self.write_pos
        return min(limit, self._rbuf_start + len(self._rbuf))

    def _take_buffered(self, out: list[bytes], n: int) -> None:
        """Append to ``out`` (up to ``n`` in all) the whole records after
        :attr:`read_pos` in the read-ahead buffer of the open read file."""
        rbuf, start = self._rbuf, self._rbuf_start
        limit = self._buffered_limit()
        lo, hi, unpack = self.min_msg_size, self.max_msg_size, _SIZE.unpack_from
        pos = self.read_pos
        had = len(out)
        want = n - had
        while want and pos + 4 <= limit:
            off = pos - start
            (size,) = unpack(rbuf, off)
            end = pos + 4 + size
            if size < lo or size > hi or end > limit:
                break
            out.append(rbuf[off + 4:off + 4 + size])
            pos = end
            want -= 1
        taken = len(out) - had
        if taken:
            self.read_pos = pos
            self.depth -= taken
            self._dirty = True
            self._check_tail_corruption()

    def sync(self) -> None:
        """fsync the write file and write the meta file atomically (no-op once closed)."""
        if self._closed:
            return
        if self._lost:
            self._lost = False
            self._copies_lost = bool(self._release_after_sync) or self._copies_lost
            self._release_after_sync = []
            raise OSError(errno.EIO, "the writes before a roll were not synced")
        if self._wfd is not None:
            if self._failed_gen == self._file_gen:
                raise OSError(errno.EIO, "an earlier fsync of this file failed")
            try:
                os.fsync(self._wfd)
            except OSError:
                self._failed_gen = self._file_gen
                self._roll_next = True
                self._copies_lost = bool(self._release_after_sync) or self._copies_lost
                self._release_after_sync = []  # their copies may be gone: keep holding the originals
                raise
        self._meta_gen += 1
        gen = self._meta_gen
        releases, self._release_after_sync = self._release_after_sync, []
        with self._meta_lock:
            self._persist_meta()
            self._meta_written_gen = gen
        self._synced_releases.extend(releases)  # the copies are durable now
        self._take_synced_releases()
        self._dirty = False
        self._bg_failed = False
        self._writes_since_sync = 0

    def sync_in_background(self) -> Future[None] | None:
        """Sync in the owner's disk thread (:attr:`background`) so the caller
        does not wait for fsync; inline when no thread is set.

        The meta file written is a snapshot taken now; a later snapshot is
        never overwritten by an earlier one (generation check under a lock).
        A failure is logged, makes :attr:`needs_sync` true again and fails
        the returned future.

        Returns:
            What ``background`` returned (a ``concurrent.futures.Future``
            for an executor), or None when synced inline / closed.
        """
        if self._closed:
            return None
        if self.background is None:
            self.sync()
            return None
        fd = os.dup(self._wfd) if self._wfd is not None else None
        text = self._meta_text()
        self._meta_gen += 1
        gen = self._meta_gen
        self._dirty = False
        self._writes_since_sync = 0
        file_gen = self._file_gen
        releases, self._release_after_sync = self._release_after_sync, []
        lost, self._lost = self._lost, False
        dir_gen = self._dir_gen
        if self._synced_releases:
            self._take_synced_releases()
        return self.background(lambda: self._sync_worker(fd, text, gen, file_gen, releases, lost, dir_gen))

    def _sync_worker(self, fd: int | None, text: bytes, gen: int, file_gen: int = -2,
                     releases: list[int] | None = None, lost: bool = False, dir_gen: int = 0) -> None:
        """Runs in the disk thread: fsync a dup of the write fd, then the meta
        (neither once an fsync of that file failed)."""
        try:
            if lost:
                raise OSError(errno.EIO, "the writes before a roll were not synced")
            if fd is not None:
                if self._failed_gen == file_gen:
                    raise OSError(errno.EIO, "an earlier fsync of this file failed")
                try:
                    os.fsync(fd)
                except OSError:
                    self._failed_gen = file_gen
                    self._roll_next = True
                    raise
            with self._meta_lock:
                if gen > self._meta_written_gen and not self._closed:
                    self._write_meta(text, dir_gen)
                    self._meta_written_gen = gen
            if releases:  # the loop thread releases them (HeldReads is not thread-safe)
                self._synced_releases.extend(releases)
        except OSError as e:
            self._bg_failed = True
            if releases:
                self._copies_lost = True  # keep holding the originals of copies that may be gone
            logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
            raise
        finally:
            if fd is not None:
                os.close(fd)

    def empty(self) -> None:
        """Drop every record: delete the data files and move to a fresh file number.

        Like go-diskqueue's ``Empty`` the next write goes to write_file_num+1;
        the meta file is rewritten at once (Go deletes it and rewrites it at
        its next sync).
        """
        logger.info("DISKQUEUE(%s): emptying", self.name)
        self._skip_to_next_rw_file()
        self.sync()

    def close(self) -> None:
        """Sync and release the files. Idempotent; never raises (a failed
        sync is logged).

        A queue unchanged since its last meta write (or since it was opened)
        is not synced again: an nsqd with 10,000 idle topics would otherwise
        spend its shutdown in fsync.
        """
        if self._closed:
            return
        try:
            if self.needs_sync or self._meta_written_gen != self._meta_gen:
                self.sync()
            if self._release_all_synced:
                # what the exit flush wrote again is durable now: the held
                # reads go, and the meta file says so
                self._release_all_synced = False
                self.release_all()
                self.sync()
            with self._meta_lock:
                self._meta.settle()  # Go reads the first slot
        except OSError as e:
            # a failing disk at shutdown: what was written stays; the meta
            # file keeps its last good state (a restart re-reads from there)
            logger.error("DISKQUEUE(%s) failed to sync at close - %s", self.name, e)
        finally:
            self._close_read_file()
            self._close_write_file()
            self._closed = True

    def delete(self) -> None:
        """Close without syncing and remove the data files and the meta file."""
        self._closed = True
        self._close_read_file()
        self._close_write_file()
        for num in range(self.read_file_num, self.write_file_num + 1):
            self._remove(self._file_name(num))
        meta_base = os.path.basename(self._meta_path)
        try:
            names = os.listdir(self.data_path)
        except OSError:
            names = []
        with self._meta_lock:  # no disk-thread meta write may recreate it
            for fn in names:  # leftovers outside [read, write], stray meta temp files
                if self._data_re.fullmatch(fn) or (fn.startswith(meta_base + ".") and fn.endswith(".tmp")):
                    self._remove(os.path.join(self.data_path, fn))
            self._remove(self._meta_path)
            self._meta.forget()
        self.depth = 0

    # ------------------------------------------------------------ internals

    def _file_name(self, num: int) -> str:
        return os.path.join(self.data_path, f"{self.name}.diskqueue.{num:06d}.dat")

    def _remove(self, path: str) -> None:
        self._dir_gen += 1
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            logger.error("DISKQUEUE(%s) failed to Remove(%s) - %s", self.name, path, e)

    def _open_write_file(self) -> int:
        if self._wfd is None:
            path = self._file_name(self.write_file_num)
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                self._dir_gen += 1  # its name is durable once the directory is synced
            try:
                # bytes past write_pos were never recorded in the meta file
                # (crash before a sync, or a stale file): drop them so they
                # cannot be read back as garbage once this file is complete
                if os.fstat(fd).st_size > self.write_pos:
                    os.ftruncate(fd, self.write_pos)
            except OSError:
                os.close(fd)
                raise
            self._wfd = fd
        return self._wfd

    def _close_write_file(self) -> None:
        if self._wfd is not None:
            try:
                os.close(self._wfd)
            except OSError:
                pass
            self._wfd = None

    def _close_read_file(self) -> None:
        if self._rfd is not None:
            try:
                os.close(self._rfd)
            except OSError:
                pass
        self._rfd = None
        self._rfd_num = -1
        self._rsize = None
        self._rbuf = b""
        self._rbuf_start = 0

    def _fill(self, end: int, limit: int) -> bool:
        """Make the read-ahead buffer cover file bytes [read_pos, end); False if the file is short."""
        buf_end = self._rbuf_start + len(self._rbuf)
        if end <= buf_end:
            return True
        if end > limit:
            return False
        fd = self._rfd
        assert fd is not None  # the caller opened the read file
        keep = self._rbuf[self.read_pos - self._rbuf_start:] if self.read_pos < buf_end else b""
        start = self.read_pos + len(keep)
        want = max(end - start, min(_READ_CHUNK, limit - start))
        parts = [keep]
        got = 0
        while got < want:
            chunk = os.pread(fd, want - got, start + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        self._rbuf = b"".join(parts)
        self._rbuf_start = self.read_pos
        return self._rbuf_start + len(self._rbuf) >= end

    def _advance_read_file(self) -> None:
        """The read file is fully read: delete it and go on with the next one."""
        old = self.read_file_num
        self._close_read_file()
        self.read_file_num = old + 1
        self.read_pos = 0
        self._dirty = True  # Go: "sync every time we start reading from a new file"
        oldest = self.held.oldest()
        if oldest is not None and oldest[0] <= old:
            self._retired.append(old)  # held records are in it: a restart reads them again
        else:
            self._remove(self._file_name(old))

    def _roll_write_file(self) -> None:
        self._roll_next = False
        lost = False
        old_num, old_pos = self.write_file_num, self.write_pos
        if self._wfd is not None:
            try:
                os.ftruncate(self._wfd, old_pos)
                os.fsync(self._wfd)
            except OSError as e:
                logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
                lost = True
            self._close_write_file()
        self.write_file_num = old_num + 1
        self.write_pos = 0
        self._file_gen += 1  # fsyncs of the new file count again
        if self.read_file_num == old_num:
            if self.read_pos >= old_pos:
                # the reader had read everything: follow the writer now
                self._advance_read_file()
            else:
                self._rsize = old_pos if self._rfd_num == old_num else None
        self._dirty = True
        lost = lost or self._lost  # an earlier roll's too: kept for the sync that would acknowledge
        self._lost = False
        try:  # "sync every time we start writing to a new file"
            self.sync()
        except OSError as e:
            logger.error("DISKQUEUE(%s) failed to sync - %s", self.name, e)
        if lost:  # the old file's unsynced writes: the sync that would acknowledge them fails
            self._lost = True

    def _handle_read_error(self, reason: str) -> None:
        """go-diskqueue handleReadError: rename the read file to .bad, jump to the next file."""
        bad = self._file_name(self.read_file_num)
        logger.error("DISKQUEUE(%s) reading at %d of %s - %s", self.name, self.read_pos, bad, reason)
        self._close_read_file()
        if self.read_file_num == self.write_file_num:
            # the write file is unreadable: the writer starts a new file too
            self._close_write_file()
            self.write_file_num += 1
            self.write_pos = 0
        bad_renamed = bad + ".bad"
        self._dir_gen += 1
        logger.warning("DISKQUEUE(%s) jump to next file and saving bad file as %s", self.name, bad_renamed)
        try:
            os.rename(bad, bad_renamed)
        except OSError as e:
            logger.error("DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s - %s",
                         self.name, bad, bad_renamed, e)
        self.read_file_num += 1
        self.read_pos = 0
        self._dirty = True
        # the records lost in the bad file are still counted in depth; like Go
        # we correct depth when the reader reaches the tail (Go only does so
        # after the next successful read)
        self._check_tail_corruption()

    def _check_tail_corruption(self) -> None:
        """go-diskqueue checkTailCorruption: at the tail depth must be 0 and read == write.

        Go's guard (``readFileNum < writeFileNum || readPos < writePos``) misses
        a read file past the write file with a smaller position; compare the
        (file, position) pairs instead.
        """
        if (self.read_file_num, self.read_pos) < (self.write_file_num, self.write_pos):
            return
        if self.depth != 0:
            if self.depth < 0:
                logger.error("DISKQUEUE(%s) negative depth at tail (%d), metadata corruption, "
                             "resetting 0...", self.name, self.depth)
            else:
                logger.error("DISKQUEUE(%s) positive depth at tail (%d), data loss, resetting 0...",
                             self.name, self.depth)
            self.depth = 0
            self._dirty = True
        if self.read_file_num != self.write_file_num or self.read_pos != self.write_pos:
            if self.read_file_num > self.write_file_num:
                logger.error("DISKQUEUE(%s) readFileNum > writeFileNum (%d > %d), corruption, "
                             "skipping to next writeFileNum and resetting 0...",
                             self.name, self.read_file_num, self.write_file_num)
            if self.read_pos > self.write_pos:
                logger.error("DISKQUEUE(%s) readPos > writePos (%d > %d), corruption, "
                             "skipping to next writeFileNum and resetting 0...",
                             self.name, self.read_pos, self.write_pos)
            self._skip_to_next_rw_file()
            self._dirty = True

    def _skip_to_next_rw_file(self) -> None:
        """Delete files read..write and start empty at the next file number."""
        self._close_read_file()
        self._close_write_file()
        self.held.clear()
        self._release_after_sync.clear()
        self._synced_releases.clear()
        for num in self._retired:
            self._remove(self._file_name(num))
        self._retired = []
        for num in range(self.read_file_num, self.write_file_num + 1):
            self._remove(self._file_name(num))
        self.write_file_num = max(self.read_file_num, self.write_file_num) + 1
        self.write_pos = 0
        self.read_file_num = self.write_file_num
        self.read_pos = 0
        self.depth = 0
        self._dirty = True

    def _meta_text(self) -> bytes:
        oldest = self.held.oldest()
        if oldest is not None:  # records handed out and not finished are read again after a restart
            return format_meta(self.depth + self.held.records, oldest[0], oldest[1], self.write_file_num,
                               self.write_pos)
        return format_meta(self.depth, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos)

    def _persist_meta(self) -> None:
        self._write_meta(self._meta_text(), self._dir_gen)

    def _write_meta(self, text: bytes, dir_gen: int) -> None:
        """Write a meta snapshot (under the meta lock), first making durable
        the data files' names as of that snapshot (``dir_gen``): a slot
        written in place needs a directory fsync for them, a replaced file
        gets one anyway.

        Raises:
            OSError: the directory or the meta file could not be synced.
        """
        if dir_gen > self._dir_synced and self._meta.writes_in_place:
            fsync_dir(self.data_path)
        self._meta.write(text)
        self._dir_synced = max(self._dir_synced, dir_gen)

    def _retrieve_meta(self) -> None:
        try:
            vals = self._meta.read()
        except FileNotFoundError:
            # a new queue (empty, file 0 position 0), unless data files exist:
            # a meta file never written (a full disk) must not hide them
            if any(map(self._data_re.fullmatch, listdir(self.data_path))):
                logger.error("DISKQUEUE(%s) has data files but no meta data file", self.name)
                self._recover_from_files()
            return
        except OSError as e:
            logger.error("DISKQUEUE(%s) failed to retrieveMetaData - %s", self.name, e)
            self._recover_from_files()
            return
        if vals is None:
            logger.error("DISKQUEUE(%s) failed to retrieveMetaData - invalid meta file %s",
                         self.name, self._meta_path)
            self._recover_from_files()
            return
        self.depth, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos = vals
        self._take_unsynced_records()
        self._check_tail_corruption()

    def _take_unsynced_records(self) -> None:
        """Count the whole records a crash left after the meta file's write
        position: written before the process died (the kernel keeps them),
        possibly acknowledged, and not yet in the meta file, which is only
        as new as the last sync. Go's diskqueue drops them (its next write
        overwrites them). A torn record ends the scan; the next write goes
        over it. With ``sync_every == 1`` nothing there was acknowledged
        (each publish was answered after its sync): none is taken. The others
        must look whole (:func:`scan_records` ``strict``): a power cut can
        leave zeros where a record ended. The rest is cut off (:func:`cut_tail`)."""
        path = self._file_name(self.write_file_num)
        if self.sync_every > 1:
            count, end = scan_records(path, self.write_pos, self.min_msg_size, self.max_msg_size, strict=True)
            if count:
                logger.warning("DISKQUEUE(%s) %d records after the meta data's write position (%d,%d), "
                               "written before a crash: kept", self.name, count, self.write_file_num, self.write_pos)
                self.depth += count
                self.write_pos = end
                self._dirty = True
        # what is left past it was never acknowledged, or is torn: a roll
        # before the next write goes over it would leave it for the reader
        cut_tail(path, self.write_pos, f"DISKQUEUE({self.name})")

    def _recover_from_files(self) -> None:
        """Rebuild the state from the data files (:func:`scan_data_files`)."""
        found = scan_data_files(self.data_path, self._data_re, self._file_name, self.min_msg_size,
                                self.max_msg_size)
        if found is None:
            logger.warning("DISKQUEUE(%s) no data files, starting empty", self.name)
            return
        self.depth, self.read_file_num, self.write_file_num, self.write_pos = found
        self.read_pos = 0
        self._dirty = True
        logger.warning("DISKQUEUE(%s) rebuilt metadata from data files: depth %d, read %d,%d, write %d,%d",
                       self.name, self.depth, self.read_file_num, self.read_pos,
                       self.write_file_num, self.write_pos)

    def __repr__(self) -> str:
        return (f"<DiskQueue {self.name!r} depth={self.depth} read={self.read_file_num},{self.read_pos} "
                f"write={self.write_file_num},{self.write_pos}>")
