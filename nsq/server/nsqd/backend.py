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

from nsq.protocol.errors import NSQError

from collections.abc import Callable

__all__ = ["BackendQueue", "BackendFull", "DiscardBackend", "NoDiskBackend"]


class BackendFull(NSQError):
    """The backend cannot take the message (the publish must be refused).

    Attributes:
        stored: from :meth:`BackendQueue.put_many`, how many records were
            stored before the failure.
    """

    stored = 0


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
            ValueError: a record of invalid size (``stored`` set likewise).
        """
        for i, record in enumerate(records):
            try:
                self.put(record)
            except (BackendFull, ValueError) as exc:
                exc.stored = i  # type: ignore[union-attr]
                raise

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
    """Drops every message (ephemeral topics and channels)."""

    accepts_overflow = True

    def put(self, record: bytes) -> None:
        return None

    def put_many(self, records: list[bytes]) -> None:
        return None

    def read(self) -> bytes | None:
        return None

    def empty(self) -> None:
        return None


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
