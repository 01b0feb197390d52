"""``nsq cluster``: flags -> :func:`nsq.apps.cluster.run` (one nsqlookupd and
N nsqd processes in the foreground)."""

from __future__ import annotations

import asyncio
import os
import sys

import click

from nsq.commands._go import GoCommand, GoDuration, fail

__all__ = ["cluster"]


class _ClusterCommand(GoCommand):
    """Go-style flags; what follows ``--`` is kept for every nsqd."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            args, ctx.meta["nsq.cluster.nsqd_flags"] = args[:i], args[i + 1:]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] [-- NSQD FLAGS...]")


@click.command(cls=_ClusterCommand, context_settings={"help_option_names": ["-h", "--help"],
                                                       "max_content_width": 120})
@click.option("-n", "--nsqds", "nsqds", type=int, default=1, show_default=True, help="nsqd processes to start")
@click.option("--replicas", "replicas", type=int, default=0, show_default=True, metavar="R",
              help="R replicas of each nsqd (all --storage=wal, each replica --replica-of its nsqd; "
                   "docs/operations/replication.md)")
@click.option("--data-path", "data_path", default="", metavar="DIR",
              help="base directory: nsqd i keeps its queues in DIR/nsqd-<i> (created; kept at exit, so a restart "
                   "with the same DIR and -n finds them) (default: a temporary directory, removed at exit)")
@click.option("--bind", "bind", default="127.0.0.1", show_default=True, metavar="ADDR",
              help="address every listener binds (0.0.0.0 to serve other hosts, with --broadcast-address)")
@click.option("--base-port", "base_port", type=int, default=4150, show_default=True, metavar="PORT",
              help="nsqd i listens on TCP PORT+2(i-1) and HTTP the port after, skipping the lookupd's pair; "
                   "0: free ports for every listener")
@click.option("--lookupd-port", "lookupd_port", type=int, default=None, metavar="PORT",
              help="the lookupd's TCP port, HTTP on the next (default 4160; free ports with --base-port 0)")
@click.option("--lookupd-tcp-address", "lookupd_tcp", multiple=True, metavar="ADDR",
              help="register with this running nsqlookupd instead of starting one (may be given multiple times)")
@click.option("--lookupd-http-address", "lookupd_http", multiple=True, metavar="ADDR",
              help="its HTTP address, to check the registrations and print (may be given multiple times)")
@click.option("--broadcast-address", "broadcast_address", default="", metavar="ADDR",
              help="address the nsqds register with lookupd, which consumers dial "
                   "(default: --bind if it is a specific address, else the hostname)")
@click.option("--mem-queue-size", "mem_queue_size", type=int, default=None,
              help="every nsqd's --mem-queue-size (default nsqd's, 10000)")
@click.option("--log-level", "log_level", default="",
              help="every daemon's --log-level: debug, info, warn, error or fatal (default info)")
@click.option("--stop-timeout", "stop_timeout", type=GoDuration(), default="1m0s", show_default=True,
              help="at exit, how long to wait for each daemon after SIGTERM before SIGKILL")
@click.pass_context
def cluster(ctx: click.Context, nsqds: int, replicas: int, data_path: str, bind: str, base_port: int, lookupd_port: int | None,
            lookupd_tcp: tuple[str, ...], lookupd_http: tuple[str, ...], broadcast_address: str,
            mem_queue_size: int | None, log_level: str, stop_timeout: float) -> None:
    """Run a local cluster in the foreground: one nsqlookupd and N nsqd
    processes (one core each), their own ports and data paths.

    Prints each daemon's TCP and HTTP address and the `nsq admin` command
    to watch them (run it in another terminal), relays their logs with
    the daemon's name in front, and stops them all on Ctrl-C or SIGTERM.
    Flags after `--` go to every nsqd (nsq cluster -n 4 -- --max-msg-size=2097152).
    """
    from nsq.apps.cluster import ClusterError, ClusterSpec, run

    if log_level and log_level.lower() not in ("debug", "info", "warn", "warning", "error", "fatal"):
        fail(f"invalid --log-level {log_level!r} (debug, info, warn, error, fatal)")
    spec = ClusterSpec(nsqds=nsqds, replicas=replicas, data_path=data_path, bind=bind, base_port=base_port, lookupd_port=lookupd_port,
                       lookupd_tcp_addresses=list(lookupd_tcp), lookupd_http_addresses=list(lookupd_http),
                       broadcast_address=broadcast_address, mem_queue_size=mem_queue_size, log_level=log_level,
                       nsqd_flags=list(ctx.meta.get("nsq.cluster.nsqd_flags", [])), stop_timeout=stop_timeout)
    if data_path and os.path.exists(data_path) and not os.path.isdir(data_path):
        fail(f"--data-path {data_path}: not a directory")
    colour = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
    try:
        spec.check()
        # the stdlib loop: this process only relays the daemons' output
        code = asyncio.run(run(spec, colour=colour))
    except ClusterError as exc:
        fail(str(exc))
    sys.exit(code)
