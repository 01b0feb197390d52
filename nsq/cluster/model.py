"""The cluster as ``nsq admin`` shows it: plain dataclasses and the pure
aggregation of nsqd ``/stats`` answers (no I/O).

Aggregation follows Go nsqadmin's ``clusterinfo`` (nsqio/nsq
``internal/clusterinfo/types.go``: ``TopicStats.Add``, ``ChannelStats.Add``,
``E2eProcessingLatencyAggregate.Add``): a topic's figures are summed over
every nsqd that has it, a channel's over every nsqd that has the topic and
the channel, and each aggregate keeps the per-nsqd figures in ``nodes``.
Rates (messages/s: the ingress ``rate`` and the ``egress``) and the
depth/rate/egress histories are filled in from two successive polls by
:func:`nsq.cluster.rates.apply_rates`.

Counts are messages; depths are messages queued (memory + disk); times are
Unix seconds; e2e latencies are nanoseconds.

An nsqd started with ``--storage=wal`` (this project's, beyond Go: its topic
log, ``nsq/server/nsqd/http/replay.py``) adds to each topic of its ``/stats``
the log's window (``head_offset``, ``first_offset``, ``retained_bytes``,
``oldest_timestamp`` in ns, ``retention_time``, ``retention_bytes``: a
:class:`TopicLog`) and to each channel its ``offset``; other nsqds leave
these keys out and ``TopicStats.log`` / ``ChannelStats.offset`` stay None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nsq._internal.addresses import fmt_addr

__all__ = ["ChannelStats", "ClientStats", "ClusterSnapshot", "LookupdInfo", "NodeError", "NodeInfo", "Percentile",
           "TopicLog", "TopicStats", "Totals", "aggregate", "host_port", "merge_e2e", "parse_e2e", "version_tuple"]


def host_port(host: str, port: int | str) -> str:
    """``host:port``, with an IPv6 host in brackets (:func:`nsq._internal.addresses.fmt_addr`)."""
    return fmt_addr(host, port)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.2.1"`` -> ``(1, 2, 1)`` (unparsable parts count as 0; ``"1.2.1-alpha"`` as 1.2.1)."""
    parts = []
    for part in (version or "0").split("-", 1)[0].split("."):
        try:
            parts.append(int(part))
        except ValueError:
            parts.append(0)
    return tuple(parts)


@dataclass
class Percentile:
    """One e2e processing latency quantile, merged over nsqds as nsqadmin does.

    Attributes:
        quantile: e.g. 0.99.
        average: count-weighted mean of the nsqds' values, ns.
        min, max: lowest and highest nsqd value, ns.
        count: FINs in the window, summed.
    """

    quantile: float
    average: float
    min: float
    max: float
    count: int


def parse_e2e(obj: Any) -> list[Percentile]:
    """nsqd's ``e2e_processing_latency`` object -> percentiles, highest quantile first
    ([] when absent or disabled)."""
    if not isinstance(obj, dict):
        return []
    count = int(obj.get("count") or 0)
    out = []
    for p in obj.get("percentiles") or []:
        try:
            q, v = float(p["quantile"]), float(p["value"])
        except (KeyError, TypeError, ValueError):
            continue
        out.append(Percentile(q, v, v, v, count))
    out.sort(key=lambda p: -p.quantile)
    return out


def merge_e2e(into: list[Percentile], other: list[Percentile]) -> list[Percentile]:
    """Merge ``other`` into ``into`` (in place, returned): per quantile the
    count-weighted average, the min and the max."""
    for value in other:
        mine = next((p for p in into if p.quantile == value.quantile), None)
        if mine is None:
            into.append(dataclasses.replace(value))
            continue
        mine.max = max(mine.max, value.max)
        mine.min = min(mine.min, value.min)
        mine.count += value.count
        if mine.count:
            mine.average += (value.average - mine.average) * value.count / mine.count
    into.sort(key=lambda p: -p.quantile)
    return into


def _int(obj: dict, key: str) -> int:
    try:
        return int(obj.get(key) or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class ClientStats:
    """A consumer connected to a channel on one nsqd (nsqd ``/stats`` client).

    ``connect_ts`` is Unix seconds; ``node`` the nsqd's HTTP address.
    """

    node: str
    node_hostname: str
    client_id: str
    hostname: str
    remote_address: str
    user_agent: str
    protocol: str
    state: int
    in_flight: int
    ready: int
    finished: int
    requeued: int
    messages: int
    connect_ts: int
    sample_rate: int = 0
    tls: bool = False
    tls_version: str = ""
    snappy: bool = False
    deflate: bool = False
    authed: bool = False
    auth_identity: str = ""

    @classmethod
    def from_json(cls, obj: dict, node: str, node_hostname: str) -> ClientStats:
        """From one entry of a channel's ``clients`` list."""
        return cls(
            node=node, node_hostname=node_hostname, client_id=str(obj.get("client_id") or ""),
            hostname=str(obj.get("hostname") or ""), remote_address=str(obj.get("remote_address") or ""),
            user_agent=str(obj.get("user_agent") or ""), protocol=str(obj.get("version") or ""),
            state=_int(obj, "state"), in_flight=_int(obj, "in_flight_count"), ready=_int(obj, "ready_count"),
            finished=_int(obj, "finish_count"), requeued=_int(obj, "requeue_count"),
            messages=_int(obj, "message_count"), connect_ts=_int(obj, "connect_ts"),
            sample_rate=_int(obj, "sample_rate"), tls=bool(obj.get("tls")),
            tls_version=str(obj.get("tls_version") or ""), snappy=bool(obj.get("snappy")),
            deflate=bool(obj.get("deflate")), authed=bool(obj.get("authed")),
            auth_identity=str(obj.get("auth_identity") or ""))

    @property
    def host(self) -> str:
        """nsqadmin's "Client Host": ``hostname:remote port``."""
        port = self.remote_address.rsplit(":", 1)[-1] if ":" in self.remote_address else "NA"
        return f"{self.hostname or self.remote_address.rsplit(':', 1)[0]}:{port}"

    @property
    def attributes(self) -> list[str]:
        """nsqadmin's attribute labels: ``Sampled N%``, ``TLS``, ``Deflate``, ``Snappy``, ``Authed``."""
        out = []
        if self.sample_rate > 0:
            out.append(f"Sampled {self.sample_rate}%")
        if self.tls:
            out.append(f"TLS {self.tls_version}".strip())
        if self.deflate:
            out.append("Deflate")
        if self.snappy:
            out.append("Snappy")
        if self.authed:
            out.append(f"Authed {self.auth_identity}".strip())
        return out


@dataclass
class ChannelStats:
    """A channel on one nsqd (``node`` = its HTTP address), or aggregated over
    nsqds (``node == "*"``, per-nsqd figures in ``nodes``).

    ``rate`` is messages/s put into the channel since the previous poll,
    ``egress`` messages/s taken from its queue (delivered to consumers, or
    emptied): the message count's growth minus the depth's, as nsq_stat
    computes it, never below 0 (a burst of requeues grows the depth); both
    None before a second poll. ``depth_history``/``rate_history``/
    ``egress_history`` the last polls' values, oldest first.

    ``dead_letters`` (``/stats`` ``dead_letter_count``: messages moved to the
    channel's dead-letter topic) and ``max_attempts`` (deliveries before
    that, 0 = off) are this project's nsqd only; a Go nsqd's stats lack
    them and they stay 0. An aggregate sums ``dead_letters`` and keeps the
    highest ``max_attempts`` (each nsqd's own in ``nodes``).

    ``offset`` (``/stats`` ``offset``, ``--storage=wal`` nsqds only): the
    topic-log offset of the next message the channel delivers; None on
    other nsqds, and always on an aggregate (offsets are per nsqd: see its
    ``nodes``, :attr:`log_nodes`).
    """

    topic: str
    name: str
    node: str = "*"
    hostname: str = ""
    depth: int = 0
    backend_depth: int = 0
    in_flight: int = 0
    deferred: int = 0
    requeued: int = 0
    timed_out: int = 0
    messages: int = 0
    client_count: int = 0
    dead_letters: int = 0
    max_attempts: int = 0
    paused: bool = False
    offset: int | None = None
    e2e: list[Percentile] = field(default_factory=list)
    clients: list[ClientStats] = field(default_factory=list)
    nodes: list[ChannelStats] = field(default_factory=list)
    rate: float | None = None
    egress: float | None = None
    depth_history: list[float] = field(default_factory=list)
    rate_history: list[float] = field(default_factory=list)
    egress_history: list[float] = field(default_factory=list)

    @property
    def memory_depth(self) -> int:
        """Messages queued in memory (depth minus disk)."""
        return self.depth - self.backend_depth

    @property
    def log_nodes(self) -> list[ChannelStats]:
        """The per-nsqd rows whose nsqd keeps a topic log (an ``offset``)."""
        return [n for n in self.nodes if n.offset is not None]

    @classmethod
    def from_json(cls, topic: str, obj: dict, node: str, hostname: str) -> ChannelStats:
        """One nsqd's channel from its ``/stats`` JSON."""
        clients = [ClientStats.from_json(c, node, hostname) for c in obj.get("clients") or [] if isinstance(c, dict)]
        count = _int(obj, "client_count") if "client_count" in obj else len(clients)
        return cls(topic=topic, name=str(obj.get("channel_name") or ""), node=node, hostname=hostname,
                   depth=_int(obj, "depth"), backend_depth=_int(obj, "backend_depth"),
                   in_flight=_int(obj, "in_flight_count"), deferred=_int(obj, "deferred_count"),
                   requeued=_int(obj, "requeue_count"), timed_out=_int(obj, "timeout_count"),
                   messages=_int(obj, "message_count"), client_count=count,
                   dead_letters=_int(obj, "dead_letter_count"), max_attempts=_int(obj, "max_attempts"),
                   paused=bool(obj.get("paused")), offset=_int(obj, "offset") if "offset" in obj else None,
                   e2e=parse_e2e(obj.get("e2e_processing_latency")), clients=clients)

    def add(self, other: ChannelStats) -> None:
        """Add one nsqd's figures (Go ``ChannelStats.Add``)."""
        self.node = "*"
        for name in ("depth", "backend_depth", "in_flight", "deferred", "requeued", "timed_out", "messages",
                     "client_count", "dead_letters"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_attempts = max(self.max_attempts, other.max_attempts)
        self.paused = self.paused or other.paused
        self.nodes.append(other)
        self.nodes.sort(key=lambda n: (n.hostname, n.node))
        merge_e2e(self.e2e, other.e2e)
        self.clients.extend(other.clients)
        self.clients.sort(key=lambda c: (c.hostname, c.remote_address, c.node))


@dataclass
class TopicLog:
    """The retained window of a topic's log on ``--storage=wal`` nsqds
    (``/stats`` topic keys of the same names; see the module doc).

    Attributes:
        head_offset: the offset the next message published gets (the
            messages ever appended to the log).
        first_offset: the offset of the oldest retained message.
        retained_bytes: bytes of the log on disk.
        oldest_timestamp: publish time of the oldest retained message,
            Unix ns; 0 when the log is empty.
        retention_time: the topic's retention by time, a Go duration
            (``"24h0m0s"``; ``"0s"``: none).
        retention_bytes: its retention by size, bytes (0: no cap).
        nodes: how many nsqds' logs this sums (1 for one nsqd's).

    An aggregate over nsqds (:meth:`merged`) sums the offsets, bytes and
    :attr:`retained_messages`, keeps the oldest ``oldest_timestamp``, and
    has ``retention_time`` "" and ``retention_bytes`` -1 where the nsqds
    differ.
    """

    head_offset: int
    first_offset: int
    retained_bytes: int
    oldest_timestamp: int
    retention_time: str
    retention_bytes: int
    nodes: int = 1

    @property
    def retained_messages(self) -> int:
        """Messages in the retained window (``head_offset - first_offset``)."""
        return max(0, self.head_offset - self.first_offset)

    @classmethod
    def from_json(cls, obj: dict) -> TopicLog | None:
        """From one ``/stats`` topic object; None when it has no ``head_offset`` (not a log)."""
        if "head_offset" not in obj:
            return None
        return cls(head_offset=_int(obj, "head_offset"), first_offset=_int(obj, "first_offset"),
                   retained_bytes=_int(obj, "retained_bytes"), oldest_timestamp=_int(obj, "oldest_timestamp"),
                   retention_time=str(obj.get("retention_time") or "0s"),
                   retention_bytes=_int(obj, "retention_bytes"))

    def merged(self, other: TopicLog) -> TopicLog:
        """This window and ``other``'s together (another nsqd's)."""
        oldest = [t for t in (self.oldest_timestamp, other.oldest_timestamp) if t]
        return TopicLog(head_offset=self.head_offset + other.head_offset,
                        first_offset=self.first_offset + other.first_offset,
                        retained_bytes=self.retained_bytes + other.retained_bytes,
                        oldest_timestamp=min(oldest) if oldest else 0,
                        retention_time=self.retention_time if self.retention_time == other.retention_time else "",
                        retention_bytes=self.retention_bytes if self.retention_bytes == other.retention_bytes
                        else -1,
                        nodes=self.nodes + other.nodes)


@dataclass
class TopicStats:
    """A topic on one nsqd, or aggregated over nsqds (``node == "*"``).

    ``channels`` of an aggregate are aggregated :class:`ChannelStats`, sorted
    by name; ``tombstoned`` (per nsqd) comes from lookupd ``/nodes``.
    ``rate`` is messages/s published to the topic, ``egress`` messages/s
    taken from its channels' queues (summed over the channels: with two
    channels each message leaves twice; 0 without channels). ``log``: the
    retained window of its topic log (``--storage=wal`` nsqds; an
    aggregate's sums those of its nsqds that have one), None without.
    """

    name: str
    node: str = "*"
    hostname: str = ""
    depth: int = 0
    backend_depth: int = 0
    messages: int = 0
    paused: bool = False
    tombstoned: bool = False
    log: TopicLog | None = None
    e2e: list[Percentile] = field(default_factory=list)
    channels: list[ChannelStats] = field(default_factory=list)
    nodes: list[TopicStats] = field(default_factory=list)
    rate: float | None = None
    egress: float | None = None
    depth_history: list[float] = field(default_factory=list)
    rate_history: list[float] = field(default_factory=list)
    egress_history: list[float] = field(default_factory=list)

    @property
    def memory_depth(self) -> int:
        """Messages queued in memory (depth minus disk)."""
        return self.depth - self.backend_depth

    @property
    def in_flight(self) -> int:
        """In flight over every channel."""
        return sum(c.in_flight for c in self.channels)

    @property
    def deferred(self) -> int:
        """Deferred over every channel."""
        return sum(c.deferred for c in self.channels)

    @property
    def client_count(self) -> int:
        """Consumers over every channel."""
        return sum(c.client_count for c in self.channels)

    @property
    def producers(self) -> int:
        """nsqds that have the topic."""
        return len(self.nodes) if self.node == "*" else 1

    def channel(self, name: str) -> ChannelStats | None:
        """The channel named ``name``, or None."""
        return next((c for c in self.channels if c.name == name), None)

    @classmethod
    def from_json(cls, obj: dict, node: str, hostname: str) -> TopicStats:
        """One nsqd's topic from its ``/stats`` JSON (channels per nsqd)."""
        name = str(obj.get("topic_name") or "")
        channels = [ChannelStats.from_json(name, c, node, hostname)
                    for c in obj.get("channels") or [] if isinstance(c, dict)]
        return cls(name=name, node=node, hostname=hostname, depth=_int(obj, "depth"),
                   backend_depth=_int(obj, "backend_depth"), messages=_int(obj, "message_count"),
                   paused=bool(obj.get("paused")), log=TopicLog.from_json(obj),
                   e2e=parse_e2e(obj.get("e2e_processing_latency")), channels=channels)

    def add(self, other: TopicStats) -> None:
        """Add one nsqd's topic (Go ``TopicStats.Add``); its channels are
        aggregated by name."""
        self.node = "*"
        self.depth += other.depth
        self.backend_depth += other.backend_depth
        self.messages += other.messages
        self.paused = self.paused or other.paused
        if other.log is not None:
            self.log = other.log if self.log is None else self.log.merged(other.log)
        for ch in other.channels:
            mine = self.channel(ch.name)
            if mine is None:
                mine = ChannelStats(topic=self.name, name=ch.name)
                self.channels.append(mine)
            mine.add(ch)
        self.channels.sort(key=lambda c: c.name)
        self.nodes.append(other)
        self.nodes.sort(key=lambda n: (n.hostname, n.node))
        merge_e2e(self.e2e, other.e2e)


@dataclass
class NodeInfo:
    """An nsqd as lookupd ``/nodes`` (or its own ``/info``) describes it.

    Attributes:
        remote_addresses: ``lookupd/remote address`` for each lookupd that
            lists it (nsqadmin's "Lookupd Conns.").
        topics: ``(topic, tombstoned)`` sorted by name.
        out_of_date: older than the newest nsqd in the cluster.
        error: why its ``/stats`` (or ``/info``) could not be read ("" if it could).
        address: the ``--nsqd-http-address`` it was given as ("" when
            found through lookupd); its API is asked there.
        replication: its ``/stats`` ``replication`` object (role, epoch,
            leader or replicas and lag; docs/operations/replication.md), or
            None (no topic log, or Go nsqd).
        replica_only: a replica found through its leader (it registers with
            no lookupd): listed, not counted in the topics' figures.
    """

    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    remote_addresses: list[str] = field(default_factory=list)
    topics: list[tuple[str, bool]] = field(default_factory=list)
    out_of_date: bool = False
    error: str = ""
    address: str = ""
    replication: dict[str, Any] | None = None
    replica_only: bool = False

    @property
    def api_address(self) -> str:
        """Where to send HTTP requests: ``address`` if given, else ``http_address``."""
        return self.address or self.http_address

    @property
    def http_address(self) -> str:
        """``broadcast_address:http_port`` (where its HTTP API and stats are)."""
        return host_port(self.broadcast_address, self.http_port)

    @property
    def tcp_address(self) -> str:
        """``broadcast_address:tcp_port``."""
        return host_port(self.broadcast_address, self.tcp_port)


@dataclass
class LookupdInfo:
    """A configured nsqlookupd: its ``/info`` version, or why it failed."""

    address: str
    version: str = ""
    error: str = ""


@dataclass(frozen=True)
class NodeError:
    """A daemon that could not be read during a poll (``kind``: ``lookupd`` or ``nsqd``)."""

    kind: str
    address: str
    message: str


@dataclass
class Totals:
    """Cluster-wide sums over every topic (depths and counts in messages)."""

    topics: int = 0
    channels: int = 0
    nodes: int = 0
    nodes_up: int = 0
    clients: int = 0
    depth: int = 0
    backend_depth: int = 0
    channel_depth: int = 0
    in_flight: int = 0
    deferred: int = 0
    messages: int = 0
    rate: float | None = None
    egress: float | None = None

    @property
    def memory_depth(self) -> int:
        """Topic depth held in memory."""
        return self.depth - self.backend_depth


@dataclass
class ClusterSnapshot:
    """One poll of the cluster.

    Attributes:
        taken_at: Unix seconds of the poll (durations such as "connected"
            are measured against it).
        lookupds: the configured lookupds (empty with ``--nsqd-http-address``).
        nodes: every nsqd, sorted by hostname then address.
        topics: every topic (aggregated), sorted by name; includes topics
            lookupd knows that no nsqd has (no ``nodes``).
        errors: daemons that could not be read.
        rate_history: cluster message rate of the last polls, oldest first.
    """

    taken_at: float
    lookupds: list[LookupdInfo] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=list)
    topics: list[TopicStats] = field(default_factory=list)
    errors: list[NodeError] = field(default_factory=list)
    rate_history: list[float] = field(default_factory=list)

    def topic(self, name: str) -> TopicStats | None:
        """The aggregated topic named ``name``, or None."""
        return next((t for t in self.topics if t.name == name), None)

    def channel(self, topic: str, name: str) -> ChannelStats | None:
        """The aggregated channel, or None."""
        t = self.topic(topic)
        return t.channel(name) if t is not None else None

    def node(self, http_address: str) -> NodeInfo | None:
        """The nsqd whose ``http_address`` is given, or None."""
        return next((n for n in self.nodes if n.http_address == http_address), None)

    @property
    def totals(self) -> Totals:
        """Sums over the cluster."""
        t = Totals(topics=len(self.topics), nodes=len(self.nodes),
                   nodes_up=sum(1 for n in self.nodes if not n.error))
        rates = [x.rate for x in self.topics if x.rate is not None]
        t.rate = sum(rates) if rates else None
        egress = [x.egress for x in self.topics if x.egress is not None]
        t.egress = sum(egress) if egress else None
        for topic in self.topics:
            t.channels += len(topic.channels)
            t.clients += topic.client_count
            t.depth += topic.depth
            t.backend_depth += topic.backend_depth
            t.channel_depth += sum(c.depth for c in topic.channels)
            t.in_flight += topic.in_flight
            t.deferred += topic.deferred
            t.messages += topic.messages
        return t


def aggregate(per_node: list[tuple[NodeInfo, dict]], known_topics: Sequence[str] = ()) -> list[TopicStats]:
    """Aggregate nsqd ``/stats`` answers per topic and channel.

    Args:
        per_node: (the nsqd, its ``/stats?format=json`` answer) for each nsqd read.
        known_topics: topic names from lookupd; those no nsqd has appear
            with zero figures and no ``nodes``.

    Returns:
        the topics sorted by name, each with its per-nsqd ``nodes`` and
        aggregated ``channels``.
    """
    topics: dict[str, TopicStats] = {}
    for node, stats in per_node:
        tombstoned = {name for name, dead in node.topics if dead}
        for obj in (stats or {}).get("topics") or []:
            if not isinstance(obj, dict):
                continue
            one = TopicStats.from_json(obj, node.http_address, node.hostname)
            one.tombstoned = one.name in tombstoned
            total = topics.get(one.name)
            if total is None:
                total = topics[one.name] = TopicStats(name=one.name)
            total.add(one)
    for name in known_topics:
        topics.setdefault(name, TopicStats(name=name))
    return [topics[name] for name in sorted(topics)]
