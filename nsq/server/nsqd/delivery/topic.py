"""A topic: the stream publishers write to, copied to each of its channels.

A topic with no channel (or a paused topic) keeps its messages in its own
queue until a channel appears (or it is unpaused); then they flow on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING, Any

from nsq.protocol.errors import NSQError
from nsq.protocol.message import IDFactory
from nsq.protocol.names import is_ephemeral
from nsq.server.nsqd.storage.backend import BackendFull
from nsq.server.nsqd.delivery.channel import Channel
from nsq.server.nsqd.storage.message import NO_OFFSET, Entry

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.stores import TopicStore
    from nsq.server.nsqd.delivery.host import QueueHost
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["Topic", "TopicFull"]

log = logging.getLogger("nsq.nsqd")


class TopicFull(NSQError):
    """A publish that memory cannot hold and no backend can take."""


class Topic:
    """One topic.

    Attributes:
        name: topic name.
        ephemeral: name ends in ``#ephemeral``; deleted with its last channel.
        channels: by name, in creation order.
        queue: messages waiting for a channel (no channel yet, or paused),
            as :data:`~nsq.server.nsqd.storage.message.Entry` tuples, at most
            ``--mem-queue-size``; the store holds the rest.
        store: the storage engine's part of the topic
            (:class:`~nsq.server.nsqd.delivery.stores.TopicStore`): it stores each
            publish (a topic log appends it), holds what memory cannot, and
            makes each new channel's store.
        backend: the store's queue (its depth: ``backend_depth``).
        paused: messages stay in ``queue`` while True.
        starting: messages stay in ``queue`` while True (a new topic waiting
            for lookupd's channel list, as Go nsqd's GetTopic does).
        message_count, message_bytes: published so far.
    """

    def __init__(self, nsqd: QueueHost, name: str, store: TopicStore) -> None:
        self.nsqd = nsqd
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = nsqd.options.mem_queue_size
        self.channels: dict[str, Channel] = {}
        self.queue: deque[Entry] = deque()
        self.store = store
        self.backend = store.backend
        #: the store's (constant) ``appends``, kept here for the hot path
        self._appends = store.appends
        self.paused = False
        #: True while a new topic asks lookupd which channels to create first
        self.starting = False
        self.deleted = False
        self.message_count = 0
        self.message_bytes = 0
        self._ids = IDFactory(nsqd.options.node_id)

    def __repr__(self) -> str:
        return f"Topic({self.name})"

    # -- the storage engine (checkpoints, retention: the topic log's) ---------------

    @property
    def log(self) -> TopicLog | None:
        """The topic log (``--storage=wal``), else None: for the figures
        outside delivery code reports (``/stats``, ``/topic/read``)."""
        return self.store.log

    def checkpoints(self) -> tuple[list[tuple[str, bytes]], list[Any]]:
        """The store's checkpoints to write (:meth:`TopicStore.checkpoints`)."""
        return self.store.checkpoints(self)

    def checkpoints_written(self, what: list[Any], ok: list[bool]) -> None:
        """The checkpoints were written (:meth:`TopicStore.checkpoints_written`)."""
        self.store.checkpoints_written(self, what, ok)

    @property
    def depth(self) -> int:
        """Messages waiting in the topic itself (memory + store)."""
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
        try:
            offsets = self.store.append(ids, bodies, now, defer_ms)
        except BackendFull as exc:
            raise TopicFull(str(exc)) from None
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
        store = self.store
        held = not self.channels and not self._appends and len(self.queue) < self.mem_queue_size
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
        if self._appends:
            try:
                offset = store.append_one(msg_id, body, now, defer_ms)
            except BackendFull as exc:
                raise TopicFull(str(exc)) from None
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
        try:
            entries = self.store.append_entries(entries)
        except BackendFull as exc:
            raise TopicFull(str(exc)) from None
        self._accept(entries, sum(len(e[1]) for e in entries))

    def _accept(self, msgs: list[Entry], nbytes: int) -> None:
        self.message_count += len(msgs)
        self.message_bytes += nbytes
        if self.channels and not self.paused and not self.starting:
            if self._appends:
                self.store.handed_on(msgs)
            self._distribute(msgs)
        else:
            try:
                self.store.hold(self, msgs)
            except BackendFull as exc:
                raise TopicFull(str(exc)) from None

    def _check_room(self, n: int) -> None:
        if self.ephemeral or not self.store.checks_room:
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

    def flush_held(self) -> None:
        """Move messages held in the topic (memory, then store) to its
        channels (:meth:`TopicStore.flush_held`).

        Called when a channel appears or the topic is unpaused.
        """
        if not self.channels or self.paused or self.deleted or self.starting:
            return
        self.store.flush_held(self)

    def peek(self, n: int) -> list[Entry]:
        """The next ``n`` messages held in the topic itself (no channel yet,
        or paused), memory first, then the store, changing nothing."""
        return self.store.peek(self, n)

    # -- channels ----------------------------------------------------------------

    def get_channel(self, name: str, start: int | None = None) -> Channel:
        """The channel ``name``, created (and fed held messages) if new; a
        new channel of a topic log may start at a retained ``start`` offset
        instead of the visible one (``POST /channel/create?start=``).

        Raises:
            StoreError: ``start`` without a topic log.
        """
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self, name, self.store.channel_store(self, name))
            self.channels[name] = channel
            log.info("TOPIC(%s): new channel(%s)", self.name, name)
            self.nsqd.notify_channel_created(self, channel)
            self.flush_held()
            if start is not None:
                self.store.start_channel(self, channel, start)
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
        self.store.empty(self)

    def close(self, delete: bool) -> None:
        """Close every channel; with ``delete``, drop all storage, otherwise
        have the store keep what the topic holds, and close it."""
        self.deleted = True
        for channel in list(self.channels.values()):
            try:
                channel.close(delete)
            except Exception:  # one channel's failing disk must not keep the others open
                log.exception("CHANNEL(%s:%s): failed to close cleanly", self.name, channel.name)
        if delete:
            self.channels.clear()
            self.queue.clear()
        try:
            self.store.close(self, delete)
        finally:
            self.queue.clear()
