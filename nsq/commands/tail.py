"""``nsq tail``: flags -> :func:`nsq.apps.tail.tail` (Go's nsq_tail,
nsqio/nsq ``apps/nsq_tail/nsq_tail.go``)."""

from __future__ import annotations

import asyncio
import sys

import click

from nsq.commands._consumer import check_sources, consumer_flags, consumer_settings, stop_event
from nsq.commands._go import GoCommand, fail, go_bool_option, run_async

__all__ = ["tail"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_tail", None, topic_required=True)
@click.option("-n", "total", default=0, type=int,
              help="total messages to show (will wait if starved) (default 0: no limit)")
@go_bool_option("--print-topic", help="print topic name where message was received")
def tail(topics: tuple[str, ...], channel: str | None, addresses: tuple[str, ...], lookupd: tuple[str, ...],
         max_in_flight: int, consumer_opts: tuple[str, ...], http_connect_timeout: float,
         http_request_timeout: float, total: int, print_topic: bool) -> None:
    """Consume TOPIC(s) and write each message body to stdout, one per line.

    Without --channel, an ephemeral channel tail<random>#ephemeral is used.
    """
    from nsq.apps.tail import ephemeral_channel
    from nsq.apps.tail import tail as run_tail

    if channel is None:
        channel = ephemeral_channel()
    check_sources(topics, channel, addresses, lookupd)
    if total < 0:
        fail("-n must be >= 0")
    if total and max_in_flight > total:
        max_in_flight = total
    identify, kwargs = consumer_settings("nsq_tail", consumer_opts, max_in_flight)

    async def main() -> int:
        return await run_tail(list(topics), channel, nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupd,
                              total=total, print_topic=print_topic, identify=identify, consumer_kwargs=kwargs,
                              stop=stop_event())

    from nsq.client.errors import ConnectError

    try:
        code = run_async(main())
    except ConnectError as exc:  # names the address: cannot connect to 127.0.0.1:4150: connection refused
        fail(str(exc))
    except (OSError, asyncio.TimeoutError) as exc:
        fail(f"cannot connect to nsqd: {exc}")
    except Exception as exc:
        fail(str(exc))
    sys.exit(code)
