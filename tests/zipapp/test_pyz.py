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


@pytest.mark.slow
def test_pyz_cluster_starts_its_daemons_from_the_zipapp(pyz, tmp_path):
    """`nsq.pyz cluster` runs its lookupd and nsqd as `python nsq.pyz lookupd|nsqd`."""
    import signal

    from nsq.apps.cluster import parse_table

    env = {**os.environ, "SHIV_ROOT": str(pyz.parent / ".shiv"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(pyz), "cluster", "--base-port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("ready:"):
                break
        rows = parse_table(lines)
        assert set(rows) == {"lookupd", "nsqd-1"}, lines
        assert f"admin:     {pyz} admin --lookupd-http-address={rows['lookupd'].http}" in lines
        with open(f"/proc/{rows['nsqd-1'].pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[1:3] == [str(pyz).encode(), b"nsqd"]
        r = run_nsq("pub", "--topic", "z", "--nsqd-tcp-address", rows["nsqd-1"].tcp, input=b"one\n",
                    prefix=[sys.executable, str(pyz)])
        assert r.returncode == 0, r.stderr
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
