"""``nsq bench writer|reader|latency``: Go's bench_writer and bench_reader, and
a PUB -> consumer latency probe (:mod:`nsq.apps.bench`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from nsq.commands._go import GoCommand, GoDuration, fail, go_bool_option

__all__ = ["bench"]

# the defaults, as nsq.apps.bench has them (not imported: keeps `--help` light)
_CTX = {"help_option_names": ["-h", "--help"]}


def _common(func: Any) -> Any:
    for opt in reversed([
        click.option("--nsqd-tcp-address", default="127.0.0.1:4150",
                     help='<addr>:<port> to connect to nsqd (default "127.0.0.1:4150")'),
        click.option("--topic", default="sub_bench", help='topic to publish to / receive from (default "sub_bench")'),
        click.option("--size", default=200, type=click.IntRange(min=0), help="size of messages (default 200)"),
        click.option("--runfor", default="10s", type=GoDuration(), help="duration of time to run (default 10s)"),
        click.option("--deadline", default="",
                     help='deadline to start the benchmark run, "2006-01-02 15:04:05" (UTC)'),
    ]):
        func = opt(func)
    return func


def _connections(func: Any) -> Any:
    return click.option("--connections", type=click.IntRange(min=1), default=None,
                        help="connections, each in its own process (default: one per CPU, or $GOMAXPROCS)")(func)


def _upgrades(func: Any) -> Any:
    """go-nsq's connection options for TLS and compression (IDENTIFY)."""
    for opt in reversed([
        go_bool_option("--tls-v1", help="upgrade every connection to TLS (nsqd needs --tls-cert/--tls-key)"),
        go_bool_option("--tls-insecure-skip-verify", help="with --tls-v1: do not check nsqd's certificate"),
        click.option("--tls-root-ca-file", default="",
                     help="with --tls-v1: CA file to check nsqd's certificate with (default: the system's)"),
        go_bool_option("--snappy", help="snappy compression both ways"),
        go_bool_option("--deflate", help="deflate compression both ways"),
        click.option("--deflate-level", default=6, type=click.IntRange(1, 9),
                     help="with --deflate: compression level, 1 (fastest) to 9 (default 6)"),
    ]):
        func = opt(func)
    return func


def _channel(func: Any) -> Any:
    return click.option("--channel", default="ch", help='channel to receive messages on (default "ch")')(func)


@click.group(context_settings=_CTX)
def bench() -> None:
    """Load nsqd over TCP (V2) and print Go's bench result line.

    "writer" and "reader" are Go's bench_writer and bench_reader; "latency"
    times PUB -> delivery to a RDY 1 consumer. Works against any
    NSQ-compatible nsqd.
    """


@bench.command(cls=GoCommand, context_settings=_CTX)
@_common
@click.option("--batch-size", default=200, type=click.IntRange(min=1), help="batch size of messages (default 200)")
@_connections
@_upgrades
def writer(**flags: Any) -> None:
    """MPUB batches as fast as nsqd answers (Go's bench_writer)."""
    _run("writer", flags)


@bench.command(cls=GoCommand, context_settings=_CTX)
@_common
@_channel
@click.option("--rdy", default=2500, type=click.IntRange(min=1), help="RDY count to use (default 2500)")
@_connections
@_upgrades
def reader(**flags: Any) -> None:
    """SUB, RDY and FIN every message (Go's bench_reader)."""
    _run("reader", flags)


@bench.command(cls=GoCommand, context_settings=_CTX)
@_common
@_channel
@click.option("--until", type=click.Choice(["delivered", "ok"]), default="delivered",
              help="end each sample when the consumer reads the message, or when the producer reads "
                   'the PUB\'s OK (no consumer) (default "delivered")')
@_upgrades
def latency(**flags: Any) -> None:
    """PUB one message, receive it with RDY 1, FIN, repeat; print p50/p90/p99/max.

    Use a topic without a backlog (a fresh one, or one the channel is
    drained of): the consumer times the first message it gets. With
    --until=ok each sample is PUB -> OK on one connection.
    """
    _run("latency", flags)


def _run(mode: str, flags: dict[str, Any]) -> None:
    from nsq.apps import bench as lib
    from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

    if not is_valid_topic_name(flags["topic"]):
        fail(f"invalid --topic {flags['topic']!r}")
    if "channel" in flags and not is_valid_channel_name(flags["channel"]):
        fail(f"invalid --channel {flags['channel']!r}")
    if flags["runfor"] <= 0:
        fail("--runfor must be > 0")
    if flags["snappy"] and flags["deflate"]:
        fail("--snappy and --deflate are mutually exclusive")
    deadline = None
    if flags["deadline"]:
        try:
            deadline = lib.parse_deadline(flags["deadline"])
        except ValueError:
            fail(f'invalid --deadline {flags["deadline"]!r} (format "2006-01-02 15:04:05")')
    opts = lib.BenchOptions(
        nsqd_tcp_address=flags["nsqd_tcp_address"], topic=flags["topic"], size=flags["size"],
        runfor=flags["runfor"], deadline=deadline,
        channel=flags.get("channel") or lib.DEFAULT_CHANNEL,
        batch_size=flags.get("batch_size") or lib.DEFAULT_BATCH_SIZE,
        rdy=flags.get("rdy") or lib.DEFAULT_RDY,
        connections=flags.get("connections") or lib.default_connections(),
        until=flags.get("until") or "delivered",
        tls_v1=flags["tls_v1"], tls_insecure_skip_verify=flags["tls_insecure_skip_verify"],
        tls_root_ca_file=flags["tls_root_ca_file"], snappy=flags["snappy"], deflate=flags["deflate"],
        deflate_level=flags["deflate_level"],
    )
    runners: dict[str, Callable[..., lib.BenchResult | lib.LatencyResult]] = {
        "writer": lib.run_writer, "reader": lib.run_reader, "latency": lib.run_latency}
    runner = runners[mode]
    bar = _ProgressBar(mode, opts.runfor) if sys.stdout.isatty() else None
    try:
        if bar is None:
            result = runner(opts)
        else:
            with bar:
                result = runner(opts, bar.update)
    except lib.BenchError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    click.echo(result.line())


class _ProgressBar:
    """A rich progress bar over the run's time, with the live message rate."""

    def __init__(self, mode: str, runfor: float) -> None:
        self.runfor = runfor
        self.progress: Any = None
        self.mode = mode

    def __enter__(self) -> _ProgressBar:
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:  # plain output only
            return self
        self.progress = Progress(TextColumn("[bold]bench_{task.fields[mode]}"), BarColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"), transient=True,
                                 auto_refresh=False)  # no refresh thread: workers are forked
        self.task = self.progress.add_task("run", total=self.runfor, mode=self.mode, info="connecting")
        self.progress.__enter__()
        return self

    def update(self, elapsed: float, count: int) -> None:
        if self.progress is None:
            return
        rate = count / elapsed if elapsed > 0 else 0.0
        self.progress.update(self.task, completed=min(elapsed, self.runfor),
                             info=f"{count:,} msgs  {rate:,.0f} msg/s", refresh=True)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)
