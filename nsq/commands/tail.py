"""``nsq tail``: consume a topic/channel and write bodies to stdout (nsq_tail)."""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

import click

from nsq.commands._consumer import check_sources, consumer_flags, consumer_settings, stop_event
from nsq.commands._go import GoCommand, fail, run_async

__all__ = ["tail"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_tail", None)
@click.option("-n", "total", default=0, type=int, help="total messages to show (will wait if starved)")
@click.option("--print-topic", is_flag=True, help="print topic name where message was received")
def tail(topics: tuple[str, ...], channel: str | None, addresses: tuple[str, ...], lookupd: tuple[str, ...],
         max_in_flight: int, consumer_opts: tuple[str, ...], http_connect_timeout: float,
         http_request_timeout: float, total: int, print_topic: bool) -> None:
    """Consume TOPIC(s) and write each message body to stdout, one per line.

    Without --channel, an ephemeral channel tail<random>#ephemeral is used.
    """
    if channel is None:
        channel = f"tail{random.randrange(1000000)}#ephemeral"
    check_sources(topics, channel, addresses, lookupd)
    if total < 0:
        fail("-n must be >= 0")
    if total and max_in_flight > total:
        max_in_flight = total
    identify, kwargs = consumer_settings("nsq_tail", consumer_opts, max_in_flight)
    try:
        code = run_async(_tail(list(topics), channel, list(addresses), list(lookupd), total, print_topic,
                               identify, kwargs))
    except (OSError, asyncio.TimeoutError) as exc:
        fail(f"cannot connect to nsqd: {exc}")
    except Exception as exc:
        fail(str(exc))
    sys.exit(code)


async def _tail(topics: list[str], channel: str, addresses: list[str], lookupd: list[str], total: int,
                print_topic: bool, identify: dict[str, Any], kwargs: dict[str, Any]) -> int:
    from nsq.client import Consumer

    out = sys.stdout.buffer
    loop = asyncio.get_running_loop()
    done = stop_event()
    shown = 0
    flush_pending = False

    def flush() -> None:
        nonlocal flush_pending
        flush_pending = False
        try:
            out.flush()
        except BrokenPipeError:
            done.set()

    def make_handler(topic: str):
        prefix = topic.encode() + b" | "

        def handle(msg) -> bool:
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

    consumers = [Consumer(t, channel, make_handler(t), addresses, identify=identify, lookupd_http_addresses=lookupd,
                          **kwargs) for t in topics]
    try:
        await asyncio.gather(*(c.start() for c in consumers))
        await done.wait()
    finally:
        await asyncio.gather(*(c.close(timeout=1.0) for c in consumers), return_exceptions=True)
        flush()
    return 0
