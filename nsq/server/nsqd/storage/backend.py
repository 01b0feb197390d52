"""Backend queues: where messages go when a memory queue is full.

nsqd keeps up to ``--mem-queue-size`` messages per topic and per channel in
memory and overflows the rest to a backend (Go: nsqd/backend_queue.go; https://nsq.io/overview/design.html). This
module defines the interface and the two backends that need no disk:

- :class:`DiscardBackend` for ``#ephemeral`` topics and channels: overflow is
  dropped, as in Go.
- :class:`NoDiskBackend` for durable topics and channels until the disk queue
  lands: it accepts nothing, so a publish that would overflow is refused with
  ``E_PUB_FAILED`` instead of dropping messages or growing without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nsq.protocol.errors import NSQError

__all__ = ["BackendQueue", "BackendFull", "BadRecord", "DiscardBackend", "NoDiskBackend", "NotReplicated"]

log = logging.getLogger("nsq.nsqd")
#: a monotonic time long before any (the first drop is reported at once)
REPORT_NEVER = 1e9


class NotReplicated(NSQError):
    """Fewer than ``--replica-acks`` replicas wrote a publish within
    ``--replica-timeout``: it is not acknowledged (E_PUB_FAILED, HTTP 503),
    though it is in the leader's log and may be delivered
    (docs/operations/replication.md)."""


class BackendFull(NSQError):
    """The backend cannot take the message (the publish must be refused).

    Attributes:
        stored: from :meth:`BackendQueue.put_many`, how many records were
            stored before the failure.
    """

    stored = 0


class BadRecord(ValueError):
    """A record of invalid size (:meth:`BackendQueue.put_many`); ``stored``:
    how many records before it were stored."""

    def __init__(self, text: str, stored: int = 0) -> None:
        super().__init__(text)
        self.stored = stored


class BackendQueue:
    """Interface of a backend queue of encoded messages (disk records).

    Attributes:
        accepts_overflow: True if :meth:`put` can take messages when memory
            is full; publishers check it to refuse before accepting anything.
        error: why the last write failed (a full or failing disk), None
            while writes succeed.
        depth: records stored (a plain attribute: delivery reads it per
            message batch).
    """

    accepts_overflow = True
    error: str | None = None
    depth: int = 0

    def put(self, record: bytes) -> None:
        """Store one encoded message. Raises :class:`BackendFull` if it cannot."""
        raise NotImplementedError

    def put_many(self, records: list[bytes]) -> None:
        """Store records in order (a disk queue writes them with one syscall).

        Raises:
            BackendFull: with ``stored`` set to how many of ``records`` were
                stored before the failure.
            BadRecord: (a ValueError) a record of invalid size (``stored``
                set likewise).
        """
        for i, record in enumerate(records):
            try:
                self.put(record)
            except BackendFull as exc:
                exc.stored = i
                raise
            except ValueError as exc:
                raise BadRecord(str(exc), stored=i) from exc

    def read(self) -> bytes | None:
        """Pop the oldest record, or None when empty."""
        raise NotImplementedError

    def read_many(self, n: int) -> list[bytes]:
        """Pop up to ``n`` oldest records."""
        out = []
        for _ in range(n):
            record = self.read()
            if record is None:
                break
            out.append(record)
        return out

    def peek(self, n: int) -> list[bytes]:
        """The ``n`` oldest records, without removing them or moving any
        position (``GET /channel/peek``); [] for a backend that keeps none."""
        return []

    def empty(self) -> None:
        """Drop every record."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release resources."""

    def delete(self) -> None:
        """Remove the backend's storage."""


class DiscardBackend(BackendQueue):
    """Drops every message (ephemeral topics and channels).

    Go nsqd drops an ephemeral queue's overflow silently; this one counts
    what it drops and logs it, at most once per :attr:`REPORT_EVERY` seconds
    per queue: ``[nsqd] ... WARNING: CHANNEL(t:c#ephemeral): dropped 39135
    messages since the last report (memory queue full: --mem-queue-size=10000,
    an ephemeral channel has no disk queue)``. The first drop is logged at
    once; the ones after it within the period are added up and logged when
    it ends. The publish path pays one addition per overflowing batch.

    Args:
        name: ``topic`` or ``topic:channel`` (as :meth:`DataPath.make_backend`
            gets it), for the log line; "" when unknown.
        mem_queue_size: the memory bound, for the log line (None: not shown).

    Attributes:
        dropped: messages dropped since this backend was made.
    """

    accepts_overflow = True
    #: s between two drop reports of one queue
    REPORT_EVERY = 5.0

    def __init__(self, name: str = "", mem_queue_size: int | None = None) -> None:
        self.name = name
        self.mem_queue_size = mem_queue_size
        self.dropped = 0
        self._reported = 0  # ``dropped`` at the last report
        self._last_report = -REPORT_NEVER
        self._timer: asyncio.TimerHandle | None = None  # while a report is due

    def put(self, record: bytes) -> None:
        self.dropped += 1
        if self._timer is None:
            self._note_drop()

    def put_many(self, records: list[bytes]) -> None:
        self.dropped += len(records)
        if self._timer is None:
            self._note_drop()

    def _note_drop(self) -> None:
        """Report now if the last report is old enough, else schedule one."""
        import time

        wait = self._last_report + self.REPORT_EVERY - time.monotonic()
        if wait <= 0:
            self.report()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a synchronous caller): report now
            self.report()
            return
        self._timer = loop.call_later(wait, self.report)

    def report(self) -> None:
        """Log the messages dropped since the last report, if any."""
        import time

        self._timer = None
        count = self.dropped - self._reported
        if not count:
            return
        self._reported = self.dropped
        self._last_report = time.monotonic()
        topic, sep, channel = self.name.partition(":")
        subject = f"CHANNEL({self.name})" if sep else f"TOPIC({topic})" if topic else "ephemeral queue"
        kind = "channel" if sep else "topic"
        bound = f": --mem-queue-size={self.mem_queue_size}" if self.mem_queue_size is not None else ""
        log.warning("%s: dropped %d message%s since the last report (memory queue full%s, an ephemeral %s "
                    "has no disk queue)", subject, count, "" if count == 1 else "s", bound, kind)

    def read(self) -> bytes | None:
        return None

    def empty(self) -> None:
        return None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.report()  # what was dropped since the last line, before the queue goes

    def delete(self) -> None:
        self.close()


class NoDiskBackend(BackendQueue):
    """Accepts nothing: durable queues refuse publishes beyond memory."""

    accepts_overflow = False

    def put(self, record: bytes) -> None:
        raise BackendFull("memory queue full and no disk queue")

    def read(self) -> bytes | None:
        return None

    def empty(self) -> None:
        return None


def put_overflow(backend: BackendQueue, records: list[bytes], report: Callable[[str | None], None]) -> int:
    """Write ``records`` to ``backend``; how many were stored.

    The outcome goes to ``report`` (the daemon's health, as Go's
    ``SetHealth`` after each backend write): the error text on a failure
    (disk full, I/O error) when the backend takes overflow at all, None on
    success. The caller decides what happens to the records not stored:
    new messages are refused, acknowledged ones stay in memory.
    """
    try:
        backend.put_many(records)
    except (BackendFull, ValueError) as exc:
        if backend.accepts_overflow:
            report(f"failed to write message to backend - {exc}")
        return getattr(exc, "stored", 0)
    report(None)
    return len(records)
