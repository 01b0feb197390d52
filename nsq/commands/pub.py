"""``nsq pub``: publish stdin split on a delimiter (Go's to_nsq), or arguments."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import click

from nsq import __version__
from nsq.commands._consumer import producer_settings, tool_version
from nsq.commands._go import GoCommand, fail, run_async

__all__ = ["pub"]

#: most PUBs awaiting OK per nsqd before reading more input
WINDOW = 256


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", required=True, help="NSQ topic to publish to")
@click.option("--nsqd-tcp-address", "addresses", multiple=True,
              help="destination nsqd TCP address (may be given multiple times; messages go round robin)")
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times): publish to the nsqds that have the "
                   "topic, or to every nsqd they know if none has it yet")
@click.option("--delimiter", default="\n", show_default=r"\n",
              help="character to split input from stdin")
@click.option("--rate", default=0, type=int, help="Throttle messages to n/second. 0 to disable")
@click.option("--producer-opt", "producer_opts", multiple=True,
              help="option to passthrough to the Producer as key,value (may be given multiple times)")
@tool_version("to_nsq")
@click.argument("messages", nargs=-1)
def pub(topic: str, addresses: tuple[str, ...], lookupd: tuple[str, ...], delimiter: str, rate: int,
        producer_opts: tuple[str, ...], messages: tuple[str, ...]) -> None:
    """Publish messages to TOPIC on nsqd over TCP.

    With MESSAGES, publishes each argument; otherwise reads stdin and
    publishes each DELIMITER-separated piece (empty pieces are skipped).
    Exits non-zero if any publish fails.
    """
    from nsq.protocol.names import is_valid_topic_name

    if not addresses and not lookupd:
        fail("--nsqd-tcp-address or --lookupd-http-address required")
    if addresses and lookupd:
        fail("use --nsqd-tcp-address or --lookupd-http-address not both")
    if not is_valid_topic_name(topic):
        fail(f"invalid --topic {topic!r}")
    if len(delimiter.encode()) != 1:
        fail("--delimiter must be a single byte")
    if rate < 0:
        fail("--rate must be >= 0")
    identify, kwargs = producer_settings("to_nsq", producer_opts)
    source = [m.encode() for m in messages] if messages else None
    try:
        if lookupd:
            addresses = tuple(run_async(_discover(topic, list(lookupd))))
        run_async(_publish(topic, list(addresses), delimiter.encode(), rate, identify, kwargs, source))
    except Exception as exc:  # a clean one-line error for the user
        fail(f"publish failed: {exc}")


async def _discover(topic: str, lookupd: list[str]) -> list[str]:
    """TCP addresses of the topic's producers, else of every nsqd the lookupds know.

    Raises:
        LookupdError: every lookupd failed, or none knows any nsqd.
    """
    from nsq.client.lookupd import LookupdError, LookupdHTTPClient, producer_address

    async with LookupdHTTPClient(user_agent=f"to_nsq/{__version__}") as client:
        producers, errors = await client.lookup_all(lookupd, topic)
        if errors and len(errors) == len(lookupd):
            raise errors[0]
        if not producers:
            results = await asyncio.gather(*(client.nodes(a) for a in lookupd), return_exceptions=True)
            producers = [p for r in results if isinstance(r, list) for p in r]
        found = list(dict.fromkeys(producer_address(p) for p in producers))
        if not found:
            raise LookupdError(lookupd[0], "no nsqd registered")
        return found


async def _stdin_pieces(delim: bytes):
    """Yield delimiter-separated pieces of stdin, read in a thread."""
    loop = asyncio.get_running_loop()
    stream = sys.stdin.buffer
    rest = b""
    while True:
        chunk = await loop.run_in_executor(None, stream.read1, 65536)
        if not chunk:
            break
        rest += chunk
        *pieces, rest = rest.split(delim)
        for piece in pieces:
            if piece:
                yield piece
    if rest:
        yield rest


async def _publish(topic: str, addresses: list[str], delim: bytes, rate: int,
                   identify: dict[str, Any], kwargs: dict[str, Any], source: list[bytes] | None) -> int:
    from nsq.client import Producer

    producers = [Producer(a, identify, **kwargs) for a in addresses]
    await asyncio.gather(*(p.connect() for p in producers))
    pending: list[set[asyncio.Future]] = [set() for _ in producers]
    count = 0
    start = time.monotonic()

    async def items():
        if source is not None:
            for item in source:
                yield item
        else:
            async for item in _stdin_pieces(delim):
                yield item

    try:
        async for body in items():
            if rate:
                due = start + count / rate
                delay = due - time.monotonic()
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
                for fut in await asyncio.gather(*window, return_exceptions=True):
                    if isinstance(fut, BaseException):
                        raise fut
    finally:
        for p in producers:
            await p.close()
    return count
