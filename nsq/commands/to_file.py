"""``nsq to-file``: archive topics to newline-delimited files (nsq_to_file).

Flags, defaults and checks as Go nsq_to_file v1.2 (nsqio/nsq
``apps/nsq_to_file/nsq_to_file.go`` ``flagSet``, ``options.go``;
https://nsq.io/components/utilities.html); the work is
:class:`nsq.apps.to_file.ToFile`.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING, Any

import click

from nsq.commands._consumer import check_sources, consumer_flags, consumer_settings, stop_event
from nsq.commands._go import Decorator, GoCommand, GoDuration, fail, go_bool_option, run_async

if TYPE_CHECKING:
    from nsq.apps.file_logger import FileLoggerOptions

__all__ = ["to_file"]


def _bool_flag(name: str, help_text: str) -> Decorator:
    return go_bool_option(name, default=False, help=help_text)


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_to_file", "nsq_to_file")
@click.option("--topic-pattern", default="", help="only log topics matching the following pattern")
@click.option("--topic-refresh", type=GoDuration(), default=60.0,
              help="how frequently the topic list should be refreshed (default 1m0s)")
@click.option("--output-dir", default="/tmp", help='directory to write output files to (default "/tmp")')
@click.option("--work-dir", default="", help="directory for in-progress files before moving to output-dir")
@click.option("--datetime-format", default="%Y-%m-%d_%H",
              help='strftime compatible format for <DATETIME> in filename format (default "%Y-%m-%d_%H")')
@click.option("--filename-format", default="<TOPIC>.<HOST><REV>.<DATETIME>.log",
              help="output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> is "
                   "increased when file already exists) (default \"<TOPIC>.<HOST><REV>.<DATETIME>.log\")")
@click.option("--host-identifier", default="",
              help="value to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> are valid "
                   "replacement tokens")
@_bool_flag("--gzip", "gzip output files.")
@click.option("--gzip-level", type=int, default=6,
              help="gzip compression level (1-9, 1=BestSpeed, 9=BestCompression) (default 6)")
@_bool_flag("--skip-empty-files", "skip writing empty files")
@click.option("--rotate-size", type=int, default=0,
              help="rotate the file when it grows bigger than rotate-size bytes")
@click.option("--rotate-interval", type=GoDuration(), default=0.0, help="rotate the file every duration")
@click.option("--sync-interval", type=GoDuration(), default=30.0,
              help="sync file to disk every duration (default 30s)")
@click.option("--log-level", default="info",
              help='set log verbosity: debug, info, warn, error, or fatal (default "info")')
@click.option("--log-prefix", default="[nsq_to_file] ", help='log message prefix (default "[nsq_to_file] ")')
def to_file(topics: tuple[str, ...], channel: str, addresses: tuple[str, ...], lookupd: tuple[str, ...],
            max_in_flight: int, consumer_opts: tuple[str, ...], http_connect_timeout: float,
            http_request_timeout: float, topic_pattern: str, topic_refresh: float, output_dir: str, work_dir: str,
            datetime_format: str, filename_format: str, host_identifier: str, gzip: bool, gzip_level: int,
            skip_empty_files: bool, rotate_size: int, rotate_interval: float, sync_interval: float,
            log_level: str, log_prefix: str) -> None:
    """Consume TOPIC(s) and write the messages to newline-delimited files.

    A message is FINed only once it is written and synced to disk. Files
    rotate when <DATETIME> changes, after --rotate-interval or past
    --rotate-size bytes. With --work-dir, finished files move to --output-dir.
    SIGTERM/SIGINT: sync, FIN, close and move every file, exit 0.
    SIGHUP: close (and move) the current files.
    """
    import re

    from nsq.apps.file_logger import FileLoggerOptions, compute_filename_format
    from nsq._internal.logs import setup_logging

    if not channel:
        fail("--channel is required")
    if http_connect_timeout <= 0:
        fail("--http-client-connect-timeout should be positive")
    if http_request_timeout <= 0:
        fail("--http-client-request-timeout should be positive")
    check_sources(topics, channel, addresses, lookupd, need_topic=False)
    if not 1 <= gzip_level <= 9:
        fail(f"invalid --gzip-level value ({gzip_level}), should be 1-9")
    if not topics and not topic_pattern:
        fail("--topic or --topic-pattern required")
    if not topics and not lookupd:
        fail("--lookupd-http-address must be specified when no --topic specified")
    if topic_pattern:
        try:
            re.compile(topic_pattern)
        except re.error as exc:
            fail(f"invalid --topic-pattern {topic_pattern!r}: {exc}")
    if rotate_size < 0:
        fail("--rotate-size must be >= 0")
    if sync_interval <= 0:
        fail("--sync-interval should be positive")
    if topic_refresh <= 0:
        fail("--topic-refresh should be positive")
    try:
        setup_logging(log_prefix, log_level)
    except ValueError as exc:
        fail(str(exc))
    opts = FileLoggerOptions(output_dir=output_dir, work_dir=work_dir or output_dir,
                             datetime_format=datetime_format, filename_format=filename_format,
                             host_identifier=host_identifier, gzip=gzip, gzip_level=gzip_level,
                             skip_empty_files=skip_empty_files, rotate_size=rotate_size,
                             rotate_interval=rotate_interval, sync_interval=sync_interval,
                             max_in_flight=max(max_in_flight, 1))
    try:
        compute_filename_format(opts, "topic")
    except ValueError as exc:
        fail(str(exc))
    identify, kwargs = consumer_settings("nsq_to_file", consumer_opts, max_in_flight)
    opts.max_in_flight = max(kwargs["max_in_flight"], 1)
    try:
        code = run_async(_run(list(topics), channel, list(addresses), list(lookupd), opts, identify, kwargs,
                              topic_pattern, topic_refresh, http_connect_timeout, http_request_timeout))
    except OSError as exc:
        fail(str(exc))
    sys.exit(code)


async def _run(topics: list[str], channel: str, addresses: list[str], lookupd: list[str], opts: FileLoggerOptions,
               identify: dict[str, Any], kwargs: dict[str, Any], topic_pattern: str, topic_refresh: float,
               connect_timeout: float, request_timeout: float) -> int:
    from nsq.apps.to_file import ToFile
    from nsq.client.lookupd import LookupdHTTPClient

    lookupd_client = LookupdHTTPClient(connect_timeout, request_timeout, user_agent=identify["user_agent"])
    consumer_args = dict(kwargs, nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupd, identify=identify,
                         lookupd_client=lookupd_client)
    app = ToFile(topics, channel, opts, consumer_args, lookupd, topic_pattern, topic_refresh, lookupd_client)
    stop = stop_event()
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, app.hup)
    except (NotImplementedError, RuntimeError, AttributeError):
        pass
    try:
        await app.start()
        failed = asyncio.ensure_future(app.failed_event.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([failed, stopped], return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()
        stopped.cancel()
    finally:
        await app.stop()
        await lookupd_client.close()
    error = app.failed()
    if error is not None:
        click.echo(f"Error: {error}", err=True)
        return 1
    return 0
