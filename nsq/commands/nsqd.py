"""``nsq nsqd``: run the daemon with Go nsqd's flags and defaults."""

from __future__ import annotations

import logging
import os
from typing import Any

import click

from nsq import NSQ_VERSION, __version__
from nsq.commands._go import GoCommand, collect_options, fail, go_bool_option, run_async, serve_daemon, spec_options
from nsq.server.nsqd.options import OPTION_SPECS, ConfigError, NSQDOptions, load_config, validate

__all__ = ["nsqd"]

_DEFAULTS = NSQDOptions(node_id=0, broadcast_address="<hostname>")


def build_options(config: str | None, flags: dict[str, Any]) -> NSQDOptions:
    """Defaults, then the config file, then explicit flags (Go's precedence).

    Raises:
        ConfigError: a bad config file or value, a ``--data-path`` that is
            not an existing directory.
    """
    opts = collect_options(NSQDOptions(), OPTION_SPECS, load_config, config, flags)
    if not opts.data_path:
        opts.data_path = os.getcwd()  # Go nsqd's default
    elif not os.path.isdir(opts.data_path):
        # Go nsqd opens the directory to lock it and refuses to start
        # (nsqd.New: "failed to lock data-path"); it never creates it
        reason = "not a directory" if os.path.exists(opts.data_path) else "no such file or directory"
        raise ConfigError(f"failed to instantiate nsqd - failed to lock data-path: "
                          f"open {opts.data_path}: {reason}")
    if not 0 <= opts.node_id < 1024:
        raise ConfigError(f"--node-id must be in [0,1024), got {opts.node_id}")
    validate(opts)
    return opts


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"],
                                                 "max_content_width": 120})
@click.option("--config", "config", default=None, help="path to config file (TOML, Go nsqd's keys)")
@click.option("--version", "show_version", is_flag=True, help="print version string")
@go_bool_option("--verbose", "verbose", default=None, help="[deprecated] has no effect, use --log-level")
@click.option("--worker-id", "worker_id", type=int, default=None, help="[deprecated] use --node-id")
@spec_options(OPTION_SPECS, _DEFAULTS, {"node_id": "hash of hostname", "broadcast_address": "OS hostname"})
def nsqd(config: str | None, show_version: bool, verbose: Any, worker_id: int | None, **flags: Any) -> None:
    """nsqd: receive, queue and deliver messages (TCP protocol V2 + HTTP API).

    Flags are Go nsqd v1.2's, with its defaults; a single dash works too
    (-mem-queue-size=100). Durations use Go syntax: 250ms, 2s, 1m0s.
    """
    if show_version:
        click.echo(f"nsqd v{NSQ_VERSION} (nsq-python {__version__})")
        return
    if worker_id is not None and flags.get("opt_node_id") is None:
        flags["opt_node_id"] = worker_id
    try:
        opts = build_options(config, flags)
    except ConfigError as exc:
        fail(str(exc))
    from nsq._internal.logs import setup_logging

    setup_logging(opts.log_prefix, opts.log_level)
    code = run_async(_serve(opts))
    raise SystemExit(code)


async def _serve(opts: NSQDOptions) -> int:
    from nsq.server.nsqd import NSQD

    log = logging.getLogger("nsq.nsqd")
    return await serve_daemon(NSQD(opts), log, (f"nsqd v{NSQ_VERSION} (nsq-python {__version__})",
                                                f"ID: {opts.node_id}"))
