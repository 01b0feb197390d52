"""Durable deferred messages: a per-channel append-only log (beyond Go).

Go nsqd keeps DPUB/REQ-delayed messages only in memory (nsqio/nsq #674,
#1079, #1375). Here each durable channel with a data path also appends them
to ``<topic>:<channel>.deferred.dat`` so they survive a crash or restart and
are delivered at their original due time. Only deferrals pay for it; plain
PUB/MPUB never touch this file.

Records::

    [int32 size][u8 kind][payload: size-1 bytes]
    kind 1, ADD:    [int64 due, unix ns][message: int64 ts, uint16 attempts, 16-byte id, body]
    kind 2, REMOVE: [16-byte id]

The file exists only while messages are deferred: it is opened at the
first deferral and removed when the last one is released, so a channel that
never defers holds no file descriptor. Replaying the file in order gives the pending set (an id may be added again
after it was removed: a message requeued with a delay twice). At start the
file is compacted (live entries rewritten to a temp file, fsynced, renamed),
and again whenever removed entries outnumber live ones. A torn tail (a crash
mid-write) is cut off with a log line. Sync follows ``--sync-every`` and the
daemon's ``--sync-timeout`` timer, like the disk queue: inline fsync with
``--sync-every=1``, else in the disk thread.

Faults: an append that fails (a full disk) is cut back to the last whole
record and raises, so the file never holds a torn record in its middle; the
caller refuses a DPUB, or keeps a requeued message in memory and writes it
to the channel's queue at exit. A REMOVE that cannot be written only means
the message may be delivered once more after a restart. A compaction that
cannot write its temp file keeps the old file.

Go nsqd ignores this file; moving a data dir back to Go loses only the
pending deferred messages.
"""

from __future__ import annotations

import logging
import os
import struct

from nsq.protocol.message import MIN_MESSAGE_LENGTH, decode_message
from nsq.server.nsqd.storage.atomicfile import fsync_dir, replace_atomically
from nsq.server.nsqd.storage.diskqueue_meta import plausible_record
from nsq.server.nsqd.storage.syncpolicy import AppendFile

__all__ = ["DeferredLog"]

log = logging.getLogger("nsq.nsqd")

_HDR = struct.Struct(">iB")
_DUE = struct.Struct(">q")
_ADD = 1
_REMOVE = 2
_MSG_HDR = struct.Struct(">qH")


class DeferredLog(AppendFile):
    """The deferred messages of one channel, on disk.

    Args:
        name: ``topic:channel``.
        data_path: directory.
        sync_every: fsync after this many appends (1 = before returning).

    Attributes:
        pending: ``{id: (due unix ns, timestamp ns, attempts, body)}``
            (plain tuples: untracked by the cycle collector) loaded at open,
            kept current by :meth:`add`/:meth:`remove`.
    """

    def __init__(self, name: str, data_path: str, sync_every: int) -> None:
        super().__init__(sync_every)
        self.name = name
        self.subject = f"DEFERRED({name})"
        self.path = os.path.join(data_path, f"{name}.deferred.dat")
        self.pending: dict[bytes, tuple[int, int, int, bytes]] = {}
        self._dead = 0
        self._fd: int | None = None
        self._size = 0  # bytes of whole records in the file
        self._closed = False
        self._load()
        if self.pending:
            self._compact()
        else:
            self._drop_file()

    # -- public --------------------------------------------------------------------

    def add(self, due_unix_ns: int, ts: int, attempts: int, msg_id: bytes, body: bytes) -> None:
        """Record a deferred message due at ``due_unix_ns`` (ns since the epoch).

        Raises:
            OSError: the record could not be written (nothing was recorded).
        """
        if self._closed:
            return
        payload = _DUE.pack(due_unix_ns) + _MSG_HDR.pack(ts, attempts) + msg_id + body
        self._append(_ADD, payload)
        if msg_id in self.pending:
            self._dead += 1
        self.pending[msg_id] = (due_unix_ns, ts, attempts, body)

    def remove(self, msg_id: bytes) -> None:
        """Record that a deferred message was released (or dropped)."""
        if self._closed or self.pending.pop(msg_id, None) is None:
            return
        self._dead += 2  # its ADD and this REMOVE
        if not self.pending:
            self._drop_file()  # nothing deferred: no file, no fd
            return
        try:
            self._append(_REMOVE, msg_id)
        except OSError as exc:
            # the ADD stays: after a restart the message is delivered again
            log.error("DEFERRED(%s): failed to record a release - %s", self.name, exc)
            return
        if self._dead > 1024 and self._dead > 4 * len(self.pending):
            self._compact()

    def clear(self) -> None:
        """Drop every pending message (channel empty)."""
        if self._closed:
            return
        self.pending.clear()
        self._drop_file()

    def _sync_fd(self) -> int | None:
        return self._fd

    def close(self) -> None:
        """Sync and close; pending messages stay in the file for the next
        start. Never raises (a failed sync is logged)."""
        if self._closed:
            return
        try:
            self.sync()
        except OSError as exc:
            log.error("DEFERRED(%s): failed to sync at close - %s", self.name, exc)
        finally:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete(self) -> None:
        """Close and remove the file (channel deleted)."""
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    # -- internals -----------------------------------------------------------------

    def _append(self, kind: int, payload: bytes) -> None:
        if self._fd is not None and self._failed_gen == self._file_gen:
            # an fsync of this file failed: its unsynced records may be gone,
            # so the pending set goes to a new file before anything else
            self._compact()
        if self._fd is None:
            # opened on the first deferred message: a channel that never
            # defers holds no file (a client can create channels at will)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._size = os.fstat(self._fd).st_size
            if self.sync_every == 1:
                try:
                    fsync_dir(os.path.dirname(self.path))  # the new name survives a power loss
                except OSError:
                    self._drop_file()  # not known to be durable: the deferral is refused
                    raise
        record = _HDR.pack(len(payload) + 1, kind) + payload
        view = memoryview(record)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            try:  # never leave a torn record for later appends to follow
                os.ftruncate(self._fd, self._size)
            except OSError as exc:
                log.error("DEFERRED(%s): failed to cut a torn record - %s", self.name, exc)
            raise
        self._size += len(record)
        self._wrote(1)

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return
        pos = 0
        end = len(data)
        while pos < end:
            if end - pos < 5:
                break
            size, kind = _HDR.unpack_from(data, pos)
            if size < 1 or end - pos - 4 < size:
                break
            body = data[pos + 5:pos + 4 + size]
            if kind == _ADD and not plausible_record(data, pos, pos + 4 + size, 0):
                break  # a record a power cut tore (no checksum here): the rest is cut
            if kind == _ADD and len(body) >= 8 + MIN_MESSAGE_LENGTH:
                due = _DUE.unpack_from(body, 0)[0]
                msg = decode_message(body[8:])
                self.pending[msg.id] = (due, msg.timestamp, msg.attempts, msg.body)
            elif kind == _REMOVE and len(body) == 16:
                self.pending.pop(bytes(body), None)
            else:
                break
            pos += 4 + size
        self._size = pos
        if pos < end:
            log.error("DEFERRED(%s): %s has a torn or corrupt record at %d of %d bytes; "
                      "keeping the %d messages before it", self.name, self.path, pos, end, len(self.pending))

    def _drop_file(self) -> None:
        """No message is pending: close and remove the file (a later
        deferral starts a new one). If the unlink is lost in a crash the
        released messages come once more."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("DEFERRED(%s): failed to remove %s - %s", self.name, self.path, exc)
        self._size = 0
        self._dead = 0
        self._file_gen += 1
        self._synced()

    def _compact(self) -> None:
        """Rewrite the file with only the pending entries, atomically.

        If the temp file cannot be written (a full disk), the old file stays
        and appends go on after it.
        """
        parts = []
        for msg_id, (due, ts, attempts, body) in self.pending.items():
            payload = _DUE.pack(due) + _MSG_HDR.pack(ts, attempts) + msg_id + body
            parts.append(_HDR.pack(len(payload) + 1, _ADD) + payload)
        data = b"".join(parts)
        try:
            replace_atomically(self.path, data)
        except OSError as exc:
            log.error("DEFERRED(%s): failed to compact %s, appending to it - %s", self.name, self.path, exc)
            if self._fd is None:
                # _size is where the whole records loaded at start end
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                if os.fstat(self._fd).st_size > self._size:
                    os.ftruncate(self._fd, self._size)  # shrinking needs no space
            return
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._file_gen += 1  # a new file: its fsyncs count
        self._size = len(data)
        self._dead = 0
        self._synced()
