"""What the consuming utilities (tail, to-file, to-http, to-nsq) share.

The flags every Go consumer tool has (``--nsqd-tcp-address``,
``--lookupd-http-address``, ``--channel``, ``--max-in-flight``,
``--consumer-opt``, ``--http-client-*-timeout``, ``--version``), their
checks with Go's messages, and the stop-on-signal event.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from nsq.commands._go import Decorator, GoDuration, ShownRequired, fail, run_async, stop_event

__all__ = ["consumer_flags", "check_sources", "consumer_settings", "producer_settings", "run_forwarder", "stop_event",
           "tool_version",
           "user_agent"]


def user_agent(tool: str) -> str:
    """``nsq_to_file/0.1.0 nsq-python/0.1.0``, as Go's ``nsq_to_file/1.2.1 go-nsq/1.1.0``."""
    from nsq import __version__

    return f"{tool}/{__version__} nsq-python/{__version__}"


def tool_version(tool: str) -> Decorator:
    """A ``--version`` flag printing ``<tool> v<version>`` as the Go tools do."""
    from nsq import NSQ_VERSION, __version__

    def show(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{tool} v{__version__} (NSQ v{NSQ_VERSION} compatible)")
            ctx.exit(0)

    return click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=show,
                        help="print version string")


def consumer_flags(tool: str, default_channel: str | None, request_timeout: float = 5.0,
                   topic_multiple: bool = True, topic_required: bool = False) -> Decorator:
    """Decorator adding the consumer flags of Go's ``tool``.

    Adds parameters ``topics`` (tuple, or ``topic`` str when not
    ``topic_multiple``), ``channel``, ``addresses``, ``lookupd``,
    ``max_in_flight``, ``consumer_opts``, ``http_connect_timeout`` and
    ``http_request_timeout`` (seconds). ``topic_required``: ``--help`` marks
    ``--topic`` ``[required]`` (the command checks it, with Go's message).
    """
    topic_cls = ShownRequired if topic_required else click.Option
    options = [
        click.option("--topic", "topics", multiple=True, cls=topic_cls, help="nsq topic (may be given multiple times)")
        if topic_multiple else click.option("--topic", "topic", default="", cls=topic_cls, help="nsq topic"),
        click.option("--channel", default=default_channel,
                     help=f'nsq channel (default "{default_channel}")' if default_channel else "nsq channel"),
        click.option("--nsqd-tcp-address", "addresses", multiple=True,
                     help="nsqd TCP address (may be given multiple times)"),
        click.option("--lookupd-http-address", "lookupd", multiple=True,
                     help="lookupd HTTP address (may be given multiple times)"),
        click.option("--max-in-flight", type=int, default=200,
                     help="max number of messages to allow in flight (default 200)"),
        click.option("--consumer-opt", "consumer_opts", multiple=True,
                     help="option to passthrough to the Consumer, go-nsq Config names as key,value "
                          "(may be given multiple times)"),
        click.option("--http-client-connect-timeout", "http_connect_timeout", type=GoDuration(), default=2.0,
                     help="timeout for HTTP connect (default 2s)"),
        click.option("--http-client-request-timeout", "http_request_timeout", type=GoDuration(),
                     default=request_timeout,
                     help=f"timeout for HTTP request (default {int(request_timeout)}s)"),
        tool_version(tool),
    ]

    def decorate(func: Any) -> Any:
        for opt in reversed(options):
            func = opt(func)
        return func

    return decorate


def check_sources(topics: list[str] | tuple[str, ...], channel: str, addresses: tuple[str, ...],
                  lookupd: tuple[str, ...], need_topic: bool = True) -> None:
    """Exit with Go's message on a missing/invalid topic, channel or source."""
    from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

    if need_topic and not topics:
        fail("--topic is required")
    for t in topics:
        if not is_valid_topic_name(t):
            fail(f"invalid --topic {t!r}")
    if not channel or not is_valid_channel_name(channel):
        fail(f"invalid --channel {channel!r}")
    if not addresses and not lookupd:
        fail("--nsqd-tcp-address or --lookupd-http-address required")
    if addresses and lookupd:
        fail("use --nsqd-tcp-address or --lookupd-http-address not both")


def consumer_settings(tool: str, consumer_opts: tuple[str, ...], max_in_flight: int) -> tuple[dict, dict]:
    """(IDENTIFY fields, Consumer kwargs) from ``--consumer-opt`` and
    ``--max-in-flight`` (a ``max_in_flight`` consumer-opt wins, as in Go
    where the flag is applied first). Exits on a bad option."""
    from nsq.client.errors import ClientConfigError
    from nsq.client.options import parse_opts

    if max_in_flight < 0:
        fail("--max-in-flight must be >= 0")
    try:
        identify, kwargs = parse_opts(consumer_opts, consumer=True)
    except ClientConfigError as exc:
        fail(str(exc))
    identify.setdefault("user_agent", user_agent(tool))
    kwargs.setdefault("max_in_flight", max_in_flight)
    return identify, kwargs


def producer_settings(tool: str, producer_opts: tuple[str, ...]) -> tuple[dict, dict]:
    """(IDENTIFY fields, Producer kwargs) from ``--producer-opt``. Exits on a bad option."""
    from nsq.client.errors import ClientConfigError
    from nsq.client.options import parse_opts

    try:
        identify, kwargs = parse_opts(producer_opts, consumer=False)
    except ClientConfigError as exc:
        fail(str(exc))
    identify.setdefault("user_agent", user_agent(tool))
    return identify, kwargs


def run_forwarder(forwarder: Any) -> None:
    """Run a library app (``await start()`` / ``await stop()``) until
    SIGINT/SIGTERM and exit 0; a connection failure or other error is one
    ``Error:`` line and exit 1."""
    import sys

    async def run() -> int:
        stop = stop_event()
        try:
            await forwarder.start()
            await stop.wait()
        finally:
            await forwarder.stop()
        return 0

    from nsq.client.errors import ConnectError

    try:
        code = run_async(run())
    except ConnectError as exc:  # names the address: cannot connect to 127.0.0.1:4150: connection refused
        fail(str(exc))
    except (OSError, asyncio.TimeoutError) as exc:
        fail(f"cannot connect to nsqd: {exc}")
    except Exception as exc:
        fail(str(exc))
    sys.exit(code)
