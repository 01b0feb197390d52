"""One Prometheus registry per daemon instance, for ``GET /metrics``.

Several daemons can run in one process (tests, an embedded cluster), so
none uses prometheus_client's global registry: each gets its own with its
collector and the library's process, platform and GC collectors
(https://prometheus.github.io/client_python/collector/), made on first use
and kept while the daemon lives.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from nsq.server.httpapi import NSQ_HEADERS

__all__ = ["new_registry", "registry_for", "metrics_handler"]

_REGISTRIES: weakref.WeakKeyDictionary[Any, CollectorRegistry] = weakref.WeakKeyDictionary()


def new_registry(collector: Any) -> CollectorRegistry:
    """A new registry with ``collector`` and the process, platform and GC collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def registry_for(daemon: Any, make: Callable[[Any], CollectorRegistry]) -> CollectorRegistry:
    """``daemon``'s registry, made by ``make(daemon)`` on first use."""
    registry = _REGISTRIES.get(daemon)
    if registry is None:
        registry = _REGISTRIES[daemon] = make(daemon)
    return registry


def metrics_handler(registry: CollectorRegistry,
                    render: Callable[[CollectorRegistry], bytes]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler for ``GET /metrics``: ``render(registry)`` (the
    text exposition format, UTF-8) with the NSQ ``X-NSQ-Content-Type``
    header, gzip-compressed when the scraper accepts it (a page for
    thousands of channels is megabytes of text)."""

    async def handler(request: web.Request) -> web.Response:
        response = web.Response(body=render(registry), headers={**NSQ_HEADERS, "Content-Type": CONTENT_TYPE_LATEST})
        response.enable_compression()
        return response

    return handler
