"""What the tools ask nsqlookupds, over every lookupd at once.

Built on :mod:`nsq.client.lookupd` (the HTTP client and
:func:`~nsq.client.lookupd.topic_producers`, which the Consumer uses too);
re-exported here so the tools import one place. As nsqio/nsq
``internal/clusterinfo/data.go``: every lookupd is asked concurrently, the
answers unioned, the failures collected, and a query fails only when no
lookupd answered (:class:`~nsq.client.lookupd.LookupdQueryError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable

from nsq.client.lookupd import (
    LookupdError,
    LookupdHTTPClient,
    LookupdQueryError,
    Producer,
    ProducerList,
    topic_producers,
    union_producers,
)

__all__ = ["LookupdError", "LookupdHTTPClient", "LookupdQueryError", "Producer", "ProducerList",
           "lookupd_producers", "topic_nsqds", "topic_producers"]


async def lookupd_producers(lookupd_http_addresses: Iterable[str], *,
                            client: LookupdHTTPClient | None = None) -> ProducerList:
    """Every nsqd the lookupds know, by their ``/nodes`` (Go's
    ``clusterinfo.GetLookupdProducers``), unioned by ``broadcast_address:tcp_port``.

    Args:
        lookupd_http_addresses: ``host:port`` or ``http(s)://host:port``.
        client: the lookupd client to use; by default a new one, closed
            before returning.

    Returns:
        the producers (with ``topics`` and ``tombstones``), first seen
        first, and ``errors`` of the lookupds that failed; empty when no
        address is given.

    Raises:
        LookupdQueryError: every lookupd failed.
    """
    return await union_producers(lookupd_http_addresses, lambda lookupd, a: lookupd.nodes(a), client)


async def _partial(query: Awaitable[ProducerList]) -> ProducerList:
    """``query``'s answer; when every lookupd failed, no producer and their errors."""
    try:
        return await query
    except LookupdQueryError as exc:
        return ProducerList((), exc.errors)


async def topic_nsqds(lookupd_http_addresses: Iterable[str], topic: str, *,
                      client: LookupdHTTPClient | None = None) -> ProducerList:
    """The nsqds an admin action on ``topic`` must reach: the ``/lookup``
    producers (:func:`topic_producers`) plus the ``/nodes`` entries that
    list the topic, tombstoned ones included (``/lookup`` leaves those
    out, and a delete must still reach them).

    Returns:
        the producers unioned by ``broadcast_address:tcp_port``; ``errors``
        has one entry per lookupd whose ``/lookup`` failed (its ``/nodes``
        likely failed the same way). Never raises for a daemon's failure.
    """
    addresses = list(dict.fromkeys(lookupd_http_addresses))
    own = client is None
    lookupd = client if client is not None else LookupdHTTPClient()
    try:
        listed, nodes = await asyncio.gather(_partial(topic_producers(addresses, topic, client=lookupd)),
                                             _partial(lookupd_producers(addresses, client=lookupd)))
    finally:
        if own:
            await lookupd.close()
    found = {p.tcp_address: p for p in listed}
    for p in nodes:
        if topic in p.topics:
            found.setdefault(p.tcp_address, p)
    return ProducerList(found.values(), listed.errors)
