"""``df.write.format("nsq")`` and ``df.writeStream.format("nsq")``: the sink.

Each Spark task publishes its partition itself, from the executor: rows are
grouped by topic and sent as MPUB chunks of ``batchSize`` messages (and at
most 4 MiB of bodies, under nsqd's default ``--max-body-size`` of 5 MiB),
several chunks pipelined on one connection, each awaited until nsqd answers
``OK``. Any refusal or lost connection raises, which fails the task (and
Spark's retry of it publishes the partition again: at-least-once).

Columns: ``body`` (binary or string, UTF-8 encoded; required, never null)
and optionally ``topic`` (string; used where the ``topic`` option is not
set). Other columns are ignored. The nsqd: task ``i`` publishes to
``nsqd_tcp_address[i % n]``, or with only ``lookupd_http_address`` to the
``i % n``-th nsqd the lookupds' ``/nodes`` list.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Mapping

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from nsq.protocol.names import is_valid_topic_name
from nsq.spark.options import SinkSettings, sink_settings

try:  # pyspark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]  # the older base

__all__ = ["NSQCommitMessage", "NSQStreamWriter", "NSQWriter", "publish"]

log = logging.getLogger("nsq.spark")

#: bodies per MPUB chunk at most, bytes
MAX_CHUNK_BYTES = 4 * 1024 * 1024
#: MPUBs awaiting their OK at once on a task's connection
PIPELINE = 8


@dataclass
class NSQCommitMessage(WriterCommitMessage):
    """What one task published.

    Attributes:
        published: messages nsqd acknowledged.
        nsqd: the nsqd (``host:port``) they went to.
    """

    published: int
    nsqd: str


class SinkError(ValueError):
    """A row or schema the sink cannot publish (null body, no topic ...)."""


def _check_schema(schema: StructType, settings: SinkSettings) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if not isinstance(body, (BinaryType, StringType)):
        raise SinkError(f"the nsq sink needs a binary or string 'body' column; got {schema.simpleString()}")
    topic = fields.get("topic")
    if topic is None and settings.topic is None:
        raise SinkError("the nsq sink needs the 'topic' option or a string 'topic' column")
    if topic is not None and not isinstance(topic, StringType):
        raise SinkError(f"the nsq sink's 'topic' column must be a string; got {topic.simpleString()}")


def _rows(items: Iterable[Any], default_topic: str | None) -> Iterator[tuple[str, bytes]]:
    """(topic, body) per row, from Arrow record batches or Rows."""
    valid: set[str] = set()
    for item in items:
        if hasattr(item, "schema") and hasattr(item, "column"):  # a pyarrow RecordBatch
            names = item.schema.names
            bodies = item.column(names.index("body")).to_pylist()
            if "topic" in names:
                topics = item.column(names.index("topic")).to_pylist()
            else:
                topics = [None] * len(bodies)
            pairs: Iterable[tuple[Any, Any]] = zip(topics, bodies)
        else:
            row = item.asDict() if hasattr(item, "asDict") else dict(item)
            pairs = [(row.get("topic"), row.get("body"))]
        for topic, body in pairs:
            topic = topic or default_topic
            if topic is None:
                raise SinkError("a row has a null topic and no 'topic' option is set")
            if topic not in valid:
                if not is_valid_topic_name(topic):
                    raise SinkError(f"a row's topic {topic!r} is not a valid topic name")
                valid.add(topic)
            if body is None:
                raise SinkError("a row has a null body (NSQ messages cannot be null)")
            yield topic, body.encode() if isinstance(body, str) else bytes(body)


async def _nsqd_for(settings: SinkSettings, index: int) -> str:
    """``nsqd_tcp_address[index % n]``, or the ``index % n``-th of the nsqds
    the lookupds know (:func:`nsq.cluster.lookupd.lookupd_producers`, sorted).

    Raises:
        ConnectionError: no lookupd answered, or none knows an nsqd.
    """
    addresses = list(settings.nsqd_tcp_addresses)
    if not addresses:
        from nsq.cluster.lookupd import LookupdQueryError, lookupd_producers

        lookupds = list(settings.lookupd_http_addresses)
        try:
            producers = await lookupd_producers(lookupds)
        except LookupdQueryError as exc:
            raise ConnectionError(f"no nsqd found through lookupd {', '.join(lookupds)}: {exc.errors[0]}") from None
        addresses = sorted({p.tcp_address for p in producers})
        if not addresses:
            raise ConnectionError(f"no nsqd found through lookupd {', '.join(lookupds)}"
                                  + (f": {producers.errors[0]}" if producers.errors else ""))
    return addresses[index % len(addresses)]


async def _publish(settings: SinkSettings, items: Iterable[Any], index: int) -> NSQCommitMessage:
    from nsq.client import Producer

    identify, kwargs = settings.producer_config()
    address = await _nsqd_for(settings, index)
    producer = Producer(address, identify, **kwargs)
    published = 0
    pending: set[asyncio.Future] = set()

    async def settle(limit: int) -> None:
        nonlocal published
        while len(pending) > limit:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                pending.discard(fut)
                published += fut.result()  # raises ErrorResponse / ConnectionClosedError

    async def send(topic: str, chunk: list[bytes]) -> int:
        await producer.multi_publish(topic, chunk)
        return len(chunk)

    try:
        await producer.connect()
        chunks: dict[str, tuple[list[bytes], int]] = {}
        for topic, body in _rows(items, settings.topic):
            bodies, size = chunks.get(topic, ([], 0))
            if bodies and (len(bodies) >= settings.batch_size or size + len(body) > MAX_CHUNK_BYTES):
                pending.add(asyncio.ensure_future(send(topic, bodies)))
                await asyncio.sleep(0)  # let it write the MPUB now
                await settle(PIPELINE)
                bodies, size = [], 0
            bodies.append(body)
            chunks[topic] = (bodies, size + len(body))
        for topic, (bodies, _) in chunks.items():
            if bodies:
                pending.add(asyncio.ensure_future(send(topic, bodies)))
        await settle(0)
    except BaseException:
        for fut in pending:
            fut.cancel()
        raise
    finally:
        await producer.close()
    return NSQCommitMessage(published, address)


def publish(options: Mapping[str, str], items: Iterable[Any]) -> NSQCommitMessage:
    """Publish one task's rows (Arrow record batches or Rows) with MPUB.

    Args:
        options: the sink's Spark options.
        items: ``pyarrow.RecordBatch``\\es or ``Row``\\s with ``body`` (and
            maybe ``topic``).

    Returns:
        the count acknowledged and the nsqd used.

    Raises:
        SinkError: a null body or topic, an invalid topic name; ErrorResponse: nsqd refused an MPUB
            (``E_BAD_TOPIC``, ``E_BAD_MESSAGE``, ``E_PUB_FAILED`` ...);
        ConnectionClosedError / OSError: nsqd went away or cannot be reached.
    """
    from pyspark import TaskContext

    settings = sink_settings(options)
    ctx = TaskContext.get()
    index = ctx.partitionId() if ctx is not None else os.getpid()
    return asyncio.run(_publish(settings, items, index))


class NSQWriter(DataSourceArrowWriter):
    """Batch sink (``df.write.format("nsq")``).

    Raises:
        SinkError: no usable ``body`` column, no topic option or column.
        ClientConfigError: bad options.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = dict(options)
        self.settings = sink_settings(self.options)
        _check_schema(schema, self.settings)

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        return publish(self.options, iterator)

    def commit(self, messages: list[Any]) -> None:
        total = sum(m.published for m in messages if isinstance(m, NSQCommitMessage))
        log.info("nsq sink: %d messages published", total)

    def abort(self, messages: list[Any]) -> None:
        total = sum(m.published for m in messages if isinstance(m, NSQCommitMessage))
        log.warning("nsq sink: write aborted after %d messages were published", total)


class NSQStreamWriter(_StreamWriterBase):
    """Streaming sink (``df.writeStream.format("nsq")``): each micro-batch
    as :class:`NSQWriter` publishes it.

    Raises:
        as :class:`NSQWriter`.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = dict(options)
        self.settings = sink_settings(self.options)
        _check_schema(schema, self.settings)

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        return publish(self.options, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        total = sum(m.published for m in messages if isinstance(m, NSQCommitMessage))
        log.info("nsq sink: batch %d: %d messages published", batchId, total)

    def abort(self, messages: list[Any], batchId: int) -> None:
        total = sum(m.published for m in messages if isinstance(m, NSQCommitMessage))
        log.warning("nsq sink: batch %d aborted after %d messages were published", batchId, total)
