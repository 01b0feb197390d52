"""The ``nsq`` command: a click group whose subcommands load lazily.

Only the module of the subcommand being run is imported, so ``nsq --help``
and ``nsq --version`` answer without importing asyncio servers or aiohttp.
"""

from __future__ import annotations

import importlib
import sys

import click

from nsq import NSQ_VERSION, __version__

#: subcommand name -> (module, attribute, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "admin": ("nsq.commands.admin", "admin", "Browse and administer the cluster in a terminal UI (nsqadmin)."),
    "bench": ("nsq.commands.bench", "bench",
              "Load nsqd and print its throughput or latency (bench_writer, bench_reader)."),
    "cluster": ("nsq.commands.cluster", "cluster",
                "Run a local cluster in the foreground: one lookupd and N nsqd processes (-n)."),
    "lookupd": ("nsq.commands.lookupd", "lookupd",
                "Run nsqlookupd, the directory nsqds register with and consumers query."),
    "nsqd": ("nsq.commands.nsqd", "nsqd",
             "Run nsqd, the daemon that receives, queues and delivers messages."),
    "pub": ("nsq.commands.pub", "pub", "Publish stdin (split on a delimiter) or arguments to a topic (to_nsq)."),
    "stat": ("nsq.commands.stat", "stat",
             "Poll /stats of a topic's producers and print a channel's totals (nsq_stat)."),
    "tail": ("nsq.commands.tail", "tail", "Consume a topic/channel and write messages to stdout (nsq_tail)."),
    "to-file": ("nsq.commands.to_file", "to_file",
                "Archive topics to newline-delimited files, rotated and optionally gzipped (nsq_to_file)."),
    "to-http": ("nsq.commands.to_http", "to_http",
                "Consume a topic/channel and GET/POST each message to HTTP endpoints (nsq_to_http)."),
    "to-nsq": ("nsq.commands.to_nsq", "to_nsq", "Consume topics and republish them to other nsqds (nsq_to_nsq)."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = SUBCOMMANDS.get(cmd_name)
        if spec is None:
            return None
        module = importlib.import_module(spec[0])
        command: click.Command = getattr(module, spec[1])
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", "-V",
    message=f"nsq v{__version__} (NSQ protocol v{NSQ_VERSION}, Python {sys.version.split()[0]})",
)
def cli() -> None:
    """NSQ, the realtime distributed message platform, in Python.

    Wire-compatible with Go NSQ v1.2: official clients and tools work
    against these daemons, and these utilities against Go's.
    """


def main() -> None:
    """Console-script entry point for ``nsq``."""
    cli(prog_name="nsq")
