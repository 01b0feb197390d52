"""Spark options of the ``nsq`` data source, checked and typed.

Spark hands a data source its options as a case-insensitive map of
strings. This module turns them into :class:`SourceSettings` (the
streaming source) and :class:`SinkSettings` (the batch and streaming sink)
without importing pyspark, so the checks run (and are tested) anywhere.

Names: the data source's own options are Spark style
(``maxMessagesPerTrigger``, ``numPartitions``, ``startingOffsets`` ...); addresses and the
client options are go-nsq Config names, exactly as ``nsq tail
--consumer-opt`` takes them (``max_in_flight``, ``msg_timeout``,
``tls_v1``, ``tls_root_ca_file``, ``snappy``, ``deflate``,
``auth_secret`` ...; see :data:`nsq.client.options.GO_NSQ_OPTIONS`).
Durations are Go durations (``"30s"``, ``"250ms"``) or plain milliseconds.

The source has two modes (option ``mode``, :data:`SOURCE_MODES`):
``inflight`` (:func:`source_settings`, :mod:`nsq.spark.source`) and
``offsets`` (:func:`offset_source_settings`, :mod:`nsq.spark.offsets`), for
nsqds started with ``--storage=wal``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nsq.client.errors import ClientConfigError
from nsq.client.options import GO_NSQ_OPTIONS, parse_opts
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from nsq._internal.addresses import split_host_port
from nsq._internal.durations import parse_duration

__all__ = [
    "DEFAULT_CHANNEL",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "EARLIEST",
    "LATEST",
    "OffsetSourceSettings",
    "SOURCE_MODES",
    "SinkSettings",
    "SourceSettings",
    "client_pairs",
    "http_key",
    "offset_source_settings",
    "sink_settings",
    "source_mode",
    "source_settings",
]

#: channel the streaming source subscribes to when none is given
DEFAULT_CHANNEL = "spark"
#: messages held un-FINed by the source over all its connections: the
#: micro-batch Spark is running plus the next one, arriving meanwhile. A
#: message is held for about two micro-batches, so rows/s stay below about
#: max_in_flight / (2 x a micro-batch's duration). Memory of the source
#: process: about max_in_flight x (mean body size + 0.5 KB), plus a batch's
#: bodies about three times over while Spark plans it (Arrow, IPC, pickle)
DEFAULT_MAX_IN_FLIGHT = 100_000
#: messages per MPUB the sink sends
DEFAULT_SINK_BATCH_SIZE = 500

# options Spark itself may put in a data source's map
_SPARK_OWN = {"path", "paths", "checkpointlocation", "queryname"}
#: the values of the source's ``mode`` option: ``auto`` picks ``offsets``
#: when every nsqd of the topic keeps it in a topic log (``--storage=wal``)
SOURCE_MODES = ("auto", "offsets", "inflight")
#: in a startingOffsets / endingOffsets JSON: the oldest retained message,
#: the head (as Kafka's -2 and -1)
EARLIEST, LATEST = -2, -1
#: offsets source: messages per Spark partition at most when
#: maxRecordsPerPartition is not set (a range of one nsqd's log is split
#: into pieces of at most this many, which tasks read side by side)
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000

_SOURCE_OWN = {"topic", "channel", "nsqd_tcp_address", "nsqd_http_address", "lookupd_http_address",
               "maxmessagespertrigger", "numpartitions", "fetchwait", "availablenowidle", "connections", "mode",
               "startingoffsets", "endingoffsets", "maxoffsetspertrigger", "minpartitions",
               "maxrecordsperpartition", "failondataloss", "syncedonly"}
_SINK_OWN = {"topic", "nsqd_tcp_address", "lookupd_http_address", "batchsize"}


def _split(value: str | None) -> tuple[str, ...]:
    """A comma list (``"a:1, b:2"``) -> ``("a:1", "b:2")``, duplicates dropped."""
    if not value:
        return ()
    return tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ClientConfigError(f"option {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise ClientConfigError(f"option {name}: {value} is below {minimum}")
    return value


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip()
    try:
        value = int(text) / 1000.0 if text.isdigit() else parse_duration(text)
    except ValueError:
        raise ClientConfigError(f"option {name}: {raw!r} is not a duration (e.g. 500ms, 2s)") from None
    if value < 0:
        raise ClientConfigError(f"option {name}: negative duration {raw!r}")
    return value


def client_pairs(options: Mapping[str, str], own: set[str]) -> tuple[str, ...]:
    """The go-nsq options among ``options``, as ``"key,value"`` pairs for
    :func:`nsq.client.options.parse_opts`.

    Raises:
        ClientConfigError: a name that is neither a data source option
            (``own``), one Spark adds, nor a go-nsq Config name.
    """
    pairs = []
    for key, value in options.items():
        name = key.lower()
        if name in own or name in _SPARK_OWN:
            continue
        if name not in GO_NSQ_OPTIONS:
            known = ", ".join(sorted(own | set(GO_NSQ_OPTIONS)))
            raise ClientConfigError(f"unknown option {key!r} for the nsq data source (known: {known})")
        pairs.append(f"{name},{value}")
    return tuple(pairs)


def _addresses(options: Mapping[str, str], source: bool = False) -> tuple[tuple[str, ...], tuple[str, ...]]:
    nsqds = _split(options.get("nsqd_tcp_address"))
    lookupds = _split(options.get("lookupd_http_address"))
    if not nsqds and not lookupds:
        if source:
            raise ClientConfigError("set option lookupd_http_address, nsqd_tcp_address or nsqd_http_address "
                                    "(comma lists)")
        raise ClientConfigError("set option nsqd_tcp_address or lookupd_http_address (comma lists)")
    return nsqds, lookupds


@dataclass(frozen=True)
class SourceSettings:
    """What ``spark.readStream.format("nsq")`` was asked for.

    Attributes:
        topic, channel: what to subscribe to.
        nsqd_tcp_addresses: ``host:port`` of nsqds to connect to directly.
        lookupd_http_addresses: nsqlookupds to discover the topic's nsqds from.
        max_in_flight: messages held un-FINed at most, over every connection
            (the running micro-batch and the one gathering meanwhile); see
            :attr:`held_limit`.
        max_messages_per_trigger: rows per micro-batch at most (None: what
            has arrived).
        num_partitions: Spark partitions per micro-batch (None: one per
            nsqd the batch came from).
        connections: connections per nsqd (nsqd caps each at its
            ``--max-rdy-count``, 2500 by default); None: just enough for
            ``max_in_flight`` at 2500 each over the nsqds known at start,
            ``ceil(max_in_flight / (2500 * nsqds))``
            (:func:`nsq.spark.bridge.auto_connections`).
        fetch_wait: seconds ``latestOffset`` waits for messages when
            (almost) none arrived while the previous batch ran.
        available_now_idle: seconds without a message after which
            ``Trigger.AvailableNow`` counts the channel as drained.
        client_options: go-nsq ``key,value`` pairs (IDENTIFY, TLS, AUTH ...).
        msg_timeout: the in-flight timeout asked for, seconds (None: nsqd's).
    """

    topic: str
    channel: str = DEFAULT_CHANNEL
    nsqd_tcp_addresses: tuple[str, ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_messages_per_trigger: int | None = None
    num_partitions: int | None = None
    connections: int | None = None
    fetch_wait: float = 0.25
    available_now_idle: float = 2.0
    client_options: tuple[str, ...] = ()
    msg_timeout: float | None = None

    @property
    def held_limit(self) -> int:
        """Messages the source holds at most: ``max_in_flight``, or twice
        ``max_messages_per_trigger`` when that is less (the running batch
        and the next; more would only wait, TOUCHed, for later batches)."""
        if self.max_messages_per_trigger:
            return min(self.max_in_flight, 2 * self.max_messages_per_trigger)
        return self.max_in_flight

    def consumer_config(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(IDENTIFY fields, Consumer keyword arguments) from the go-nsq
        options; ``max_attempts`` is 0 (never give up) unless set, since a
        message given up is a message lost.

        Raises:
            ClientConfigError: a bad value, unreadable TLS files.
        """
        identify, kwargs = parse_opts(list(self.client_options), consumer=True)
        kwargs.pop("max_in_flight", None)
        kwargs.setdefault("max_attempts", 0)
        return identify, kwargs


def _topic_channel(options: Mapping[str, str]) -> tuple[str, str]:
    topic = (options.get("topic") or "").strip()
    if not is_valid_topic_name(topic):
        raise ClientConfigError(f"option topic: {topic!r} is not a valid topic name" if topic
                                else "option topic is required")
    channel = (options.get("channel") or DEFAULT_CHANNEL).strip()
    if not is_valid_channel_name(channel):
        raise ClientConfigError(f"option channel: {channel!r} is not a valid channel name")
    return topic, channel


def source_settings(options: Mapping[str, str]) -> SourceSettings:
    """Check the streaming source's options.

    Raises:
        ClientConfigError: no or invalid topic/channel, no address, a number
            or duration that does not parse, an unknown option name.
    """
    topic, channel = _topic_channel(options)
    nsqds, lookupds = _addresses(options, source=True)
    pairs = client_pairs(options, _SOURCE_OWN)
    identify, _ = parse_opts(list(pairs), consumer=True)  # fail early on bad values
    max_in_flight = _int(options, "max_in_flight", DEFAULT_MAX_IN_FLIGHT, 1)
    assert max_in_flight is not None
    msg_timeout = identify.get("msg_timeout")
    return SourceSettings(
        topic=topic,
        channel=channel,
        nsqd_tcp_addresses=nsqds,
        lookupd_http_addresses=lookupds,
        max_in_flight=max_in_flight,
        max_messages_per_trigger=_int(options, "maxMessagesPerTrigger", None, 1),
        num_partitions=_int(options, "numPartitions", None, 1),
        connections=_int(options, "connections", None, 1),
        fetch_wait=_seconds(options, "fetchWait", 0.25),
        available_now_idle=_seconds(options, "availableNowIdle", 2.0),
        client_options=pairs,
        msg_timeout=msg_timeout / 1000.0 if msg_timeout else None,
    )


def source_mode(options: Mapping[str, str]) -> str:
    """The ``mode`` option: ``auto`` (default), ``offsets`` or ``inflight``.

    Raises:
        ClientConfigError: another value.
    """
    mode = str(options.get("mode") or "auto").strip().lower()
    if mode not in SOURCE_MODES:
        raise ClientConfigError(f"option mode: {mode!r} is not one of {', '.join(SOURCE_MODES)}")
    return mode


def http_key(address: str) -> str:
    """An nsqd's HTTP address as the offsets source names it (the key of
    its offsets JSON, its ``nsqd`` column): ``host:port``, without
    ``http://`` or a trailing ``/``; an ``https://`` address keeps its scheme.

    Raises:
        ClientConfigError: no port.
    """
    text = address.strip().rstrip("/")
    if text.lower().startswith("http://"):
        text = text[7:]
    rest = text[8:] if text.lower().startswith("https://") else text
    try:
        split_host_port(rest)
    except ValueError as exc:
        raise ClientConfigError(f"nsqd HTTP address {address!r}: {exc}") from None
    return text


#: an offsets option: "earliest", "latest", or {nsqd HTTP address: offset}
OffsetSpec = str | dict[str, int]


def _offset_spec(options: Mapping[str, str], name: str, topic: str, default: str, ending: bool) -> OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest``, or
    JSON ``{"<nsqd http host:port>": {"<topic>": N}}`` with N an offset,
    -2 (earliest, starting only) or -1 (latest)."""
    raw = options.get(name.lower())
    text = str(raw).strip() if raw is not None else ""
    if not text:
        return default
    if text.lower() in ("earliest", "latest"):
        if ending and text.lower() == "earliest":
            raise ClientConfigError(f"option {name}: earliest is not an end (use latest or offsets)")
        return text.lower()
    try:
        doc = json.loads(text)
    except ValueError:
        raise ClientConfigError(f"option {name}: {text!r} is neither earliest, latest nor JSON "
                                f'{{"<nsqd http host:port>": {{"{topic}": offset}}}}') from None
    if not isinstance(doc, dict):
        raise ClientConfigError(f"option {name}: the JSON must be an object of nsqd HTTP addresses")
    out: dict[str, int] = {}
    lowest = LATEST if ending else EARLIEST
    for address, per_topic in doc.items():
        if not isinstance(per_topic, dict):
            raise ClientConfigError(f"option {name}: {address!r} must map to {{\"{topic}\": offset}}")
        for t, offset in per_topic.items():
            if t != topic:
                raise ClientConfigError(f"option {name}: names topic {t!r}, the source reads {topic!r}")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < lowest:
                raise ClientConfigError(f"option {name}: {address} {t}: {offset!r} is not an offset "
                                        f"(>= 0, {'-1 latest' if ending else '-2 earliest, -1 latest'})")
            out[http_key(address)] = offset
    return out


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ClientConfigError(f"option {name}: {raw!r} is not true or false")
    return text == "true"


@dataclass(frozen=True)
class OffsetSourceSettings:
    """What the offsets source (:mod:`nsq.spark.offsets`) was asked for.

    Attributes:
        topic: the topic to read.
        channel: the progress channel a streaming query keeps on every
            nsqd (its offset is the query's committed position).
        nsqd_http_addresses: nsqds to read, as :func:`http_key` names them.
        lookupd_http_addresses: nsqlookupds to find the topic's nsqds with.
        starting_offsets, ending_offsets: ``"earliest"``, ``"latest"`` or
            ``{nsqd: offset}`` (:data:`EARLIEST`, :data:`LATEST` allowed);
            ``ending_offsets`` is for batch queries only.
        max_offsets_per_trigger: messages per micro-batch at most, over all
            nsqds (None: everything up to the heads).
        min_partitions: Spark partitions per batch at least (None: one per
            nsqd range, split by ``max_records_per_partition``).
        max_records_per_partition: messages per Spark partition at most.
        fail_on_data_loss: an offset retention has deleted (or a log that
            went back) fails the query; False: read on from what is left.
        synced_only: read only messages nsqd has fsynced (each log's
            ``synced_offset`` in ``/stats`` instead of its head), so a
            batch never holds a message a power cut on the nsqd could take
            back.
        fetch_wait: seconds ``latestOffset`` keeps looking (every 50 ms)
            when no head has moved, before it answers "nothing new".
        auth_secret: sent as ``Authorization: Bearer`` (nsqd
            ``--http-auth-required``); "" sends none.
    """

    topic: str
    channel: str = DEFAULT_CHANNEL
    nsqd_http_addresses: tuple[str, ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()
    starting_offsets: OffsetSpec = "latest"
    ending_offsets: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    fail_on_data_loss: bool = True
    synced_only: bool = False
    fetch_wait: float = 0.25
    auth_secret: str = ""


def offset_source_settings(options: Mapping[str, str], batch: bool = False) -> OffsetSourceSettings:
    """Check the offsets source's options (``batch``: for
    ``spark.read``, whose startingOffsets default to earliest and which
    takes endingOffsets).

    Raises:
        ClientConfigError: no or invalid topic/channel, no HTTP address
            (``nsqd_tcp_address`` alone cannot be read by offset), a bad
            offsets option or number, an unknown option name.
    """
    topic, channel = _topic_channel(options)
    nsqds = tuple(dict.fromkeys(http_key(a) for a in _split(options.get("nsqd_http_address"))))
    lookupds = _split(options.get("lookupd_http_address"))
    if not nsqds and not lookupds:
        raise ClientConfigError("the offsets mode reads nsqds over HTTP: set option nsqd_http_address or "
                                "lookupd_http_address (comma lists)")
    pairs = client_pairs(options, _SOURCE_OWN)
    _, kwargs = parse_opts(list(pairs), consumer=True)
    if not batch and options.get("endingoffsets"):
        raise ClientConfigError("option endingOffsets is for batch queries (spark.read), not streams")
    per_trigger = _int(options, "maxOffsetsPerTrigger", None, 1)
    if per_trigger is None:
        per_trigger = _int(options, "maxMessagesPerTrigger", None, 1)
    min_partitions = _int(options, "minPartitions", None, 1)
    if min_partitions is None:
        min_partitions = _int(options, "numPartitions", None, 1)
    per_partition = _int(options, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION, 1)
    assert per_partition is not None
    return OffsetSourceSettings(
        topic=topic,
        channel=channel,
        nsqd_http_addresses=nsqds,
        lookupd_http_addresses=lookupds,
        starting_offsets=_offset_spec(options, "startingOffsets", topic, "earliest" if batch else "latest", False),
        ending_offsets=_offset_spec(options, "endingOffsets", topic, "latest", True),
        max_offsets_per_trigger=per_trigger,
        min_partitions=min_partitions,
        max_records_per_partition=per_partition,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        synced_only=_bool(options, "syncedOnly", False),
        fetch_wait=_seconds(options, "fetchWait", 0.25),
        auth_secret=str(kwargs.get("auth_secret") or ""),
    )


@dataclass(frozen=True)
class SinkSettings:
    """What ``df.write.format("nsq")`` / ``writeStream`` was asked for.

    Attributes:
        topic: the topic to publish to, or None when each row's ``topic``
            column names it.
        nsqd_tcp_addresses, lookupd_http_addresses: where to publish (with
            only lookupds, every nsqd their ``/nodes`` lists).
        batch_size: messages per MPUB at most (a chunk also stays under
            4 MiB of bodies).
        client_options: go-nsq ``key,value`` pairs (TLS, AUTH, snappy ...).
    """

    topic: str | None
    nsqd_tcp_addresses: tuple[str, ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()
    batch_size: int = DEFAULT_SINK_BATCH_SIZE
    client_options: tuple[str, ...] = ()

    def producer_config(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(IDENTIFY fields, Producer keyword arguments).

        Raises:
            ClientConfigError: a bad value, unreadable TLS files.
        """
        return parse_opts(list(self.client_options), consumer=False)


def sink_settings(options: Mapping[str, str]) -> SinkSettings:
    """Check the sink's options (the ``topic`` column is checked against the
    schema elsewhere).

    Raises:
        ClientConfigError: an invalid topic, no address, a bad batch size,
            an unknown option name.
    """
    topic = (options.get("topic") or "").strip() or None
    if topic is not None and not is_valid_topic_name(topic):
        raise ClientConfigError(f"option topic: {topic!r} is not a valid topic name")
    nsqds, lookupds = _addresses(options)
    pairs = client_pairs(options, _SINK_OWN)
    parse_opts(list(pairs), consumer=False)
    batch_size = _int(options, "batchSize", DEFAULT_SINK_BATCH_SIZE, 1)
    assert batch_size is not None
    return SinkSettings(topic=topic, nsqd_tcp_addresses=nsqds, lookupd_http_addresses=lookupds,
                        batch_size=batch_size, client_options=pairs)
