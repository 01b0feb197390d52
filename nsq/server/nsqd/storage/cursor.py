"""A channel of a topic log (``--storage=wal``): a cursor plus what it has not finished.

The design of nsqio/nsq pull request #625 ("nsqd: per-topic WAL"): a
channel keeps no copy of the messages. It keeps

- ``next``: the offset of the next message it has not yet taken from the
  topic log (into memory, in flight or deferred);
- a :class:`RangeSet` of the offsets it has finished (FIN, dead-lettered)
  above a low-water mark ``low``: below it every message is finished.

Depth (what is left to deliver from the log) is ``visible - next`` minus
the finished offsets at or after ``next``, where ``visible`` is how far the
topic has handed its log to channels. What was taken and not finished
(in flight, requeued, deferred) is every offset in ``[low, next)`` not in
the set, so a crash loses none of it: the checkpoint (``<channel>.cursor``)
stores ``low`` and the set, and a restarted channel reads again from
``low``, skipping what is finished. It redelivers at most what was in
flight, or finished after its last checkpoint. Segments wholly below every
channel's checkpointed ``low`` are deleted.

FINs are appended to a list on the hot path and folded into the set by the
daemon's periodic scan (:meth:`ChannelCursor.fold`): a sort of a mostly
sorted list, not a search per message.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nsq.server.nsqd.storage.backend import BackendQueue

if TYPE_CHECKING:
    from nsq.server.nsqd.storage.deferredlog import DeferredLog
    from nsq.server.nsqd.storage.message import Entry
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["RangeSet", "ChannelCursor"]

log = logging.getLogger("nsq.nsqd")


class RangeSet:
    """Finished offsets at or above a low-water mark.

    Attributes:
        low: every offset below it is finished.
        starts, ends: the finished offsets above ``low`` as sorted,
            disjoint, non-adjacent half-open intervals ``[start, end)``,
            each ``start > low``.
    """

    __slots__ = ("low", "starts", "ends")

    def __init__(self, low: int = 0, ranges: list[list[int]] | None = None) -> None:
        self.low = low
        self.starts: list[int] = []
        self.ends: list[int] = []
        if ranges:
            self._merge([(int(s), int(e)) for s, e in ranges if e > s])

    def __contains__(self, offset: int) -> bool:
        if offset < self.low:
            return True
        j = bisect.bisect_right(self.starts, offset) - 1
        return j >= 0 and offset < self.ends[j]

    def add_many(self, offsets: list[int]) -> None:
        """Mark ``offsets`` (any order, duplicates allowed) finished."""
        if not offsets:
            return
        offsets.sort()
        runs = []
        start = prev = offsets[0]
        for o in offsets:
            if o > prev + 1:
                runs.append((start, prev + 1))
                start = o
            prev = o
        runs.append((start, prev + 1))
        self._merge(runs)

    def _merge(self, runs: list[tuple[int, int]]) -> None:
        merged: list[tuple[int, int]] = []
        for s, e in sorted([*zip(self.starts, self.ends), *runs]):
            if merged and s <= merged[-1][1]:
                if e > merged[-1][1]:
                    merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        low = self.low
        while merged and merged[0][0] <= low:
            low = max(low, merged.pop(0)[1])
        self.low = low
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]

    def cut_from(self, offset: int) -> None:
        """Forget every finished offset at or after ``offset`` (a rewind)."""
        if self.low > offset:
            self.low = offset
            self.starts, self.ends = [], []
            return
        keep = bisect.bisect_left(self.starts, offset)
        self.starts = self.starts[:keep]
        self.ends = [min(e, offset) for e in self.ends[:keep]]

    def finish_below(self, offset: int) -> None:
        """Mark every offset below ``offset`` finished (a commit)."""
        if offset > self.low:
            self._merge([(self.low, offset)])

    def next_gap(self, offset: int) -> tuple[int, int]:
        """``(first unfinished offset >= offset, start of the finished
        interval after it or -1)``."""
        if offset < self.low:
            offset = self.low
        j = bisect.bisect_right(self.starts, offset) - 1
        if j >= 0 and offset < self.ends[j]:
            offset = self.ends[j]
        k = bisect.bisect_right(self.starts, offset)
        return offset, (self.starts[k] if k < len(self.starts) else -1)

    def count_from(self, offset: int) -> int:
        """How many finished offsets are at or after ``offset`` (above low)."""
        n = 0
        for s, e in zip(self.starts, self.ends):
            if e > offset:
                n += e - max(s, offset)
        return n

    def ranges(self) -> list[list[int]]:
        """The intervals as ``[[start, end], ...]`` (JSON-friendly)."""
        return [[s, e] for s, e in zip(self.starts, self.ends)]


class ChannelCursor(BackendQueue):
    """One channel's position in its topic's log; the channel's backend.

    Args:
        topic_log: the topic's :class:`~nsq.server.nsqd.storage.topiclog.TopicLog`.
        subject: ``topic:channel`` for log lines.
        path: the checkpoint file, or None (an ``#ephemeral`` channel: its
            position lives and dies with it).
        start: the offset a new channel starts at (the topic's visible
            head: it gets what the topic hands on from now).
        dlog: the channel's deferred log (REQ with a delay), if durable.

    Attributes:
        next: the next offset to take from the log.
        visible: offsets below it were handed to channels by the topic.
        depth: messages left to take (``visible - next`` minus finished
            ones); a plain attribute, kept current.
        finished: the :class:`RangeSet` (FINs folded in by :meth:`fold`).
        held: sorted offsets at or after ``next`` that the channel holds
            already (deferred as they were published behind a backlog, or
            restored at start): skipped when read, not counted in depth.
        restore: ``[(offset, due unix ns), ...]`` of the messages that were
            deferred when the checkpoint was written at exit (the channel
            defers them again at start, :meth:`hold` each).
        persisted_low: ``low`` of the newest checkpoint on disk.
    """

    accepts_overflow = True
    error = None
    #: FINs collected before a consumer's batch folds them at once instead of
    #: waiting for the periodic scan (bounds the list: ~450k FINs/s here
    #: would otherwise hold ~900k ints, tens of MiB, between two scans)
    FOLD_AT = 65_536

    def __init__(self, topic_log: TopicLog, subject: str, path: str | None, start: int,
                 dlog: DeferredLog | None = None) -> None:
        self.log = topic_log
        self.subject = subject
        self.path = path
        self.dlog = dlog
        self.next = start
        self.visible = start
        self.depth = 0
        self.finished = RangeSet(start)
        self.fins: list[int] = []
        self.held: list[int] = []
        self.restore: list[tuple[int, int]] = []
        self._ahead = 0  # finished offsets at or after next
        #: deliveries so far of unfinished messages, restored from a checkpoint
        self.attempts: dict[int, int] = {}
        #: REQ-delayed messages restored from the deferred log: id -> due (unix ns)
        self.restored_due: dict[bytes, int] = {}
        self.persisted_low = start
        #: offsets below this were taken before a rewind and may still be in
        #: flight or deferred: the channel filters them when it reads them
        self.replay_end = 0
        #: (low, ranges, last range start) of the last checkpoint written
        self._saved: tuple[int, int, int] | None = None
        if path is not None:
            self._load()
        self.attach_deferred(dlog)
        self._refresh()

    def attach_deferred(self, dlog: DeferredLog | None) -> None:
        """Use ``dlog`` (the channel's deferred log): its pending messages
        are REQ delays to apply when their records are read again."""
        self.dlog = dlog
        if dlog is not None and dlog.pending:
            self.restored_due = {msg_id: item[0] for msg_id, item in dlog.pending.items()}

    def __repr__(self) -> str:
        return f"ChannelCursor({self.subject} next={self.next} low={self.finished.low})"

    # -- checkpoint ----------------------------------------------------------------

    def _load(self) -> None:
        assert self.path is not None
        try:
            with open(self.path, "rb") as fh:
                data = json.loads(fh.read())
            low = int(data["low"])
            ranges = data.get("finished", [])
            attempts = {int(k): int(v) for k, v in data.get("attempts", {}).items()}
            restore = [(int(o), int(due)) for o, due in data.get("deferred", [])]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("CHANNEL(%s): unreadable checkpoint %s (%s): reading from offset %d", self.subject,
                      self.path, exc, self.next)
            return
        self.finished = RangeSet(low, ranges)
        self.next = self.finished.low
        self.attempts = attempts
        self.restore = [(o, due) for o, due in restore if o not in self.finished]
        self.persisted_low = low
        fin = self.finished
        self._saved = (fin.low, len(fin.starts), fin.starts[-1] if fin.starts else 0)

    def checkpoint(self, attempts: dict[int, int] | None = None,
                   deferred: list[tuple[int, int]] | None = None) -> tuple[str, bytes] | None:
        """``(path, content)`` of a checkpoint to write (:meth:`fold` first),
        or None for an ephemeral channel or when nothing changed since the
        last one (and no ``attempts`` are given). At exit, ``attempts``
        (offset -> deliveries so far) and ``deferred`` (``(offset, due unix
        ns)`` of the messages deferred now) go in too."""
        if self.path is None:
            return None
        fin = self.finished
        state = (fin.low, len(fin.starts), fin.starts[-1] if fin.starts else 0)
        if attempts is None and self._saved == state:
            return None
        self._saved = state
        doc: dict[str, Any] = {"version": 1, "low": fin.low, "finished": fin.ranges()}
        if attempts:
            doc["attempts"] = {str(k): v for k, v in attempts.items()}
        if deferred:
            doc["deferred"] = sorted(deferred)
        return self.path, json.dumps(doc, separators=(",", ":")).encode()

    # -- positions -----------------------------------------------------------------

    def finish(self, offsets: Iterable[int]) -> None:
        """The channel finished the messages at ``offsets`` (FIN, dead
        letters): collected, and folded into the range set at once when
        :data:`FOLD_AT` are waiting (else by the periodic scan)."""
        fins = self.fins
        fins.extend(offsets)
        if len(fins) > self.FOLD_AT:
            self.fold()

    def fold(self) -> bool:
        """Fold the FINs collected since the last call into the range set;
        True if the low-water mark moved."""
        if not self.fins:
            return False
        fins, self.fins = self.fins, []
        low = self.finished.low
        held = self.held
        if held:  # a held message finished: counted by the range set from now on
            for offset in fins:
                i = bisect.bisect_left(held, offset)
                if i < len(held) and held[i] == offset:
                    del held[i]
        self.finished.add_many(fins)
        return self.finished.low != low

    def committed(self) -> int:
        """The low-water mark with the FINs not folded yet counted: every
        message below it is finished (folds them first)."""
        self.fold()
        return self.finished.low

    def _refresh(self) -> None:
        self._ahead = self.finished.count_from(self.next) if self.finished.starts else 0
        held = self.held
        if held and held[0] < self.next:
            del held[:bisect.bisect_left(held, self.next)]
        depth = self.visible - self.next - self._ahead - len(held)
        self.depth = depth if depth > 0 else 0

    def show(self, visible: int) -> None:
        """The topic handed its log on up to ``visible`` (exclusive)."""
        if visible > self.visible:
            self.visible = visible
            self._refresh()

    def took(self, end: int) -> None:
        """The channel took every message up to ``end`` (exclusive) into
        memory as they were published (no backlog)."""
        self.next = end
        if end > self.visible:
            self.visible = end
        self._refresh()

    def hold(self, offset: int) -> None:
        """The channel holds the message at ``offset`` (at or after
        :attr:`next`) already: skip it when reading, do not count it."""
        if offset >= self.next and offset not in self.finished:
            bisect.insort(self.held, offset)
            self._refresh()

    def put_back(self, offset: int) -> None:
        """Messages from ``offset`` on were dropped from memory (overflow):
        read them from the log again."""
        if offset < self.next:
            self.next = offset
            self._refresh()

    def read_entries(self, n: int, now_ns: int) -> list[Entry]:
        """Take up to ``n`` messages from the log at :attr:`next`, skipping
        finished ones, as queue entries ``(id, body, timestamp, attempts,
        defer_ms, offset)``; ``defer_ms`` > 0 for one still deferred (a DPUB
        or a restored REQ delay: ms left until it is due)."""
        out: list[Entry] = []
        fin = self.finished
        attempts = self.attempts
        restored = self.restored_due
        topic_log = self.log
        held = self.held
        while len(out) < n and self.next < self.visible:
            if fin.starts or self.next < fin.low:
                start, limit = fin.next_gap(self.next)
                if start != self.next:
                    self.next = start
                    continue
                if limit < 0:
                    limit = self.visible
            else:
                limit = self.visible
            records, nxt = topic_log.read(self.next, min(n - len(out), limit - self.next))
            if nxt <= self.next:
                break
            if nxt - self.next > len(records):
                log.error("CHANNEL(%s): %d messages at offsets %d-%d are not in the log any more", self.subject,
                          nxt - self.next - len(records), self.next, nxt - 1)
            self.next = nxt
            for offset, msg_id, body, ts, tries, defer_ms in records:
                if held and held[0] <= offset:
                    while held and held[0] < offset:
                        del held[0]
                    if held and held[0] == offset:
                        del held[0]
                        continue
                if attempts:
                    tries = attempts.pop(offset, tries)
                if restored and msg_id in restored:
                    left = (restored.pop(msg_id) - now_ns) // 1_000_000
                    if left <= 0 and self.dlog is not None:
                        self.dlog.remove(msg_id)
                    defer_ms = left if left > 0 else 0
                elif defer_ms:
                    left = (ts + defer_ms * 1_000_000 - now_ns) // 1_000_000
                    defer_ms = left if left > 0 else 0
                out.append((msg_id, body, ts, tries, defer_ms, offset))
        self._refresh()
        return out

    def peek_entries(self, n: int) -> list[Entry]:
        """The next ``n`` messages :meth:`read_entries` would take, changing nothing."""
        saved = (self.next, self.depth, self._ahead, dict(self.attempts), dict(self.restored_due), self.dlog,
                 list(self.held))
        self.dlog = None
        try:
            return self.read_entries(n, 0)
        finally:
            self.next, self.depth, self._ahead, self.attempts, self.restored_due, self.dlog, self.held = saved

    def rewind(self, offset: int) -> None:
        """Read again from ``offset``: every offset at or after it counts as
        not finished (the caller checked it is retained). The positions a
        restart could read from move back at once, so the log's segments
        from there on are kept."""
        self.fold()
        self.finished.cut_from(offset)
        self.replay_end = max(self.replay_end, self.next)
        self.next = offset
        self.persisted_low = min(self.persisted_low, self.finished.low)
        self._saved = None  # checkpoint at the next scan
        self._refresh()

    def commit(self, offset: int) -> None:
        """Everything below ``offset`` is finished (a reader that keeps its
        own position, like the Spark source, reports its progress)."""
        self.fold()
        self.finished.finish_below(offset)
        if self.next < offset:
            self.next = offset
        self._refresh()

    def adopt(self, low: int, ranges: list[list[int]]) -> None:
        """Take the leader's checkpoint (a replica's copy of the channel):
        below ``low`` and in ``ranges`` everything is finished, and the
        channel reads from ``low`` once it delivers (after a promotion)."""
        fin = self.finished
        if fin.low == low and fin.ranges() == ranges and not self.fins:
            return
        self.fins.clear()
        self.finished = RangeSet(low, ranges)
        self.next = low
        self.held.clear()
        self._saved = None  # written by the next checkpoint scan
        self._refresh()

    def skip_to(self, offset: int) -> None:
        """Everything before ``offset`` is finished (the channel was emptied)."""
        self.fins.clear()
        self.finished = RangeSet(offset)
        self.next = offset
        self.held.clear()
        self.attempts.clear()
        self.restored_due.clear()
        self._refresh()

    # -- BackendQueue --------------------------------------------------------------

    def put(self, record: bytes) -> None:
        """Not used: the topic appends records to its log once.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("a channel of a topic log takes no records: the topic appends them")

    def read(self) -> bytes | None:
        """Not used: the channel reads with :meth:`read_entries`.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("read a channel of a topic log with read_entries()")

    def empty(self) -> None:
        """Everything handed to the channel so far is finished (``/channel/empty``)."""
        self.skip_to(self.visible)

    def close(self) -> None:
        """Nothing to release: the caller writes the last checkpoint."""

    def delete(self) -> None:
        """Remove the checkpoint (the channel was deleted)."""
        if self.path is not None:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("CHANNEL(%s): failed to remove %s - %s", self.subject, self.path, exc)
