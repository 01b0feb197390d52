"""``GET /metrics``: nsqd's state in the Prometheus text exposition format.

Beyond Go nsqd, which has ``/stats`` and statsd but no Prometheus endpoint
(https://nsq.io/components/nsqd.html). Format:
https://prometheus.io/docs/instrumenting/exposition_formats/ (text format,
written by ``prometheus_client.generate_latest``; content type
``prometheus_client.CONTENT_TYPE_LATEST``).

Every figure is read from the daemon when the page is scraped (a custom
collector, :class:`NSQDCollector`): nothing is counted per message for
Prometheus, and the values are the ones ``/stats`` reports at the same moment
(:mod:`nsq.server.nsqd.stats` reads the same attributes). Each daemon has its
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
========================================================= ======= ===========================================

The two e2e families are present only with
``--e2e-processing-latency-percentile``. The summary has one sample per
configured quantile (label ``quantile`` as ``0.99``, ``1``) over the sliding
window ``--e2e-processing-latency-window-time``; it has no ``_sum`` and no
``_count`` (nsqd keeps no running sum, and the window's count goes down as the
window slides, so it is the gauge ``..._samples`` instead of a counter). While
a window is empty ``/stats`` says 0 and the summary says NaN, as Prometheus
client libraries do for a summary without observations.

Cost: one pass over topics and channels, about 20 samples per channel;
formatting is done by ``prometheus_client`` (pure Python, on the event loop
like ``/stats``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from nsq.server.httpapi import NSQ_HEADERS
from nsq.server.nsqd.stats import e2e_latency

if TYPE_CHECKING:
    from nsq.server.nsqd.nsqd import NSQD

__all__ = ["NSQDCollector", "make_registry", "registry_for", "render", "metrics_handler", "quantile_label"]

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
    """

    def __init__(self, nsqd: NSQD) -> None:
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
        t_msgs = CounterMetricFamily("nsq_topic_messages", "Messages published to the topic since it was "
                                     "created.", labels=_TOPIC)
        t_bytes = CounterMetricFamily("nsq_topic_message_bytes", "Bytes of message bodies published to the "
                                      "topic since it was created.", labels=_TOPIC)
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
        families: list[Metric] = [t_depth, t_backend, t_msgs, t_bytes, t_paused, c_depth, c_backend, c_inflight,
                                  c_deferred, c_msgs, c_requeued, c_timed_out, c_dead, c_clients, c_paused]
        e2e_on = bool(nsqd.options.e2e_processing_latency_percentiles)
        host = nsqd.options.broadcast_address
        if e2e_on:
            e2e_name = "nsq_channel_e2e_processing_latency_seconds"
            c_e2e = SummaryMetricFamily(e2e_name, "Time from publish to FIN (seconds), at the configured "
                                        "quantiles over the --e2e-processing-latency-window-time window; "
                                        "NaN while the window is empty.", labels=_CHANNEL)
            c_e2e_n = GaugeMetricFamily("nsq_channel_e2e_processing_latency_samples", "FINs in the e2e "
                                        "processing latency window.", labels=_CHANNEL)
            families += [c_e2e, c_e2e_n]

        for tname, topic in sorted(nsqd.topics.items()):
            tl = [tname]
            backend = topic.backend.depth
            t_depth.add_metric(tl, len(topic.queue) + backend)  # Topic.depth, backend read once
            t_backend.add_metric(tl, backend)
            t_msgs.add_metric(tl, topic.message_count)
            t_bytes.add_metric(tl, topic.message_bytes)
            t_paused.add_metric(tl, 1 if topic.paused else 0)
            for cname, ch in sorted(topic.channels.items()):
                cl = [tname, cname]
                backend = ch.backend.depth
                c_depth.add_metric(cl, len(ch.queue) + backend)  # Channel.depth
                c_backend.add_metric(cl, backend)
                c_inflight.add_metric(cl, len(ch.in_flight))
                c_deferred.add_metric(cl, len(ch.deferred))
                c_msgs.add_metric(cl, ch.message_count)
                c_requeued.add_metric(cl, ch.requeue_count)
                c_timed_out.add_metric(cl, ch.timeout_count)
                c_dead.add_metric(cl, ch.dead_letter_count)
                c_clients.add_metric(cl, len(ch.clients))
                c_paused.add_metric(cl, 1 if ch.paused else 0)
                if e2e_on and ch.e2e is not None:
                    latency = e2e_latency([ch.e2e], tname, cname, host)
                    count = latency["count"]
                    c_e2e_n.add_metric(cl, count)
                    for p in latency["percentiles"] or []:
                        value = p["value"] / 1e9 if count else math.nan
                        c_e2e.add_sample(e2e_name, {"topic": tname, "channel": cname,
                                                    "quantile": quantile_label(p["quantile"])}, value)

        yield from families
        yield GaugeMetricFamily("nsq_clients", "V2 (TCP) client connections open.", value=len(nsqd.clients))
        yield GaugeMetricFamily("nsq_health", "1 while nsqd is healthy (/ping answers OK), else 0.",
                                value=1 if nsqd.health == "OK" else 0)


def make_registry(nsqd: NSQD) -> CollectorRegistry:
    """A new registry with :class:`NSQDCollector` for ``nsqd`` and the
    library's process, platform and GC collectors (not the global registry)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NSQDCollector(nsqd))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


_REGISTRIES: weakref.WeakKeyDictionary[NSQD, CollectorRegistry] = weakref.WeakKeyDictionary()


def registry_for(nsqd: NSQD) -> CollectorRegistry:
    """``nsqd``'s registry, made on first use and kept while ``nsqd`` lives."""
    registry = _REGISTRIES.get(nsqd)
    if registry is None:
        registry = _REGISTRIES[nsqd] = make_registry(nsqd)
    return registry


def render(nsqd: NSQD) -> tuple[bytes, str]:
    """The ``/metrics`` page now: ``(body, content type)``, the body in the
    text exposition format (UTF-8), the type ``CONTENT_TYPE_LATEST``.

    Call on the daemon's event loop thread.
    """
    return generate_latest(registry_for(nsqd)), CONTENT_TYPE_LATEST


def metrics_handler(nsqd: NSQD) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler for ``GET /metrics`` of ``nsqd``.

    The response carries the NSQ ``X-NSQ-Content-Type`` header as every nsqd
    answer, and is gzip-compressed when the scraper accepts it (Prometheus
    does; a page for thousands of channels is megabytes of text).
    """
    registry = registry_for(nsqd)

    async def handler(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry),
                                headers={**NSQ_HEADERS, "Content-Type": CONTENT_TYPE_LATEST})
        response.enable_compression()
        return response

    return handler
