"""The ``nsq`` source on offsets: nsqds started with ``--storage=wal``.

Like Spark's Kafka source
(https://spark.apache.org/docs/latest/streaming/structured-streaming-kafka-integration.html):
every durable topic on such an nsqd is an append-only log, an offset
counts the messages in it (the first message ever is 0), and a
micro-batch is a range of offsets per nsqd, so nothing is held in flight:

- An offset of the source (in Spark's checkpoint) is JSON
  ``{"<nsqd http host:port>": {"<topic>": N}}``: per nsqd (its HTTP
  address, :func:`nsq.spark.options.http_key`; the lookupds'
  ``broadcast_address:http_port``), the next offset to read.
- The driver side (:class:`NSQOffsetStreamReader`, in Spark's Python
  source runner) asks the nsqds' ``/stats`` for each log's head
  (:class:`~nsq.spark.logcluster.LogCluster`) and plans ranges per nsqd,
  at most ``maxOffsetsPerTrigger`` in all (shared out by backlog, as
  Kafka's ``maxOffsetsPerTrigger``), split into Spark partitions of at most
  ``maxRecordsPerPartition`` messages and at least ``minPartitions`` of them
  (:func:`plan_partitions`).
- Executors read their ranges from the nsqds themselves
  (:func:`nsq.spark.logread.read_range`, ``GET /topic/read``). A range
  always reads the same rows while nsqd retains it, so a micro-batch Spark
  replays from its checkpoint after a restart reads exactly what it read
  the first time: with an idempotent or transactional sink (Parquet,
  Delta, ``foreachBatch`` writing by batch id) the output is exactly once.
- A streaming query keeps a channel (option ``channel``, default
  ``spark``) on every nsqd as its progress marker: created at the
  query's starting offset if missing, and advanced with ``POST
  /channel/commit`` to each committed batch's end (at ``commit(end)``, and
  at the next ``latestOffset(start)``, ``start`` being committed then;
  Spark only calls ``commit`` once a later batch is planned). So ``nsq
  admin`` and ``/stats`` show the query's lag as that channel's depth, and
  retention never deletes what the query has not committed. Subscribe no
  consumer to that channel.
- An nsqd found after the query started (a new one registered with the
  lookupds) is read from its oldest retained message.

Columns: those of the in-flight source (``body``, ``id``, ``attempts``,
``timestamp``, ``topic``, ``nsqd``) and ``offset`` (long). ``nsqd`` is the
nsqd's HTTP address here (the offsets' key); ``attempts`` is 1 plus what
the log holds (this read counts as a delivery, as in the in-flight source).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (StructType)

from nsq.spark.columns import (OFFSETS_SCHEMA, OFFSETS_STRUCT, ReadAllAvailable, ReadMaxRows,
                                SupportsTriggerAvailableNow)
from nsq.spark.logcluster import LogCluster, LogState
from nsq.spark.options import EARLIEST, LATEST, OffsetSourceSettings

__all__ = ["NSQOffsetBatchReader", "NSQOffsetRange", "NSQOffsetStreamReader", "OFFSETS_SCHEMA", "OFFSETS_STRUCT",
           "plan_partitions", "rate_limit"]

log = logging.getLogger("nsq.spark")


#: {nsqd HTTP address: offset} of the one topic a reader reads
Offsets = dict[str, int]
#: seconds between two looks at the heads while none has moved
POLL_INTERVAL = 0.05


class NSQOffsetRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of ``topic`` on ``nsqd``.

    Attributes:
        nsqd: the nsqd's HTTP address.
        topic: the topic.
        start, end: the range (``end`` excluded).
        clamp: start at the oldest retained message if ``start`` is gone
            (a range of an nsqd found after the query started).
    """

    def __init__(self, nsqd: str, topic: str, start: int, end: int, clamp: bool = False) -> None:
        self.nsqd, self.topic, self.start, self.end, self.clamp = nsqd, topic, start, end, clamp

    def __len__(self) -> int:
        return self.end - self.start

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NSQOffsetRange) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"NSQOffsetRange({self.nsqd} {self.topic} [{self.start}, {self.end}){' clamp' if self.clamp else ''})"


# -- offsets as Spark keeps them ---------------------------------------------------------


def to_json(offsets: Mapping[str, int], topic: str) -> dict:
    """``{nsqd: {topic: offset}}``, nsqds sorted (Spark compares offsets by
    their JSON text)."""
    return {nsqd: {topic: int(offsets[nsqd])} for nsqd in sorted(offsets)}


def from_json(doc: Mapping[str, Any] | None, topic: str) -> Offsets:
    """The offsets of ``topic`` in a source offset (other topics ignored)."""
    out: Offsets = {}
    for nsqd, per_topic in (doc or {}).items():
        if isinstance(per_topic, Mapping) and topic in per_topic:
            out[nsqd] = int(per_topic[topic])
    return out


def resolve(spec: str | Mapping[str, int], states: Mapping[str, LogState], topic: str,
            default: int = EARLIEST) -> Offsets:
    """Offsets for an offsets option (``earliest``, ``latest`` or
    ``{nsqd: offset}`` with -2 / -1) over the nsqds that answered:
    ``earliest`` is each log's oldest retained message, ``latest`` its
    head; an nsqd without the topic yet is at 0; nsqds a JSON spec does not
    name get ``default``; nsqds it names that did not answer keep their
    given offset (only when >= 0).

    Raises:
        ValueError: an nsqd has the topic but keeps it in no log
            (``--storage=diskqueue``, an ephemeral topic).
    """
    out: Offsets = {}
    for nsqd, state in states.items():
        if state.exists and not state.wal:
            raise ValueError(f"nsqd {nsqd} does not keep topic {topic} in a topic log (start it with "
                             "--storage=wal), so it cannot be read by offset: set option mode=inflight")
        want = spec if isinstance(spec, str) else spec.get(nsqd, default)
        if want in ("earliest", EARLIEST):
            out[nsqd] = state.first
        elif want in ("latest", LATEST):
            out[nsqd] = state.head
        else:
            out[nsqd] = int(want)
    if not isinstance(spec, str):
        out.update({nsqd: offset for nsqd, offset in spec.items() if nsqd not in out and offset >= 0})
    return dict(sorted(out.items()))


# -- planning (pure) ---------------------------------------------------------------------


def rate_limit(start: Mapping[str, int], latest: Mapping[str, int], limit: int | None) -> Offsets:
    """Ends of a batch reading at most ``limit`` messages over all nsqds,
    shared out by each one's backlog (Spark's Kafka source,
    ``KafkaMicroBatchStream.rateLimit``): an nsqd with backlog ``b`` of
    ``total`` gets ``limit * b / total``, rounded down, or up when below 1.
    ``latest`` has every nsqd; ``start`` misses the new ones (from 0)."""
    if not limit:
        return dict(latest)
    sizes = {n: max(0, latest[n] - start.get(n, 0)) for n in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for nsqd, end in latest.items():
        begin = start.get(nsqd, 0)
        share = limit * sizes[nsqd] / total
        take = int(share) if share >= 1 else (1 if share > 0 else 0)
        out[nsqd] = min(end, begin + take) if end >= begin else end
    return out


def plan_partitions(start: Mapping[str, int], end: Mapping[str, int], topic: str,
                    min_partitions: int | None = None, max_records: int | None = None) -> list[NSQOffsetRange]:
    """The Spark partitions of a batch from ``start`` to ``end``.

    One range per nsqd whose end is past its start (an nsqd missing from
    ``start`` is read from its oldest retained message, ``clamp`` on each
    of its pieces; one whose end is below its start, a log that went back,
    from 0, clamped);
    each split into equal pieces of at most ``max_records``; then, while
    there are fewer than ``min_partitions``, the ranges are split in
    proportion to their size (Spark's ``KafkaOffsetRangeCalculator``).
    Deterministic: the same offsets give the same partitions.
    """
    ranges: list[tuple[str, int, int, bool]] = []
    for nsqd in sorted(end):
        e = end[nsqd]
        s = start.get(nsqd)
        clamp = s is None or e < s
        if clamp:
            s = 0
        assert s is not None
        if e > s:
            ranges.append((nsqd, s, e, clamp))
    if not ranges:
        return []
    pieces: list[tuple[str, int, int, bool]] = []
    total = sum(e - s for _, s, e, _ in ranges)
    want = max(min_partitions or 1, 1)
    for nsqd, s, e, clamp in ranges:
        size = e - s
        parts = 1
        if max_records:
            parts = -(-size // max_records)
        if want > 1:
            parts = max(parts, round(want * size / total), 1)
        step, extra = divmod(size, parts)
        at = s
        for i in range(parts):
            stop = at + step + (1 if i < extra else 0)
            if stop > at:
                pieces.append((nsqd, at, stop, clamp))
            at = stop
    return [NSQOffsetRange(nsqd, topic, s, e, clamp) for nsqd, s, e, clamp in pieces]


def _read(settings: OffsetSourceSettings, partition: InputPartition) -> Iterator[Any]:
    """The rows of one planned range, as Arrow record batches (executor)."""
    from nsq.spark.logread import read_range

    if not isinstance(partition, NSQOffsetRange):  # Spark's stand-in when a batch query planned nothing
        return iter([])
    return read_range(partition.nsqd, partition.topic, partition.start, partition.end, clamp=partition.clamp,
                      fail_on_data_loss=settings.fail_on_data_loss, auth_secret=settings.auth_secret)


def _check(errors: list, what: str) -> None:
    if errors:
        raise RuntimeError(f"nsq offsets source: {what}: " + "; ".join(str(e) for e in errors))


# -- the readers -------------------------------------------------------------------------


class NSQOffsetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("nsq")`` on offsets (see the module docstring).

    Args:
        settings: the checked options.
        schema: :data:`OFFSETS_STRUCT`.
    """

    def __init__(self, settings: OffsetSourceSettings, schema: StructType | None = None) -> None:
        self.settings = settings
        self.schema = schema
        self._cluster: LogCluster | None = None
        #: the heads seen by the last latestOffset (reportLatestOffset)
        self._latest: Offsets | None = None
        #: the heads when Trigger.AvailableNow began: nothing past them is read
        self._available_now: Offsets | None = None
        self._last_end: dict | None = None
        self._initial: dict | None = None

    @property
    def cluster(self) -> LogCluster:
        if self._cluster is None:
            self._cluster = LogCluster.from_settings(self.settings)
        return self._cluster

    def __getstate__(self) -> dict:  # what goes to the executors: the settings
        return {"settings": self.settings, "schema": self.schema, "_cluster": None, "_latest": None,
                "_available_now": None, "_last_end": None, "_initial": None}

    def initialOffset(self) -> dict:
        """``startingOffsets`` resolved against the nsqds (once per reader:
        Spark asks again when it plans the first batch); the progress
        channel is made to stand there on each of them.

        ``latest`` is where the progress channel stands on an nsqd that has
        it, the head elsewhere: Spark plans the first batch from
        ``initialOffset`` again after a restart if that batch was not
        committed, and the channel still holds the first answer then
        (``earliest`` and offsets are the same every time).

        Raises:
            RuntimeError: an nsqd or every lookupd did not answer.
            ValueError: an nsqd keeps the topic in no log.
        """
        if self._initial is not None:
            return self._initial
        s = self.settings
        states, errors = self.cluster.states(also=s.starting_offsets if isinstance(s.starting_offsets, dict) else ())
        _check(errors, "startingOffsets")
        offsets = resolve(s.starting_offsets, states, s.topic)
        if s.starting_offsets == "latest":
            offsets.update({n: st.channel_offset for n, st in states.items()
                            if st.channel_offset is not None and st.first <= st.channel_offset <= st.head})
        self.cluster.prepare_channels(offsets, states, fresh=True)
        log.info("nsq offsets source: %s starts at %s", s.topic, offsets)
        self._initial = to_json(offsets, s.topic)
        return self._initial

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` or ``ReadAllAvailable()``."""
        if self.settings.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.settings.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember the heads now: ``Trigger.AvailableNow`` reads up to them."""
        states, errors = self.cluster.states()
        _check(errors, "Trigger.AvailableNow")
        self._available_now = {n: st.head for n, st in states.items() if st.wal}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The next batch's end: each nsqd's head (capped at the
        ``Trigger.AvailableNow`` heads), at most ``limit`` rows in all.
        Commits ``start`` to the progress channels first (Spark asks for
        the next batch only once the previous one is committed). An nsqd
        that does not answer stays where it is; returns ``start`` when
        there is nothing new.

        Raises:
            RuntimeError: every lookupd failed.
        """
        topic = self.settings.topic
        known = start is not None
        if start is None:  # pyspark < 4.2 asks for the heads, without a start or a limit
            start = self._last_end or {}
        begin = from_json(start, topic)
        states = self._poll(begin)
        self.cluster.prepare_channels({n: begin.get(n, st.first) for n, st in states.items() if st.wal}, states)
        if known:
            self.cluster.commit(begin)
        latest: Offsets = dict(begin)
        for nsqd, st in states.items():
            if st.exists and not st.wal:
                raise RuntimeError(f"nsqd {nsqd} has topic {topic} but keeps it in no topic log "
                                   "(--storage=wal): it cannot be read by offset")
            if st.wal and (nsqd in begin or st.head > st.first):
                latest[nsqd] = st.head
        self._latest = dict(latest)
        if self._available_now is not None:
            cap = self._available_now
            latest = {n: min(h, cap[n]) if n in cap else begin[n] for n, h in latest.items()
                      if n in cap or n in begin}
        for nsqd, head in latest.items():
            if nsqd in begin and head < begin[nsqd]:
                if self.settings.fail_on_data_loss:
                    from nsq.spark.logread import DataLossError

                    raise DataLossError(nsqd, topic, begin[nsqd], -1, f"is past the head {head} of the topic's "
                                        "log (it went back: deleted and created again?)")
                log.warning("nsq offsets source: %s %s: the log went back to %d, reading it from 0", nsqd,
                            topic, head)
        rows = getattr(limit, "max_rows", None) or getattr(limit, "maxRows", None)
        end = rate_limit(begin, latest, int(rows) if rows else None)
        if end == begin:
            return start
        self._last_end = to_json(end, topic)
        return self._last_end

    def _poll(self, begin: Offsets) -> dict[str, LogState]:
        """The nsqds' states; when none has a message past ``begin``, asked
        again every :data:`POLL_INTERVAL` for up to ``fetchWait`` (Spark
        asks again at once after an empty answer)."""
        deadline = time.monotonic() + self.settings.fetch_wait
        while True:
            states, errors = self.cluster.states(also=begin)
            for error in errors:
                log.warning("nsq offsets source: %s", error)
            news = any(st.wal and st.head > begin.get(n, st.first) for n, st in states.items())
            if news or time.monotonic() + POLL_INTERVAL > deadline:
                return states
            time.sleep(POLL_INTERVAL)

    def reportLatestOffset(self) -> dict | None:
        """The heads the last :meth:`latestOffset` saw."""
        return None if self._latest is None else to_json(self._latest, self.settings.topic)

    def partitions(self, start: dict, end: dict) -> list[NSQOffsetRange]:
        """The ranges between ``start`` and ``end`` (:func:`plan_partitions`)."""
        s = self.settings
        return plan_partitions(from_json(start, s.topic), from_json(end, s.topic), s.topic, s.min_partitions,
                               s.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The range's rows as Arrow record batches, read from its nsqd (executor)."""
        return _read(self.settings, partition)

    def commit(self, end: dict) -> None:
        """Advance the progress channels to ``end``."""
        self.cluster.commit(from_json(end, self.settings.topic))

    def stop(self) -> None:
        """Nothing is held: nothing to give back."""


class NSQOffsetBatchReader(DataSourceReader):
    """``spark.read.format("nsq")`` on offsets: ``startingOffsets``
    (default ``earliest``) to ``endingOffsets`` (default ``latest``),
    resolved when Spark plans the query. Keeps no channel."""

    def __init__(self, settings: OffsetSourceSettings, schema: StructType | None = None) -> None:
        self.settings = settings
        self.schema = schema

    def partitions(self) -> list[NSQOffsetRange]:
        """The ranges to read.

        Raises:
            RuntimeError: an nsqd or every lookupd did not answer.
            ValueError: a start past its end, an nsqd without a topic log.
        """
        s = self.settings
        named = [*(s.starting_offsets if isinstance(s.starting_offsets, dict) else ()),
                 *(s.ending_offsets if isinstance(s.ending_offsets, dict) else ())]
        states, errors = LogCluster.from_settings(s).states(also=named)
        _check(errors, "planning the batch")
        start = resolve(s.starting_offsets, states, s.topic, EARLIEST)
        end = resolve(s.ending_offsets, states, s.topic, LATEST)
        for nsqd in sorted(set(start) & set(end)):
            if start[nsqd] > end[nsqd]:
                raise ValueError(f"nsq source: {nsqd} {s.topic}: startingOffsets {start[nsqd]} is past "
                                 f"endingOffsets {end[nsqd]}")
        start = {n: o for n, o in start.items() if n in end}
        return plan_partitions(start, end, s.topic, s.min_partitions, s.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The range's rows as Arrow record batches (executor)."""
        return _read(self.settings, partition)


def offsets_option_text(offsets: Mapping[str, int], topic: str) -> str:
    """``offsets`` as a startingOffsets / endingOffsets option value."""
    return json.dumps(to_json(offsets, topic))
