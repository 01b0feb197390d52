"""``nsq pub``: flags -> :mod:`nsq.apps.pub` (Go's to_nsq: publish stdin
split on a delimiter, or the arguments; nsqio/nsq ``apps/to_nsq/to_nsq.go``)."""

from __future__ import annotations

import sys

import click

from nsq import __version__
from nsq.commands._consumer import producer_settings, tool_version
from nsq.commands._go import GoCommand, fail, run_async

__all__ = ["pub"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", required=True, help="NSQ topic to publish to")
@click.option("--nsqd-tcp-address", "addresses", multiple=True,
              help="destination nsqd TCP address (may be given multiple times; messages go round robin)")
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times): publish to the nsqds that have the "
                   "topic, or to every nsqd they know if none has it yet")
@click.option("--delimiter", default="\n", help='character to split input from stdin (default "\\n")')
@click.option("--rate", default=0, type=int, help="Throttle messages to n/second. 0 to disable (default 0)")
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
    from nsq.apps.pub import discover_nsqds, publish, split_stream

    async def main() -> int:
        nsqds = list(addresses)
        if lookupd:
            nsqds = await discover_nsqds(list(lookupd), topic, user_agent=f"to_nsq/{__version__}")
        bodies = [m.encode() for m in messages] if messages else split_stream(sys.stdin.buffer, delimiter.encode())
        return await publish(topic, nsqds, bodies, rate=rate, identify=identify, producer_kwargs=kwargs)

    try:
        run_async(main())
    except Exception as exc:  # a clean one-line error for the user
        fail(f"publish failed: {exc}")
