"""nsqd's stats: typed once per request, read by ``/stats`` (JSON and text),
statsd and ``/metrics``.

:func:`collect_stats` builds an :class:`NSQDStats` (topics -> channels ->
clients, producers, memory) from the daemon, as Go's ``NSQD.GetStats``
builds ``TopicStats`` / ``ChannelStats`` / ``ClientStats`` (nsqd/stats.go)
for both its HTTP API and its statsd loop. The HTTP API writes
``stats.to_json()`` (or the text report,
:func:`nsq.server.nsqd.stats.text.render_text`), statsd
(:mod:`nsq.server.nsqd.stats.statsd`) and ``/metrics``
(:mod:`nsq.server.nsqd.stats.metrics`) read the fields.

JSON shapes are Go nsqd 1.2.1's (nsqd/http.go ``doStats``, nsqd/stats.go): topics sorted by name, ``topics`` null
when a filter matches nothing, ``producers`` null when there are none.
``--storage=wal`` adds the topic log's figures to its topics and each
channel's ``offset`` (only there).
``e2e_processing_latency`` is Go's quantile result (:func:`e2e_latency`,
https://nsq.io/components/nsqd.html#-e2e-processing-latency-percentile). ``memory`` maps Go's
runtime figures to CPython's (:mod:`nsq.server.nsqd.stats.memstats`); statsd pushes the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from nsq import NSQ_VERSION
from nsq._internal.durations import format_duration
from nsq.server.nsqd.delivery.logstore import LogChannelStore, LogTopicStore
from nsq.server.nsqd.stats.memstats import MemoryStats, memory_stats
from nsq.server.nsqd.stats.shapes import e2e_json, topic_json
from nsq.server.nsqd.delivery.quantile import WindowedQuantile, merged_result

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.tcp.client_v2 import ClientV2
    from nsq.server.nsqd.delivery.host import DaemonHost
    from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["NSQDStats", "TopicStats", "TopicLogStats", "ChannelStats", "ClientStats", "PubCount", "E2ELatency",
           "Percentile", "collect_stats", "get_stats", "client_stats", "e2e_latency"]


def _json_number(q: float) -> float | int:
    # Go's encoding/json writes 1.0 as 1
    return int(q) if q == int(q) else q


# -- the shapes (Go nsqd/stats.go) ----------------------------------------------------
#
# Built once per request (:func:`collect_stats`) and read by the HTTP API
# (``to_json`` for ``?format=json``, the text report of
# :mod:`nsq.server.nsqd.stats.text`), statsd (:mod:`nsq.server.nsqd.stats.statsd`)
# and ``/metrics`` (:mod:`nsq.server.nsqd.stats.metrics`). ``to_json`` writes each
# object's keys in the order ``/stats`` has always had (Go's for Go's fields,
# ours after).


class Percentile(NamedTuple):
    """One configured quantile of an e2e latency window."""

    quantile: float
    #: ns; 0 while the window is empty
    value: int


@dataclass(slots=True)
class E2ELatency:
    """Go's ``quantile.Result`` for a channel (its window) or a topic (its
    channels' windows merged).

    Attributes:
        count: values (FINs) in the window.
        percentiles: one per ``--e2e-processing-latency-percentile``, in the
            configured order; None when no quantile applies (none
            configured, or a topic without channels).
        topic, channel, host: what the figure is about (``channel`` "" for
            a topic; ``host`` the broadcast address).
    """

    count: int
    percentiles: list[Percentile] | None
    topic: str
    channel: str
    host: str

    def to_json(self) -> dict[str, Any]:
        """:func:`~nsq.server.nsqd.stats.shapes.e2e_json`."""
        percentiles = self.percentiles
        return e2e_json(self.count, None if percentiles is None else
                        [{"quantile": _json_number(q), "value": v} for q, v in percentiles],
                        self.topic, self.channel, self.host)


@dataclass(slots=True)
class PubCount:
    """Messages a producer published to one topic (Go ``PubCount``)."""

    topic: str
    count: int


@dataclass(slots=True)
class ClientStats:
    """One V2 connection (Go ``ClientStats``); counts since it connected.

    ``authed``, ``auth_identity``, ``auth_identity_url`` and ``pub_counts``
    are left out of the JSON when empty (Go's ``omitempty``).
    """

    client_id: str
    hostname: str
    version: str
    remote_address: str
    #: Go's client state number (0 init, 3 subscribed, 4 closing)
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    #: Unix s
    connect_ts: int
    sample_rate: int
    deflate: bool
    snappy: bool
    user_agent: str
    tls: bool
    tls_cipher_suite: str
    tls_version: str
    tls_negotiated_protocol: str
    tls_negotiated_protocol_is_mutual: bool
    authed: bool = False
    auth_identity: str = ""
    auth_identity_url: str = ""
    pub_counts: list[PubCount] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``/stats`` client object."""
        out: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": self.version,
            "remote_address": self.remote_address,
            "state": self.state,
            "ready_count": self.ready_count,
            "in_flight_count": self.in_flight_count,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.deflate,
            "snappy": self.snappy,
            "user_agent": self.user_agent,
            "tls": self.tls,
            "tls_cipher_suite": self.tls_cipher_suite,
            "tls_version": self.tls_version,
            "tls_negotiated_protocol": self.tls_negotiated_protocol,
            "tls_negotiated_protocol_is_mutual": self.tls_negotiated_protocol_is_mutual,
        }
        if self.authed:
            out["authed"] = True
            if self.auth_identity:
                out["auth_identity"] = self.auth_identity
            if self.auth_identity_url:
                out["auth_identity_url"] = self.auth_identity_url
        if self.pub_counts:
            out["pub_counts"] = [{"topic": pc.topic, "count": pc.count} for pc in self.pub_counts]
        return out


@dataclass(slots=True)
class ChannelStats:
    """One channel (Go ``ChannelStats``); counts since the channel was made.

    Attributes:
        depth: queued messages, memory + backend (not in flight, not deferred).
        backend_depth: of those, in the backend (disk queue or topic log).
        dead_letter_count, max_attempts: beyond Go (a Go client ignores them).
        clients: None when not asked for (``include_clients=false``), else
            a list (possibly empty).
        offset: ``--storage=wal`` only: the next offset the channel takes
            from its topic log (left out of the JSON otherwise).
        committed_offset: ``--storage=wal`` only: the channel's low-water
            mark, below which it has finished every message (its committed
            position; left out of the JSON otherwise).
    """

    channel_name: str
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    dead_letter_count: int
    max_attempts: int
    client_count: int
    clients: list[ClientStats] | None
    paused: bool
    e2e_processing_latency: E2ELatency
    offset: int | None = None
    committed_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``/stats`` channel object."""
        clients = self.clients
        out: dict[str, Any] = {
            "channel_name": self.channel_name,
            "depth": self.depth,
            "backend_depth": self.backend_depth,
            "in_flight_count": self.in_flight_count,
            "deferred_count": self.deferred_count,
            "message_count": self.message_count,
            "requeue_count": self.requeue_count,
            "timeout_count": self.timeout_count,
            "dead_letter_count": self.dead_letter_count,
            "max_attempts": self.max_attempts,
            "client_count": self.client_count,
            "clients": None if clients is None else [c.to_json() for c in clients] if clients else [],
            "paused": self.paused,
            "e2e_processing_latency": self.e2e_processing_latency.to_json(),
        }
        if self.offset is not None:
            out["offset"] = self.offset
        if self.committed_offset is not None:
            out["committed_offset"] = self.committed_offset
        return out


@dataclass(slots=True)
class TopicLogStats:
    """A ``--storage=wal`` topic's log (beyond Go).

    Attributes:
        head_offset: the offset the next message published gets.
        synced_offset: every message below it is fsynced.
        first_offset: the oldest retained message's offset.
        retained_bytes: bytes of the log on disk.
        oldest_timestamp: publish time of the oldest retained message (Unix
            ns), 0 when the log is empty.
        retention_time: the topic's retention as a Go duration (``0s``: none).
        retention_bytes: the topic's retention by size (0: none).
    """

    head_offset: int
    synced_offset: int
    first_offset: int
    retained_bytes: int
    oldest_timestamp: int
    retention_time: str
    retention_bytes: int


@dataclass(slots=True)
class TopicStats:
    """One topic (Go ``TopicStats``); counts since the topic was made.

    Attributes:
        channels: by name, those the channel filter keeps.
        e2e_processing_latency: every channel's windows merged, whatever
            the channel filter (as Go).
        log: ``--storage=wal`` only; its fields follow
            ``e2e_processing_latency`` in the JSON object (left out otherwise).
    """

    topic_name: str
    channels: list[ChannelStats]
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    paused: bool
    e2e_processing_latency: E2ELatency
    log: TopicLogStats | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``/stats`` topic object (:func:`~nsq.server.nsqd.stats.shapes.topic_json`)."""
        channels = self.channels
        return topic_json(self.topic_name, [c.to_json() for c in channels] if channels else [], self.depth,
                          self.backend_depth, self.message_count, self.message_bytes, self.paused,
                          self.e2e_processing_latency.to_json(), self.log)


@dataclass(slots=True)
class NSQDStats:
    """The whole of ``/stats`` (Go ``doStats``'s answer).

    Attributes:
        version: the NSQ version reported (``1.2.1``).
        health: ``OK`` or the disk error.
        start_time: Unix s.
        topics: by name; None when a topic filter names no topic (Go).
        memory: None when not asked for (``include_mem=false``, statsd);
            left out of the JSON then.
        producers: connections that published (to the filtered topic, if
            any); None when there are none (Go's null).
        replication: beyond Go, with ``--storage=wal``: the node's role,
            epoch, leader or replicas and their lag
            (docs/operations/replication.md); None (left out) otherwise.
    """

    version: str
    health: str
    start_time: int
    topics: list[TopicStats] | None
    memory: MemoryStats | None
    producers: list[ClientStats] | None
    replication: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``/stats?format=json`` object, ``{version, health,
        start_time, topics, memory?, producers}``."""
        topics = self.topics
        out: dict[str, Any] = {
            "version": self.version,
            "health": self.health,
            "start_time": self.start_time,
            "topics": None if topics is None else [t.to_json() for t in topics],
        }
        if self.memory is not None:
            out["memory"] = self.memory.to_json()
        producers = self.producers
        out["producers"] = None if producers is None else [p.to_json() for p in producers]
        if self.replication is not None:
            out["replication"] = self.replication
        return out


# -- building them ----------------------------------------------------------------


def e2e_latency(quantiles: list[WindowedQuantile], topic: str, channel: str, host: str) -> E2ELatency:
    """Go's e2e processing latency for a channel (its quantile) or a topic
    (its channels' quantiles merged); ``percentiles`` None when
    ``quantiles`` is empty."""
    if not quantiles:
        return E2ELatency(0, None, topic, channel, host)
    count, values = merged_result(quantiles, quantiles[0].percentiles)
    return E2ELatency(count, [Percentile(q, int(v)) for q, v in values], topic, channel, host)


def client_stats(client: ClientV2, topic: str = "") -> ClientStats:
    """One connection's stats (Go ``clientV2.Stats``); with ``topic``, its
    ``pub_counts`` hold that topic only (``/stats?topic=`` producers)."""
    settings = client.negotiated
    features = client.features
    cipher_suite = version = protocol = ""
    ssl_object = features.ssl_object
    if ssl_object is not None:
        from nsq.server.tls import tls_version_name

        cipher = ssl_object.cipher()
        cipher_suite = cipher[0] if cipher else ""
        version = tls_version_name(ssl_object)
        protocol = ssl_object.selected_alpn_protocol() or ""
    out = ClientStats(
        client_id=settings.client_id,
        hostname=settings.hostname,
        version="V2",
        remote_address=client.remote_address,
        state=client.state,
        ready_count=client.ready_count,
        in_flight_count=client.in_flight_count,
        message_count=client.message_count,
        finish_count=client.finish_count,
        requeue_count=client.requeue_count,
        connect_ts=client.connect_ts,
        sample_rate=settings.sample_rate,
        deflate=features.deflate,
        snappy=features.snappy,
        user_agent=settings.user_agent,
        tls=features.tls,
        tls_cipher_suite=cipher_suite,
        tls_version=version,
        tls_negotiated_protocol=protocol,
        tls_negotiated_protocol_is_mutual=False,
    )
    state = features.auth_state
    if state is not None and state.authorizations:
        out.authed = True
        out.auth_identity = state.identity
        out.auth_identity_url = state.identity_url
    pub_counts = client.pub_counts
    if topic:
        if topic in pub_counts:
            out.pub_counts = [PubCount(topic, pub_counts[topic])]
    elif pub_counts:
        out.pub_counts = [PubCount(t, c) for t, c in sorted(pub_counts.items())]
    return out


# The builders below pass fields by position (named in the comments): a
# dataclass takes keywords at about 2.5 times the cost, and /metrics builds
# these for every channel of the daemon at each scrape.


def channel_stats(channel: Channel, host: str, include_clients: bool) -> ChannelStats:
    """One channel's stats (Go ``NewChannelStats``)."""
    e2e = channel.e2e
    store = channel.store
    wal = store if isinstance(store, LogChannelStore) else None
    clients = channel.clients
    return ChannelStats(
        channel.name,  # channel_name
        channel.depth,  # depth
        channel.backend.depth,  # backend_depth
        len(channel.in_flight),  # in_flight_count
        len(channel.deferred),  # deferred_count
        channel.message_count,  # message_count
        channel.requeue_count,  # requeue_count
        channel.timeout_count,  # timeout_count
        channel.dead_letter_count,  # dead_letter_count
        channel.max_attempts,  # max_attempts
        len(clients),  # client_count
        # clients; Go: null when not asked for, a (possibly empty) list otherwise
        # the channel's subscribers are the daemon's V2 connections
        [client_stats(cast("ClientV2", c)) for c in clients.values()] if include_clients else None,
        channel.paused,  # paused
        e2e_latency([e2e] if e2e is not None else [], channel.topic.name, channel.name, host),
        wal.position(channel) if wal is not None else None,  # offset
        wal.cursor.committed() if wal is not None else None,  # committed_offset
    )


def topic_stats(topic: Topic, host: str, channel_filter: str, include_clients: bool) -> TopicStats:
    """One topic's stats (Go ``NewTopicStats``)."""
    channels = topic.channels
    name = topic.name
    return TopicStats(
        name,  # topic_name
        [  # channels
            channel_stats(c, host, include_clients)
            for cname, c in sorted(channels.items())
            if not channel_filter or cname == channel_filter
        ] if channels else [],
        topic.depth,  # depth
        topic.backend.depth,  # backend_depth
        topic.message_count,  # message_count
        topic.message_bytes,  # message_bytes
        topic.paused,  # paused
        # e2e_processing_latency; Go: every channel's quantiles merged, whatever the channel filter
        e2e_latency([c.e2e for c in channels.values() if c.e2e is not None], name, "", host)
        if channels else E2ELatency(0, None, name, "", host),
        log_stats(topic) if topic.store.log is not None else None,  # log
    )


def log_stats(topic: Topic) -> TopicLogStats:
    """A ``--storage=wal`` topic's log figures (its ``log`` must be set)."""
    store = topic.store
    assert isinstance(store, LogTopicStore)
    tlog = store.log
    oldest = tlog.timestamp_at(tlog.first) if tlog.first < tlog.head else None
    return TopicLogStats(
        head_offset=tlog.head,
        synced_offset=tlog.synced,
        first_offset=tlog.first,
        retained_bytes=tlog.retained_bytes,
        oldest_timestamp=oldest or 0,
        retention_time=format_duration(store.retention_time),
        retention_bytes=store.retention_bytes,
    )


def _selected(nsqd: DaemonHost, topic: str, channel: str) -> list[Topic]:
    """The topics ``/stats?topic=&channel=`` reports, by name: a channel
    filter also drops the topics that lack that channel."""
    return [t for name, t in sorted(nsqd.topics.items())
            if (not topic or name == topic) and (not channel or channel in t.channels)]


def collect_stats(
    nsqd: DaemonHost, topic: str = "", channel: str = "", include_clients: bool = True, include_mem: bool = True
) -> NSQDStats:
    """Everything ``/stats`` reports, now (Go ``NSQD.GetStats`` and ``doStats``).

    Args:
        topic, channel: filters (``/stats?topic=&channel=``): a channel
            filter also drops the topics that lack that channel.
        include_clients: channel clients and producers (off for statsd and
            ``/metrics``).
        include_mem: :func:`~nsq.server.nsqd.stats.memstats.memory_stats`.
    """
    stats = _top(nsqd, topic, include_clients, include_mem)
    if stats.topics is not None:
        host = nsqd.options.broadcast_address
        stats.topics = [topic_stats(t, host, channel, include_clients) for t in _selected(nsqd, topic, channel)]
    return stats


def _top(nsqd: DaemonHost, topic: str, include_clients: bool, include_mem: bool) -> NSQDStats:
    """The stats but their topics: ``topics`` None when the topic filter
    names no topic (Go), else an empty list to fill."""
    producers: list[ClientStats] = []
    if include_clients:
        for client in nsqd.clients.values():
            if client.pub_counts and (not topic or topic in client.pub_counts):
                producers.append(client_stats(client, topic))
    return NSQDStats(
        version=NSQ_VERSION,
        health=nsqd.health,
        start_time=nsqd.start_time,
        topics=None if topic and topic not in nsqd.topics else [],
        memory=memory_stats() if include_mem else None,
        producers=producers or None,
        replication=nsqd.replication_status(),
    )


def get_stats(
    nsqd: DaemonHost, topic: str = "", channel: str = "", include_clients: bool = True, include_mem: bool = True
) -> dict[str, Any]:
    """The ``/stats?format=json`` object, ``{version, health, start_time,
    topics, memory?, producers}``: ``collect_stats(...).to_json()``'s
    (arguments as there), written from the topics and channels without
    the typed stats between (10,000 topics: 11 ms against 32)."""
    out = _top(nsqd, topic, include_clients, include_mem).to_json()
    if out["topics"] is not None:
        host = nsqd.options.broadcast_address
        out["topics"] = [_topic_json(t, host, channel, include_clients) for t in _selected(nsqd, topic, channel)]
    return out


def _topic_json(topic: Topic, host: str, channel_filter: str, include_clients: bool) -> dict[str, Any]:
    """``topic_stats(...).to_json()``, without the typed stats."""
    channels = topic.channels
    name = topic.name
    if channels:
        chans = [channel_stats(c, host, include_clients).to_json() for cname, c in sorted(channels.items())
                 if not channel_filter or cname == channel_filter]
        e2e = e2e_latency([c.e2e for c in channels.values() if c.e2e is not None], name, "", host).to_json()
    else:
        chans, e2e = [], e2e_json(0, None, name, "", host)
    return topic_json(name, chans, topic.depth, topic.backend.depth, topic.message_count, topic.message_bytes,
                      topic.paused, e2e, log_stats(topic) if topic.store.log is not None else None)
