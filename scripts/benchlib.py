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

import compileall  # noqa: E402

# The daemons a benchmark starts read the package's bytecode, as an installed
# nsq or the zipapp does, also where PYTHONDONTWRITEBYTECODE is set: else each
# start compiles ~80 modules from source (+0.1-0.25 s to /ping here). Also a
# worktree's package named by PYTHONPATH for an A/B (whose daemons must start
# outside the repository: `python -m` puts the working directory first).
for _path in [ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]:
    if _path and os.path.isdir(os.path.join(_path, "nsq")):
        compileall.compile_dir(os.path.join(_path, "nsq"), quiet=2)

NSQ = [sys.executable, "-m", "nsq"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NSQD:
    """`nsq nsqd` as a subprocess on free ports with a temporary data path."""

    def __init__(self, *flags: str, binary: str | None = None) -> None:
        """``binary``: another nsqd executable (Go's) taking the same flags."""
        self.data_path = tempfile.mkdtemp(prefix="nsq-bench-")
        self.tcp = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        argv = [binary] if binary else [*NSQ, "nsqd"]
        self.proc = subprocess.Popen([*argv, f"--tcp-address={self.tcp}", f"--http-address={self.http}",
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
        return rss_mib(self.proc.pid)

    def stop(self) -> None:
        terminate(self.proc, 60)
        shutil.rmtree(self.data_path, ignore_errors=True)


def terminate(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM ``proc`` if it runs, wait up to ``timeout`` s, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


# --- several nsqd processes behind one nsqlookupd (scripts/bench-multicore) ---
#
# One `nsq nsqd` is one event loop, so it uses one core; the NSQ way to use a
# many-core host is several nsqds, each with its own ports and data path, all
# registered with the same nsqlookupd (nsq.io/overview/design.html): what
# `nsq cluster -n N` starts (nsq/apps/cluster.py).

import resource  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterable, Sequence  # noqa: E402

from nsq.apps.cluster import TableRow, parse_table  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far, in seconds (utime and
    stime, fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of process ``pid`` on ``cpus`` only (sched_setaffinity
    of each task in /proc/<pid>/task; threads it starts later inherit it)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:
            pass


def children_cpu_seconds() -> float:
    """User + system CPU of this process's children that have been waited
    for, and of their waited-for children (getrusage RUSAGE_CHILDREN)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def machine_busy_seconds() -> float:
    """CPU seconds all cores of this machine have spent busy since boot
    (every /proc/stat ``cpu`` column but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Fleet:
    """``count`` nsqd processes behind one nsqlookupd: ``nsq cluster -n
    count`` as a child process on free loopback ports, its data under
    ``data_root`` (``nsqd-<i>``), ``extra`` flags for every nsqd (after
    ``--``). ``log_dir``: None sends the daemons' prefixed logs to this
    process's stderr; a directory gets them in ``cluster.log``.

    The addresses and pids come from the table the command prints before
    its ``ready:`` line (:func:`nsq.apps.cluster.parse_table`).
    """

    def __init__(self, count: int, data_root: str, *, extra: Sequence[str] = (),
                 log_dir: str | None = None) -> None:
        if count < 1:
            raise ValueError("count must be >= 1")
        self.count, self.data_root, self.extra, self.log_dir = count, os.path.abspath(data_root), list(extra), log_dir
        self.proc: subprocess.Popen | None = None
        self.rows: dict[str, TableRow] = {}
        self.lines: list[str] = []

    @property
    def nsqds(self) -> list[TableRow]:
        return [self.rows[f"nsqd-{i}"] for i in range(1, self.count + 1)]

    @property
    def lookupd_http_addresses(self) -> list[str]:
        return [self.rows["lookupd"].http]

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        return [d.tcp for d in self.nsqds]

    @property
    def nsqd_http_addresses(self) -> list[str]:
        return [d.http for d in self.nsqds]

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        """Run ``nsq cluster`` and read its output up to ``ready:``.
        Raises RuntimeError (after stopping it) when it ends or is not ready
        within ``timeout`` seconds."""
        log = open(os.path.join(self.log_dir, "cluster.log"), "ab") if self.log_dir else None
        try:
            self.proc = subprocess.Popen(
                [*NSQ, "cluster", "-n", str(self.count), "--data-path", self.data_root, "--base-port", "0",
                 "--", *self.extra], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
        finally:
            if log:
                log.close()
        ready = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if line.startswith("ready:"):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(timeout) or not any(line.startswith("ready:") for line in self.lines):
            self.stop()
            raise RuntimeError(f"nsq cluster -n {self.count} did not start: {' / '.join(self.lines[-5:])}")
        self.rows = parse_table(self.lines)

    def registered(self) -> int:
        """How many nsqds the lookupd listed before ``ready:`` (it waits up
        to 10 s for all of them)."""
        for line in self.lines:
            if line.startswith("registered with lookupd: "):
                return int(line.split(": ", 1)[1].split("/")[0])
        return 0

    def wait_registered(self, timeout: float = 10.0) -> int:
        """The nsqds registered with the lookupd (``nsq cluster`` waited for them)."""
        return self.registered()

    def nsqd_cpu_seconds(self) -> float:
        """User + system CPU of all the nsqds so far (/proc/<pid>/stat)."""
        return sum(cpu_seconds(d.pid) for d in self.nsqds)

    def stop(self, timeout: float = 90.0) -> int | None:
        """SIGINT ``nsq cluster`` (it stops the nsqds, then the lookupd) and
        wait; SIGKILL after ``timeout`` seconds. Its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def read_through_lookupd(lookupd_http: Sequence[str], topic: str, count: int, channel: str = "check",
                         timeout: float = 30.0) -> list[str]:
    """Run `nsq tail --lookupd-http-address=... -n count` and return the
    bodies it printed (fewer when ``timeout`` passed first)."""
    argv = [*NSQ, "tail", f"--topic={topic}", f"--channel={channel}", "-n", str(count),
            *(f"--lookupd-http-address={a}" for a in lookupd_http)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate()
    return out.splitlines()


def http_post(address: str, path: str, body: bytes = b"") -> bytes:
    """POST to an nsqd or lookupd HTTP API; the answer's body."""
    req = urllib.request.Request(f"http://{address}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it now (scans /proc for parents)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(parents.get(p, ()))
    return tree


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU so far of each of ``pids`` and everything below
    them (a process that is gone by the time it is read counts 0)."""
    total = 0.0
    for pid in pids:
        for p in process_tree(pid):
            try:
                total += cpu_seconds(p)
            except (OSError, ValueError, IndexError):
                pass
    return total


# --- scripts/bench-ceiling's bare V2 server as a child process (scripts/bench, scripts/bench-ceiling) ---

def rss_mib(pid: int) -> float:
    """VmRSS of process ``pid`` in MiB (/proc/<pid>/status reports it in kB,
    that is KiB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class BareServer:
    """``scripts/bench-ceiling --serve PORT`` (the bare V2 framing server, one
    event loop) as a subprocess on a free port; ``deliver_published`` adds
    ``--deliver-published``, ``tls`` (certificate file, key file) offers
    TLS. Its address is ``tcp``."""

    def __init__(self, size: int = 200, deliver_published: bool = False, tls: tuple[str, str] | None = None) -> None:
        port = free_port()
        self.tcp = f"127.0.0.1:{port}"
        argv = [sys.executable, os.path.join(ROOT, "scripts", "bench-ceiling"), "--serve", str(port),
                "--size", str(size)]
        if deliver_published:
            argv.append("--deliver-published")
        if tls is not None:
            argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.stop()
            sys.exit("the bare server did not start")

    def __enter__(self) -> BareServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        """VmRSS in MiB."""
        return rss_mib(self.proc.pid)

    def create_channel(self, topic: str, channel: str) -> None:
        """Nothing to do: the bare server's channels are its SUBs (for
        code written against :class:`NSQD`)."""

    def stop(self) -> None:
        terminate(self.proc, 30)
        if self.proc.stdout:
            self.proc.stdout.close()
