"""Shell completion (click's): ``_NSQ_COMPLETE=bash_source nsq`` prints the
script to source, and completing asks the lazily loaded subcommands. Runs
the installed ``nsq`` console script (``python -m nsq`` when there is none)
in a subprocess: click writes completions to the real stdout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.cli.conftest import NSQ

_SCRIPT = shutil.which("nsq", path=os.path.dirname(sys.executable))
COMMAND = [_SCRIPT] if _SCRIPT else NSQ


def complete(shell_var: str, words: str = "", cword: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "_NSQ_COMPLETE": shell_var, "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    return subprocess.run(COMMAND, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _nsq_completion nsq"),
                                           ("zsh", "#compdef nsq"),
                                           ("fish", "complete --no-files --command nsq")])
def test_source_script(shell, marker):
    r = complete(f"{shell}_source")
    assert r.returncode == 0, r.stderr
    assert marker in r.stdout and "_NSQ_COMPLETE" in r.stdout


def test_bash_completes_subcommands_and_their_options():
    r = complete("bash_complete", "nsq to-", 1)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["plain,to-file", "plain,to-http", "plain,to-nsq"]
    assert complete("bash_complete", "nsq tail --print", 2).stdout.split() == ["plain,--print-topic"]
    assert complete("bash_complete", "nsq bench w", 2).stdout.split() == ["plain,writer"]
