"""``nsq pub`` as a library: publish pieces of a stream (or given bodies) to
a topic, round robin over nsqds, as Go's ``to_nsq`` does (nsqio/nsq
``apps/to_nsq/to_nsq.go``; https://nsq.io/components/utilities.html#to_nsq).

Go's to_nsq only takes ``--nsqd-tcp-address``; :func:`discover_nsqds` adds
lookupd discovery: the nsqds that have the topic, else every nsqd the
lookupds know (the first publish creates the topic there).

Each nsqd gets up to :data:`WINDOW` PUBs awaiting their ``OK`` before more
input is read; any refused publish raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import IO, Any

from nsq.cluster.lookupd import LookupdError, LookupdHTTPClient, LookupdQueryError, lookupd_producers, topic_producers

__all__ = ["WINDOW", "discover_nsqds", "publish", "split_stream"]

#: most PUBs awaiting OK per nsqd before reading more input
WINDOW = 256


async def discover_nsqds(lookupd_http_addresses: list[str], topic: str, *, user_agent: str | None = None) -> list[str]:
    """TCP addresses (``broadcast_address:tcp_port``) of the topic's
    producers (:func:`~nsq.cluster.lookupd.topic_producers`), else of every
    nsqd the lookupds know (:func:`~nsq.cluster.lookupd.lookupd_producers`).

    Raises:
        LookupdError: every lookupd failed (a LookupdQueryError), or none knows any nsqd.
    """
    async with LookupdHTTPClient(user_agent=user_agent) as client:
        producers = await topic_producers(lookupd_http_addresses, topic, client=client)
        if not producers:
            try:
                producers = await lookupd_producers(lookupd_http_addresses, client=client)
            except LookupdQueryError:
                pass
    found = list(dict.fromkeys(p.tcp_address for p in producers))
    if not found:
        raise LookupdError(",".join(lookupd_http_addresses), "no nsqd registered")
    return found


async def split_stream(stream: IO[bytes], delimiter: bytes) -> AsyncIterator[bytes]:
    """Yield the ``delimiter``-separated pieces of a binary stream, read in
    a thread (64 KiB at a time); empty pieces are skipped."""
    loop = asyncio.get_running_loop()
    read = getattr(stream, "read1", stream.read)
    rest = b""
    while True:
        chunk = await loop.run_in_executor(None, read, 65536)
        if not chunk:
            break
        rest += chunk
        *pieces, rest = rest.split(delimiter)
        for piece in pieces:
            if piece:
                yield piece
    if rest:
        yield rest


async def _items(bodies: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(bodies, AsyncIterable):
        async for item in bodies:
            yield item
    else:
        for item in bodies:
            yield item


async def publish(topic: str, nsqd_tcp_addresses: list[str], bodies: Iterable[bytes] | AsyncIterable[bytes], *,
                  rate: int = 0, identify: dict[str, Any] | None = None,
                  producer_kwargs: dict[str, Any] | None = None) -> int:
    """Publish every body to ``topic``, round robin over the nsqds.

    Args:
        topic: a valid topic name.
        nsqd_tcp_addresses: ``host:port`` of each nsqd (at least one).
        bodies: the message bodies (e.g. :func:`split_stream` of stdin).
        rate: messages per second at most (0: no limit).
        identify, producer_kwargs: the Producer's IDENTIFY fields and
            keyword arguments (``--producer-opt``).

    Returns:
        the number of messages published (each acknowledged with ``OK``).

    Raises:
        OSError / asyncio.TimeoutError: an nsqd cannot be reached;
        ErrorResponse / ConnectionClosedError: a publish was refused or lost.
    """
    from nsq.client import Producer

    producers = [Producer(a, dict(identify or {}), **(producer_kwargs or {})) for a in nsqd_tcp_addresses]
    pending: list[set[asyncio.Future]] = [set() for _ in producers]
    count = 0
    start = time.monotonic()
    try:
        await asyncio.gather(*(p.connect() for p in producers))
        async for body in _items(bodies):
            if rate:
                delay = start + count / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            i = count % len(producers)
            window = pending[i]
            if len(window) >= WINDOW:
                done, _ = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    window.discard(fut)
                    fut.result()
            window.add(asyncio.ensure_future(producers[i].publish(topic, body)))
            count += 1
        for window in pending:
            if window:
                for result in await asyncio.gather(*window, return_exceptions=True):
                    if isinstance(result, BaseException):
                        raise result
    finally:
        for p in producers:
            await p.close()
    return count
