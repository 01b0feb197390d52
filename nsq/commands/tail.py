"""``nsq tail``: consume a topic/channel and write bodies to stdout (nsq_tail)."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from typing import Any

import click

from nsq.commands._go import GoCommand, fail, run_async

__all__ = ["tail"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", "topics", multiple=True, help="NSQ topic (may be given multiple times)")
@click.option("--channel", default=None, help="NSQ channel (default: an ephemeral tail<random>#ephemeral)")
@click.option("--nsqd-tcp-address", "addresses", multiple=True,
              help="nsqd TCP address (may be given multiple times)")
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times)")
@click.option("-n", "total", default=0, type=int, help="total messages to show (will wait if starved)")
@click.option("--print-topic", is_flag=True, help="print topic name where message was received")
@click.option("--max-in-flight", default=200, type=int, show_default=True,
              help="max number of messages to allow in flight")
@click.option("--consumer-opt", "consumer_opts", multiple=True,
              help="option to passthrough to the Consumer as key,value (may be given multiple times)")
def tail(topics: tuple[str, ...], channel: str | None, addresses: tuple[str, ...], lookupd: tuple[str, ...],
         total: int, print_topic: bool, max_in_flight: int, consumer_opts: tuple[str, ...]) -> None:
    """Consume TOPIC(s) and write each message body to stdout, one per line."""
    from nsq.client.errors import ClientConfigError
    from nsq.client.options import parse_opts
    from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

    if not topics:
        fail("--topic is required")
    if not addresses and not lookupd:
        fail("--nsqd-tcp-address or --lookupd-http-address required")
    if addresses and lookupd:
        fail("use --nsqd-tcp-address or --lookupd-http-address not both")
    for t in topics:
        if not is_valid_topic_name(t):
            fail(f"invalid --topic {t!r}")
    if channel is None:
        channel = f"tail{random.randrange(1000000)}#ephemeral"
    if not is_valid_channel_name(channel):
        fail(f"invalid --channel {channel!r}")
    if total < 0:
        fail("-n must be >= 0")
    if total and max_in_flight > total:
        max_in_flight = total
    try:
        identify, kwargs = parse_opts(consumer_opts, consumer=True)
    except ClientConfigError as exc:
        fail(str(exc))
    kwargs.setdefault("max_in_flight", max_in_flight)
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
    done = asyncio.Event()
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
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, done.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await asyncio.gather(*(c.start() for c in consumers))
        await done.wait()
    finally:
        await asyncio.gather(*(c.close(timeout=1.0) for c in consumers), return_exceptions=True)
        flush()
    return 0
