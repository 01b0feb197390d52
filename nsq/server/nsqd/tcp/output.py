"""When V2 connections write: coalesced once per event-loop turn, or at
once at the end of a small read.

A connection appends frames (answers, messages) to its own output buffer
and asks :class:`Output` to write it; every connection with output waiting
is written by one callback at the end of the loop turn, so a read that
answers many commands, or a publish that delivers to many consumers, costs
one ``write`` per connection, as Go's buffered writer does
(``nsqd/protocol_v2.go``: ``Send`` flushes a response at once, and
``messagePump`` flushes when nothing else is pending). A small read (one
PUB, a FIN, a RDY) is answered at once instead (:meth:`Output.hold` and
:meth:`Output.flush_now`): a producer waiting for its ``OK`` does not wait
for the end of the turn, nor pays for a loop callback.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["Output", "Writer"]


class Writer(Protocol):
    """What :class:`Output` needs of a connection (a ``ClientV2``)."""

    #: bytes waiting to be written
    out: bytearray
    #: already waiting in :attr:`Output.pending`
    dirty: bool

    def flush(self) -> None:
        """Write :attr:`out` (clearing :attr:`dirty`)."""


class Output:
    """The connections with output waiting, written together.

    Attributes:
        pending: connections to write, in the order their output became
            pending (messages a PUB delivered go out before its ``OK``,
            unless its connection is TLS or compressed:
            ``ClientV2._process`` writes that ``OK`` first).
        scheduled: a write of :attr:`pending` is due (a loop callback, or
            a small read's :meth:`flush_now`).
    """

    __slots__ = ("loop", "pending", "scheduled")

    def __init__(self) -> None:
        self.pending: list[Writer] = []
        self.scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None

    def schedule(self, conn: Writer) -> None:
        """Write ``conn``'s output at the end of this loop turn (the caller
        sets ``conn.dirty``)."""
        self.pending.append(conn)
        if not self.scheduled:
            self._schedule()

    def hold(self) -> bool:
        """Start a small read whose end calls :meth:`flush_now`: until then
        :meth:`schedule` only records the connections (no loop callback per
        request). Returns the ``held`` to pass to :meth:`flush_now` (False:
        a write was already scheduled)."""
        if self.scheduled:
            return False
        self.scheduled = True
        return True

    def flush_now(self, conn: Writer, held: bool = False) -> None:
        """Write now, not at the end of this loop turn, the output pending
        for every connection, then ``conn``'s. ``held``: :meth:`hold`'s
        answer at the start of the read."""
        if held and not self.pending:
            # only ``conn`` has output (a producer's OK): write it alone
            self.scheduled = False
            conn.flush()
            if self.pending:  # its flush made output (none known today)
                self._schedule()
            return
        if conn.out and not conn.dirty:
            conn.dirty = True
            self.pending.append(conn)
        self._write()  # a write already scheduled finds nothing left
        if held:
            self.scheduled = False
            if self.pending:  # a connection's flush made output (none known today)
                self._schedule()

    def flush_all(self) -> None:
        """Write every connection's pending output (the end of the loop turn,
        or shutdown)."""
        self.scheduled = False
        self._write()

    def _schedule(self) -> None:
        self.scheduled = True
        assert self.loop is not None, "Output.loop is set when the daemon starts"
        self.loop.call_soon(self.flush_all)

    def _write(self) -> None:
        pending = self.pending
        if pending:
            self.pending = []
            for conn in pending:
                conn.flush()
