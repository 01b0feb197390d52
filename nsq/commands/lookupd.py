"""``nsq lookupd``: run nsqlookupd with Go nsqlookupd's flags and defaults."""

from __future__ import annotations

import logging
from typing import Any

import click

from nsq import NSQ_VERSION, __version__
from nsq.commands._go import GoCommand, collect_options, fail, go_bool_option, run_async, serve_daemon, spec_options
from nsq.server.lookupd.options import OPTION_SPECS, ConfigError, LookupdOptions, load_config

__all__ = ["lookupd"]

_DEFAULTS = LookupdOptions(broadcast_address="<hostname>")


def build_options(config: str | None, flags: dict[str, Any]) -> LookupdOptions:
    """Defaults, then the config file, then explicit flags (Go's precedence).

    Raises:
        ConfigError: a bad config file or value.
    """
    opts = collect_options(LookupdOptions(), OPTION_SPECS, load_config, config, flags)
    return opts


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"],
                                                 "max_content_width": 120})
@click.option("--config", "config", default=None, help="path to config file (TOML, Go nsqlookupd's keys)")
@click.option("--version", "show_version", is_flag=True, help="print version string")
@go_bool_option("--verbose", "verbose", default=None, help="[deprecated] has no effect, use --log-level")
@spec_options(OPTION_SPECS, _DEFAULTS, {"broadcast_address": "OS hostname"})
def lookupd(config: str | None, show_version: bool, verbose: Any, **flags: Any) -> None:
    """nsqlookupd: the directory nsqds register with and consumers ask.

    nsqds connect to --tcp-address (--lookupd-tcp-address on nsqd);
    consumers query --http-address (/lookup?topic=). Flags are Go
    nsqlookupd v1.2's; a single dash works too. Durations use Go syntax.
    """
    if show_version:
        click.echo(f"nsqlookupd v{NSQ_VERSION} (nsq-python {__version__})")
        return
    try:
        opts = build_options(config, flags)
    except ConfigError as exc:
        fail(str(exc))
    from nsq._internal.logs import setup_logging

    setup_logging(opts.log_prefix, opts.log_level)
    raise SystemExit(run_async(_serve(opts)))


async def _serve(opts: LookupdOptions) -> int:
    from nsq.server.lookupd import NSQLookupd

    log = logging.getLogger("nsq.lookupd")
    return await serve_daemon(NSQLookupd(opts), log, (f"nsqlookupd v{NSQ_VERSION} (nsq-python {__version__})",))
