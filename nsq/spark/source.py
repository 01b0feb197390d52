"""``spark.readStream.format("nsq")``: the streaming source.

At-least-once, the way NSQ does it (there are no offsets to seek to):

- The consumer lives in the stream reader, in Spark's driver-side source
  runner process (one per query run), on a background event loop
  (:class:`~nsq.spark.bridge.ConsumerBridge`). It connects lazily, at the
  first ``latestOffset``: the reader is also built in throwaway planning
  and executor processes.
- Messages are held in flight (never auto-answered), up to
  ``max_in_flight`` of them: the batch Spark is running and the next one,
  which arrives meanwhile. ``latestOffset`` takes what has arrived (up to
  ``maxMessagesPerTrigger``) as the next micro-batch and answers with an
  offset ``{"session": S, "seq": N}``, a count of the messages this reader
  has handed out. ``partitions`` carries the batch's payloads to the
  executors inside the :class:`NSQPartition`\\s (one Arrow record batch
  each, in the IPC stream format); ``read`` yields that
  ``pyarrow.RecordBatch`` as it is (PySpark's Python data source API takes
  record batches from ``read``:
  https://spark.apache.org/docs/latest/api/python/tutorial/sql/python_data_source.html).
- A batch's messages are FINed when Spark asks for the batch after it
  (``latestOffset(start)`` with ``start`` = its end: Spark only asks once
  the batch is in its commit log), or at ``commit(end)``, whichever comes
  first. Held messages are TOUCHed so a long batch keeps them.
- If the query dies, the messages it held are in flight on a dead
  connection: nsqd requeues them after ``msg_timeout`` and the restarted
  query reads them again (``attempts`` > 1). A batch Spark replays from its
  checkpoint after a restart (an offset of an earlier session) therefore
  plans as empty: its messages come back through nsqd instead. Expect
  duplicates, never losses; ``id`` identifies a message.
- ``stop()`` REQs (delay 0) every message still held and closes the
  connections (CLS), so nothing stays in flight.
- ``Trigger.AvailableNow``: the query takes messages published before it
  started (NSQ timestamp, nsqd's clock) until none arrives for
  ``availableNowIdle``, then ends; later messages are held aside and
  requeued at stop.

Columns: ``body`` binary, ``id`` string (16 hex characters), ``attempts``
int, ``timestamp`` timestamp (when nsqd accepted the message; NSQ's ns cut
to Spark's µs), ``topic`` string, ``nsqd`` string (``host:port`` it came
from).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from operator import attrgetter
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (StructType)

from nsq.spark.columns import (STREAM_SCHEMA, STREAM_STRUCT, ReadAllAvailable, ReadMaxRows,
                                SupportsTriggerAvailableNow, arrow_schema)
from nsq.spark.options import SourceSettings, source_settings

__all__ = ["NSQDataSource", "NSQPartition", "NSQStreamReader", "STREAM_SCHEMA"]

log = logging.getLogger("nsq.spark")


# a batch being gathered ends once no message came for this long (seconds)
_LINGER = 0.02
_POLL = 0.005
# what arrived while the previous batch ran is taken at once when it is at
# least 1/_PIPELINED_SHARE of what the batch may hold; less (a first batch,
# a trickle) waits for more as an empty start does
_PIPELINED_SHARE = 8

_BODY, _ID, _ATTEMPTS, _TIMESTAMP, _NSQD = (attrgetter(name) for name in
                                            ("body", "id", "attempts", "timestamp", "nsqd_address"))


class NSQPartition(InputPartition):
    """One Spark task's share of a micro-batch: the messages themselves
    (the executor cannot reach the connection that holds them), as one
    Arrow record batch in the IPC stream format (built where the batch is
    planned; pickles as one bytes object).

    Attributes:
        count: messages in it.
        ipc: the Arrow IPC stream (schema :data:`STREAM_SCHEMA`).
    """

    def __init__(self, count: int, ipc: bytes) -> None:
        self.count = count
        self.ipc = ipc

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"NSQPartition({self.count} messages)"






def _record_batch(topic: str, messages: list, nsqd: str | None = None) -> Any:
    """The Arrow record batch of ``messages`` (client Message objects),
    schema :func:`nsq.spark.columns.arrow_schema`.

    One Python pass per source attribute; the rest is Arrow's: ids (16
    ASCII hex bytes) cast from binary to string, NSQ's ns timestamps cast
    to µs (truncated, as ``ns // 1000`` for times after 1970), ``topic``
    (and ``nsqd`` when every message came from that one) repeated.
    """
    import pyarrow as pa

    n = len(messages)
    schema = arrow_schema()
    ts_type = schema.field("timestamp").type
    timestamps = pa.array(list(map(_TIMESTAMP, messages)), pa.timestamp("ns", tz="UTC"))
    if nsqd is None:
        nsqds = pa.array(list(map(_NSQD, messages)), pa.string())
    else:
        nsqds = pa.repeat(pa.scalar(nsqd, pa.string()), n)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(list(map(_BODY, messages)), pa.binary()),
            pa.array(list(map(_ID, messages)), pa.binary()).cast(pa.string()),
            pa.array(list(map(_ATTEMPTS, messages)), pa.int32()),
            timestamps.cast(ts_type, safe=False),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            nsqds,
        ],
        schema=schema,
    )


def _partitions(topic: str, messages: list, num_partitions: int | None) -> list[NSQPartition]:
    """Split a batch: ``num_partitions`` even slices, or one per nsqd."""
    import pyarrow as pa

    groups: list[tuple[list, str | None]] = []
    if num_partitions:
        size = -(-len(messages) // num_partitions)
        groups = [(messages[i:i + size], None) for i in range(0, len(messages), size)]
    else:
        by_nsqd: dict[str, list] = {}
        for m in messages:
            by_nsqd.setdefault(m.nsqd_address, []).append(m)
        groups = [(group, address) for address, group in by_nsqd.items()]
    parts = []
    for group, address in groups:
        if group:
            batch = _record_batch(topic, group, address)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
            parts.append(NSQPartition(len(group), sink.getvalue().to_pybytes()))
    return parts


class NSQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader (see the module docstring for the protocol).

    Args:
        settings: the checked options.
        schema: must be :data:`STREAM_SCHEMA`.

    Raises:
        ValueError: another schema was asked for.
    """

    def __init__(self, settings: SourceSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema
        self.session = uuid.uuid4().hex
        self._bridge: Any = None
        self._next_seq = 0
        #: end seq -> (start seq, messages) of planned, not yet FINed batches
        self._batches: dict[int, tuple[int, list]] = {}
        #: json of a start offset -> the end returned for it (idempotent replanning)
        self._planned: dict[str, dict] = {}
        #: arrived, eligible, not yet in a batch (oldest first)
        self._ready: list = []
        self._late: list = []
        self._available_now_ns: int | None = None
        self._last_eligible = 0.0
        self._last_end: dict | None = None
        self._sigterm_handler: Any = None

    # -- offsets -----------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """``{"session": <this reader>, "seq": 0}`` (no connection needed)."""
        return {"session": self.session, "seq": 0}

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxMessagesPerTrigger)`` or ``ReadAllAvailable()``."""
        if self.settings.max_messages_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.settings.max_messages_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember now: only messages nsqd accepted before it are taken."""
        self._available_now_ns = time.time_ns()

    def _own_seq(self, offset: dict | None) -> int | None:
        if isinstance(offset, dict) and offset.get("session") == self.session:
            return int(offset.get("seq", 0))
        return None

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """FIN the batches up to ``start`` (Spark has committed them), then
        take the next batch, up to ``limit`` rows (``ReadMaxRows``).

        The consumers keep receiving while Spark runs a batch (up to
        :attr:`~nsq.spark.options.SourceSettings.held_limit` held in
        all), so what arrived meanwhile is taken at once when it is at
        least an eighth of what the batch may hold. Otherwise (the first
        batch, a quiet topic) it waits up to ``fetchWait`` for messages,
        stopping once none came for 20 ms or the batch is full. Returns
        ``start`` when nothing arrived.

        Raises:
            OSError / ErrorResponse / ClientConfigError: the first connect
                failed (no nsqd reachable and no lookupd given, bad TLS files).
        """
        if start is None:  # pyspark < 4.2 calls latestOffset()
            start = self._last_end or self.initialOffset()
        key = json.dumps(start, sort_keys=True)
        planned = self._planned.get(key)
        if planned is not None:
            return planned
        own = self._own_seq(start)
        if own is not None:
            self._finish_through(own)
        self._ensure_bridge()
        cap = getattr(limit, "max_rows", None) or getattr(limit, "maxRows", None)
        messages = self._gather(int(cap) if cap else None)
        if not messages:
            return start
        first = self._next_seq
        self._next_seq = end_seq = first + len(messages)
        self._batches[end_seq] = (first, messages)
        end = {"session": self.session, "seq": end_seq}
        self._planned[key] = end
        self._last_end = end
        return end

    def _gather(self, cap: int | None) -> list:
        """The next batch: what arrived while the previous one ran, at once;
        when nothing did, wait for messages (see :meth:`latestOffset`)."""
        held = sum(len(ms) for _, ms in self._batches.values())
        room = max(0, self.settings.held_limit - held - len(self._late))
        target = min(cap or room, room) if room else 0
        self._drain_incoming()
        if not target or len(self._ready) * _PIPELINED_SHARE >= target:
            return self._take(cap)
        bridge = self._bridge
        started = time.monotonic()
        available_now = self._available_now_ns is not None
        while True:
            time.sleep(_POLL)
            self._drain_incoming()
            now = time.monotonic()
            n = len(self._ready)
            if n >= target:
                break
            if n and now - max(started, bridge.last_arrival, self._last_eligible) >= _LINGER:
                break
            if not n:
                if available_now:
                    if now - max(started, self._last_eligible) >= self.settings.available_now_idle:
                        break
                elif now - started >= self.settings.fetch_wait:
                    break
            elif now - started >= max(self.settings.fetch_wait, _LINGER):
                break
        return self._take(cap)

    def _take(self, cap: int | None) -> list:
        ready = self._ready
        take = min(len(ready), cap) if cap else len(ready)
        batch = ready[:take]
        del ready[:take]
        return batch

    def _drain_incoming(self) -> None:
        incoming = self._bridge.incoming
        n = len(incoming)  # the loop thread only appends: these n are there to pop
        if not n:
            return
        pop = incoming.popleft
        cutoff = self._available_now_ns
        if cutoff is None:
            self._ready.extend([pop() for _ in range(n)])
            self._last_eligible = time.monotonic()
            return
        eligible = False
        for _ in range(n):
            m = pop()
            if m.timestamp > cutoff:
                self._late.append(m)
            else:
                self._ready.append(m)
                eligible = True
        if eligible:
            self._last_eligible = time.monotonic()

    def _finish_through(self, seq: int) -> None:
        done = [end for end in self._batches if end <= seq]
        for end in sorted(done):
            _, messages = self._batches.pop(end)
            self._bridge.finish(messages)
        if done:
            self._planned = {k: v for k, v in self._planned.items() if v["seq"] > seq}

    def _ensure_bridge(self) -> None:
        if self._bridge is not None:
            return
        from nsq.spark.bridge import ConsumerBridge

        s = self.settings
        identify, kwargs = s.consumer_config()
        bridge = ConsumerBridge(s.topic, s.channel, s.nsqd_tcp_addresses, s.lookupd_http_addresses,
                                max_in_flight=s.held_limit, connections=s.connections, identify=identify,
                                consumer_kwargs=kwargs, msg_timeout=s.msg_timeout)
        bridge.start()
        self._bridge = bridge
        self._catch_sigterm()
        log.info("nsq source: consuming %s/%s (pid %d)", s.topic, s.channel, os.getpid())

    def _catch_sigterm(self) -> None:
        """Spark ends the source runner process with SIGTERM when the query
        stops, which would kill it before ``stop()`` is done: handle it by
        stopping (REQ what is held, close), then exit. Only where nobody
        else handles SIGTERM, and only on the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_sigterm(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the close short
            try:
                self.stop()
            finally:
                os._exit(128 + signum)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._sigterm_handler = on_sigterm

    # -- planning and reading --------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[NSQPartition]:
        """The messages of the batches between ``start`` and ``end``; none
        for a batch an earlier run planned (nsqd redelivers those)."""
        own_end = self._own_seq(end)
        if own_end is None:
            return []
        own_start = self._own_seq(start) or 0
        messages = []
        for end_seq in sorted(self._batches):
            first, batch = self._batches[end_seq]
            if first >= own_start and end_seq <= own_end:
                messages.extend(batch)
        return _partitions(self.settings.topic, messages, self.settings.num_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's messages as one Arrow record batch (runs on an
        executor; returns a list iterator)."""
        import pyarrow as pa

        assert isinstance(partition, NSQPartition)
        if not len(partition):
            return iter([])
        return iter([pa.ipc.open_stream(partition.ipc).read_next_batch()])

    def commit(self, end: dict) -> None:
        """FIN every batch up to ``end`` not FINed yet."""
        own = self._own_seq(end)
        if own is not None and self._bridge is not None:
            self._finish_through(own)

    def stop(self) -> None:
        """REQ every held message (delay 0) and close the connections."""
        if self._bridge is not None:
            self._bridge.close()
            self._bridge = None
        if self._sigterm_handler is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is self._sigterm_handler:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._sigterm_handler = None
        self._batches.clear()
        self._ready.clear()
        self._late.clear()


class NSQDataSource(DataSource):
    """The ``nsq`` data source: ``spark.readStream.format("nsq")``,
    ``spark.read.format("nsq")`` (offsets mode only) and
    ``df.write.format("nsq")`` / ``df.writeStream.format("nsq")``.

    The source has two modes, chosen by option ``mode`` or, with ``auto``
    (the default), by what the nsqds report when Spark asks for the schema
    (:func:`nsq.spark.mode.choose_mode`): ``offsets``
    (:mod:`nsq.spark.offsets`, nsqds with ``--storage=wal``; schema
    :data:`~nsq.spark.offsets.OFFSETS_SCHEMA`) and ``inflight`` (this
    module; :data:`STREAM_SCHEMA`). The schema carries the choice to the
    readers. Register it with :func:`nsq.spark.register`. Batch reads of a
    topic that is not in a topic log are refused: use a stream with
    ``Trigger.AvailableNow``, or ``format("nsq-archive")`` for what ``nsq
    to-file`` wrote.
    """

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def _mode(self) -> str:
        mode = getattr(self, "_chosen_mode", None)
        if mode is None:
            from nsq.spark.mode import choose_mode

            mode = self._chosen_mode = choose_mode(self.options)
        return mode

    def schema(self) -> StructType:
        if self._mode() == "offsets":
            from nsq.spark.columns import OFFSETS_STRUCT

            return OFFSETS_STRUCT
        return STREAM_STRUCT

    def streamReader(self, schema: StructType) -> Any:
        from nsq.spark.mode import offsets_schema, with_tcp_addresses

        if offsets_schema(schema, self.options):
            from nsq.spark.offsets import NSQOffsetStreamReader
            from nsq.spark.options import offset_source_settings

            return NSQOffsetStreamReader(offset_source_settings(self.options), schema)
        _check_schema(schema)
        return NSQStreamReader(source_settings(with_tcp_addresses(self.options)), schema)

    def reader(self, schema: StructType) -> Any:
        from nsq.spark.mode import offsets_schema

        if offsets_schema(schema, self.options):
            from nsq.spark.offsets import NSQOffsetBatchReader
            from nsq.spark.options import offset_source_settings

            return NSQOffsetBatchReader(offset_source_settings(self.options, batch=True), schema)
        raise ValueError("the nsq data source reads topics in batch only from nsqds started with "
                         "--storage=wal (by offset); otherwise use spark.readStream.format('nsq') "
                         "(with Trigger.AvailableNow to drain a channel once), or "
                         "spark.read.format('nsq-archive').load(path) for nsq to-file archives")

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from nsq.spark.sink import NSQWriter

        return NSQWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from nsq.spark.sink import NSQStreamWriter

        return NSQStreamWriter(self.options, schema)


def _check_schema(schema: StructType) -> None:
    expected = STREAM_STRUCT
    if schema is not None and [(f.name, f.dataType) for f in schema.fields] != \
            [(f.name, f.dataType) for f in expected.fields]:
        raise ValueError(f"the nsq source has a fixed schema ({STREAM_SCHEMA}); got {schema.simpleString()}")
