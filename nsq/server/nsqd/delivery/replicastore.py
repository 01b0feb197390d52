"""A replica's topics (``--replica-of``; docs/operations/replication.md).

:class:`ReplicaTopicStore` is the topic log engine's store
(:class:`~nsq.server.nsqd.delivery.logstore.LogTopicStore`) while the node
follows a leader: publishes are refused (the leader takes them), records
arrive as the leader wrote them (:meth:`ReplicaTopicStore.copy`), the
channels' positions are the leader's checkpoints, and segments go when the
leader's go. Once the node is promoted (``replica_of`` empty) it is the
topic log engine as on any leader: the delivery code never asks which.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from nsq.server.nsqd.delivery.logstore import LogTopicStore
from nsq.server.nsqd.storage.backend import BackendFull
from nsq.server.nsqd.storage.message import Entry

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.host import QueueHost
    from nsq.server.nsqd.delivery.topic import Topic
    from nsq.server.nsqd.storage.replicalog import ReplicaLog
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["ReplicaTopicStore", "refusal", "log_store"]


def refusal(leader: str) -> str:
    """The text a replica refuses a publish or subscription with."""
    return f"this nsqd is a replica of {leader}: publish and subscribe there"


class ReplicaTopicStore(LogTopicStore):
    """A topic log copied from a leader (see the module docstring)."""

    log: ReplicaLog

    def _refuse(self) -> None:
        leader = self.host.replica_of
        if leader:
            raise BackendFull(refusal(leader))

    def append(self, ids: list[bytes], bodies: list[bytes], ts: int, defer_ms: int) -> Iterable[int]:
        """As :meth:`LogTopicStore.append` once promoted.

        Raises:
            BackendFull: a replica (the publish is refused, naming the leader).
        """
        self._refuse()
        return super().append(ids, bodies, ts, defer_ms)

    def append_one(self, msg_id: bytes, body: bytes, ts: int, defer_ms: int) -> int:
        """As :meth:`LogTopicStore.append_one` once promoted (raises as :meth:`append`)."""
        self._refuse()
        return super().append_one(msg_id, body, ts, defer_ms)

    def append_entries(self, entries: list[Entry]) -> list[Entry]:
        """As :meth:`LogTopicStore.append_entries` once promoted (raises as :meth:`append`)."""
        self._refuse()
        return super().append_entries(entries)

    def copy(self, topic: Topic, first: int, segment_base: int, count: int, data: bytes | memoryview) -> int:
        """Write ``count`` of the leader's records starting at offset
        ``first`` (what this copy has already is skipped; a copy that fell
        behind the leader's retention starts over at ``first``).

        Returns:
            How many records were appended.

        Raises:
            ValueError: the records do not follow this copy (a gap inside
                a segment).
            BackendFull: the write failed (a full or failing disk).
        """
        tlog = self.log
        if first > tlog.head:
            if first != segment_base:
                raise ValueError(f"records from {first} do not follow the copy's head {tlog.head}")
            tlog.reset_to(first)
        skip = tlog.head - first
        if skip >= count:
            return 0
        if skip:
            from nsq.server.nsqd.storage.logsegment import FRAME

            pos = 0
            for _ in range(skip):
                pos += 8 + FRAME.unpack_from(data, pos)[0]
            data = data[pos:]
        tlog.append_copy(data, count - skip, segment_base)
        if topic.channels and not topic.paused:  # the leader hands them on as they come
            self.follow(topic, tlog.head, tlog.first)
        self.backend.depth = tlog.head - self.visible
        return count - skip

    def follow(self, topic: Topic, visible: int, first: int) -> None:
        """The leader handed its log on to channels up to ``visible`` and
        retains it from ``first``: the same here (within what was copied)."""
        tlog = self.log
        visible = min(visible, tlog.head)
        if visible > self.visible:
            self.visible = visible
            for channel in topic.channels.values():
                cursor = channel.store.cursor
                if cursor is not None:
                    cursor.show(visible)
        self.backend.depth = tlog.head - self.visible
        if first > tlog.first:
            tlog.delete_before(first)

    def trim(self, topic: Topic) -> None:
        """A replica deletes segments when its leader does (:meth:`follow`);
        once promoted, as any topic log."""
        if not self.host.replica_of:
            super().trim(topic)


def log_store(host: QueueHost, name: str, topic_log: TopicLog) -> LogTopicStore:
    """The store of a topic log: a replica's copy (:class:`ReplicaLog`) gets a
    :class:`ReplicaTopicStore`, any other a :class:`LogTopicStore`."""
    from nsq.server.nsqd.storage.replicalog import ReplicaLog

    if isinstance(topic_log, ReplicaLog):
        return ReplicaTopicStore(host, name, topic_log)
    return LogTopicStore(host, name, topic_log)
