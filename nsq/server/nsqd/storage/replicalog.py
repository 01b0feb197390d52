"""A replica's copy of a topic log (``--replica-of``; docs/operations/replication.md).

:class:`ReplicaLog` is a :class:`~nsq.server.nsqd.storage.topiclog.TopicLog`
that also takes records as the leader wrote them: the same bytes at the
same offsets, in segments that start where the leader's start
(:meth:`ReplicaLog.append_copy`), so the copy is byte-identical above the
leader's first retained offset. It can start over at the leader's first
offset when it fell behind the leader's retention (:meth:`ReplicaLog.reset_to`)
and cut what a former leader wrote after the point where its log and the
new leader's diverged (:meth:`ReplicaLog.truncate_to`; Kafka's leader-epoch
truncation, KIP-101). Once promoted it is appended to as any topic log.
"""

from __future__ import annotations

import logging
import os

from nsq.server.nsqd.storage.logsegment import Segment, segment_name
from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["ReplicaLog"]

log = logging.getLogger("nsq.nsqd")


class ReplicaLog(TopicLog):
    """A topic log a leader's records are copied into (see the module docstring)."""

    def _forget_reads(self) -> None:
        """Where reads ended and the last read's bytes no longer hold: the copy is cut or restarts."""
        self._read_ends.clear()
        self._last_read = None

    def append_copy(self, data: bytes | memoryview, count: int, segment_base: int) -> int:
        """Append ``count`` records (checked by the caller) that the
        leader holds in its segment starting at ``segment_base``: a new
        segment starts here exactly when the leader's did, and never for
        size alone.

        Returns:
            The offset of the first one (:attr:`head` before).

        Raises:
            ValueError: ``segment_base`` is past :attr:`head` (a gap).
            BackendFull: as :meth:`TopicLog.append`.
        """
        if segment_base > self.head:
            raise ValueError(f"segment {segment_base} starts past the head {self.head}")
        active = self._segments[-1]
        if segment_base == self.head and active.count and active.base != segment_base:
            self._roll()
        if self._unsynced_dirs:
            self._sync_dirs()
        return self._append(data, count, roll=False)

    def reset_to(self, base: int) -> None:
        """Drop every segment and start empty at offset ``base`` (the leader
        no longer retains what follows this copy's head)."""
        log.warning("TOPIC(%s): copy restarts at the leader's first retained offset %d (it had %d to %d)",
                    self.name, base, self.first, self.head)
        self._close_files()
        self._forget_reads()
        for seg in self._segments:
            seg.remove()
        seg = Segment(base, os.path.join(self.path, segment_name(base)))
        seg.index = []
        seg.count = 0
        self._segments = [seg]
        self._bases = [base]
        self._closed = False
        self._wfd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._unsynced_dirs.append(self.path)
        self._sync_dirs()
        self.first = self.head = self.synced = base
        self._file_gen += 1

    def truncate_to(self, offset: int) -> int:
        """Cut every record at or after ``offset`` (synced before returning).

        Returns:
            How many records were cut.
        """
        if offset >= self.head:
            return 0
        offset = max(offset, self.first)
        cut = self.head - offset
        self._forget_reads()
        while len(self._segments) > 1 and self._bases[-1] >= offset and self._bases[-1] > self.first:
            seg = self._segments.pop()
            self._bases.pop()
            seg.close()
            seg.remove()
        active = self._segments[-1]
        active.drop_index()  # it changes: the newest segment never uses one
        pos = self._position(active, offset) if offset > active.base else 0
        if self._wfd is not None:
            os.close(self._wfd)
        self._wfd = os.open(active.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.ftruncate(self._wfd, pos)
        os.fsync(self._wfd)
        active.close()
        active.size = pos
        active.count = offset - active.base
        active.index = None
        self._scan(active)
        self._file_gen += 1
        self._unsynced_dirs.append(self.path)
        self._sync_dirs()
        self.head = offset
        self.synced = min(self.synced, offset)
        log.warning("TOPIC(%s): %d records after offset %d cut (not in the leader's log)", self.name, cut, offset)
        return cut
