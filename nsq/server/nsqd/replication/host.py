"""The daemon as replication sees it (:class:`~nsq.server.nsqd.nsqd.NSQD`
implements it): a Protocol, so this room does not import the daemon."""

from __future__ import annotations

from typing import Any, Protocol

from nsq.server.nsqd.delivery.host import DaemonHost
from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["ReplicationHost"]


class ReplicationHost(DaemonHost, Protocol):
    """What the leader's sessions, the follower and the node's role use.

    Attributes:
        data_path: where ``nsqd.replication.json`` lives ("" = memory only).
        lookupds: the nsqlookupd connections (registered once promoted).
    """

    data_path: str
    lookupds: Any

    def get_topic(self, name: str) -> Topic:
        """The topic ``name``, created if new."""

    def delete_topic(self, name: str) -> bool:
        """Delete a topic; False if unknown."""
