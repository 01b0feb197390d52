"""A channel's administration and lifecycle, off the delivery path.

Functions taking the :class:`~nsq.server.nsqd.channel.Channel`; its methods
of the same names call them, so the HTTP API, the topic and the daemon see
only the channel:

- :func:`empty` (``POST /channel/empty``) and :func:`flush` / :func:`close`
  (exit or delete): nsqio/nsq ``nsqd/channel.go`` ``Empty``, ``flush`` and
  ``exit``. In a topic log (``--storage=wal``) :func:`flush` writes the
  channel's checkpoint instead, with :func:`wal_attempts`.
- :func:`rewind` and :func:`commit` (``POST /channel/rewind``,
  ``/channel/commit``, and where a new channel starts): the topic log's
  replay, beyond Go (docs/operations/durability.md, "Retention and replay";
  docs/reference/http.md).
- :func:`load_deferred`: the deferred messages of the channel's deferred
  log re-armed at start (durable DPUB and REQ delays, beyond Go;
  docs/operations/durability.md).
- :func:`peek` (``GET /channel/peek``): the next messages it would deliver,
  beyond Go (docs/guides/nsqd.md, "Peek").
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from nsq.server.nsqd.message import ATTEMPTS, DEADLINE, NO_OFFSET, OFFSET, Entry, decode_entries, encode_entries, entry

if TYPE_CHECKING:
    from nsq.server.nsqd.channel import Channel

__all__ = ["pause", "unpause", "empty", "flush", "rewind", "commit", "wal_attempts", "close", "load_deferred", "peek",
           "hand_on", "restore_deferred"]

log = logging.getLogger("nsq.nsqd")


def pause(channel: Channel) -> None:
    """Stop delivering to clients (messages keep queueing); persisted."""
    channel.paused = True
    channel.nsqd.persist_metadata()


def unpause(channel: Channel) -> None:
    """Resume delivery; persisted."""
    channel.paused = False
    channel.nsqd.persist_metadata()
    channel.pump()


def empty(channel: Channel) -> None:
    """Drop every queued, in-flight and deferred message (as Go's Empty):
    memory, backend and deferred log; each client's in-flight count goes to
    0 and its readiness is checked again."""
    channel.queue.clear()
    channel.backend.empty()
    for client in channel.clients.values():
        client.in_flight_count = 0
    channel.in_flight.clear()
    channel._in_flight_pq.clear()
    channel._pq_refs = 0
    channel.deferred.clear()
    channel._deferred_pq.clear()
    channel._unlogged.clear()
    if channel.deferred_log is not None:
        channel.deferred_log.clear()
    for client in channel.clients.values():
        channel.client_ready(client)


def flush(channel: Channel) -> int:
    """Write memory, in-flight and deferred messages to the backend (exit).

    In-flight messages keep their attempts and go in deadline order, after
    the memory queue. Deferred ones go too when there is no deferred log
    (losing their delay, as Go), else only those the log could not record.
    Nothing is written for an ephemeral channel or a backend that takes no
    overflow. In a topic log nothing is written but the channel's checkpoint
    (:func:`wal_attempts` goes into it): every message it has not finished
    is in the log already. The channel's memory, in-flight and deferred
    state is empty afterwards.

    Returns:
        How many messages were written (topic log: how many were held).
    """
    if channel.wal is not None:
        count = len(channel.queue) + len(channel.in_flight) + len(channel.deferred)
        now_mono, now_unix = time.monotonic(), time.time_ns()
        deferred = [(item[2][5], now_unix + int((item[0] - now_mono) * 1e9))
                    for item in channel.deferred.values() if item[2][5] >= 0]
        channel.topic.write_checkpoint(channel, channel.wal_attempts(), deferred)
        channel.queue.clear()
        channel.in_flight.clear()
        channel.deferred.clear()
        channel._in_flight_pq.clear()
        channel._deferred_pq.clear()
        return count
    msgs = list(channel.queue)
    msgs += map(entry, sorted(channel.in_flight.values(), key=lambda m: m[DEADLINE]))
    if channel.deferred_log is None:
        # as Go: deferred messages go to the disk queue (losing their delay)
        msgs += [item[2] for item in sorted(channel.deferred.values())]
    elif channel._unlogged:
        # the rest are in the deferred log with their due times; these
        # could not be recorded there (a full disk)
        msgs += [item[2] for item in sorted(channel.deferred.values()) if item[2][0] in channel._unlogged]
        channel._unlogged.clear()
    if msgs and channel.backend.accepts_overflow and not channel.ephemeral:
        log.info("CHANNEL(%s): flushing %d memory %d in-flight %d deferred messages to backend",
                 channel.name, len(channel.queue), len(channel.in_flight), len(channel.deferred))
        channel.nsqd.write_at_exit(channel.backend, encode_entries(msgs),
                                   f"CHANNEL({channel.topic.name}:{channel.name})")
    channel.queue.clear()
    channel.in_flight.clear()
    channel.deferred.clear()
    channel._in_flight_pq.clear()
    channel._deferred_pq.clear()
    return len(msgs)


def rewind(channel: Channel, offset: int) -> int:
    """Topic log: deliver again every message from ``offset`` on.

    The caller checked ``offset`` is retained. Messages queued in memory
    from there on are read from the log again; ones in flight may come
    twice. Ready clients are served at once.

    Returns:
        How many messages that puts back (the depth added, at least 0).
    """
    wal = channel.wal
    assert wal is not None
    before = channel.depth
    if any(e[5] >= offset for e in channel.queue):
        channel.queue = deque(e for e in channel.queue if e[5] < offset)
    wal.rewind(offset)
    count = max(0, channel.depth - before)
    if channel._ready and not channel.paused:
        channel.pump()
    return count


def commit(channel: Channel, offset: int) -> None:
    """Topic log: every message below ``offset`` is finished; the channel
    reads on from there. Queued ones below it are dropped, deferred ones
    too (and removed from the deferred log)."""
    wal = channel.wal
    assert wal is not None
    if any(e[5] < offset for e in channel.queue):
        channel.queue = deque(e for e in channel.queue if e[5] >= offset)
    for msg_id in [i for i, item in channel.deferred.items() if 0 <= item[2][5] < offset]:
        del channel.deferred[msg_id]  # the heap drops it lazily
        if channel.deferred_log is not None:
            channel.deferred_log.remove(msg_id)
    wal.commit(offset)


def wal_attempts(channel: Channel) -> dict[int, int]:
    """``{offset: deliveries so far}`` of the messages taken from the topic
    log and not finished (queued, in flight or deferred) that were
    delivered at least once."""
    out = {}
    for e in channel.queue:
        if e[3] and e[5] >= 0:
            out[e[5]] = e[3]
    for msg in channel.in_flight.values():
        if msg[OFFSET] >= 0:
            out[msg[OFFSET]] = msg[ATTEMPTS]
    for item in channel.deferred.values():
        e = item[2]
        if e[3] and e[5] >= 0:
            out[e[5]] = e[3]
    return out


def close(channel: Channel, delete: bool) -> None:
    """Close every subscribed client and stop the channel (Go's ``exit``).

    With ``delete``, empty it (``channel.empty()``) and delete its backend
    and deferred log; otherwise flush what it holds to the backend
    (``channel.flush()``) and close both. The daemon forgets them either way.

    Raises:
        Whatever the flush raises, after the backend and log are closed.
    """
    channel.deleted = True
    channel.nsqd.forget_backend(channel.backend)
    for client in list(channel.clients.values()):
        client.close()
    channel.clients.clear()
    channel._ready.clear()
    dlog = channel.deferred_log
    if dlog is not None:
        channel.nsqd.forget_backend(dlog)
    if delete:
        channel.empty()
        channel.backend.delete()
        if dlog is not None:
            dlog.delete()
    else:
        try:
            channel.flush()
        finally:
            channel.backend.close()
            if dlog is not None:
                dlog.close()


def load_deferred(channel: Channel) -> None:
    """Re-arm the deferred messages found in the channel's deferred log at
    their original due time (Unix ns in the log, monotonic s in the heap);
    ones already due are released by the next timeout scan."""
    dlog = channel.deferred_log
    assert dlog is not None  # called only for a channel with a deferred log
    now_mono, now_unix = time.monotonic(), time.time_ns()
    for msg_id, (due_unix, ts, attempts, body) in list(dlog.pending.items()):
        channel._defer((msg_id, body, ts, attempts, 0, NO_OFFSET), now_mono + (due_unix - now_unix) / 1e9,
                       persist=False)
    if channel.deferred:
        log.info("CHANNEL(%s:%s): %d deferred messages restored", channel.topic.name, channel.name,
                 len(channel.deferred))


def position(channel: Channel) -> int:
    """Topic log: the offset of the next message the channel reads in log
    order (``offset`` in /stats): its cursor, less the newest messages it
    queued in memory and has not delivered yet (the ones whose offsets run
    up to the cursor; requeued ones are older)."""
    wal = channel.wal
    assert wal is not None
    q = channel.queue
    nxt = wal.next
    if not q or q[-1][5] != nxt - 1:
        return nxt
    if q[0][5] == nxt - len(q):  # all of it, in order
        return q[0][5]
    for e in reversed(q):
        if e[5] != nxt - 1:
            break
        nxt -= 1
    return nxt


def hand_on(channel: Channel, end: int, deferred: list[tuple[int, int]]) -> None:
    """Topic log: the topic hands on what it held up to ``end`` without
    memory copies (the channel reads them from the log); ``deferred`` are
    ``(offset, due unix ns)`` of the DPUBs among them, deferred at once as
    the default engine does with what it hands on."""
    wal = channel.wal
    assert wal is not None
    channel.message_count += max(0, end - wal.visible)
    wal.show(end)
    restore_deferred(channel, deferred)
    if channel._ready and not channel.paused:
        channel.pump()


def restore_deferred(channel: Channel, deferred: list[tuple[int, int]]) -> None:
    """Topic log: defer the messages at these offsets (``(offset, due unix
    ns)``) now, reading them from the log, and have the cursor skip them:
    what was deferred at a clean exit, or DPUBs the topic held. Ones
    finished, or already behind the cursor, are left alone."""
    wal = channel.wal
    assert wal is not None
    if not deferred:
        return
    now_mono, now_unix = time.monotonic(), time.time_ns()
    restored = 0
    for offset, due in deferred:
        if offset < wal.next or offset >= wal.visible or offset in wal.finished or offset in wal.held:
            continue
        records, _ = wal.log.read(offset, 1)
        if not records or records[0][0] != offset:
            continue
        _, msg_id, body, ts, tries, _ = records[0]
        tries = wal.attempts.pop(offset, tries)
        wal.restored_due.pop(msg_id, None)
        channel._defer((msg_id, body, ts, tries, 0, offset), now_mono + (due - now_unix) / 1e9, persist=False)
        wal.hold(offset)
        restored += 1
    wal.restore = []
    if restored:
        log.debug("CHANNEL(%s:%s): %d deferred messages restored", channel.topic.name, channel.name, restored)


def peek(channel: Channel, n: int) -> list[Entry]:
    """The next ``n`` messages the channel would deliver, memory first, then
    disk (its backend or its topic-log cursor), without changing anything
    (depth, counters, positions).

    Returns:
        Up to ``n`` entries (:data:`~nsq.server.nsqd.message.Entry`), fewer
        when it holds fewer; deferred and in-flight messages are not
        included.
    """
    out = list(itertools.islice(channel.queue, n))
    if len(out) < n and channel.backend.depth:
        if channel.wal is not None:
            out += channel.wal.peek_entries(n - len(out))
        else:
            out += decode_entries(channel.backend.peek(n - len(out)))
    return out
