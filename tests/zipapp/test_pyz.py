"""The one-file zipapp: build it with shiv and run a round trip through it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsq import __version__
from tests.cli.conftest import NSQDProcess, run_nsq

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build-pyz"), sys.executable], capture_output=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr.decode()
    path = ROOT / "dist" / "nsq.pyz"
    assert path.exists()
    return path


@pytest.mark.slow
def test_pyz_version(pyz):
    r = subprocess.run([str(pyz), "--version"], capture_output=True, timeout=60,
                       env={**os.environ, "SHIV_ROOT": str(pyz.parent / ".shiv")})
    assert r.returncode == 0, r.stderr
    assert __version__ in r.stdout.decode()


@pytest.mark.slow
def test_pyz_round_trip(pyz):
    prefix = [sys.executable, str(pyz)]
    d = NSQDProcess(prefix)
    try:
        r = run_nsq("pub", "--topic", "z", "--nsqd-tcp-address", d.tcp, input=b"one\ntwo\n", prefix=prefix)
        assert r.returncode == 0, r.stderr
        r = run_nsq("tail", "--topic", "z", "--nsqd-tcp-address", d.tcp, "-n", "2", prefix=prefix)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [b"one", b"two"]
    finally:
        assert d.stop() == 0
