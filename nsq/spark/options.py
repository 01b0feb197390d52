"""Spark options of the ``nsq`` data source, checked and typed.

Spark hands a data source its options as a case-insensitive map of
strings. This module turns them into :class:`SourceSettings` (the
streaming source) and :class:`SinkSettings` (the batch and streaming sink)
without importing pyspark, so the checks run (and are tested) anywhere.

Names: the data source's own options are Spark style
(``maxMessagesPerTrigger``, ``numPartitions`` ...); addresses and the
client options are go-nsq Config names, exactly as ``nsq tail
--consumer-opt`` takes them (``max_in_flight``, ``msg_timeout``,
``tls_v1``, ``tls_root_ca_file``, ``snappy``, ``deflate``,
``auth_secret`` ...; see :data:`nsq.client.options.GO_NSQ_OPTIONS`).
Durations are Go durations (``"30s"``, ``"250ms"``) or plain milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nsq.client.errors import ClientConfigError
from nsq.client.options import GO_NSQ_OPTIONS, parse_opts
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from nsq._internal.durations import parse_duration

__all__ = [
    "DEFAULT_CHANNEL",
    "DEFAULT_MAX_IN_FLIGHT",
    "SinkSettings",
    "SourceSettings",
    "client_pairs",
    "sink_settings",
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
_SOURCE_OWN = {"topic", "channel", "nsqd_tcp_address", "lookupd_http_address", "maxmessagespertrigger",
               "numpartitions", "fetchwait", "availablenowidle", "connections"}
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


def _addresses(options: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    nsqds = _split(options.get("nsqd_tcp_address"))
    lookupds = _split(options.get("lookupd_http_address"))
    if not nsqds and not lookupds:
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


def source_settings(options: Mapping[str, str]) -> SourceSettings:
    """Check the streaming source's options.

    Raises:
        ClientConfigError: no or invalid topic/channel, no address, a number
            or duration that does not parse, an unknown option name.
    """
    topic = (options.get("topic") or "").strip()
    if not is_valid_topic_name(topic):
        raise ClientConfigError(f"option topic: {topic!r} is not a valid topic name" if topic
                                else "option topic is required")
    channel = (options.get("channel") or DEFAULT_CHANNEL).strip()
    if not is_valid_channel_name(channel):
        raise ClientConfigError(f"option channel: {channel!r} is not a valid channel name")
    nsqds, lookupds = _addresses(options)
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
