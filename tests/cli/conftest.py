from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaemonProcess:
    """An ``nsq`` daemon as a real subprocess on free loopback ports; ready
    once its HTTP ``/ping`` answers OK (20 s at most)."""

    name = "daemon"

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.proc.stderr.read().decode()}")
            try:
                if self.get("/ping") == b"OK":
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not start")

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://{self.http}{path}", timeout=5) as r:
            return r.read()

    def post(self, path: str, body: bytes = b"") -> bytes:
        req = urllib.request.Request(f"http://{self.http}{path}", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.read()

    def stop(self) -> int:
        """SIGTERM, wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(10)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()
            self._cleanup()

    def _cleanup(self) -> None:
        pass


class NSQDProcess(DaemonProcess):
    """`nsq nsqd` (or another launcher) with its own temporary data path."""

    name = "nsqd"

    def __init__(self, argv_prefix: list[str], extra: list[str] | None = None) -> None:
        import tempfile

        self._data_dir = tempfile.TemporaryDirectory(prefix="nsqd-data-")
        self.data_path = self._data_dir.name
        self.tcp_port = free_port()
        self.http_port = free_port()
        self.tcp = f"127.0.0.1:{self.tcp_port}"
        self.http = f"127.0.0.1:{self.http_port}"
        super().__init__(argv_prefix + ["nsqd", f"--tcp-address={self.tcp}", f"-http-address={self.http}",
                                        f"--data-path={self.data_path}"] + (extra or []))

    def _cleanup(self) -> None:
        self._data_dir.cleanup()


NSQ = [sys.executable, "-m", "nsq"]


@pytest.fixture
def nsqd_proc():
    d = NSQDProcess(NSQ)
    yield d
    d.stop()


def run_nsq(*args: str, input: bytes | None = None, timeout: float = 20, prefix=None) -> subprocess.CompletedProcess:
    return subprocess.run((prefix or NSQ) + list(args), input=input, capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
