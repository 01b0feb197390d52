"""What nsqd, the utilities, the TUI and Spark share about a cluster, as
Go's ``internal/clusterinfo`` (nsqio/nsq ``internal/clusterinfo/data.go``
and ``types.go``) is shared by nsqd, nsq_stat and nsqadmin.

==========================  ====================================================
module                      holds
==========================  ====================================================
:mod:`.lookupd`             the lookupd HTTP client and discovery over every
                            lookupd: :func:`topic_producers` (``/lookup``),
                            :func:`lookupd_producers` (``/nodes``),
                            :func:`topic_nsqds` (both, for admin actions);
                            built on :mod:`nsq.client.lookupd`, which the
                            Consumer uses too
:mod:`.nsqd`                the nsqd HTTP client (``/stats``, ``/info``, admin
                            POSTs), :func:`nsqd_topic_producers`
:mod:`.peek`                the next messages of a channel or topic over
                            its nsqds (this project's nsqd ``/channel/peek``)
:mod:`.model`               the aggregated cluster (topics, channels, clients,
                            nodes) and its rates; pure
:mod:`.poller`              :class:`Cluster`: polls lookupds and nsqds into a
                            :class:`~.model.ClusterSnapshot`
:mod:`.actions`             :class:`Admin`: nsqadmin's actions and notifications
:mod:`.stat`                :class:`StatPoller`: one channel summed over the
                            cluster (nsq_stat), and its plain lines
==========================  ====================================================

Nothing here imports Textual; the TUI (:mod:`nsq.tui`) draws what this
package reads.
"""

from __future__ import annotations

from nsq.client.lookupd import HTTPAPIClient, HTTPAPIError
from nsq.cluster.actions import ActionResult, Actor, Admin
from nsq.cluster.lookupd import (
    LookupdError,
    LookupdHTTPClient,
    LookupdQueryError,
    Producer,
    ProducerList,
    lookupd_producers,
    topic_nsqds,
    topic_producers,
)
from nsq.cluster.model import ChannelStats, ClientStats, ClusterSnapshot, NodeInfo, TopicStats
from nsq.cluster.nsqd import NSQDHTTPClient, NSQDHTTPError, nsqd_topic_producers
from nsq.cluster.peek import Peek, PeekedMessage, merge_peeks
from nsq.cluster.poller import Cluster
from nsq.cluster.stat import NodeReport, PlainWriter, StatPoller, StatReport

__all__ = [
    "ActionResult",
    "Actor",
    "Admin",
    "ChannelStats",
    "ClientStats",
    "Cluster",
    "ClusterSnapshot",
    "HTTPAPIClient",
    "HTTPAPIError",
    "LookupdError",
    "LookupdHTTPClient",
    "LookupdQueryError",
    "NSQDHTTPClient",
    "NSQDHTTPError",
    "NodeInfo",
    "NodeReport",
    "Peek",
    "PeekedMessage",
    "PlainWriter",
    "Producer",
    "ProducerList",
    "StatPoller",
    "StatReport",
    "TopicStats",
    "lookupd_producers",
    "merge_peeks",
    "nsqd_topic_producers",
    "topic_nsqds",
    "topic_producers",
]
