"""Daemons as real subprocesses for the reliability tests, and what /proc says about them.

``nsq nsqd`` / ``nsq lookupd`` run with ``--tcp-address 127.0.0.1:0`` and
``--http-address 127.0.0.1:0``; the bound ports are read from their log
(``TCP: listening on 127.0.0.1:PORT``), which goes to a file (a pipe nobody
reads would block a daemon that logs thousands of connections).

Sizes from /proc/<pid>/status are in bytes; ``NSQ_SOAK_SCALE`` (a float,
default 1) multiplies the work the fuzz and soak tests do, so a soak script
can run them bigger than CI does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["Daemon", "NSQDDaemon", "LookupdDaemon", "scale", "MiB"]

MiB = 1024 * 1024

_LISTEN = re.compile(r"(TCP|HTTP): listening on (\S+):(\d+)")


def scale(n: int, minimum: int = 1) -> int:
    """``n`` times ``NSQ_SOAK_SCALE`` (default 1), at least ``minimum``."""
    return max(minimum, int(n * float(os.environ.get("NSQ_SOAK_SCALE", "1"))))


class Daemon:
    """One ``python -m nsq <command>`` subprocess on loopback port 0.

    Attributes:
        tcp_port, http_port: the ports it bound.
        pid: its process id.
        log_path: its stderr (the log).
    """

    command = ""

    def __init__(self, *flags: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix=f"nsq-{self.command}-")
        self.dir = Path(self._dir.name)
        self.log_path = self.dir / "log"
        self._log = open(self.log_path, "wb")
        argv = [sys.executable, "-m", "nsq", self.command, "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0", "--log-level=info", *self.extra_flags(), *flags]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.pid = self.proc.pid
        self.tcp_port = self.http_port = 0
        try:
            self._wait_ready(30)
        except BaseException:
            self.stop()
            raise

    def extra_flags(self) -> list[str]:
        return []

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.command} exited {self.proc.returncode}: {self.log_tail()}")
            for kind, _host, port in _LISTEN.findall(self.log_path.read_text(errors="replace")):
                if kind == "TCP":
                    self.tcp_port = int(port)
                else:
                    self.http_port = int(port)
            if self.tcp_port and self.http_port:
                try:
                    if self.get("/ping") == b"OK":
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.command} did not start: {self.log_tail()}")

    # -- HTTP ----------------------------------------------------------------------

    def get(self, path: str, timeout: float = 5) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=timeout) as r:
            return r.read()

    def post(self, path: str, body: bytes = b"", timeout: float = 5) -> bytes:
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()

    # -- /proc -------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _status(self, key: str) -> int:
        """A ``kB`` field of /proc/<pid>/status, in bytes."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    def rss(self) -> int:
        """Resident set size now (bytes)."""
        return self._status("VmRSS")

    def peak_rss(self) -> int:
        """Highest resident set size since the process started (bytes)."""
        return self._status("VmHWM")

    def fds(self) -> int:
        """Open file descriptors."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def wait_fds(self, at_most: int, timeout: float = 10) -> int:
        """Poll until at most ``at_most`` fds are open; returns the last count."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.fds()
            if n <= at_most or time.monotonic() > deadline:
                return n
            time.sleep(0.05)

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def log_count(self, text: str) -> int:
        """Lines of the log containing ``text``."""
        return sum(text in line for line in self.log_path.read_text(errors="replace").splitlines())

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            return self.proc.returncode
        finally:
            self._log.close()
            self._dir.cleanup()


class NSQDDaemon(Daemon):
    """``nsq nsqd`` with a private data path."""

    command = "nsqd"

    def extra_flags(self) -> list[str]:
        data = self.dir / "data"
        data.mkdir()
        return [f"--data-path={data}"]


class LookupdDaemon(Daemon):
    """``nsq lookupd``."""

    command = "lookupd"
