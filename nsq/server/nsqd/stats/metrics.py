"""``GET /metrics``: nsqd's state in the Prometheus text exposition format.

Beyond Go nsqd, which has ``/stats`` and statsd but no Prometheus endpoint
(https://nsq.io/components/nsqd.html). Format:
https://prometheus.io/docs/instrumenting/exposition_formats/ (the text
format as ``prometheus_client.generate_latest`` writes it, byte for byte,
through the faster :func:`text_exposition`; content type
``prometheus_client.CONTENT_TYPE_LATEST``).

Every figure is read from the daemon when the page is scraped (a custom
collector, :class:`NSQDCollector`): nothing is counted per message for
Prometheus, and the values are the ones ``/stats`` reports at the same moment
(both read the typed stats :func:`nsq.server.nsqd.stats.collect.collect_stats`
builds, as statsd does). Each daemon has its
own :class:`~prometheus_client.CollectorRegistry` (several daemons may run in
one process), holding that collector and the library's process, platform and
GC collectors (``process_resident_memory_bytes``, ``python_info``,
``python_gc_collections_total``, ...; the process figures are the whole
process's).

Metrics (labels in braces; counters are exposed with the ``_total`` suffix):

========================================================= ======= ===========================================
name                                                      type    ``/stats`` field
========================================================= ======= ===========================================
``nsq_topic_depth{topic}``                                gauge   topic ``depth`` (memory + backend)
``nsq_topic_backend_depth{topic}``                        gauge   topic ``backend_depth``
``nsq_topic_messages_total{topic}``                       counter topic ``message_count``
``nsq_topic_message_bytes_total{topic}``                  counter topic ``message_bytes``
``nsq_topic_paused{topic}``                               gauge   topic ``paused`` (1 / 0)
``nsq_channel_depth{topic,channel}``                      gauge   channel ``depth``
``nsq_channel_backend_depth{topic,channel}``              gauge   channel ``backend_depth``
``nsq_channel_in_flight{topic,channel}``                  gauge   channel ``in_flight_count``
``nsq_channel_deferred{topic,channel}``                   gauge   channel ``deferred_count``
``nsq_channel_messages_total{topic,channel}``             counter channel ``message_count``
``nsq_channel_requeued_total{topic,channel}``             counter channel ``requeue_count``
``nsq_channel_timed_out_total{topic,channel}``            counter channel ``timeout_count``
``nsq_channel_dead_lettered_total{topic,channel}``        counter channel ``dead_letter_count``
``nsq_channel_clients{topic,channel}``                    gauge   channel ``client_count``
``nsq_channel_paused{topic,channel}``                     gauge   channel ``paused`` (1 / 0)
``nsq_channel_e2e_processing_latency_seconds``            summary channel ``e2e_processing_latency``
``{topic,channel,quantile}``                                      ``percentiles`` (ns / 1e9)
``nsq_channel_e2e_processing_latency_samples``            gauge   channel ``e2e_processing_latency``
``{topic,channel}``                                               ``count``
``nsq_clients``                                           gauge   V2 connections open
``nsq_health``                                            gauge   ``health``: 1 when ``OK``, else 0
``nsq_draining``                                          gauge   1 while draining (``/ping`` 503), else 0
========================================================= ======= ===========================================

The two e2e families are present only with
``--e2e-processing-latency-percentile``. The summary has one sample per
configured quantile (label ``quantile`` as ``0.99``, ``1``) over the sliding
window ``--e2e-processing-latency-window-time``; it has no ``_sum`` and no
``_count`` (nsqd keeps no running sum, and the window's count goes down as the
window slides, so it is the gauge ``..._samples`` instead of a counter). While
a window is empty ``/stats`` says 0 and the summary says NaN, as Prometheus
client libraries do for a summary without observations.

Cost: one pass over topics and channels on the event loop, as ``/stats``:
5 samples per topic and 10 per channel (plus 1 and one per quantile with
e2e). Measured: 10,000 topics with one channel each, 150,000 samples, an
8.3 MB page in about 0.2 s (:func:`scrape`); aiohttp compresses the answer
(gzip or deflate, when the scraper accepts it) in an executor thread.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from nsq._internal.durations import parse_duration
from nsq.server.promregistry import new_registry
from nsq.server.promregistry import metrics_handler as _metrics_handler
from nsq.server.promregistry import registry_for as _registry_for
from nsq.server.nsqd.stats.collect import collect_stats

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.host import DaemonHost
    from nsq.server.nsqd.stats.collect import NSQDStats

__all__ = ["NSQDCollector", "make_registry", "registry_for", "render", "metrics_handler", "quantile_label",
           "text_exposition", "scrape"]

_TOPIC = ("topic",)
_CHANNEL = ("topic", "channel")


def quantile_label(q: float) -> str:
    """A quantile as the ``quantile`` label value: the shortest decimal that
    reads back as ``q`` (``0.99``, ``0.5``, ``1``), as Go's client writes it."""
    text = repr(float(q))
    return text[:-2] if text.endswith(".0") else text


class NSQDCollector(Collector):
    """The nsqd figures of the module table, read from ``nsqd`` at each collect.

    Must be called on the daemon's event loop thread (it walks the topic and
    channel dicts the loop mutates), which the ``/metrics`` handler is.
    Samples are built directly (not through ``add_metric``) and share one
    labels dict per topic and per channel, which :func:`text_exposition`
    formats once.
    """

    def __init__(self, nsqd: DaemonHost) -> None:
        self.nsqd = nsqd

    def describe(self) -> list[Metric]:
        # nothing to check at registration: the families depend on the topics
        return []

    def collect(self) -> Iterator[Metric]:
        nsqd = self.nsqd
        t_depth = GaugeMetricFamily("nsq_topic_depth", "Messages queued in the topic (memory + disk), "
                                    "not yet copied to its channels.", labels=_TOPIC)
        t_backend = GaugeMetricFamily("nsq_topic_backend_depth", "Messages of nsq_topic_depth in the topic's "
                                      "disk queue.", labels=_TOPIC)
        t_msgs = CounterMetricFamily("nsq_topic_messages", "Messages published to the topic since nsqd "
                                     "started.", labels=_TOPIC)
        t_bytes = CounterMetricFamily("nsq_topic_message_bytes", "Bytes of message bodies published to the "
                                      "topic since nsqd started.", labels=_TOPIC)
        t_paused = GaugeMetricFamily("nsq_topic_paused", "1 while the topic is paused, else 0.", labels=_TOPIC)
        c_depth = GaugeMetricFamily("nsq_channel_depth", "Messages queued in the channel (memory + disk), "
                                    "not counting in-flight and deferred ones.", labels=_CHANNEL)
        c_backend = GaugeMetricFamily("nsq_channel_backend_depth", "Messages of nsq_channel_depth in the "
                                      "channel's disk queue.", labels=_CHANNEL)
        c_inflight = GaugeMetricFamily("nsq_channel_in_flight", "Messages sent to a client and not yet "
                                       "finished, requeued or timed out.", labels=_CHANNEL)
        c_deferred = GaugeMetricFamily("nsq_channel_deferred", "Messages held back until their deferral "
                                       "(DPUB or REQ with a delay) ends.", labels=_CHANNEL)
        c_msgs = CounterMetricFamily("nsq_channel_messages", "Messages the channel received from its topic.",
                                     labels=_CHANNEL)
        c_requeued = CounterMetricFamily("nsq_channel_requeued", "Messages requeued by a client (REQ).",
                                         labels=_CHANNEL)
        c_timed_out = CounterMetricFamily("nsq_channel_timed_out", "In-flight messages that reached their "
                                          "timeout and were requeued.", labels=_CHANNEL)
        c_dead = CounterMetricFamily("nsq_channel_dead_lettered", "Messages moved to the dead-letter topic "
                                     "after their maximum attempts.", labels=_CHANNEL)
        c_clients = GaugeMetricFamily("nsq_channel_clients", "Clients subscribed to the channel.",
                                      labels=_CHANNEL)
        c_paused = GaugeMetricFamily("nsq_channel_paused", "1 while the channel is paused, else 0.",
                                     labels=_CHANNEL)
        topic_families: list[Metric] = [t_depth, t_backend, t_msgs, t_bytes, t_paused]
        channel_families: list[Metric] = [c_depth, c_backend, c_inflight, c_deferred, c_msgs, c_requeued,
                                          c_timed_out, c_dead, c_clients, c_paused]
        # (sample name, samples list) of each family, in the order of the values below
        t_out = [(f.name + ("_total" if f.type == "counter" else ""), f.samples) for f in topic_families]
        c_out = [(f.name + ("_total" if f.type == "counter" else ""), f.samples) for f in channel_families]
        e2e_on = bool(nsqd.options.e2e_processing_latency_percentiles)
        e2e_name = "nsq_channel_e2e_processing_latency_seconds"
        e2e_samples = "nsq_channel_e2e_processing_latency_samples"
        c_e2e = SummaryMetricFamily(e2e_name, "Time from publish to FIN (seconds), at the configured "
                                    "quantiles over the --e2e-processing-latency-window-time window; "
                                    "NaN while the window is empty.", labels=_CHANNEL)
        c_e2e_n = GaugeMetricFamily(e2e_samples, "FINs in the e2e processing latency window.", labels=_CHANNEL)
        e2e_out = c_e2e.samples.append
        e2e_n_out = c_e2e_n.samples.append

        stats = collect_stats(nsqd, include_clients=False, include_mem=False)
        for topic in stats.topics or []:
            tname = topic.topic_name
            tl = {"topic": tname}
            values: tuple[float, ...] = (
                topic.depth,
                topic.backend_depth,
                topic.message_count,
                topic.message_bytes,
                1 if topic.paused else 0,
            )
            for (name, samples), value in zip(t_out, values):
                samples.append(Sample(name, tl, value))
            for ch in topic.channels:
                cname = ch.channel_name
                cl = {"topic": tname, "channel": cname}
                values = (
                    ch.depth,
                    ch.backend_depth,
                    ch.in_flight_count,
                    ch.deferred_count,
                    ch.message_count,
                    ch.requeue_count,
                    ch.timeout_count,
                    ch.dead_letter_count,
                    ch.client_count,
                    1 if ch.paused else 0,
                )
                for (name, samples), value in zip(c_out, values):
                    samples.append(Sample(name, cl, value))
                latency = ch.e2e_processing_latency
                if e2e_on and latency.percentiles is not None:
                    count = latency.count
                    e2e_n_out(Sample(e2e_samples, cl, count))
                    for q, ns in latency.percentiles:
                        e2e_out(Sample(e2e_name, {"topic": tname, "channel": cname, "quantile": quantile_label(q)},
                                       ns / 1e9 if count else math.nan))

        yield from topic_families
        yield from channel_families
        yield from _log_families(stats)
        yield from _replication_families(stats)
        if e2e_on:
            yield c_e2e
            yield c_e2e_n
        yield GaugeMetricFamily("nsq_clients", "V2 (TCP) client connections open.", value=len(nsqd.clients))
        yield GaugeMetricFamily("nsq_health", "1 while nsqd is healthy (/stats health OK), else 0 (a disk "
                                "error: /ping answers 500).", value=1 if stats.health == "OK" else 0)
        yield GaugeMetricFamily("nsq_draining", "1 while nsqd drains before exiting (/ping answers 503 "
                                "DRAINING), else 0.", value=1 if nsqd.draining else 0)


def _log_families(stats: NSQDStats) -> Iterator[Metric]:
    """``--storage=wal``: the retained window of each topic log and each
    channel's offset (nothing when no topic has a log)."""
    topics = [t for t in stats.topics or [] if t.log is not None]
    if not topics:
        return
    head = GaugeMetricFamily("nsq_topic_head_offset", "Offset the next message published to the topic gets "
                             "(messages ever appended to its log).", labels=_TOPIC)
    first = GaugeMetricFamily("nsq_topic_first_offset", "Offset of the oldest message the topic log retains.",
                              labels=_TOPIC)
    retained = GaugeMetricFamily("nsq_topic_retained_bytes", "Bytes of the topic log on disk.", labels=_TOPIC)
    synced = GaugeMetricFamily("nsq_topic_synced_offset", "Offset below which every message of the topic log is "
                               "fsynced (head offset minus this: messages a power cut could take back).",
                               labels=_TOPIC)
    keep_time = GaugeMetricFamily("nsq_topic_retention_seconds", "The topic's retention by time (s; 0: finished "
                                  "messages are not kept).", labels=_TOPIC)
    keep_bytes = GaugeMetricFamily("nsq_topic_retention_bytes", "The topic's retention by size (bytes; 0: no cap).",
                                   labels=_TOPIC)
    oldest = GaugeMetricFamily("nsq_topic_oldest_timestamp_seconds", "Publish time (Unix s) of the oldest "
                               "message the topic log retains; 0 when it is empty.", labels=_TOPIC)
    offset = GaugeMetricFamily("nsq_channel_offset", "Offset of the next message the channel takes from its "
                               "topic log (head offset minus this: its lag).", labels=_CHANNEL)
    committed = GaugeMetricFamily("nsq_channel_committed_offset", "Offset below which the channel has finished "
                                  "every message (its low-water mark).", labels=_CHANNEL)
    for topic in topics:
        name = topic.topic_name
        tlog = topic.log
        assert tlog is not None
        head.add_metric([name], tlog.head_offset)
        first.add_metric([name], tlog.first_offset)
        retained.add_metric([name], tlog.retained_bytes)
        synced.add_metric([name], tlog.synced_offset)
        keep_time.add_metric([name], parse_duration(tlog.retention_time))
        keep_bytes.add_metric([name], tlog.retention_bytes)
        oldest.add_metric([name], tlog.oldest_timestamp / 1e9)
        for ch in topic.channels:
            if ch.offset is not None:
                offset.add_metric([name, ch.channel_name], ch.offset)
            if ch.committed_offset is not None:
                committed.add_metric([name, ch.channel_name], ch.committed_offset)
    yield from (head, synced, first, retained, keep_time, keep_bytes, oldest, offset, committed)


def _replication_families(stats: NSQDStats) -> Iterator[Metric]:
    """``--storage=wal``: the node's role, epoch, replicas and lag
    (docs/operations/replication.md); nothing otherwise."""
    rep = stats.replication
    if rep is None:
        return
    leader = rep["role"] == "leader"
    if leader:
        replicas = len(rep["replicas"])
        lag_msgs = max((r["lag_messages"] for r in rep["replicas"]), default=0)
        lag_s = max((r["lag_seconds"] for r in rep["replicas"]), default=0.0)
    else:
        replicas = 1 if rep.get("connected") else 0
        lag_msgs, lag_s = rep["lag_messages"], rep["lag_seconds"]
    yield GaugeMetricFamily("nsq_replication_leader", "1 on a leader, 0 on a replica (--replica-of).",
                            value=1 if leader else 0)
    yield GaugeMetricFamily("nsq_replication_epoch", "The node's leader epoch (one more at each promotion).",
                            value=rep["epoch"])
    yield GaugeMetricFamily("nsq_replication_replicas", "On a leader: replicas following it; on a replica: 1 "
                            "while connected to its leader.", value=replicas)
    yield GaugeMetricFamily("nsq_replication_lag_messages", "Messages not copied yet: on a leader, the largest "
                            "lag of its replicas; on a replica, its own.", value=lag_msgs)
    yield GaugeMetricFamily("nsq_replication_lag_seconds", "Age of the oldest message not copied yet (s; 0 "
                            "while the copy has everything): the largest of the replicas on a leader.", value=lag_s)


# -- the text format, written fast ----------------------------------------------

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
#: OpenMetrics types written under another name in the text format (generate_latest's munging)
_TEXT_TYPE = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}


class _Unusual(Exception):
    """Something :func:`text_exposition` leaves to ``generate_latest``."""


def text_exposition(registry: Collector) -> bytes:
    """``prometheus_client.generate_latest(registry)``, byte for byte, faster
    on large pages (UTF-8 text format,
    https://prometheus.io/docs/instrumenting/exposition_formats/).

    ``generate_latest`` formats every sample from scratch (sorting, escaping
    and joining its labels: about 5 us a sample, 0.7 s for 10,000 channels).
    Here a labels dict shared by several samples (as :class:`NSQDCollector`
    shares one per topic and per channel) is formatted once, and integer
    values once per value. Metric or label names outside the legacy charset
    (``[a-zA-Z_:][a-zA-Z0-9_:]*``), which ``generate_latest`` escapes, make it
    hand the whole page to ``generate_latest`` instead.
    """
    try:
        return _text(registry)
    except _Unusual:
        return generate_latest(registry)


def _label_text(labels: dict[str, str]) -> str:
    parts = []
    for key, value in sorted(labels.items()):
        if not _LABEL_NAME.match(key):
            raise _Unusual(key)
        value = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{key}="{value}"')
    return "{" + ",".join(parts) + "}"


def _text(registry: Collector) -> bytes:
    out: list[str] = []
    write = out.append
    # id(labels dict) -> (the dict, kept alive so its id stays its own; its text)
    label_texts: dict[int, tuple[dict[str, str], str]] = {}
    int_texts: dict[int, str] = {}
    names_ok: set[str] = set()
    for metric in registry.collect():
        name = metric.name
        mtype = metric.type
        if mtype == "counter":
            name += "_total"
        elif mtype == "info":
            name += "_info"
        mtype = _TEXT_TYPE.get(mtype, mtype)
        if not _METRIC_NAME.match(name):
            raise _Unusual(name)
        doc = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        write(f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n")
        suffixed = {metric.name + suffix: suffix for suffix in ("_created", "_gsum", "_gcount")}
        om_lines: dict[str, list[str]] = {}
        for sample in metric.samples:
            sname, labels, value, timestamp = sample[0], sample[1], sample[2], sample[3]
            if sname not in names_ok:
                if not _METRIC_NAME.match(sname):
                    raise _Unusual(sname)
                names_ok.add(sname)
            if labels:
                entry = label_texts.get(id(labels))
                if entry is None or entry[0] is not labels:
                    entry = label_texts[id(labels)] = (labels, _label_text(labels))
                label_text = entry[1]
            else:
                label_text = ""
            if type(value) is int:
                value_text = int_texts.get(value)
                if value_text is None:
                    value_text = int_texts[value] = floatToGoString(value)
            else:
                value_text = floatToGoString(value)
            line = f"{sname}{label_text} {value_text}\n" if timestamp is None else \
                f"{sname}{label_text} {value_text} {int(float(timestamp) * 1000):d}\n"
            suffix = suffixed.get(sname)
            if suffix is None:
                write(line)
            else:
                # OpenMetrics-only samples: a gauge of their own after the family
                om_lines.setdefault(suffix, []).append(line)
        for suffix, lines in sorted(om_lines.items()):
            write(f"# HELP {metric.name}{suffix} {doc}\n# TYPE {metric.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")


def scrape(registry: Collector) -> bytes:
    """:func:`text_exposition` with the cyclic garbage collector paused.

    A page allocates a tuple per sample (``Sample``) and frees it all by
    reference counting before returning (no cycles); with the collector on,
    10,000 channels' 150,000 tuples trigger hundreds of young collections
    and a full one over the daemon's heap (about 130 ms, which would also
    show in ``/stats`` ``gc_pause_usec``). Paused, a 10,000-channel page
    takes about half the time. The collector is switched back on only if it
    was on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return text_exposition(registry)
    finally:
        if enabled:
            gc.enable()


def make_registry(nsqd: DaemonHost) -> CollectorRegistry:
    """A new registry with :class:`NSQDCollector` for ``nsqd`` and the library's
    process, platform and GC collectors (:mod:`nsq.server.promregistry`)."""
    return new_registry(NSQDCollector(nsqd))


def registry_for(nsqd: DaemonHost) -> CollectorRegistry:
    """``nsqd``'s registry, made on first use and kept while it lives."""
    return _registry_for(nsqd, make_registry)


def render(nsqd: DaemonHost) -> tuple[bytes, str]:
    """The ``/metrics`` page now: ``(body, content type)``, the body in the
    text exposition format (UTF-8), the type ``CONTENT_TYPE_LATEST``.

    Call on the daemon's event loop thread.
    """
    return scrape(registry_for(nsqd)), CONTENT_TYPE_LATEST


def metrics_handler(nsqd: DaemonHost) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler for ``GET /metrics`` of ``nsqd``
    (:func:`nsq.server.promregistry.metrics_handler`)."""
    return _metrics_handler(registry_for(nsqd), scrape)
