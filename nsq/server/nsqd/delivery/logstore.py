"""The topic log + cursor engine (``--storage=wal``): each durable topic
appends every message once to its :class:`~nsq.server.nsqd.storage.topiclog.TopicLog`,
and each channel is a :class:`~nsq.server.nsqd.storage.cursor.ChannelCursor` into it
(docs/operations/durability.md, "The topic log"). The roles it fills are
:mod:`nsq.server.nsqd.delivery.stores`'; replay, retention and positions, beyond
the roles, are its own (``/channel/rewind``, ``/channel/commit``,
``/topic/config``, ``/stats`` offsets).
"""

from __future__ import annotations

import json
import logging
import operator
import os
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nsq.protocol.names import is_ephemeral
from nsq.server.nsqd.storage.atomicfile import replace_atomically
from nsq.server.nsqd.storage.backend import BackendFull, BackendQueue
from nsq.server.nsqd.storage.cursor import ChannelCursor
from nsq.server.nsqd.storage.message import ATTEMPTS, OFFSET, Entry
from nsq.server.nsqd.delivery.stores import ChannelStore
from nsq.server.nsqd.storage.topiclog import encode_batch, encode_record

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.delivery.host import QueueHost
    from nsq.server.nsqd.delivery.topic import Topic
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["LogTopicStore", "LogChannelStore", "HeldMessages"]

log = logging.getLogger("nsq.nsqd")
_DEFER_MS = operator.itemgetter(4)


class HeldMessages(BackendQueue):
    """A topic log's messages no channel has been handed yet (no channel,
    paused, starting) beyond the ones the topic keeps in memory too (its
    queue, up to ``--mem-queue-size``, as the default engine): only a count,
    the log holds them."""

    accepts_overflow = True

    def put(self, record: bytes) -> None:
        """Not used: the log holds them.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("a topic log holds these")

    def read(self) -> bytes | None:
        """Nothing to read here: channels read the log (None)."""
        return None

    def empty(self) -> None:
        """Forget the count (the topic moves its visible offset to the head)."""
        self.depth = 0


class LogChannelStore:
    """A channel of a topic log: its :class:`ChannelCursor` (the channel's
    ``backend`` too: its depth is what is left in the log only)."""

    tracks_offsets = True
    keeps_order = True
    persist_deferred = False

    def __init__(self, cursor: ChannelCursor) -> None:
        self.cursor = cursor
        self.backend: BackendQueue = cursor

    def open(self, channel: Channel) -> None:
        """REQ delays come back from the deferred log as the cursor reads
        their messages from the log again; what was deferred at a clean
        exit is deferred again at once."""
        self.cursor.attach_deferred(channel.deferred_log)
        self.restore_deferred(channel, self.cursor.restore)

    def queue_behind(self, channel: Channel, msgs: list[Entry]) -> list[Entry]:
        """They are read from the log when their turn comes; the deferred
        ones (DPUB) are held now (the cursor skips them)."""
        cursor = self.cursor
        cursor.show(msgs[-1][5] + 1)
        if not any(map(_DEFER_MS, msgs)):
            return []
        deferred = [e for e in msgs if e[4]]
        for e in deferred:
            cursor.hold(e[5])
        return deferred

    def took(self, msgs: list[Entry]) -> None:
        """The cursor moves past them."""
        self.cursor.took(msgs[-1][5] + 1)

    def overflow(self, channel: Channel, excess: int, fresh: int, new: bool) -> None:
        """Drop up to ``excess`` of the newest messages from memory and read
        them from the log when their turn comes: the ones at the tail
        whose offsets run up to the cursor (requeued messages stay)."""
        q = channel.queue
        nxt = self.cursor.next
        dropped = 0
        while dropped < excess and q and q[-1][5] == nxt - 1:
            q.pop()
            nxt -= 1
            dropped += 1
        if dropped:
            self.cursor.put_back(nxt)

    def spill(self, channel: Channel, e: Entry) -> bool:
        """Never: a requeued message is in the log already, and its memory
        came from flight."""
        return False

    def read(self, channel: Channel, n: int) -> list[Entry]:
        """Up to ``n`` messages from the cursor; after a rewind, one still
        in flight or deferred is not taken twice."""
        cursor = self.cursor
        entries = cursor.read_entries(n, time.time_ns())
        if entries and entries[0][5] < cursor.replay_end and (channel.in_flight or channel.deferred):
            in_flight, deferred = channel.in_flight, channel.deferred
            entries = [e for e in entries if e[0] not in in_flight and e[0] not in deferred]
        return entries

    def finish(self, offsets: Iterable[int]) -> None:
        """Collected by the cursor (folded into its range set later)."""
        self.cursor.finish(offsets)

    def released(self, channel: Channel, e: Entry) -> Entry:
        """Out of the deferred log at once: the log keeps the message (the
        deferred log only its delay)."""
        dlog = channel.deferred_log
        if dlog is not None:
            channel._unlogged.discard(e[0])
            dlog.remove(e[0])
        return e

    def peek(self, n: int) -> list[Entry]:
        """The cursor's next ``n`` messages, changing nothing."""
        return self.cursor.peek_entries(n) if self.cursor.depth else []

    def empty(self) -> None:
        """Everything handed to the channel so far is finished."""
        self.cursor.empty()

    def flush(self, channel: Channel) -> int:
        """Nothing is written but the channel's checkpoint, with the
        attempts of what it took and the due times of what it deferred:
        every message it has not finished is in the log already."""
        now_mono, now_unix = time.monotonic(), time.time_ns()
        deferred = [(item[2][5], now_unix + int((item[0] - now_mono) * 1e9))
                    for item in channel.deferred.values() if item[2][5] >= 0]
        self.write_checkpoint(channel, self.attempts(channel), deferred)
        return len(channel.queue) + len(channel.in_flight) + len(channel.deferred)

    def write_checkpoint(self, channel: Channel, attempts: dict[int, int] | None = None,
                         deferred: list[tuple[int, int]] | None = None) -> None:
        """Write the channel's checkpoint now (at exit), with ``attempts``
        and ``deferred`` (see :meth:`ChannelCursor.checkpoint`)."""
        cursor = self.cursor
        cursor.fold()
        cp = cursor.checkpoint(attempts, deferred)
        if cp is None:
            return
        try:
            replace_atomically(*cp)
            cursor.persisted_low = cursor.finished.low
        except OSError as exc:
            log.error("CHANNEL(%s:%s): failed to write its checkpoint - %s: after a restart it delivers again "
                      "from its previous one", channel.topic.name, channel.name, exc)

    def close(self) -> None:
        """Nothing to release: the checkpoint was written by :meth:`flush`."""

    def delete(self) -> None:
        """Remove the checkpoint."""
        self.cursor.delete()

    # -- the topic log's own operations (replay, retention, positions) ----------------

    @staticmethod
    def attempts(channel: Channel) -> dict[int, int]:
        """``{offset: deliveries so far}`` of the messages taken from the
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

    def position(self, channel: Channel) -> int:
        """The offset of the next message the channel reads in log order
        (``offset`` in /stats): its cursor, less the newest messages it
        queued in memory and has not delivered yet (the ones whose offsets
        run up to the cursor; requeued ones are older)."""
        q = channel.queue
        nxt = self.cursor.next
        if not q or q[-1][5] != nxt - 1:
            return nxt
        if q[0][5] == nxt - len(q):  # all of it, in order
            return q[0][5]
        for e in reversed(q):
            if e[5] != nxt - 1:
                break
            nxt -= 1
        return nxt

    def rewind(self, channel: Channel, offset: int) -> int:
        """Deliver again every message from ``offset`` on (the caller
        checked it is retained). Messages queued in memory from there on
        are read from the log again; ones in flight may come twice. Ready
        clients are served at once. Returns how many messages that puts
        back (the depth added, at least 0)."""
        before = channel.depth
        if any(e[5] >= offset for e in channel.queue):
            channel.queue = deque(e for e in channel.queue if e[5] < offset)
        self.cursor.rewind(offset)
        count = max(0, channel.depth - before)
        channel.pump()
        return count

    def commit(self, channel: Channel, offset: int) -> None:
        """Every message below ``offset`` is finished; the channel reads on
        from there. Queued ones below it are dropped, deferred ones too
        (and removed from the deferred log)."""
        if any(e[5] < offset for e in channel.queue):
            channel.queue = deque(e for e in channel.queue if e[5] >= offset)
        for msg_id in [i for i, item in channel.deferred.items() if 0 <= item[2][5] < offset]:
            del channel.deferred[msg_id]  # the heap drops it lazily
            if channel.deferred_log is not None:
                channel.deferred_log.remove(msg_id)
        self.cursor.commit(offset)

    def hand_on(self, channel: Channel, end: int, deferred: list[tuple[int, int]]) -> None:
        """The topic hands on what it held up to ``end`` without memory
        copies (the channel reads them from the log); ``deferred`` are
        ``(offset, due unix ns)`` of the DPUBs among them, deferred at once
        as the default engine does with what it hands on."""
        cursor = self.cursor
        channel.message_count += max(0, end - cursor.visible)
        cursor.show(end)
        self.restore_deferred(channel, deferred)
        channel.pump()

    def restore_deferred(self, channel: Channel, deferred: list[tuple[int, int]]) -> None:
        """Defer the messages at these offsets (``(offset, due unix ns)``)
        now, reading them from the log, and have the cursor skip them: what
        was deferred at a clean exit, or DPUBs the topic held. Ones
        finished, or already behind the cursor, are left alone."""
        cursor = self.cursor
        if not deferred:
            return
        now_mono, now_unix = time.monotonic(), time.time_ns()
        restored = 0
        for offset, due in deferred:
            if offset < cursor.next or offset >= cursor.visible or offset in cursor.finished \
                    or offset in cursor.held:
                continue
            records, _ = cursor.log.read(offset, 1)
            if not records or records[0][0] != offset:
                continue
            _, msg_id, body, ts, tries, _ = records[0]
            tries = cursor.attempts.pop(offset, tries)
            cursor.restored_due.pop(msg_id, None)
            channel._defer((msg_id, body, ts, tries, 0, offset), now_mono + (due - now_unix) / 1e9, persist=False)
            cursor.hold(offset)
            restored += 1
        cursor.restore = []
        if restored:
            log.debug("CHANNEL(%s:%s): %d deferred messages restored", channel.topic.name, channel.name, restored)


class LogTopicStore:
    """A durable topic's log (``--storage=wal``).

    Attributes:
        log: the :class:`~nsq.server.nsqd.storage.topiclog.TopicLog`.
        backend: :class:`HeldMessages`, the held messages in the log only.
        visible: the offset up to which messages were handed to channels
            (held ones are from there to the log's head: the first ones in
            the topic's queue too, the rest in the log only).
        persisted_visible: ``visible`` of the newest topic.json on disk.
        held_deferred: ``(offset, due unix ns)`` of the DPUBs held in the
            log only (handed on deferred).
        retention_time, retention_bytes: keep finished messages this long
            (s) / this many bytes (0: off); the daemon's or the topic's own.
    """

    checks_room = False
    appends = True

    def __init__(self, host: QueueHost, name: str, topic_log: TopicLog) -> None:
        self.host = host
        self.name = name
        self.log = topic_log
        self.backend = HeldMessages()
        self.held_deferred: list[tuple[int, int]] = []
        self.retention_time = host.options.retention_time
        self.retention_bytes = host.options.retention_bytes
        self._own_retention = False
        self.visible = self.persisted_visible = self._load_visible(topic_log)
        self.backend.depth = topic_log.head - self.visible

    # -- topic.json --------------------------------------------------------------------

    def _state_path(self) -> str:
        return os.path.join(self.log.path, "topic.json")

    def _held(self, topic: Topic) -> list[tuple[int, int]]:
        """``(offset, due unix ns)`` of every DPUB the topic holds."""
        mem = [(e[5], e[2] + e[4] * 1_000_000) for e in topic.queue if e[4]] if topic.queue else []
        return mem + self.held_deferred

    def _state(self, topic: Topic) -> bytes:
        """topic.json: the visible offset, the held DPUBs and the topic's own retention."""
        state: dict = {"visible": self.visible}
        deferred = self._held(topic)
        if deferred:
            state["deferred"] = deferred
        if self._own_retention:
            state["retention_time"] = self.retention_time
            state["retention_bytes"] = self.retention_bytes
        return json.dumps(state).encode()

    def _load_visible(self, topic_log: TopicLog) -> int:
        try:
            with open(os.path.join(topic_log.path, "topic.json"), "rb") as fh:
                state = json.loads(fh.read())
            visible = int(state["visible"])
            self.held_deferred = [(int(o), int(due)) for o, due in state.get("deferred", []) if int(o) >= visible]
            if "retention_time" in state:
                self.retention_time = float(state["retention_time"])
                self.retention_bytes = int(state.get("retention_bytes", 0))
                self._own_retention = True
        except FileNotFoundError:
            return topic_log.first
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("TOPIC(%s): unreadable topic.json (%s): holding the whole log for new channels", self.name, exc)
            return topic_log.first
        return min(max(visible, topic_log.first), topic_log.head)

    def set_retention(self, topic: Topic, retention_time: float | None, retention_bytes: int | None) -> None:
        """This topic's own retention (``POST /topic/config``), written to
        topic.json now.

        Raises:
            OSError: it could not be written (nothing changed).
        """
        old = (self.retention_time, self.retention_bytes, self._own_retention)
        if retention_time is not None:
            self.retention_time = retention_time
        if retention_bytes is not None:
            self.retention_bytes = retention_bytes
        self._own_retention = True
        try:
            replace_atomically(self._state_path(), self._state(topic))
        except OSError:
            self.retention_time, self.retention_bytes, self._own_retention = old
            raise
        self.persisted_visible = min(self.persisted_visible, self.visible)

    # -- appending ---------------------------------------------------------------------

    def _append(self, data: bytes, count: int) -> int:
        had_error = self.log.error is not None
        try:
            base = self.log.append_joined(data, count)
        except BackendFull as exc:
            self.host.set_health(str(exc))
            raise
        if had_error:
            self.host.set_health(None)
        return base

    def append(self, ids: list[bytes], bodies: list[bytes], ts: int, defer_ms: int) -> Iterable[int]:
        """One record per message, in one write."""
        base = self._append(encode_batch(ids, bodies, ts, defer_ms), len(ids))
        return range(base, base + len(ids))

    def append_one(self, msg_id: bytes, body: bytes, ts: int, defer_ms: int) -> int:
        """One record (:meth:`_append` inline: this is every PUB's path)."""
        tlog = self.log
        if tlog.error is not None:
            return self._append(encode_record(msg_id, body, ts, 0, defer_ms), 1)
        try:
            return tlog.append_joined(encode_record(msg_id, body, ts, 0, defer_ms), 1)
        except BackendFull as exc:
            self.host.set_health(str(exc))
            raise

    def append_entries(self, entries: list[Entry]) -> list[Entry]:
        """Records keeping each entry's id, timestamp and attempts."""
        base = self._append(b"".join(encode_record(e[0], e[1], e[2], e[3], e[4]) for e in entries), len(entries))
        return [(e[0], e[1], e[2], e[3], e[4], base + i) for i, e in enumerate(entries)]

    def handed_on(self, msgs: list[Entry]) -> None:
        """The channels get them: visible moves past them."""
        self.visible = msgs[-1][5] + 1

    def hold(self, topic: Topic, msgs: list[Entry]) -> None:
        """The first ``--mem-queue-size`` in memory too (handed on from
        there, as the default engine holds them), the rest in the log only."""
        q = topic.queue
        room = topic.mem_queue_size - len(q)
        if room > 0 and not self.backend.depth:
            q.extend(msgs[:room])
            msgs = msgs[room:]
        if msgs:
            self.backend.depth += len(msgs)
            if any(map(_DEFER_MS, msgs)):
                self.held_deferred += [(e[5], e[2] + e[4] * 1_000_000) for e in msgs if e[4]]

    def flush_held(self, topic: Topic) -> None:
        """What was held in memory is handed on from there, the rest the
        channels read from the log."""
        if topic.queue:
            msgs = list(topic.queue)
            topic.queue.clear()
            self.visible = msgs[-1][5] + 1
            topic._distribute(msgs, new=False)
        head = self.log.head
        if head > self.visible:
            deferred, self.held_deferred = self.held_deferred, []
            self.visible = head
            for channel in list(topic.channels.values()):
                channel.store.hand_on(channel, head, deferred)  # type: ignore[attr-defined]
        self.backend.depth = 0

    def channel_store(self, topic: Topic, name: str) -> ChannelStore:
        """A cursor that starts at the visible offset: a new channel gets
        what the topic hands on from now (and what it holds)."""
        path = None if is_ephemeral(name) else os.path.join(self.log.path, f"{name}.cursor")
        cursor = ChannelCursor(self.log, f"{topic.name}:{name}", path, self.visible)
        cursor.show(self.visible)
        if path is not None and not os.path.exists(path):
            # a new channel is on disk before anything is published to it:
            # a crash before nsqd.dat lists it restores it from this file
            cp = cursor.checkpoint()
            if cp is not None:
                try:
                    replace_atomically(*cp)
                except OSError as exc:
                    log.error("CHANNEL(%s:%s): failed to write its first checkpoint - %s", topic.name, name, exc)
        return LogChannelStore(cursor)

    def start_channel(self, topic: Topic, channel: Channel, start: int) -> None:
        """Rewind the new channel to a retained ``start`` before where it
        stands, or commit it past what the topic held."""
        store: LogChannelStore = channel.store  # type: ignore[assignment]
        at = self.visible - channel.depth  # where it starts after what was held
        if start < at:
            store.rewind(channel, max(start, self.log.first))
        elif start > at:
            store.commit(channel, start)

    def peek(self, topic: Topic, n: int) -> list[Entry]:
        """Read from the log at the visible offset, changing nothing."""
        held = ChannelCursor(self.log, self.name, None, self.visible)
        held.show(self.log.head)
        return held.peek_entries(n)

    def empty(self, topic: Topic) -> None:
        """The visible offset moves to the head."""
        self.backend.empty()
        self.visible = self.log.head
        self.held_deferred = []

    def close(self, topic: Topic, delete: bool) -> None:
        """Write topic.json (if it changed) and close the log; with
        ``delete``, remove the log."""
        self.host.forget_backend(self.log)
        if delete:
            self.log.delete()
            return
        if self.visible != self.persisted_visible or self._held(topic):
            try:
                replace_atomically(self._state_path(), self._state(topic))
            except OSError as exc:
                log.error("TOPIC(%s): failed to write topic.json - %s", self.name, exc)
        self.log.close()

    # -- checkpoints and retention -------------------------------------------------------

    def checkpoints(self, topic: Topic) -> tuple[list[tuple[str, bytes]], list[Any]]:
        """Fold every channel's FINs; the checkpoints to write (``(path,
        content)``) and, for each, what it records (a cursor and its low, or
        the store and its visible offset). See :meth:`checkpoints_written`."""
        files: list[tuple[str, bytes]] = []
        what: list[Any] = []
        if topic.deleted:
            return files, what
        for channel in topic.channels.values():
            cursor = channel.store.cursor
            if cursor is None:
                continue
            cursor.fold()
            cp = cursor.checkpoint()
            if cp is not None:
                files.append(cp)
                what.append((cursor, cursor.finished.low))
        if self.visible != self.persisted_visible:
            files.append((self._state_path(), self._state(topic)))
            what.append((self, self.visible))
        return files, what

    def checkpoints_written(self, topic: Topic, what: list[Any], ok: list[bool]) -> None:
        """Record the checkpoints on disk, then delete the log's segments
        below every position a restart could read from."""
        for (owner, value), done in zip(what, ok):
            if not done:
                continue
            if owner is self:
                self.persisted_visible = value
            else:
                owner.persisted_low = value
        self.trim(topic)

    def trim(self, topic: Topic) -> None:
        """Delete the segments wholly below the oldest offset still needed:
        the persisted positions of the channels (an ephemeral one's own) and
        of the topic's held messages; with retention, only those past its
        time or beyond its size. The segment being written rolls once its
        oldest message is past the retention time, so a quiet topic's last
        messages go too."""
        if topic.deleted:
            return
        floor = min(self.persisted_visible, self.visible)
        for channel in topic.channels.values():
            cursor = channel.store.cursor
            if cursor is not None:
                low = cursor.finished.low if cursor.path is None else cursor.persisted_low
                floor = min(floor, low)
        rt, rb = self.retention_time, self.retention_bytes
        now = time.time()
        if rt:
            self.log.roll_older_than(int((now - rt) * 1e9))
        segments = self.log.segment_info()
        retained = sum(size for _, size, _ in segments)
        upto = None
        # whole segments below the floor, oldest first, never the newest
        for (_base, size, mtime), (next_base, _, _) in zip(segments, segments[1:]):
            if next_base > floor:
                break
            if (rt or rb) and not ((rt and now - mtime > rt) or (rb and retained > rb)):
                break
            upto = next_base
            retained -= size
        if upto is not None and self.log.delete_before(upto):
            log.info("TOPIC(%s): log segments before offset %d deleted", self.name, self.log.first)
