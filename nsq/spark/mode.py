"""Which of the ``nsq`` source's two readers a query gets.

- ``offsets`` (:mod:`nsq.spark.offsets`): nsqds started with
  ``--storage=wal`` keep every durable topic as an append-only log; the
  query reads ranges of offsets, nothing is held in flight.
- ``inflight`` (:mod:`nsq.spark.source`): the channel consumer, messages
  held in flight until Spark has committed their batch.

Option ``mode`` (``auto``, ``offsets``, ``inflight``) says which; with
``auto`` :func:`choose_mode` asks the nsqds. The choice is made once, when
Spark asks the data source for its schema (at ``load()``), and travels in
the schema: the offsets mode's has an ``offset`` column
(:func:`offsets_schema`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import StructType

from nsq.client.errors import ClientConfigError
from nsq.client.lookupd import HTTPAPIError
from nsq.protocol.names import is_valid_topic_name
from nsq.spark.logcluster import LogCluster
from nsq.spark.options import http_key, source_mode

__all__ = ["choose_mode", "offsets_schema", "with_tcp_addresses"]

log = logging.getLogger("nsq.spark")


def choose_mode(options: Mapping[str, str]) -> str:
    """``offsets`` or ``inflight``: the ``mode`` option, or with ``auto``
    what the nsqds report (:meth:`~nsq.spark.logcluster.LogCluster.storage_modes`): ``offsets``
    when every nsqd that answered keeps the topic in a log, ``inflight``
    when none does, no nsqd answered, or only ``nsqd_tcp_address`` is
    given (there is no HTTP address to ask).

    Raises:
        ClientConfigError: a bad ``mode``; some nsqds in one mode and some
            in the other (set ``mode`` to say which to use).
    """
    mode = source_mode(options)
    if mode != "auto":
        return mode
    nsqds = [http_key(a) for a in (options.get("nsqd_http_address") or "").split(",") if a.strip()]
    lookupds = [a.strip() for a in (options.get("lookupd_http_address") or "").split(",") if a.strip()]
    if not nsqds and not lookupds:
        return "inflight"
    topic = (options.get("topic") or "").strip()
    if not is_valid_topic_name(topic):
        return "inflight"  # whose option checks say what is wrong
    cluster = LogCluster(topic, "", nsqds, lookupds)
    try:
        modes, errors = cluster.storage_modes()
    except HTTPAPIError as exc:
        log.warning("nsq source: cannot ask the cluster for its storage (%s): in-flight mode", exc)
        return "inflight"
    for error in errors:
        log.warning("nsq source: mode auto: %s", error)
    kinds = set(modes.values())
    if len(kinds) > 1:
        wal = sorted(a for a, m in modes.items() if m == "offsets")
        other = sorted(a for a, m in modes.items() if m != "offsets")
        raise ClientConfigError(f"topic {topic}: nsqds {', '.join(wal)} keep it in a topic log (--storage=wal), "
                                f"{', '.join(other)} do not: set option mode to offsets or inflight")
    return kinds.pop() if kinds else "inflight"


def offsets_schema(schema: StructType | None, options: Any) -> bool:
    """Whether ``schema`` (the one :meth:`nsq.spark.source.NSQDataSource.schema` chose, or
    the user's) is the offsets mode's; an explicit ``mode`` must agree.

    Raises:
        ValueError: a schema of neither mode, or of the other mode than ``mode`` says.
    """
    from nsq.spark.columns import OFFSETS_SCHEMA, OFFSETS_STRUCT, STREAM_SCHEMA, STREAM_STRUCT

    fields = [(f.name, f.dataType) for f in (schema or STREAM_STRUCT).fields]
    offsets = fields == [(f.name, f.dataType) for f in OFFSETS_STRUCT.fields]
    mode = source_mode(options)
    if offsets and mode == "inflight":
        raise ValueError(f"mode inflight reads the columns {STREAM_SCHEMA} (no offset)")
    if not offsets and mode == "offsets":
        raise ValueError(f"mode offsets reads the columns {OFFSETS_SCHEMA}; got "
                         f"{(schema or STREAM_STRUCT).simpleString()}")
    return offsets


def with_tcp_addresses(options: Any) -> Any:
    """``options``, with ``nsqd_tcp_address`` from the nsqds' ``/info`` when
    only ``nsqd_http_address`` is given (the in-flight source connects over TCP)."""
    if options.get("nsqd_tcp_address") or options.get("lookupd_http_address") or \
            not options.get("nsqd_http_address"):
        return options
    nsqds = [http_key(a) for a in options["nsqd_http_address"].split(",") if a.strip()]
    return {**options, "nsqd_tcp_address": ",".join(LogCluster("", "", nsqds).tcp_addresses())}
