"""``nsq stat``: flags -> :mod:`nsq.apps.stat` (Go's nsq_stat lines) or,
on a terminal, :mod:`nsq.tui.stat` (the same figures live).

Go nsq_stat's flags (nsqio/nsq ``apps/nsq_stat/nsq_stat.go``;
https://nsq.io/components/utilities.html#nsq_stat), plus ``--plain`` and
``--http-auth-secret`` (default: ``$NSQ_AUTH_SECRET``), the secret sent to
nsqds started with ``--http-auth-required``.
Textual is imported only for the TUI, so ``nsq stat --help`` and piped
runs stay fast.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from nsq.commands._go import GoCommand, GoDuration, ShownRequired, fail, go_bool_option, run_async, stop_event

__all__ = ["stat"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", default="", cls=ShownRequired, help="NSQ topic")
@click.option("--channel", default="", cls=ShownRequired, help="NSQ channel")
@click.option("--count", "count", type=int, default=None, help="number of reports (default: until interrupted)")
@click.option("--interval", type=GoDuration(), default=2.0,
              help="duration of time between polling/printing output (default 2s)")
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times)")
@click.option("--nsqd-http-address", "nsqd", multiple=True,
              help="nsqd HTTP address (may be given multiple times)")
@click.option("--http-client-connect-timeout", type=GoDuration(), default=2.0,
              help="timeout for HTTP connect (default 2s)")
@click.option("--http-client-request-timeout", type=GoDuration(), default=5.0,
              help="timeout for HTTP request (default 5s)")
@click.option("--http-auth-secret", default="", envvar="NSQ_AUTH_SECRET", show_envvar=True,
              help="secret sent to the nsqds as 'Authorization: Bearer <secret>' (for nsqds started with "
                   "--http-auth-required); lookupds are asked without it")
@go_bool_option("--plain",
                help="print nsq_stat's plain lines even when stdout is a terminal (the default when piped)")
def stat(topic: str, channel: str, count: int | None, interval: float, lookupd: tuple[str, ...],
         nsqd: tuple[str, ...], http_client_connect_timeout: float, http_client_request_timeout: float,
         http_auth_secret: str, plain: bool) -> None:
    """Poll /stats of every nsqd with TOPIC and show CHANNEL's totals each --interval.

    A live TUI when stdout is a terminal; Go nsq_stat's plain lines when
    piped or with --plain.

    Beyond Go: an nsqd that is a replica, or a leader with replicas, adds a
    line before each interval's row, e.g. 'replication: ADDR leader epoch
    0 acks 1, replica ADDR lag 0 msgs 0.00s' or 'replication: ADDR replica
    of LEADER epoch 0 lag 12 msgs 0.04s' (a leader's figures are for
    TOPIC); a replica's copy of CHANNEL is not added to the totals.
    """
    if not topic or not channel:
        fail("--topic and --channel are required")
    if count is not None and count <= 0:
        fail("--count should be positive")
    if interval <= 0:
        fail("--interval should be positive")
    if not nsqd and not lookupd:
        fail("--nsqd-http-address or --lookupd-http-address required")
    if nsqd and lookupd:
        fail("use --nsqd-http-address or --lookupd-http-address not both")
    from nsq.apps.stat import StatError, StatPoller, run_plain

    # StatPoller hands auth_secret to its NSQDHTTPClient; given only when set
    extra = {"auth_secret": http_auth_secret} if http_auth_secret else {}
    poller = StatPoller(topic, channel, lookupd=list(lookupd), nsqd=list(nsqd), interval=interval,
                        connect_timeout=http_client_connect_timeout,
                        request_timeout=http_client_request_timeout, **extra)
    if not plain and _isatty(sys.stdout):
        from nsq.tui.stat import run_stat_app

        sys.exit(run_stat_app(poller, count=count, out=sys.stdout))

    async def main() -> int:
        return await run_plain(poller, sys.stdout, count=count, stop=stop_event())

    try:
        code = run_async(main())
    except StatError as exc:
        fail(str(exc))
    sys.exit(code)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
