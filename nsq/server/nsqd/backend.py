"""Backend queues: where messages go when a memory queue is full.

nsqd keeps up to ``--mem-queue-size`` messages per topic and per channel in
memory and overflows the rest to a backend (seed 000 "后台/磁盘队列"). This
module defines the interface and the two backends that need no disk:

- :class:`DiscardBackend` for ``#ephemeral`` topics and channels: overflow is
  dropped, as in Go.
- :class:`NoDiskBackend` for durable topics and channels until the disk queue
  lands: it accepts nothing, so a publish that would overflow is refused with
  ``E_PUB_FAILED`` instead of dropping messages or growing without bound.
"""

from __future__ import annotations

__all__ = ["BackendQueue", "BackendFull", "DiscardBackend", "NoDiskBackend"]


class BackendFull(Exception):
    """The backend cannot take the message (the publish must be refused)."""


class BackendQueue:
    """Interface of a backend queue of encoded messages (disk records).

    Attributes:
        accepts_overflow: True if :meth:`put` can take messages when memory
            is full; publishers check it to refuse before accepting anything.
    """

    accepts_overflow = True

    def put(self, record: bytes) -> None:
        """Store one encoded message. Raises :class:`BackendFull` if it cannot."""
        raise NotImplementedError

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

    @property
    def depth(self) -> int:
        """Records stored."""
        raise NotImplementedError

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

    def read(self) -> bytes | None:
        return None

    @property
    def depth(self) -> int:
        return 0

    def empty(self) -> None:
        return None


class NoDiskBackend(BackendQueue):
    """Accepts nothing: durable queues refuse publishes beyond memory."""

    accepts_overflow = False

    def put(self, record: bytes) -> None:
        raise BackendFull("memory queue full and no disk queue")

    def read(self) -> bytes | None:
        return None

    @property
    def depth(self) -> int:
        return 0

    def empty(self) -> None:
        return None
