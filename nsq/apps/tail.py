"""``nsq tail`` as a library: consume topics and write each message body to
a stream, one per line, as Go's nsq_tail (nsqio/nsq
``apps/nsq_tail/nsq_tail.go``; https://nsq.io/components/utilities.html#nsq_tail).

Output is flushed once per event-loop turn (not per message); a closed
pipe ends the tail quietly. With ``total``, messages past it are handed
back (REQ) and the tail ends once ``total`` were written.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

__all__ = ["ephemeral_channel", "tail"]


def ephemeral_channel() -> str:
    """nsq_tail's default channel: ``tail<random>#ephemeral``."""
    return f"tail{random.randrange(1000000)}#ephemeral"


async def tail(topics: list[str], channel: str, *, nsqd_tcp_addresses: Sequence[str] = (),
               lookupd_http_addresses: Sequence[str] = (), total: int = 0, print_topic: bool = False,
               identify: dict[str, Any] | None = None, consumer_kwargs: dict[str, Any] | None = None,
               out: IO[bytes] | None = None, stop: asyncio.Event | None = None) -> int:
    """Consume ``channel`` of every topic and write the bodies to ``out``.

    Args:
        topics, channel: what to consume (one Consumer per topic).
        nsqd_tcp_addresses, lookupd_http_addresses: where (one of the two).
        total: end after this many messages (0: until ``stop``).
        print_topic: prefix each line with ``<topic> | ``.
        identify, consumer_kwargs: the Consumer's IDENTIFY fields and
            keyword arguments (``--consumer-opt``, ``max_in_flight``).
        out: a binary stream (default: stdout's buffer).
        stop: set to end the tail (SIGINT, SIGTERM).

    Returns:
        0.

    Raises:
        OSError / asyncio.TimeoutError: no nsqd could be reached.
    """
    from nsq.client import Consumer

    out = out if out is not None else sys.stdout.buffer
    loop = asyncio.get_running_loop()
    done = stop if stop is not None else asyncio.Event()
    shown = 0
    flush_pending = False

    def flush() -> None:
        nonlocal flush_pending
        flush_pending = False
        try:
            out.flush()
        except BrokenPipeError:
            done.set()

    def make_handler(topic: str) -> Callable[[Any], bool]:
        prefix = topic.encode() + b" | "

        def handle(msg: Any) -> bool:
            nonlocal shown, flush_pending
            if total and shown >= total:
                return False  # past -n: hand it back
            shown += 1
            if print_topic:
                out.write(prefix)
            out.write(msg.body)
            out.write(b"\n")
            if not flush_pending:
                flush_pending = True
                loop.call_soon(flush)
            if total and shown >= total:
                done.set()
            return True

        return handle

    consumers = [Consumer(t, channel, make_handler(t), list(nsqd_tcp_addresses), identify=dict(identify or {}),
                          lookupd_http_addresses=list(lookupd_http_addresses), **(consumer_kwargs or {}))
                 for t in topics]
    try:
        await asyncio.gather(*(c.start() for c in consumers))
        await done.wait()
    finally:
        await asyncio.gather(*(c.close(timeout=1.0) for c in consumers), return_exceptions=True)
        flush()
    return 0
