"""A disk queue's read position held back at its oldest unfinished record.

go-diskqueue persists its read position as soon as a record is read, so a
message read from disk into memory (queued, in flight, requeued) is on
disk nowhere: a crash, or a power cut after the next sync, loses it (Go
nsqd loses it the same way). A channel's disk queue here keeps, instead,
the batches it handed out and not yet seen finished; the meta file records
the position of the oldest such batch (and a depth counting them again), so
a restart reads them again: at-least-once, as NSQ promises, and the files
they are in are kept until then. The meta format is go-diskqueue's.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["HeldReads"]


class HeldReads:
    """Batches of records read from a disk queue and not yet finished.

    Each batch is a token: where it began (file number, byte position), how
    many records it had and how many are still unfinished. Tokens are
    handed out in read order, so the oldest live one is the first.

    Attributes:
        records: records read since the oldest live batch began (finished
            ones after it included): what a restart reads again.
    """

    __slots__ = ("_batches", "_next", "records")

    def __init__(self) -> None:
        self._batches: OrderedDict[int, list[int]] = OrderedDict()
        self._next = 0
        self.records = 0

    def __bool__(self) -> bool:
        return bool(self._batches)

    def take(self, file_num: int, pos: int, count: int = 0) -> int:
        """A batch of ``count`` records read from ``(file_num, pos)`` on; its
        token. Taken before the records are read (a file read to its end
        meanwhile is kept), then counted with :meth:`count`."""
        token = self._next
        self._next += 1
        self._batches[token] = [file_num, pos, count, count]
        self.records += count
        return token

    def count(self, token: int, count: int) -> None:
        """Batch ``token`` (the newest) holds ``count`` records; with 0 it is
        dropped."""
        batch = self._batches[token]
        if count <= 0:
            del self._batches[token]
            self.records -= batch[2]
            return
        self.records += count - batch[2]
        batch[2] = batch[3] = count

    def release(self, token: int) -> bool:
        """One record of batch ``token`` is finished (or stored again
        elsewhere). True if the oldest position moved."""
        batches = self._batches
        batch = batches.get(token)
        if batch is None:
            return False
        left = batch[3] = batch[3] - 1
        if left > 0 or token != next(iter(batches)):
            return False
        batches.popitem(last=False)
        self.records -= batch[2]
        while batches:
            first = next(iter(batches.values()))
            if first[3] > 0:
                break
            batches.popitem(last=False)
            self.records -= first[2]
        return True

    def clear(self) -> None:
        """Forget every batch (the queue was emptied, or what was read is
        stored again at its tail)."""
        self._batches.clear()
        self.records = 0

    def oldest(self) -> tuple[int, int] | None:
        """``(file number, byte position)`` of the oldest live batch, or None."""
        if not self._batches:
            return None
        first = next(iter(self._batches.values()))
        return first[0], first[1]
