"""The storage engines behind a topic and its channels: one interface per role.

A :class:`~nsq.server.nsqd.delivery.topic.Topic` and a
:class:`~nsq.server.nsqd.delivery.channel.Channel` hold delivery (consumers, memory
queues, in flight, deferred, timeouts, RDY, dead letters, counts) and call
their store, a :class:`TopicStore` or :class:`ChannelStore`, wherever the
engine matters; they never ask which one they have (Go keeps
``BackendQueue``, nsqd/backend_queue.go, between channel.go and
go-diskqueue the same way). Two engines implement both roles:

- the memory queue + Go disk queue engine (``--storage=diskqueue``, and
  every ephemeral or memory-only topic):
  :mod:`nsq.server.nsqd.delivery.queuestore`;
- the topic log + cursor engine (``--storage=wal``):
  :mod:`nsq.server.nsqd.delivery.logstore` (docs/operations/durability.md, "The
  topic log").

The daemon chooses the engine once, where it makes a topic
(``NSQD.get_topic``); the topic's store makes each channel's. A third
engine (a replica's copy of a log, say) implements these two Protocols;
delivery code does not change. Stores keep no reference to their topic or
channel (no reference cycle): the methods that act on them take them as an
argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nsq.server.nsqd.storage.backend import BackendQueue
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.storage.cursor import ChannelCursor
    from nsq.server.nsqd.storage.message import Entry
    from nsq.server.nsqd.delivery.topic import Topic
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["TopicStore", "ChannelStore", "StoreError"]


class StoreError(Exception):
    """An operation the store's engine does not have (a channel started at
    an offset without a topic log); the text names what is needed."""


class ChannelStore(Protocol):
    """What a channel needs of its storage engine.

    Attributes:
        backend: the queue whose ``depth`` is the channel's
            ``backend_depth`` (messages not in memory) and whose ``error``
            says why its disk fails (None while it works).
        cursor: the channel's position in its topic's log, or None.
        tracks_offsets: what the channel finishes or dead-letters must be
            reported (:meth:`finish`, with each entry's offset: its place
            in a topic log, or the token of the disk-queue read it came
            from); False: it is not called.
        keeps_order: the store keeps a position in one ordered log: what
            the channel takes as published must be reported (:meth:`took`),
            and while its ``backend`` has a depth (a backlog) new messages
            queue behind it (:meth:`queue_behind`); False: neither is called.
        persist_deferred: a DPUB's deferral goes to the channel's deferred
            log (False: the store keeps the delay itself).
    """

    @property
    def backend(self) -> BackendQueue: ...
    @property
    def cursor(self) -> ChannelCursor | None: ...
    @property
    def tracks_offsets(self) -> bool: ...
    @property
    def keeps_order(self) -> bool: ...
    @property
    def persist_deferred(self) -> bool: ...

    def open(self, channel: Channel) -> None:
        """The channel was made: restore what the engine kept of it
        (deferred messages) through the channel's own methods."""

    def queue_behind(self, channel: Channel, msgs: list[Entry]) -> list[Entry]:
        """Queue ``msgs`` behind the backlog; the deferred ones (DPUB), to
        be deferred now by the channel."""

    def took(self, msgs: list[Entry]) -> None:
        """The channel took ``msgs`` into memory as they were published."""

    def overflow(self, channel: Channel, excess: int, fresh: int, new: bool) -> None:
        """The memory queue is ``excess`` past ``--mem-queue-size``; of its
        tail, ``fresh`` entries are this publish's (``new``).

        Raises:
            BackendFull: new messages could not be kept (refuse the publish).
        """

    def spill(self, channel: Channel, e: Entry) -> bool:
        """Keep a requeued message out of a full memory queue; False: the
        channel keeps it in memory."""

    def read(self, channel: Channel, n: int) -> list[Entry]:
        """Up to ``n`` messages taken from the store, oldest first (a
        ``defer_ms`` > 0 one is still deferred)."""

    def finish(self, offsets: Iterable[int]) -> None:
        """The channel finished the messages at these offsets."""

    def released(self, channel: Channel, e: Entry) -> Entry:
        """A deferred message is due and goes back to the channel's queue:
        the entry to queue. The store decides when it leaves the channel's
        deferred log (where it may be the only copy on disk)."""

    def peek(self, n: int) -> list[Entry]:
        """The next ``n`` messages :meth:`read` would take, changing nothing."""

    def empty(self) -> None:
        """Drop everything the store holds for the channel."""

    def flush(self, channel: Channel) -> int:
        """At exit: keep what the channel holds in memory, in flight and
        deferred; how many messages that was."""

    def close(self) -> None:
        """Release the store's files."""

    def delete(self) -> None:
        """Remove the store's files (the channel was deleted)."""


class TopicStore(Protocol):
    """What a topic needs of its storage engine.

    Attributes:
        backend: the queue whose ``depth`` is the topic's ``backend_depth``.
        log: the topic log, or None (outside delivery code reads its figures).
        checks_room: a publish must find room in the memory queues that
            cannot overflow (no log to keep it).
        appends: every message is stored as it is published
            (:meth:`append_one`, :meth:`handed_on`); False: the memory queues
            hold them (a message held for the first channel goes to the
            topic's memory queue without the store), and those two are not
            called.
    """

    @property
    def backend(self) -> BackendQueue: ...
    @property
    def log(self) -> TopicLog | None: ...
    @property
    def checks_room(self) -> bool: ...
    @property
    def appends(self) -> bool: ...

    def append(self, ids: list[bytes], bodies: list[bytes], ts: int, defer_ms: int) -> Iterable[int]:
        """Store new messages; their offsets (:data:`NO_OFFSET` without a log).

        Raises:
            BackendFull: nothing was stored (a full or failing disk).
        """

    def append_one(self, msg_id: bytes, body: bytes, ts: int, defer_ms: int) -> int:
        """:meth:`append` of one message; its offset."""

    def append_entries(self, entries: list[Entry]) -> list[Entry]:
        """Store messages that have an id and timestamp (dead letters): the
        entries with their offsets."""

    def handed_on(self, msgs: list[Entry]) -> None:
        """``msgs`` go to the channels now (not held)."""

    def hold(self, topic: Topic, msgs: list[Entry]) -> None:
        """Hold ``msgs`` for the first channel (or until unpaused): the
        first ``--mem-queue-size`` in ``topic.queue``.

        Raises:
            BackendFull: new messages the disk refused (not kept).
        """

    def flush_held(self, topic: Topic) -> None:
        """Hand what the topic holds (memory, then store) to its channels."""

    def channel_store(self, topic: Topic, name: str) -> ChannelStore:
        """The store of a new channel ``name``."""

    def start_channel(self, topic: Topic, channel: Channel, start: int) -> None:
        """A new channel starts at offset ``start`` (``/channel/create?start=``)."""

    def peek(self, topic: Topic, n: int) -> list[Entry]:
        """The next ``n`` messages held for the first channel."""

    def empty(self, topic: Topic) -> None:
        """Drop what the topic holds (not its channels')."""

    def close(self, topic: Topic, delete: bool) -> None:
        """Keep (or with ``delete``, remove) what the store holds."""

    def checkpoints(self, topic: Topic) -> tuple[list[tuple[str, bytes]], list[Any]]:
        """Files to write every ``--sync-timeout`` (``(path, content)``) and
        what each records, for :meth:`checkpoints_written`."""

    def checkpoints_written(self, topic: Topic, what: list[Any], ok: list[bool]) -> None:
        """Which of those were written (then drop what no restart needs)."""
