"""Go-style flags for click commands.

Go's flag package accepts ``-flag value``, ``-flag=value``, ``--flag value``
and ``--flag=value``, and booleans as ``-flag`` or ``-flag=false``. The
:class:`GoCommand` class rewrites single-dash long flags to double-dash
before click parses, so scripts written for the Go tools keep working.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

import click

from nsq._internal.durations import format_duration, parse_duration

if TYPE_CHECKING:
    from nsq.server.options import OptionSpec

class _DaemonOptions(Protocol):
    log_level: str


#: a daemon's options dataclass (NSQDOptions, LookupdOptions)
Options = TypeVar("Options", bound=_DaemonOptions)
#: what a click decorator takes and gives back (a function, then a command)
Decorator = Callable[[Any], Any]

__all__ = ["GoBool", "GoBoolOption", "GoCommand", "GoDuration", "ShownRequired", "fail", "go_bool_option", "flag_values", "collect_options", "run_async", "serve_daemon",
           "spec_options", "stop_event"]


class GoCommand(click.Command):
    """A click command that also accepts Go's single-dash long flags."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out = []
        passthrough = False
        for arg in args:
            if passthrough:
                out.append(arg)
                continue
            if arg == "--":
                passthrough = True
            elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1 and arg[1].isalpha():
                name, eq, value = arg.partition("=")
                if len(name) > 2:
                    arg = "-" + arg  # Go's -long-flag
                elif eq:
                    out += [name, value]  # Go's -n=5
                    continue
            # anything else (a value such as -0.1 or -5) passes as it is
            out.append(arg)
        return super().parse_args(ctx, out)


class GoBool(click.ParamType):
    """A boolean flag value as Go parses it (true/false/1/0/t/f)."""

    name = "bool"
    _WORDS = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        word = str(value).lower()
        if word not in self._WORDS:
            self.fail(f"invalid boolean value {value!r}", param, ctx)
        return self._WORDS[word]


class GoBoolOption(click.Option):
    """A Go bool flag: ``--gzip`` alone is true, ``--gzip=false`` (``=0``,
    ``=f``, any :class:`GoBool` word) sets it; ``--help`` shows it as the
    flag alone (``--gzip``), as Go's flag package does, with no value
    placeholder."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("type", GoBool())
        kwargs["is_flag"] = False
        kwargs["flag_value"] = "true"
        kwargs["metavar"] = ""
        super().__init__(*args, **kwargs)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        return record[0].rstrip(), record[1]


def go_bool_option(*names: str, default: Any = False, help: str = "", **kwargs: Any) -> Decorator:
    """``click.option`` of a :class:`GoBoolOption`."""
    return click.option(*names, cls=GoBoolOption, default=default, help=help, **kwargs)


class ShownRequired(click.Option):
    """An option ``--help`` marks ``[required]`` whose absence the command
    reports itself, with the Go tool's message (``--topic is required``)
    and exit status 1 rather than click's usage error."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.required = True
        try:
            return super().get_help_record(ctx)
        finally:
            self.required = False


class GoDuration(click.ParamType):
    """A Go duration (``1m0s``, ``250ms``); converts to seconds (float)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except ValueError:
            self.fail(f"invalid duration {value!r} (examples: 250ms, 2s, 1m0s)", param, ctx)


def fmt_default(value: Any) -> str:
    if isinstance(value, float):
        return format_duration(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def run_async(main: Any) -> Any:
    """Run a coroutine on uvloop when installed, else the stdlib loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one error line to stderr and exit non-zero (no traceback)."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def _param_name(flag: str) -> str:
    return "opt_" + flag.replace("-", "_")


#: a help text that already names its default ("(default 0, i.e., unlimited)",
#: "(defaults to the OS hostname)", "default none"): no second "(default ...)"
_SAYS_DEFAULT = re.compile(r"\(defaults?\b|\bdefaults? (to|is|none)\b|\bdefault:")


def spec_options(specs: Sequence[OptionSpec], defaults: Any, shown: dict[str, str] | None = None) -> Decorator:
    """A decorator adding one click option per :class:`~nsq.server.options.OptionSpec`.

    Args:
        specs: the daemon's flag table.
        defaults: an options dataclass instance whose fields give the
            defaults shown in ``--help``.
        shown: default texts to show instead (``{"node_id": "hash of hostname"}``).

    Every option defaults to None, so :func:`flag_values` can tell flags
    given on the command line from defaults (Go's flags > config > defaults).
    """
    shown = shown or {}

    def decorate(func: Any) -> Any:
        for spec in reversed(specs):
            names = (f"--{spec.flag}", _param_name(spec.flag))
            if spec.cfg in shown:
                text = shown[spec.cfg]
            elif spec.kind in ("list", "floatlist"):
                text = ""
            else:
                text = fmt_default(getattr(defaults, spec.cfg))
            if _SAYS_DEFAULT.search(spec.help):
                text = ""  # the help text already says it (Go's own wording)
            help_text = spec.help + (f" (default {text})" if text else "")
            if spec.kind == "bool":
                opt = go_bool_option(*names, default=None, help=help_text)
            elif spec.kind == "duration":
                opt = click.option(*names, type=GoDuration(), default=None, help=help_text)
            elif spec.kind in ("list", "floatlist"):
                opt = click.option(*names, multiple=True, help=help_text)
            elif spec.kind == "int":
                opt = click.option(*names, type=int, default=None, help=help_text)
            else:
                opt = click.option(*names, default=None, help=help_text)
            func = opt(func)
        return func

    return decorate


def flag_values(specs: Sequence[OptionSpec], flags: dict[str, Any]) -> dict[str, Any]:
    """``{config key: value}`` for the flags given on the command line.

    Raises:
        nsq.server.options.ConfigError: a value that does not fit its option.
    """
    from nsq.server.options import coerce

    values: dict[str, Any] = {}
    for spec in specs:
        value = flags.get(_param_name(spec.flag))
        if value is None or (spec.kind in ("list", "floatlist") and not value):
            continue
        if spec.kind == "duration" and isinstance(value, float):
            # GoDuration already gave seconds; coerce() would read a number as
            # milliseconds (the TOML config rule)
            values[spec.cfg] = value
            continue
        values[spec.cfg] = coerce(spec, list(value) if isinstance(value, tuple) else value)
    return values


async def serve_daemon(daemon: Any, log: Any, banner: tuple[str, ...] = ()) -> int:
    """Raise the open-file limit (:mod:`nsq.server.fdlimit`), start
    ``daemon`` (``await start()``), tune the cycle collector
    (:mod:`nsq.server.gctune`), hand freed memory back every 10 s
    (:mod:`nsq.server.memtrim`), run until SIGINT/SIGTERM or until the
    daemon stops itself (nsqd's ``POST /drain``), then ``await stop()``.
    With nsqd's ``--drain-timeout`` a signal drains first (``drain()``; a
    second signal ends the wait). Returns the exit code: 0, or 1 if it
    could not start.

    ``banner`` lines are logged (info) first. Logs are held back until the
    start succeeds: a start that fails prints only ``Error: ...``
    (:func:`~nsq._internal.neterrors.describe_error`: ``cannot listen on
    127.0.0.1:4151 (HTTP): address already in use``) and the warnings
    logged meanwhile, if any, after it."""

    import logging

    from nsq._internal.logs import HeldLogs
    from nsq._internal.neterrors import describe_error
    from nsq.server.fdlimit import raise_nofile_limit

    held = HeldLogs.hold()
    for line in banner:
        log.info("%s", line)
    raise_nofile_limit()  # as Go's runtime: connections are fds
    try:
        await daemon.start()
    except (OSError, ValueError) as exc:
        await daemon.stop()
        click.echo(f"Error: {describe_error(exc)}", err=True)
        held.replay(logging.WARNING)
        return 1
    except BaseException:
        held.replay()
        raise
    held.replay()
    from nsq.server.gctune import tune_for_daemon
    from nsq.server.memtrim import trim_periodically, tune_malloc

    tune_for_daemon()
    tune_malloc()
    trimmer = asyncio.get_running_loop().create_task(trim_periodically())
    signals = stop_event()
    wait_stopped = getattr(daemon, "wait_stopped", None)  # nsqd can stop itself (POST /drain)
    stopped = asyncio.ensure_future(wait_stopped() if wait_stopped else asyncio.Event().wait())
    waiting = asyncio.ensure_future(signals.wait())
    await asyncio.wait({stopped, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    drain_timeout = getattr(getattr(daemon, "options", None), "drain_timeout", 0)
    if not stopped.done() and drain_timeout > 0:
        # a second signal ends the drain's wait at once
        signals.clear()
        loop = asyncio.get_running_loop()
        second = loop.create_task(signals.wait())
        second.add_done_callback(lambda _: daemon.skip_drain())
        await daemon.drain(drain_timeout)
        second.cancel()
    trimmer.cancel()
    await daemon.stop()
    stopped.cancel()
    return 0


def stop_event() -> asyncio.Event:
    """An event set on SIGINT or SIGTERM (call inside the running loop)."""
    import signal

    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, event.set)
        except (NotImplementedError, RuntimeError):
            pass
    return event


def collect_options(options: Options, specs: Sequence[OptionSpec], load_config: Callable[[str], dict[str, Any]],
                    config: str | None, flags: dict[str, Any]) -> Options:
    """Fill the options dataclass ``options``: its defaults, then the TOML
    ``config`` file (read with ``load_config``), then the flags given on the
    command line (Go's precedence); check ``log_level``.

    Raises:
        nsq.server.options.ConfigError: a bad config file, value or log level.
    """
    from nsq.server.options import ConfigError

    values: dict[str, Any] = {}
    if config:
        values.update(load_config(config))
    values.update(flag_values(specs, flags))
    for key, value in values.items():
        setattr(options, key, value)
    if options.log_level.lower() not in ("debug", "info", "warn", "warning", "error", "fatal"):
        raise ConfigError(f"invalid --log-level {options.log_level!r} (debug, info, warn, error, fatal)")
    return options
