"""Daemons and clients of the cluster fault tests, in network namespaces.

- :class:`NSQDNode` / :class:`LookupdNode`: ``python -m nsq nsqd|lookupd``
  in a :class:`~tests.faults.netns.Host`, on fixed ports of the host's own
  address (4150/4151, 4160/4161: every host is its own namespace), started,
  signalled (SIGKILL, SIGSTOP, SIGTERM) and restarted on the same data path.
- :class:`ClientProcess`: ``nsq tail`` / ``nsq pub`` / ``nsq to-nsq`` (or a
  script) in a host, each stdout line kept with the monotonic time it was
  read.
- :class:`Cluster`: nsqds and lookupds on a :class:`~tests.faults.netns.Net`,
  a tester host for the test itself, client hosts.

What the tests count and the load they make: :mod:`tests.faults.traffic`.
Times are ``time.monotonic()`` seconds. HTTP goes through
:func:`http_json`, run in a thread that enters the caller's host first.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.faults.netns import Host

__all__ = ["Cluster", "NSQDNode", "LookupdNode", "ClientProcess", "http_json", "rss_mib"]

NSQD_TCP, NSQD_HTTP = 4150, 4151
LOOKUPD_TCP, LOOKUPD_HTTP = 4160, 4161
PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[2]


def http_json(via: Host, url: str, method: str = "GET", timeout: float = 3.0) -> Any:
    """GET/POST ``url`` from inside ``via`` (this thread enters it for the
    call); the decoded JSON answer, or the raw bytes if it is not JSON."""
    with via.inside():
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data = r.read()
    try:
        return json.loads(data)
    except ValueError:
        return data


async def ahttp_json(via: Host, url: str, method: str = "GET", timeout: float = 3.0) -> Any:
    """:func:`http_json` in a worker thread."""
    return await asyncio.to_thread(http_json, via, url, method, timeout)


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    """A ``kB`` field of /proc/<pid>/status, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


class _Node:
    """One daemon in a host; ``tester`` is the host HTTP checks come from."""

    command = ""
    tcp_port = http_port = 0

    def __init__(self, host: Host, tester: Host, workdir: Path, *flags: str) -> None:
        self.host = host
        self.tester = tester
        self.dir = workdir / host.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "log"
        self.flags = list(flags)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def tcp(self) -> str:
        return f"{self.host.ip}:{self.tcp_port}"

    @property
    def http(self) -> str:
        return f"{self.host.ip}:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def argv(self) -> list[str]:
        ip = self.host.ip
        return [PYTHON, "-m", "nsq", self.command, f"--tcp-address={ip}:{self.tcp_port}",
                f"--http-address={ip}:{self.http_port}", f"--broadcast-address={ip}", "--log-level=info",
                *self.extra_flags(), *self.flags]

    def extra_flags(self) -> list[str]:
        return []

    def start(self) -> None:
        """Start the process (appending to its log); :meth:`wait_ready` next."""
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts} ----\n".encode())
            log.flush()
            self.proc = self.host.popen(self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=self.dir, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self, timeout: float = 30) -> float:
        """Poll ``/ping`` until it answers; returns the monotonic time it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.command} on {self.host} exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if http_json(self.tester, f"http://{self.http}/ping", timeout=1) == b"OK":
                    return time.monotonic()
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.command} on {self.host} did not start:\n{self.log_tail()}")

    def get(self, path: str, timeout: float = 3.0) -> Any:
        return http_json(self.tester, f"http://{self.http}{path}", timeout=timeout)

    async def aget(self, path: str, timeout: float = 3.0) -> Any:
        return await ahttp_json(self.tester, f"http://{self.http}{path}", timeout=timeout)

    def post(self, path: str, timeout: float = 3.0) -> Any:
        return http_json(self.tester, f"http://{self.http}{path}", method="POST", timeout=timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM (SIGCONT first, in case it was stopped), wait; SIGKILL
        after ``timeout`` s. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def rss(self) -> float:
        """Resident set size now (MiB)."""
        return rss_mib(self.pid)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class NSQDNode(_Node):
    """``nsq nsqd`` on ``host:4150``/``4151`` with its own data path,
    registered with ``lookupds`` (TCP addresses)."""

    command = "nsqd"
    tcp_port, http_port = NSQD_TCP, NSQD_HTTP

    def __init__(self, host: Host, tester: Host, workdir: Path, lookupds: Iterable[str] = (), *flags: str) -> None:
        super().__init__(host, tester, workdir, *flags)
        self.lookupds = list(lookupds)
        (self.dir / "data").mkdir(exist_ok=True)

    def extra_flags(self) -> list[str]:
        return [f"--data-path={self.dir / 'data'}", *(f"--lookupd-tcp-address={a}" for a in self.lookupds)]

    def stats(self, topic: str = "", timeout: float = 3.0) -> dict:
        q = f"&topic={topic}" if topic else ""
        return self.get(f"/stats?format=json{q}", timeout=timeout)

    async def astats(self, topic: str = "", timeout: float = 3.0) -> dict:
        return await asyncio.to_thread(self.stats, topic, timeout)

    def backlog(self, *topics: str, skip: Iterable[str] = (), in_flight: bool = False) -> int:
        """Messages of ``topics`` waiting on this nsqd: each topic's depth
        plus each channel's depth and deferred count (and, with
        ``in_flight``, its messages in flight); channels named in ``skip``
        are left out."""
        total = 0
        for t in self.stats().get("topics", []):
            if t["topic_name"] not in topics:
                continue
            total += t["depth"]
            for c in t["channels"]:
                if c["channel_name"] not in skip:
                    total += c["depth"] + c["deferred_count"] + (c["in_flight_count"] if in_flight else 0)
        return total

    def clients(self, topic: str, channel: str, client_id: str | None = None, timeout: float = 1.0) -> int:
        """Clients subscribed to ``topic``/``channel`` (with ``client_id``
        only those that IDENTIFYed with it)."""
        n = 0
        for t in self.stats(topic, timeout=timeout).get("topics", []):
            for c in t["channels"]:
                if t["topic_name"] == topic and c["channel_name"] == channel:
                    n += sum(1 for cl in c["clients"] if client_id is None or cl.get("client_id") == client_id)
        return n

    def channel_depth(self, topic: str, channel: str) -> int:
        """One channel's depth (0 if it does not exist)."""
        for t in self.stats(topic).get("topics", []):
            for c in t["channels"]:
                if t["topic_name"] == topic and c["channel_name"] == channel:
                    return c["depth"]
        return 0

    def create(self, topic: str, *channels: str) -> None:
        """The topic and its channels, by HTTP (so they exist before any publish)."""
        self.post(f"/topic/create?topic={topic}")
        for ch in channels:
            self.post(f"/channel/create?topic={topic}&channel={ch}")


class LookupdNode(_Node):
    """``nsq lookupd`` on ``host:4160``/``4161``."""

    command = "lookupd"
    tcp_port, http_port = LOOKUPD_TCP, LOOKUPD_HTTP

    def node_addresses(self, via: Host | None = None, timeout: float = 2.0) -> set[str]:
        """The broadcast addresses ``/nodes`` lists (asked from ``via``,
        default the tester)."""
        answer = http_json(via or self.tester, f"http://{self.http}/nodes", timeout=timeout)
        return {p["broadcast_address"] for p in answer.get("producers", [])}

    def lookup(self, topic: str, via: Host | None = None, timeout: float = 2.0) -> set[str]:
        """The broadcast addresses ``/lookup?topic=`` lists ({} for 404)."""
        try:
            answer = http_json(via or self.tester, f"http://{self.http}/lookup?topic={topic}", timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return set()
            raise
        return {p["broadcast_address"] for p in answer.get("producers", [])}


class ClientProcess:
    """A client process in a host; stdout lines kept as ``(time, line)``
    (``line`` without its newline), stderr in a file.

    Args:
        host: where it runs.
        argv: the command (``[PYTHON, "-m", "nsq", "tail", ...]``).
        workdir: where its stderr file goes.
        name: a file name for it.
        stdin: bytes to write to its stdin, then close it (None: no stdin).
    """

    def __init__(self, host: Host, argv: list[str], workdir: Path, name: str, stdin: bytes | None = None) -> None:
        self.host = host
        self.name = name
        self.err_path = workdir / f"{name}.stderr"
        self.lines: list[tuple[float, bytes]] = []
        self._err = open(self.err_path, "wb")
        self.proc = host.popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=self._err, cwd=ROOT,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._writer: threading.Thread | None = None
        if stdin is not None:
            self._writer = threading.Thread(target=self._write, args=(stdin,), daemon=True)
            self._writer.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        lines = self.lines
        for line in self.proc.stdout:
            lines.append((time.monotonic(), line.rstrip(b"\n")))

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self, n: int = 40) -> str:
        self._err.flush()
        return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-n:])

    async def wait(self, timeout: float) -> int | None:
        """Wait for it to exit; None if it still runs after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return self.proc.poll()

    def stop(self) -> int | None:
        """SIGTERM (SIGKILL after 10 s); the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        self._err.close()
        return self.proc.returncode


class Cluster:
    """``nsqds`` nsqds (hosts n0, n1, ...) registered with ``lookupds``
    lookupds (hosts l0, l1, ...), a ``tester`` host the test process enters
    (:meth:`Host.enter`), and ``clients`` extra hosts for client processes.

    Args:
        net: the :class:`~tests.faults.netns.Net` to build on.
        workdir: data paths and logs go under it.
        nsqd_flags, lookupd_flags: extra daemon flags.
    """

    def __init__(self, net: Any, workdir: Path, nsqds: int = 3, lookupds: int = 2, clients: Iterable[str] = (),
                 nsqd_flags: Iterable[str] = (), lookupd_flags: Iterable[str] = ()) -> None:
        self.net = net
        self.workdir = workdir
        self.tester = net.add("tester")
        self.clients = {name: net.add(name) for name in clients}
        self.lookupds = [LookupdNode(net.add(f"l{i}"), self.tester, workdir, *lookupd_flags) for i in range(lookupds)]
        lookupd_tcp = [lk.tcp for lk in self.lookupds]
        self.nsqds = [NSQDNode(net.add(f"n{i}"), self.tester, workdir, lookupd_tcp, *nsqd_flags)
                      for i in range(nsqds)]
        self.processes: list[ClientProcess] = []
        self._entered = False

    def start(self) -> None:
        """Start every daemon (at once) and wait until each answers /ping."""
        self.tester.enter()
        self._entered = True
        for node in [*self.lookupds, *self.nsqds]:
            node.start()
        for node in [*self.lookupds, *self.nsqds]:
            node.wait_ready()

    @property
    def nsqd_tcp(self) -> list[str]:
        return [n.tcp for n in self.nsqds]

    @property
    def lookupd_http(self) -> list[str]:
        return [lk.http for lk in self.lookupds]

    def run(self, host: Host, name: str, *argv: str, stdin: bytes | None = None) -> ClientProcess:
        """A client process in ``host`` (stopped at teardown)."""
        proc = ClientProcess(host, list(argv), self.workdir, name, stdin=stdin)
        self.processes.append(proc)
        return proc

    def nsq(self, host: Host, name: str, *args: str, stdin: bytes | None = None) -> ClientProcess:
        """``python -m nsq ARGS`` in ``host``."""
        return self.run(host, name, PYTHON, "-m", "nsq", *args, stdin=stdin)

    def wait_registered(self, topic: str, timeout: float = 30) -> None:
        """Wait until every lookupd lists every nsqd as a producer of ``topic``."""
        want = {n.host.ip for n in self.nsqds}
        deadline = time.monotonic() + timeout
        while True:
            seen = [lk.lookup(topic) for lk in self.lookupds]
            if all(s >= want for s in seen):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"lookupds list {seen} for {topic}, want {want}")
            time.sleep(0.1)

    async def wait_consumers(self, consumer: Any, topic: str, channel: str, timeout: float = 15) -> None:
        """Wait until ``consumer`` (a ``nsq.client.Consumer``) is connected to
        every nsqd and every nsqd has a client on ``topic``/``channel`` (a
        tool's consumer)."""
        deadline = time.monotonic() + timeout
        while len(consumer.connections) < len(self.nsqds) or not all(n.clients(topic, channel) for n in self.nsqds):
            assert time.monotonic() < deadline, "consumers did not connect to every nsqd"
            await asyncio.sleep(0.1)

    def diagnostics(self) -> str:
        """The last log lines of every daemon and client (for a failure)."""
        parts = []
        for node in [*self.lookupds, *self.nsqds]:
            parts.append(f"--- {node.command} {node.host} ---\n{node.log_tail(25)}")
        for proc in self.processes:
            parts.append(f"--- {proc.name} stderr ---\n{proc.stderr(25)}")
        return "\n".join(parts)

    def close(self) -> None:
        """Stop clients and daemons, leave the tester host, delete the namespaces."""
        try:
            for proc in self.processes:
                try:
                    proc.stop()
                except Exception:
                    pass
            for node in [*self.nsqds, *self.lookupds]:
                try:
                    node.stop(timeout=5)
                except Exception:
                    pass
        finally:
            if self._entered:
                self._entered = False
                self.tester.leave()
            self.net.close()
