"""A topic: the stream publishers write to, copied to each of its channels.

A topic with no channel (or a paused topic) keeps its messages in its own
queue until a channel appears (or it is unpaused); then they flow on.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING

from nsq.protocol.errors import NSQError
from nsq.protocol.message import IDFactory
from nsq.protocol.names import is_ephemeral
from nsq.server.nsqd.backend import BackendFull, BackendQueue, DiscardBackend, NoDiskBackend, put_overflow
from nsq.server.nsqd.channel import Channel
from nsq.server.nsqd.message import Entry, decode_entries, encode_entries

if TYPE_CHECKING:
    from nsq.server.nsqd.host import QueueHost

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
            as :data:`~nsq.server.nsqd.message.Entry` tuples.
        backend: overflow backend for ``queue``.
        paused: messages stay in ``queue`` while True.
        starting: messages stay in ``queue`` while True (a new topic waiting
            for lookupd's channel list, as Go nsqd's GetTopic does).
        message_count, message_bytes: published so far.
    """

    def __init__(self, nsqd: QueueHost, name: str, backend: BackendQueue | None = None) -> None:
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

    def __repr__(self) -> str:
        return f"Topic({self.name})"

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
        msgs = list(zip(self.new_ids(n), bodies, repeat(time.time_ns(), n), repeat(0, n), repeat(defer_ms, n)))
        self._accept(msgs, sum(map(len, bodies)))

    def publish_one(self, body: bytes, defer_ms: int = 0) -> None:
        """:meth:`publish` of one message (PUB, DPUB: the request/response
        case, without the batch machinery). Raises :class:`TopicFull`."""
        if self.deleted:
            raise TopicFull("exiting")
        if self.nsqd.draining:
            raise TopicFull("draining")
        self._check_room(1)
        now = time.time_ns()
        msg_id = self._ids.new_id(now)
        while msg_id is None:  # 4096 IDs used in this ~1 ms window
            now = time.time_ns()
            msg_id = self._ids.new_id(now)
        self._accept([(msg_id, body, now, 0, defer_ms)], len(body))

    def put_entries(self, entries: list[Entry]) -> None:
        """Accept messages that already have an id and timestamp (a channel's
        dead letters), as :meth:`publish` does new ones.

        Raises:
            TopicFull: refused (memory full without a backend, a failing disk).
        """
        if self.deleted:
            raise TopicFull("exiting")
        self._check_room(len(entries))
        self._accept(entries, sum(len(e[1]) for e in entries))

    def _accept(self, msgs: list[Entry], nbytes: int) -> None:
        self.message_count += len(msgs)
        self.message_bytes += nbytes
        if self.channels and not self.paused and not self.starting:
            self._distribute(msgs)
        else:
            self._hold(msgs)

    def _check_room(self, n: int) -> None:
        if self.ephemeral:
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
        out = list(itertools.islice(self.queue, n))
        if len(out) < n and self.backend.depth:
            out += decode_entries(self.backend.peek(n - len(out)), f"TOPIC({self.name})")
        return out

    # -- channels ----------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """The channel ``name``, created (and fed held messages) if new."""
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self, name, self.nsqd.make_backend(f"{self.name}:{name}", is_ephemeral(name)))
            self.channels[name] = channel
            log.info("TOPIC(%s): new channel(%s)", self.name, name)
            self.nsqd.notify_channel_created(self, channel)
            self.flush_held()
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
            return
        try:
            if self.queue and self.backend.accepts_overflow and not self.ephemeral:
                log.info("TOPIC(%s): flushing %d memory messages to backend", self.name, len(self.queue))
                self.nsqd.write_at_exit(self.backend, encode_entries(list(self.queue)), f"TOPIC({self.name})")
            self.queue.clear()
        finally:
            self.backend.close()
