"""Helpers shared by scripts/bench and scripts/bench-ceiling (not a command).

Importing this module re-executes the calling script under the project's
virtualenv (``.venv``) when there is one and it is not already running
there, so ``scripts/bench`` works from any shell.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENV = os.path.join(ROOT, ".venv")
if (os.path.exists(os.path.join(_VENV, "bin", "python")) and not os.environ.get("NSQ_BENCH_NO_VENV")
        and os.path.realpath(sys.prefix) != os.path.realpath(_VENV)):
    os.execv(os.path.join(_VENV, "bin", "python"), [os.path.join(_VENV, "bin", "python"), *sys.argv])
sys.path.insert(0, ROOT)

from nsq.apps.bench import parse_latency_line, parse_result_line  # noqa: E402  (after the re-exec above)

NSQ = [sys.executable, "-m", "nsq"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NSQD:
    """`nsq nsqd` as a subprocess on free ports with a temporary data path."""

    def __init__(self, *flags: str) -> None:
        self.data_path = tempfile.mkdtemp(prefix="nsq-bench-")
        self.tcp = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen([*NSQ, "nsqd", f"--tcp-address={self.tcp}", f"--http-address={self.http}",
                                      f"--data-path={self.data_path}", *flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.http}/ping", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    sys.exit(f"nsqd did not start (flags {' '.join(flags)})")
                time.sleep(0.05)

    def __enter__(self) -> NSQD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def create_channel(self, topic: str, channel: str) -> None:
        """Create ``topic`` and its ``channel`` over HTTP (messages then go straight to the channel)."""
        for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
            req = urllib.request.Request(f"http://{self.http}{path}", method="POST")
            urllib.request.urlopen(req, timeout=10).close()

    def stats(self, topic: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.http}/stats?format=json&topic={topic}", timeout=10) as r:
            return json.load(r)

    def channel_depth(self, topic: str, channel: str) -> int | None:
        for t in self.stats(topic).get("topics") or []:
            for c in t.get("channels") or []:
                if t["topic_name"] == topic and c["channel_name"] == channel:
                    return c["depth"]
        return None

    def rss_mb(self) -> float:
        """VmRSS of the nsqd process in MB (MiB, as /proc reports kB)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_path, ignore_errors=True)


def start_bench(mode: str, tcp: str, *flags: str) -> subprocess.Popen:
    """Start `nsq bench MODE` against ``tcp`` (collect with :func:`finish_bench`)."""
    return subprocess.Popen([*NSQ, "bench", mode, f"--nsqd-tcp-address={tcp}", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_bench(proc: subprocess.Popen, echo: bool = True) -> dict[str, Any]:
    """Wait for a `nsq bench` process; its parsed line (exits on failure)."""
    out, err = proc.communicate(timeout=900)
    parsed = parse_latency_line(out) if "[bench_latency]" in out else parse_result_line(out)
    if proc.returncode or parsed is None:
        sys.exit(f"{' '.join(proc.args[2:4])} failed: {err.strip() or out.strip()}")
    if echo:
        print("   ", out.strip(), file=sys.stderr, flush=True)
    return parsed


def run_bench(mode: str, tcp: str, *flags: str, echo: bool = True) -> dict[str, Any]:
    """Run `nsq bench MODE` to the end; its parsed line."""
    return finish_bench(start_bench(mode, tcp, *flags), echo)
