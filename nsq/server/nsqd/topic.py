"""A topic: the stream publishers write to, copied to each of its channels.

A topic with no channel (or a paused topic) keeps its messages in its own
queue until a channel appears (or it is unpaused); then they flow on.
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
import os
import time
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING

from nsq.protocol.errors import NSQError
from nsq.protocol.message import IDFactory
from nsq.protocol.names import is_ephemeral
from nsq.server.nsqd.backend import BackendFull, BackendQueue, DiscardBackend, NoDiskBackend, put_overflow
from nsq.server.nsqd import channel_admin
from nsq.server.nsqd.channel import Channel
from nsq.server.nsqd.cursor import ChannelCursor
from nsq.server.nsqd.message import NO_OFFSET, Entry, decode_entries, encode_entries
from nsq.server.nsqd.topiclog import encode_batch, encode_record

if TYPE_CHECKING:
    from collections.abc import Iterable

    from nsq.server.nsqd.host import QueueHost
    from nsq.server.nsqd.topiclog import TopicLog

__all__ = ["Topic", "TopicFull"]

log = logging.getLogger("nsq.nsqd")
_DEFER_MS = operator.itemgetter(4)


class TopicFull(NSQError):
    """A publish that memory cannot hold and no backend can take."""


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


class Topic:
    """One topic.

    Attributes:
        name: topic name.
        ephemeral: name ends in ``#ephemeral``; deleted with its last channel.
        channels: by name, in creation order.
        queue: messages waiting for a channel (no channel yet, or paused),
            as :data:`~nsq.server.nsqd.message.Entry` tuples.
        backend: overflow backend for ``queue``.
        paused: messages stay in ``queue`` while True.
        starting: messages stay in ``queue`` while True (a new topic waiting
            for lookupd's channel list, as Go nsqd's GetTopic does).
        message_count, message_bytes: published so far.
        log: the topic log (``--storage=wal``), else None.
        visible: with a log, the offset up to which messages were handed
            to channels (held ones are from there to the log's head: the
            first ones in ``queue`` too, the rest in the log only).
        held_deferred: with a log, ``(offset, due unix ns)`` of the DPUBs
            held in the log only (handed on deferred).
    """

    def __init__(self, nsqd: QueueHost, name: str, backend: BackendQueue | None = None,
                 topic_log: TopicLog | None = None) -> None:
        self.nsqd = nsqd
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = nsqd.options.mem_queue_size
        self.channels: dict[str, Channel] = {}
        self.queue: deque[Entry] = deque()
        if backend is None:
            backend = DiscardBackend() if self.ephemeral else NoDiskBackend()
        self.backend = backend
        self.paused = False
        #: True while a new topic asks lookupd which channels to create first
        self.starting = False
        self.deleted = False
        self.message_count = 0
        self.message_bytes = 0
        self._ids = IDFactory(nsqd.options.node_id)
        self.log = topic_log
        self.held_deferred: list[tuple[int, int]] = []
        self.visible = 0
        #: ``visible`` of the newest topic.json on disk
        self.persisted_visible = 0
        #: --storage=wal: keep finished messages this long (s) / this many bytes (0: off)
        self.retention_time = nsqd.options.retention_time
        self.retention_bytes = nsqd.options.retention_bytes
        if topic_log is not None:
            self.backend = HeldMessages()
            self.visible = self.persisted_visible = self._load_visible(topic_log)
            self.backend.depth = topic_log.head - self.visible

    def __repr__(self) -> str:
        return f"Topic({self.name})"

    # -- the topic log ---------------------------------------------------------------

    def _state_path(self) -> str:
        assert self.log is not None
        return os.path.join(self.log.path, "topic.json")

    def _state(self) -> bytes:
        """topic.json: the visible offset and the topic's own retention."""
        state: dict = {"visible": self.visible}
        deferred = self._held_deferred()
        if deferred:
            state["deferred"] = deferred
        if self._own_retention:
            state["retention_time"] = self.retention_time
            state["retention_bytes"] = self.retention_bytes
        return json.dumps(state).encode()

    _own_retention = False

    def _held_deferred(self) -> list[tuple[int, int]]:
        """``(offset, due unix ns)`` of every DPUB the topic holds."""
        mem = [(e[5], e[2] + e[4] * 1_000_000) for e in self.queue if e[4]] if self.held_deferred or self.queue \
            else []
        return mem + self.held_deferred

    def set_retention(self, retention_time: float | None, retention_bytes: int | None) -> None:
        """This topic's own retention (``POST /topic/config``), written to
        topic.json now.

        Raises:
            OSError: it could not be written (nothing changed).
        """
        from nsq.server.nsqd.atomicfile import replace_atomically

        old = (self.retention_time, self.retention_bytes, self._own_retention)
        if retention_time is not None:
            self.retention_time = retention_time
        if retention_bytes is not None:
            self.retention_bytes = retention_bytes
        self._own_retention = True
        try:
            replace_atomically(self._state_path(), self._state())
        except OSError:
            self.retention_time, self.retention_bytes, self._own_retention = old
            raise
        self.persisted_visible = min(self.persisted_visible, self.visible)

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

    def _append(self, data: bytes, count: int) -> int:
        assert self.log is not None
        had_error = self.log.error is not None
        try:
            base = self.log.append_joined(data, count)
        except BackendFull as exc:
            self.nsqd.set_health(str(exc))
            raise TopicFull(str(exc)) from None
        if had_error:
            self.nsqd.set_health(None)
        return base

    def channel_path(self, name: str) -> str | None:
        """Where a durable channel of a topic log keeps its checkpoint."""
        if self.log is None or is_ephemeral(name):
            return None
        return os.path.join(self.log.path, f"{name}.cursor")

    def checkpoints(self) -> tuple[list[tuple[str, bytes]], list]:
        """Fold every channel's FINs; the checkpoints to write (``(path,
        content)``) and, for each, what it records (a cursor and its low, or
        the topic and its visible offset). See :meth:`checkpoints_written`."""
        files: list[tuple[str, bytes]] = []
        what: list = []
        if self.log is None or self.deleted:
            return files, what
        for channel in self.channels.values():
            cursor = channel.wal
            if cursor is None:
                continue
            cursor.fold()
            cp = cursor.checkpoint()
            if cp is not None:
                files.append(cp)
                what.append((cursor, cursor.finished.low))
        if self.visible != self.persisted_visible:
            files.append((self._state_path(), self._state()))
            what.append((self, self.visible))
        return files, what

    def checkpoints_written(self, what: list, ok: list[bool]) -> None:
        """Record the checkpoints on disk, then delete the log's segments
        below every position a restart could read from."""
        for (owner, value), done in zip(what, ok):
            if not done:
                continue
            if owner is self:
                self.persisted_visible = value
            else:
                owner.persisted_low = value
        self.trim_log()

    def trim_log(self) -> None:
        """Delete the segments wholly below the oldest offset still needed:
        the persisted positions of the channels (an ephemeral one's own) and
        of the topic's held messages."""
        if self.log is None or self.deleted:
            return
        floor = min(self.persisted_visible, self.visible)
        for channel in self.channels.values():
            cursor = channel.wal
            if cursor is not None:
                low = cursor.finished.low if cursor.path is None else cursor.persisted_low
                floor = min(floor, low)
        rt, rb = self.retention_time, self.retention_bytes
        now = time.time()
        if rt:
            # a quiet topic's last segment rolls too, so retention reaches it
            self.log.roll_older_than(int((now - rt) * 1e9))
        segments = self.log.segment_info()
        retained = sum(size for _, size, _ in segments)
        upto = None
        # whole segments below the floor, oldest first, never the newest;
        # with retention, only those past its time or beyond its size
        for (_base, size, mtime), (next_base, _, _) in zip(segments, segments[1:]):
            if next_base > floor:
                break
            if (rt or rb) and not ((rt and now - mtime > rt) or (rb and retained > rb)):
                break
            upto = next_base
            retained -= size
        if upto is not None and self.log.delete_before(upto):
            log.info("TOPIC(%s): log segments before offset %d deleted", self.name, self.log.first)

    def write_checkpoint(self, channel: Channel, attempts: dict[int, int],
                         deferred: list[tuple[int, int]] | None = None) -> None:
        """Write ``channel``'s checkpoint now (at exit), with ``attempts``
        and ``deferred`` (see :meth:`ChannelCursor.checkpoint`)."""
        cursor = channel.wal
        if cursor is None:
            return
        cursor.fold()
        cp = cursor.checkpoint(attempts, deferred)
        if cp is None:
            return
        from nsq.server.nsqd.atomicfile import replace_atomically

        try:
            replace_atomically(*cp)
            cursor.persisted_low = cursor.finished.low
        except OSError as exc:
            log.error("CHANNEL(%s:%s): failed to write its checkpoint - %s: after a restart it delivers again "
                      "from its previous one", self.name, channel.name, exc)

    @property
    def depth(self) -> int:
        """Messages waiting in the topic itself (memory + backend)."""
        return len(self.queue) + self.backend.depth

    # -- ids -------------------------------------------------------------------

    def new_ids(self, count: int) -> list[bytes]:
        """``count`` new message IDs (waits out an exhausted ~1 ms window)."""
        ids = self._ids.new_ids(time.time_ns(), count)
        while len(ids) < count:
            ids += self._ids.new_ids(time.time_ns(), count - len(ids))
        return ids

    # -- publishing ------------------------------------------------------------

    def publish(self, bodies: list[bytes], defer_ms: int = 0) -> None:
        """Accept new messages (PUB, MPUB, DPUB, /pub, /mpub).

        If a durable topic or channel cannot hold them (memory full and no
        backend that takes overflow) nothing is queued. If a disk write
        fails (a full or failing disk), the publish is refused too: the
        messages that could not be written are not kept, so memory stays
        within ``--mem-queue-size`` (channels already written keep their
        copy: a refused publish may still be delivered, an acknowledged one
        is never lost).

        Raises:
            TopicFull: refused; the caller answers ``E_PUB_FAILED`` (or the
                MPUB/DPUB equivalent, or HTTP 503).
        """
        n = len(bodies)
        if n == 1:
            self.publish_one(bodies[0], defer_ms)
            return
        if self.deleted:
            raise TopicFull("exiting")
        if self.nsqd.draining:
            raise TopicFull("draining")
        self._check_room(n)
        # entries are built by zip in C: no Python call per message
        ids = self.new_ids(n)
        now = time.time_ns()
        if self.log is not None:
            base = self._append(encode_batch(ids, bodies, now, defer_ms), n)
            offsets: Iterable[int] = range(base, base + n)
        else:
            offsets = repeat(NO_OFFSET, n)
        msgs = list(zip(ids, bodies, repeat(now, n), repeat(0, n), repeat(defer_ms, n), offsets))
        self._accept(msgs, sum(map(len, bodies)))

    def publish_one(self, body: bytes, defer_ms: int = 0) -> None:
        """:meth:`publish` of one message (PUB, DPUB: the request/response
        case, without the batch machinery). Raises :class:`TopicFull`."""
        if self.deleted:
            raise TopicFull("exiting")
        if self.nsqd.draining:
            raise TopicFull("draining")
        # a topic without a channel, with room in memory, queues it there
        # (what _check_room and _accept decide, without their calls)
        held = not self.channels and self.log is None and len(self.queue) < self.mem_queue_size
        if not held:
            self._check_room(1)
        now = time.time_ns()
        msg_id = self._ids.new_id(now)
        while msg_id is None:  # 4096 IDs used in this ~1 ms window
            now = time.time_ns()
            msg_id = self._ids.new_id(now)
        if held:
            self.message_count += 1
            self.message_bytes += len(body)
            self.queue.append((msg_id, body, now, 0, defer_ms, NO_OFFSET))
            return
        offset = NO_OFFSET
        if self.log is not None:
            offset = self._append(encode_record(msg_id, body, now, 0, defer_ms), 1)
        self._accept([(msg_id, body, now, 0, defer_ms, offset)], len(body))

    def put_entries(self, entries: list[Entry]) -> None:
        """Accept messages that already have an id and timestamp (a channel's
        dead letters), as :meth:`publish` does new ones.

        Raises:
            TopicFull: refused (memory full without a backend, a failing disk).
        """
        if self.deleted:
            raise TopicFull("exiting")
        self._check_room(len(entries))
        if self.log is not None:
            base = self._append(b"".join(encode_record(e[0], e[1], e[2], e[3], e[4]) for e in entries),
                                len(entries))
            entries = [(e[0], e[1], e[2], e[3], e[4], base + i) for i, e in enumerate(entries)]
        self._accept(entries, sum(len(e[1]) for e in entries))

    def _accept(self, msgs: list[Entry], nbytes: int) -> None:
        self.message_count += len(msgs)
        self.message_bytes += nbytes
        if self.channels and not self.paused and not self.starting:
            if self.log is not None:
                self.visible = msgs[-1][5] + 1
            self._distribute(msgs)
        elif self.log is not None:
            self._hold_in_log(msgs)
        else:
            self._hold(msgs)

    def _hold_in_log(self, msgs: list[Entry]) -> None:
        """Held messages of a topic log: the first ``--mem-queue-size`` in
        memory too (handed on from there, as the default engine holds
        them), the rest in the log only."""
        q = self.queue
        room = self.mem_queue_size - len(q)
        if room > 0 and not self.backend.depth:
            q.extend(msgs[:room])
            msgs = msgs[room:]
        if msgs:
            self.backend.depth += len(msgs)
            if any(map(_DEFER_MS, msgs)):
                self.held_deferred += [(e[5], e[2] + e[4] * 1_000_000) for e in msgs if e[4]]

    def _check_room(self, n: int) -> None:
        if self.ephemeral or self.log is not None:
            return
        if self.channels and not self.paused and not self.starting:
            for channel in self.channels.values():
                if not channel.backend.accepts_overflow and channel.capacity() < n:
                    raise TopicFull(f"channel {channel.name} memory queue full (--mem-queue-size)")
        elif not self.backend.accepts_overflow and len(self.queue) + n > self.mem_queue_size:
            raise TopicFull("topic memory queue full (--mem-queue-size)")

    def _distribute(self, msgs: list[Entry], new: bool = True) -> None:
        # entries are immutable: every channel shares them
        for channel in list(self.channels.values()):
            try:
                channel.put_messages(msgs, new)
            except BackendFull as exc:
                raise TopicFull(str(exc)) from None

    def _hold(self, msgs: list[Entry]) -> None:
        q = self.queue
        room = self.mem_queue_size - len(q)
        if room >= len(msgs):
            q.extend(msgs)
            return
        if room > 0:
            q.extend(msgs[:room])
            msgs = msgs[room:]
        stored = put_overflow(self.backend, encode_entries(msgs), self.nsqd.set_health)
        if stored < len(msgs):
            # new messages the disk refused: not kept, the publish is refused
            self.message_count -= len(msgs) - stored
            raise TopicFull(self.backend.error or "failed to write to the backend")

    #: messages moved from the topic's backend to its channels per loop turn
    DRAIN_CHUNK = 4096
    #: s between tries to drain the backend while a channel's disk fails
    RETRY_DRAIN = 1.0

    def flush_held(self) -> None:
        """Move messages held in the topic (memory, then backend) to its channels.

        Called when a channel appears or the topic is unpaused. A large
        backend is drained in chunks, one per event-loop turn.
        """
        if not self.channels or self.paused or self.deleted or self.starting:
            return
        if self.log is not None:
            # what was held in memory is handed on from there, the rest the
            # channels read from the log
            if self.queue:
                msgs = list(self.queue)
                self.queue.clear()
                self.visible = msgs[-1][5] + 1
                self._distribute(msgs, new=False)
            head = self.log.head
            if head > self.visible:
                deferred, self.held_deferred = self.held_deferred, []
                self.visible = head
                for channel in list(self.channels.values()):
                    channel_admin.hand_on(channel, head, deferred)
            self.backend.depth = 0
            return
        if self.queue:
            msgs = list(self.queue)
            self.queue.clear()
            self._distribute(msgs, new=False)
        if self.backend.depth:
            if any(c.backend.error is not None for c in self.channels.values()):
                # a channel's disk refuses writes: moving the topic's backlog
                # would only pile it up in that channel's memory; retry later
                self.nsqd.call_later(self.RETRY_DRAIN, self.flush_held)
                return
            msgs = decode_entries(self.backend.read_many(self.DRAIN_CHUNK), f"TOPIC({self.name})")
            if msgs:
                self._distribute(msgs, new=False)
            if self.backend.depth:
                self.nsqd.call_soon(self.flush_held)

    def peek(self, n: int) -> list[Entry]:
        """The next ``n`` messages held in the topic itself (no channel yet,
        or paused), memory first, then disk, changing nothing."""
        if self.log is not None:
            held = ChannelCursor(self.log, self.name, None, self.visible)
            held.show(self.log.head)
            return held.peek_entries(n)
        out = list(itertools.islice(self.queue, n))
        if len(out) < n and self.backend.depth:
            out += decode_entries(self.backend.peek(n - len(out)), f"TOPIC({self.name})")
        return out

    # -- channels ----------------------------------------------------------------

    def get_channel(self, name: str, start: int | None = None) -> Channel:
        """The channel ``name``, created (and fed held messages) if new; a
        new channel of a topic log may start at a retained ``start`` offset
        instead of the visible one (``POST /channel/create?start=``)."""
        channel = self.channels.get(name)
        if channel is None:
            if self.log is not None:
                # a new channel gets what the topic hands on from now (and
                # what it holds): it starts at the visible offset
                cursor = ChannelCursor(self.log, f"{self.name}:{name}", self.channel_path(name), self.visible)
                cursor.show(self.visible)
                backend: BackendQueue = cursor
            else:
                backend = self.nsqd.make_backend(f"{self.name}:{name}", is_ephemeral(name))
            channel = Channel(self, name, backend)
            self.channels[name] = channel
            log.info("TOPIC(%s): new channel(%s)", self.name, name)
            self.nsqd.notify_channel_created(self, channel)
            self.flush_held()
            if start is not None and channel.wal is not None:
                at = self.visible - channel.depth  # where it starts after what was held
                if start < at:
                    channel.rewind(max(start, self.log.first if self.log is not None else 0))
                elif start > at:
                    channel.commit(start)  # past what the topic holds for new channels
        return channel

    def delete_channel(self, name: str) -> bool:
        """Delete a channel (closing its clients); False if it does not exist."""
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        log.info("TOPIC(%s): deleting channel %s", self.name, name)
        channel.close(delete=True)
        self.nsqd.notify_channel_deleted(self, channel)
        if self.ephemeral and not self.channels and not self.deleted:
            self.nsqd.delete_topic(self.name)
        return True

    # -- admin -------------------------------------------------------------------

    def pause(self) -> None:
        """Hold new messages in the topic instead of its channels; persisted."""
        self.paused = True
        self.nsqd.persist_metadata()

    def unpause(self) -> None:
        """Resume the flow to channels, held messages first; persisted."""
        self.paused = False
        self.nsqd.persist_metadata()
        self.flush_held()

    def empty(self) -> None:
        """Drop the messages held in the topic (not its channels'), as Go."""
        self.queue.clear()
        self.backend.empty()
        if self.log is not None:
            self.visible = self.log.head
            self.held_deferred = []

    def close(self, delete: bool) -> None:
        """Close every channel; with ``delete``, drop all storage, otherwise
        flush held messages to the backend and close it."""
        self.deleted = True
        self.nsqd.forget_backend(self.backend)
        for channel in list(self.channels.values()):
            try:
                channel.close(delete)
            except Exception:  # one channel's failing disk must not keep the others open
                log.exception("CHANNEL(%s:%s): failed to close cleanly", self.name, channel.name)
        if delete:
            self.channels.clear()
            self.queue.clear()
            self.backend.delete()
            if self.log is not None:
                self.nsqd.forget_backend(self.log)
                self.log.delete()
            return
        if self.log is not None:
            self.nsqd.forget_backend(self.log)
            if self.visible != self.persisted_visible or self._held_deferred():
                from nsq.server.nsqd.atomicfile import replace_atomically

                try:
                    replace_atomically(self._state_path(), self._state())
                except OSError as exc:
                    log.error("TOPIC(%s): failed to write topic.json - %s", self.name, exc)
            self.log.close()
            return
        try:
            if self.queue and self.backend.accepts_overflow and not self.ephemeral:
                log.info("TOPIC(%s): flushing %d memory messages to backend", self.name, len(self.queue))
                self.nsqd.write_at_exit(self.backend, encode_entries(list(self.queue)), f"TOPIC({self.name})")
            self.queue.clear()
        finally:
            self.backend.close()
