"""Every subcommand's --help: plain text (no reST or Markdown quoting),
defaults written one way (Go's "(default X)"), Go bool flags shown as flags
(and still taking Go's --flag=false), required options marked."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from nsq.cli import cli
from nsq.commands._go import GoBoolOption, GoCommand, go_bool_option

#: every subcommand's help, sub-subcommands too
COMMANDS = [["nsqd"], ["lookupd"], ["admin"], ["stat"], ["tail"], ["to-file"], ["to-http"], ["to-nsq"], ["pub"],
            ["bench"], ["bench", "writer"], ["bench", "reader"], ["bench", "latency"]]


def help_text(*args: str) -> str:
    r = CliRunner().invoke(cli, [*args, "--help"], prog_name="nsq", terminal_width=200)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_help_is_plain_and_consistent(args):
    text = help_text(*args)
    assert "`" not in text  # reST ``literal`` or Markdown `code`
    assert "[default:" not in text  # click's style: defaults are "(default X)" as in Go's tools
    assert not re.search(r"--[\w-]+ BOOL\b", text), "a Go bool flag shown as if it needed a value"


def option_line(text: str, flag: str) -> str:
    """The option's help record, its continuation lines joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == flag or line.strip().startswith(flag + " "))
    record = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 10):  # the next option, or the end
            break
        record.append(" " + line.strip())
    return "".join(record)


@pytest.mark.parametrize("args, flag", [(["tail"], "--topic"), (["to-http"], "--topic"), (["to-nsq"], "--topic"),
                                        (["to-nsq"], "--destination-nsqd-tcp-address"), (["stat"], "--topic"),
                                        (["stat"], "--channel"), (["pub"], "--topic")])
def test_required_options_are_marked(args, flag):
    assert option_line(help_text(*args), flag).rstrip().endswith("[required]")


def test_pub_defaults_shown_as_elsewhere():
    text = help_text("pub")
    assert option_line(text, "--delimiter").endswith('character to split input from stdin (default "\\n")')
    assert option_line(text, "--rate").endswith("(default 0)")


@pytest.mark.parametrize("args, flag", [(["to-file"], "--gzip"), (["to-file"], "--skip-empty-files"),
                                        (["admin"], "--serve"), (["admin"], "--read-only"), (["nsqd"], "--snappy"),
                                        (["nsqd"], "--verbose"), (["lookupd"], "--verbose"),
                                        (["tail"], "--print-topic"), (["stat"], "--plain")])
def test_go_bool_flags_shown_as_flags(args, flag):
    line = option_line(help_text(*args), flag)
    assert re.match(rf"\s*{flag}\s{{2,}}\S", line), line


def test_missing_required_topic_keeps_go_message():
    r = CliRunner().invoke(cli, ["tail", "--nsqd-tcp-address=127.0.0.1:4150"], prog_name="nsq")
    assert r.exit_code == 1 and r.output.strip() == "Error: --topic is required"


@click.command(cls=GoCommand)
@go_bool_option("--gzip", help="gzip output files")
def _probe(gzip: bool) -> None:
    click.echo(repr(gzip))


@pytest.mark.parametrize("argv, value", [([], "False"), (["--gzip"], "True"), (["--gzip=true"], "True"),
                                         (["--gzip=false"], "False"), (["-gzip"], "True"), (["-gzip=0"], "False"),
                                         (["--gzip=t"], "True")])
def test_go_bool_option_takes_go_spellings(argv, value):
    r = CliRunner().invoke(_probe, argv)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == value


def test_go_bool_option_bad_value():
    r = CliRunner().invoke(_probe, ["--gzip=maybe"])
    assert r.exit_code == 2 and "invalid boolean value 'maybe'" in r.output


def test_go_bool_option_is_the_class_used():
    assert isinstance(next(p for p in _probe.params if p.name == "gzip"), GoBoolOption)
