"""``nsq pub`` as a library: publish pieces of a stream (or given bodies) to
a topic, round robin over nsqds, as Go's ``to_nsq`` does (nsqio/nsq
``apps/to_nsq/to_nsq.go``; https://nsq.io/components/utilities.html#to_nsq).

Go's to_nsq only takes ``--nsqd-tcp-address``; :func:`discover_nsqds` adds
lookupd discovery: the nsqds that have the topic, else every nsqd the
lookupds know (the first publish creates the topic there).

Each nsqd gets up to :data:`WINDOW` PUBs awaiting their ``OK`` before more
input is read. A publish lost with its connection (the nsqd died, or
cannot be reached) goes to the next nsqd; a refused one (``E_BAD_TOPIC``)
raises.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import IO, Any

from nsq.cluster.lookupd import LookupdError, LookupdHTTPClient, LookupdQueryError, lookupd_producers, topic_producers

__all__ = ["WINDOW", "RETRY_AFTER", "discover_nsqds", "publish", "split_stream"]

log = logging.getLogger("nsq.pub")

#: most PUBs awaiting OK per nsqd before reading more input
WINDOW = 256
#: seconds an nsqd whose publish failed is left out of the rotation
RETRY_AFTER = 1.0


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
                  producer_kwargs: dict[str, Any] | None = None, retry_after: float = RETRY_AFTER) -> int:
    """Publish every body to ``topic``, round robin over the nsqds.

    A publish that fails because its nsqd cannot be reached or its
    connection was lost goes to the next nsqd; the failed nsqd is left out
    of the rotation for ``retry_after`` seconds, then tried again (it
    reconnects). A body that failed on every nsqd in turn ends the run. A
    body whose connection dropped before its ``OK`` may have been taken
    anyway: it can then arrive twice (at least once, as NSQ promises).

    Args:
        topic: a valid topic name.
        nsqd_tcp_addresses: ``host:port`` of each nsqd (at least one).
        bodies: the message bodies (e.g. :func:`split_stream` of stdin).
        rate: messages per second at most (0: no limit).
        identify, producer_kwargs: the Producer's IDENTIFY fields and
            keyword arguments (``--producer-opt``).
        retry_after: seconds a failed nsqd is skipped.

    Returns:
        the number of messages published (each acknowledged with ``OK``).

    Raises:
        OSError / asyncio.TimeoutError: no nsqd can be reached, or a body
            failed on every nsqd;
        ErrorResponse: a publish was refused (``E_BAD_TOPIC`` ...).
    """
    from nsq.client import Producer
    from nsq.client.errors import ConnectionClosedError

    retryable = (ConnectionClosedError, OSError, asyncio.TimeoutError)
    producers = [Producer(a, dict(identify or {}), **(producer_kwargs or {})) for a in nsqd_tcp_addresses]
    n = len(producers)
    down_until = [0.0] * n
    per = [0] * n  # publishes awaiting OK, per nsqd
    #: publish future -> (nsqd index, body, failures so far)
    pending: dict[asyncio.Future, tuple[int, bytes, int]] = {}
    retry: deque[tuple[bytes, int]] = deque()
    turn = 0
    count = taken = 0
    start = time.monotonic()

    def pick() -> int:
        nonlocal turn
        now = time.monotonic()
        for _ in range(n):
            i = turn % n
            turn += 1
            if down_until[i] <= now:
                return i
        i = turn % n  # every nsqd failed lately: try the next one anyway
        turn += 1
        return i

    async def settle() -> None:
        """Wait for at least one answer: count it, or queue its body for another nsqd."""
        nonlocal count
        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for fut in done:
            i, body, failures = pending.pop(fut)
            per[i] -= 1
            exc = fut.exception()
            if exc is None:
                count += 1
                continue
            if not isinstance(exc, retryable) or failures + 1 >= n:
                raise exc
            if down_until[i] <= time.monotonic():
                log.warning("publish to %s failed: %s; going on with the other nsqds", producers[i].address, exc)
            down_until[i] = time.monotonic() + retry_after
            retry.append((body, failures + 1))

    async def send(body: bytes, failures: int) -> None:
        nonlocal turn
        while True:
            i = pick()
            if per[i] < WINDOW:
                break
            turn -= 1  # its turn again once an answer came
            await settle()
        per[i] += 1
        pending[asyncio.ensure_future(producers[i].publish(topic, body))] = (i, body, failures)

    try:
        results = await asyncio.gather(*(p.connect() for p in producers), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if len(failed) == n:
            raise failed[0]
        for i, r in enumerate(results):
            if isinstance(r, BaseException):
                log.warning("%s; going on with the other nsqds", r)
                down_until[i] = time.monotonic() + retry_after
        async for body in _items(bodies):
            while retry:
                await send(*retry.popleft())
            if rate:
                delay = start + taken / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await send(body, 0)
            taken += 1
        while pending or retry:
            if retry:
                await send(*retry.popleft())
            else:
                await settle()
    finally:
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for p in producers:
            await p.close()
    return count
