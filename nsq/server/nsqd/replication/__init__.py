"""Replication: a topic log copied to a second nsqd (docs/operations/replication.md).

The top room beside the daemon: it sees the daemon and every room below.

- :mod:`.wire`: the stream's binary frames (sans-IO).
- :mod:`.leader`: a leader's sessions, one per replica, and the acks a
  publish with ``--replica-acks`` waits for.
- :mod:`.follower`: a replica's copy of its leader.
- :mod:`.node`: the node's role, epoch, promotion and ``/replica/*`` endpoints.

The copy itself is storage and delivery: :class:`~nsq.server.nsqd.storage.replicalog.ReplicaLog`
and :class:`~nsq.server.nsqd.delivery.replicastore.ReplicaTopicStore`.
"""

from nsq.server.nsqd.replication.node import Replication

__all__ = ["Replication"]
