"""``GET /metrics``: nsqlookupd's registration DB in the Prometheus text
exposition format.

Beyond Go nsqlookupd (https://nsq.io/components/nsqlookupd.html has no
metrics endpoint). Format:
https://prometheus.io/docs/instrumenting/exposition_formats/ (text format,
written by ``prometheus_client.generate_latest``; content type
``prometheus_client.CONTENT_TYPE_LATEST``).

The figures are read from the daemon's :class:`RegistrationDB` when the page
is scraped (:class:`LookupdCollector`); each daemon has its own
:class:`~prometheus_client.CollectorRegistry` with that collector and the
library's process, platform and GC collectors
(``process_resident_memory_bytes``, ...; the process figures are the whole
process's).

================================ ===== =================================================================
name                             type  meaning (the HTTP API answer it agrees with)
================================ ===== =================================================================
``nsqlookupd_producers``         gauge nsqd instances identified and pinged within
                                       ``--inactive-producer-timeout``: the length of ``/nodes``
                                       ``producers``
``nsqlookupd_topics``            gauge topics known: the length of ``/topics`` ``topics``
``nsqlookupd_channels``          gauge (topic, channel) pairs known: the sum over the topics of the
                                       length of ``/channels?topic=`` ``channels``
``nsqlookupd_tombstones``        gauge (topic, nsqd) registrations tombstoned by ``/topic/tombstone``
                                       less than ``--tombstone-lifetime`` ago: the ``true`` entries of
                                       ``/nodes`` ``tombstones`` (counted for inactive nsqds too)
================================ ===== =================================================================

All are unlabelled gauges. Cost: one pass over the registrations per scrape
(the page is small: ``generate_latest`` writes it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from nsq.server.promregistry import new_registry
from nsq.server.promregistry import metrics_handler as _metrics_handler
from nsq.server.promregistry import registry_for as _registry_for

if TYPE_CHECKING:
    from nsq.server.lookupd.lookupd import NSQLookupd

__all__ = ["LookupdCollector", "lookupd_figures", "make_registry", "registry_for", "render", "metrics_handler"]


def lookupd_figures(lookupd: NSQLookupd, now: float | None = None) -> dict[str, int]:
    """``{"producers", "topics", "channels", "tombstones"}`` as the module
    table defines them; ``now`` in ``time.monotonic()`` seconds."""
    opts = lookupd.options
    now = time.monotonic() if now is None else now
    producers: set[str] = set()
    topics: set[str] = set()
    channels = 0
    tombstones = 0
    for (category, key, _subkey), regs in lookupd.db.items():
        if category == "client":
            # /nodes: identified nsqds, active ones only (tombstones do not hide a node)
            producers.update(pid for pid, p in regs.items()
                             if p.is_active(opts.inactive_producer_timeout, 0.0, now))
        elif category == "topic":
            topics.add(key)
            tombstones += sum(1 for p in regs.values() if p.is_tombstoned(opts.tombstone_lifetime, now))
        elif category == "channel":
            # registrations are unique (topic, channel) keys
            channels += 1
    return {"producers": len(producers), "topics": len(topics), "channels": channels, "tombstones": tombstones}


class LookupdCollector(Collector):
    """The nsqlookupd figures of the module table, read at each collect
    (on the daemon's event loop thread)."""

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        figures = lookupd_figures(self.lookupd)
        yield GaugeMetricFamily("nsqlookupd_producers", "nsqd instances registered and active (as /nodes).",
                                value=figures["producers"])
        yield GaugeMetricFamily("nsqlookupd_topics", "Topics registered (as /topics).", value=figures["topics"])
        yield GaugeMetricFamily("nsqlookupd_channels", "(topic, channel) pairs registered (as /channels, "
                                "summed over the topics).", value=figures["channels"])
        yield GaugeMetricFamily("nsqlookupd_tombstones", "(topic, nsqd) registrations tombstoned within "
                                "--tombstone-lifetime.", value=figures["tombstones"])


def make_registry(lookupd: NSQLookupd) -> CollectorRegistry:
    """A new registry with :class:`LookupdCollector` for ``lookupd`` and the library's
    process, platform and GC collectors (:mod:`nsq.server.promregistry`)."""
    return new_registry(LookupdCollector(lookupd))


def registry_for(lookupd: NSQLookupd) -> CollectorRegistry:
    """``lookupd``'s registry, made on first use and kept while it lives."""
    return _registry_for(lookupd, make_registry)


def render(lookupd: NSQLookupd) -> tuple[bytes, str]:
    """The ``/metrics`` page now: ``(body, content type)`` (text exposition
    format, ``CONTENT_TYPE_LATEST``)."""
    return generate_latest(registry_for(lookupd)), CONTENT_TYPE_LATEST


def metrics_handler(lookupd: NSQLookupd) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler for ``GET /metrics`` of ``lookupd``
    (:func:`nsq.server.promregistry.metrics_handler`)."""
    return _metrics_handler(registry_for(lookupd), generate_latest)
