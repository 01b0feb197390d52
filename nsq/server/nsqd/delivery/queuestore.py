"""The memory queue + Go disk queue engine (``--storage=diskqueue``, and
every ephemeral or memory-only topic): a topic's and each channel's memory
queue spill past ``--mem-queue-size`` into their own
:class:`~nsq.server.nsqd.storage.backend.BackendQueue` (a go-diskqueue
:class:`~nsq.server.nsqd.storage.diskqueue.DiskQueue`, discard, or refuse), as in
nsqio/nsq nsqd/topic.go and channel.go. The roles it fills are
:mod:`nsq.server.nsqd.delivery.stores`'.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable
from itertools import repeat
from typing import TYPE_CHECKING, Any

from nsq.protocol.message import encode_message
from nsq.protocol.names import is_ephemeral
from nsq.server.nsqd.storage.backend import BackendFull, BackendQueue, put_overflow
from nsq.server.nsqd.storage.diskqueue import DiskQueue
from nsq.server.nsqd.storage.message import DEADLINE, NO_OFFSET, Entry, decode_entries, encode_entries, entry
from nsq.server.nsqd.delivery.stores import ChannelStore, StoreError

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.delivery.host import QueueHost
    from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["QueueTopicStore", "QueueChannelStore"]

log = logging.getLogger("nsq.nsqd")


class QueueChannelStore:
    """A channel's overflow backend (disk queue, discard, refuse): the
    channel's memory queue spills into it past ``--mem-queue-size``.

    A message read from a disk queue carries the token of its read batch in
    its entry's offset field, and the queue's persisted read position stays
    at the oldest batch not finished (:meth:`DiskQueue.read_held`): a crash
    or power cut reads in-flight and requeued messages again instead of
    losing them (Go loses them)."""

    cursor = None
    keeps_order = False
    persist_deferred = True
    #: who a log line about an undecodable record names (set by :meth:`open`)
    _subject = "CHANNEL"

    def __init__(self, host: QueueHost, backend: BackendQueue) -> None:
        self.host = host
        self.backend = backend
        self._disk = backend if isinstance(backend, DiskQueue) else None
        #: FINs are reported: the disk queue holds its reads until then
        self.tracks_offsets = self._disk is not None
        self._dlog: Any = None
        #: released deferred messages whose only copy on disk is the deferred
        #: log: token (<= -2, in the entry's offset) -> id, removed from the
        #: log once finished (or stored again at exit)
        self._dlog_ids: dict[int, bytes] = {}
        self._next_token = -2
        self._flushed: list[bytes] = []

    def open(self, channel: Channel) -> None:
        """Re-arm the deferred messages of the channel's deferred log at
        their original due time (Unix ns in the log, monotonic s in the
        heap); ones already due are released by the next timeout scan."""
        self._subject = f"CHANNEL({channel.topic.name}:{channel.name})"
        dlog = self._dlog = channel.deferred_log
        if dlog is None:
            return
        now_mono, now_unix = time.monotonic(), time.time_ns()
        for msg_id, (due_unix, ts, attempts, body) in list(dlog.pending.items()):
            channel._defer((msg_id, body, ts, attempts, 0, NO_OFFSET), now_mono + (due_unix - now_unix) / 1e9,
                           persist=False)
        if channel.deferred:
            log.info("CHANNEL(%s:%s): %d deferred messages restored", channel.topic.name, channel.name,
                     len(channel.deferred))

    def queue_behind(self, channel: Channel, msgs: list[Entry]) -> list[Entry]:
        """Not used (``tracks_offsets`` is False: new messages go to memory
        first, and Go alternates memory and disk).

        Raises:
            StoreError: always.
        """
        raise StoreError("a disk queue takes new messages in memory first")

    def took(self, msgs: list[Entry]) -> None:
        """Nothing to note."""

    def overflow(self, channel: Channel, excess: int, fresh: int, new: bool) -> None:
        """The newest entries (this publish's, at the tail) go to the
        backend; older ones kept in memory while the disk failed are only
        retried once it works again (no rewrite per publish). New ones the
        backend refuses are dropped and :class:`BackendFull` raised; older
        ones go back to memory."""
        backend = self.backend
        if not backend.accepts_overflow:
            return
        q = channel.queue
        fresh = min(fresh, len(q)) if new else 0
        if backend.error is not None and excess > fresh:
            excess = fresh
        if excess <= 0 or not (fresh or backend.error is None):
            return
        overflow = [q.pop() for _ in range(excess)]
        overflow.reverse()
        stored = put_overflow(backend, encode_entries(overflow), self.host.set_health)
        if self._disk is not None:  # read from disk before, stored again at the tail now
            for e in overflow[:stored]:
                if e[5] >= 0:
                    self._disk.release_when_synced(e[5])
        if stored == excess:
            return
        refused = min(excess - stored, fresh)
        q.extend(overflow[stored:excess - refused])  # acknowledged before: never lost
        if refused:
            channel.message_count -= refused
            raise BackendFull(backend.error or "failed to write to the backend")

    def spill(self, channel: Channel, e: Entry) -> bool:
        """Write a requeued message to the backend. If the backend refuses
        it (a full or failing disk) the channel keeps it in memory past the
        bound rather than losing it, and /ping reports the error (as Go's
        SetHealth)."""
        if not self.backend.accepts_overflow:
            return False
        if not put_overflow(self.backend, [encode_message(e[2], e[3], e[0], e[1])], self.host.set_health):
            return False
        if e[5] >= 0 and self._disk is not None:  # stored again at the tail
            self._disk.release_when_synced(e[5])
        return True

    def read(self, channel: Channel, n: int) -> list[Entry]:
        """Up to ``n`` messages read (and removed) from the backend; from a
        disk queue, held there until finished (their offset is the token)."""
        subject = self._subject
        if self._disk is None:
            return decode_entries(self.backend.read_many(n), subject)
        records, token = self._disk.read_held(n)
        entries = decode_entries(records, subject, token)
        if len(entries) < len(records):  # undecodable records: gone, not held
            for _ in range(len(records) - len(entries)):
                self._disk.release(token)
        return entries

    def finish(self, offsets: Iterable[int]) -> None:
        """Messages read from the disk queue (a token >= 0) are finished:
        its persisted read position may move on."""
        disk = self._disk
        if disk is not None:
            for token in offsets:
                if token >= 0:
                    disk.release(token)
                elif token < -1 and self._dlog_ids:  # a released deferred message
                    msg_id = self._dlog_ids.pop(token, None)
                    if msg_id is not None:
                        self._dlog.remove(msg_id)

    def released(self, channel: Channel, e: Entry) -> Entry:
        """A due deferred message goes back to the queue (memory: a crash
        would lose it). It stays in the deferred log until it is finished,
        unless its disk-queue read is still held (then it is covered)."""
        dlog = self._dlog
        if dlog is None:
            return e
        if e[0] in channel._unlogged:  # never recorded there
            channel._unlogged.discard(e[0])
            return e
        if e[5] >= 0 or self._disk is None:
            dlog.remove(e[0])
            return e
        token = self._next_token
        self._next_token -= 1
        self._dlog_ids[token] = e[0]
        return (e[0], e[1], e[2], e[3], e[4], token)

    def peek(self, n: int) -> list[Entry]:
        """The backend's next ``n`` messages, changing nothing."""
        return decode_entries(self.backend.peek(n)) if self.backend.depth else []

    def empty(self) -> None:
        """Drop the backend's messages (the channel clears its deferred log)."""
        self.backend.empty()
        self._dlog_ids.clear()

    def flush(self, channel: Channel) -> int:
        """Write memory, in-flight and deferred messages to the backend.

        In-flight messages keep their attempts and go in deadline order,
        after the memory queue. Deferred ones go too when there is no
        deferred log (losing their delay, as Go), else only those the log
        could not record. Nothing is written for an ephemeral channel or a
        backend that takes no overflow (nsqio/nsq ``nsqd/channel.go``
        ``flush``)."""
        msgs = list(channel.queue)
        msgs += map(entry, sorted(channel.in_flight.values(), key=lambda m: m[DEADLINE]))
        if channel.deferred_log is None:
            msgs += [item[2] for item in sorted(channel.deferred.values())]
        elif channel._unlogged:
            msgs += [item[2] for item in sorted(channel.deferred.values()) if item[2][0] in channel._unlogged]
            channel._unlogged.clear()
        stored = len(msgs)
        if msgs and self.backend.accepts_overflow and not channel.ephemeral:
            log.info("CHANNEL(%s): flushing %d memory %d in-flight %d deferred messages to backend",
                     channel.name, len(channel.queue), len(channel.in_flight), len(channel.deferred))
            stored = self.host.write_at_exit(self.backend, encode_entries(msgs),
                                             f"CHANNEL({channel.topic.name}:{channel.name})")
        if self._disk is not None:
            if stored == len(msgs) and self._dlog_durable():
                # what was read and held is at the tail again, or in the
                # deferred log, or finished: the read position moves on once
                # the queue has synced the copies (close), and the released
                # deferred ones leave the deferred log then
                self._disk.release_all_when_synced()
                self._flushed = list(self._dlog_ids.values())
                self._dlog_ids.clear()
            else:  # the rest stay held: a restart reads them again
                self.finish([e[5] for e in msgs[:stored] if e[5] >= 0])
        return len(msgs)

    def _dlog_durable(self) -> bool:
        """Sync the deferred log now: a held read of a message deferred
        since is covered only by its ADD record there, and releasing the
        reads lets the disk queue persist its read position past it (its
        --sync-every=1 fsync may still wait in the disk thread). False (and
        logged) if that sync failed: the reads stay held."""
        dlog = self._dlog
        if dlog is None or not dlog.pending:
            return True
        try:
            dlog.sync()
        except OSError as exc:
            log.error("%s: failed to sync the deferred log at exit - %s", dlog.subject, exc)
            return False
        return True

    def close(self) -> None:
        """Close the backend (synced), then take what the exit flush wrote
        out of the deferred log."""
        self.backend.close()
        for msg_id in self._flushed:
            self._dlog.remove(msg_id)
        self._flushed = []

    def delete(self) -> None:
        """Delete the backend's files."""
        self.backend.delete()


class QueueTopicStore:
    """A topic's overflow backend: held messages past ``--mem-queue-size``."""

    log = None
    checks_room = True
    appends = False

    #: messages moved from the backend to the channels per loop turn
    DRAIN_CHUNK = 4096
    #: s between tries to drain the backend while a channel's disk fails
    RETRY_DRAIN = 1.0

    def __init__(self, host: QueueHost, backend: BackendQueue) -> None:
        self.host = host
        self.backend = backend

    def append(self, ids: list[bytes], bodies: list[bytes], ts: int, defer_ms: int) -> Iterable[int]:
        """No log: the messages live in memory (and the backends): no offsets."""
        return repeat(NO_OFFSET, len(ids))

    def append_one(self, msg_id: bytes, body: bytes, ts: int, defer_ms: int) -> int:
        """No log: :data:`NO_OFFSET`."""
        return NO_OFFSET

    def append_entries(self, entries: list[Entry]) -> list[Entry]:
        """No log: the entries as they are."""
        return entries

    def handed_on(self, msgs: list[Entry]) -> None:
        """Nothing to note."""

    def hold(self, topic: Topic, msgs: list[Entry]) -> None:
        """Memory up to ``--mem-queue-size``, the rest to the backend; new
        messages the disk refused are not kept (:class:`BackendFull`)."""
        q = topic.queue
        room = topic.mem_queue_size - len(q)
        if room >= len(msgs):
            q.extend(msgs)
            return
        if room > 0:
            q.extend(msgs[:room])
            msgs = msgs[room:]
        stored = put_overflow(self.backend, encode_entries(msgs), self.host.set_health)
        if stored < len(msgs):
            topic.message_count -= len(msgs) - stored
            raise BackendFull(self.backend.error or "failed to write to the backend")

    def flush_held(self, topic: Topic) -> None:
        """Memory first, then the backend in chunks of :data:`DRAIN_CHUNK`,
        one per event-loop turn (Go's topic ``messagePump`` reads its
        backend the same way, into every channel). A chunk read from a disk
        queue stays there (held) until the channels' disk queues have synced
        their copies: a crash meanwhile hands it on again, never loses it
        (Go deletes the topic's file first)."""
        if topic.queue:
            msgs = list(topic.queue)
            topic.queue.clear()
            topic._distribute(msgs, new=False)
        if self.backend.depth:
            if any(c.store.backend.error is not None for c in topic.channels.values()):
                # a channel's disk refuses writes: moving the topic's backlog
                # would only pile it up in that channel's memory; retry later
                self.host.call_later(self.RETRY_DRAIN, topic.flush_held)
                return
            disk = self.backend if isinstance(self.backend, DiskQueue) else None
            if disk is None:
                records = self.backend.read_many(self.DRAIN_CHUNK)
            else:
                records, _token = disk.read_held(self.DRAIN_CHUNK)
            msgs = decode_entries(records, f"TOPIC({topic.name})")
            if msgs:
                topic._distribute(msgs, new=False)
            if disk is not None and records:
                try:
                    for channel in topic.channels.values():
                        if isinstance(channel.backend, DiskQueue) and channel.backend.needs_sync:
                            channel.backend.sync()
                except OSError as exc:  # kept in the topic's queue too: a restart hands it on again
                    log.error("TOPIC(%s): failed to sync a channel's copy of held messages - %s", topic.name, exc)
                else:
                    disk.release_all()
            if self.backend.depth:
                self.host.call_soon(topic.flush_held)

    def channel_store(self, topic: Topic, name: str) -> ChannelStore:
        """A channel's own backend from the host (disk queue, discard, refuse)."""
        return QueueChannelStore(self.host, self.host.make_backend(f"{topic.name}:{name}", is_ephemeral(name)))

    def start_channel(self, topic: Topic, channel: Channel, start: int) -> None:
        """Not without a topic log.

        Raises:
            StoreError: always.
        """
        raise StoreError("a channel starts at an offset only with --storage=wal")

    def peek(self, topic: Topic, n: int) -> list[Entry]:
        """Memory first, then the backend, changing nothing."""
        out = list(itertools.islice(topic.queue, n))
        if len(out) < n and self.backend.depth:
            out += decode_entries(self.backend.peek(n - len(out)), f"TOPIC({topic.name})")
        return out

    def empty(self, topic: Topic) -> None:
        """Drop the backend's messages."""
        self.backend.empty()

    def close(self, topic: Topic, delete: bool) -> None:
        """Flush held memory messages to the backend (durable topics) and
        close it; with ``delete``, delete it."""
        self.host.forget_backend(self.backend)
        if delete:
            self.backend.delete()
            return
        try:
            if topic.queue and self.backend.accepts_overflow and not topic.ephemeral:
                log.info("TOPIC(%s): flushing %d memory messages to backend", topic.name, len(topic.queue))
                self.host.write_at_exit(self.backend, encode_entries(list(topic.queue)), f"TOPIC({topic.name})")
        finally:
            self.backend.close()

    def checkpoints(self, topic: Topic) -> tuple[list[tuple[str, bytes]], list[Any]]:
        """None: disk queues sync their own meta files."""
        return [], []

    def checkpoints_written(self, topic: Topic, what: list[Any], ok: list[bool]) -> None:
        """Nothing to do."""
