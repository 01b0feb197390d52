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


# --- several nsqd processes behind one nsqlookupd (scripts/nsqd-multi, scripts/bench-multicore) ---
#
# One `nsq nsqd` is one event loop, so it uses one core; the NSQ way to use a
# many-core host is several nsqds, each with its own ports and data path, all
# registered with the same nsqlookupd, producers spread over them and
# consumers finding all of them through lookupd (nsq.io/overview/design.html,
# nsq.io/components/nsqlookupd.html).

import ipaddress  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
from collections.abc import Iterable, Sequence  # noqa: E402

from nsq.protocol.message import default_node_id  # noqa: E402

#: nsqlookupd's own default TCP port (its HTTP port is the next one)
LOOKUPD_PORT = 4160
#: nsqd's own default TCP port: nsqd-0 of a fleet gets it (and 4151 for HTTP)
NSQD_BASE_PORT = 4150


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far, in seconds (utime and
    stime, fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def port_pairs(base: int, count: int, skip: Iterable[int] = ()) -> list[tuple[int, int]]:
    """``count`` (TCP, HTTP) port pairs from ``base`` up, two apart:
    (base, base+1), (base+2, base+3), ..., leaving out every pair that holds
    a port of ``skip`` (the lookupd's, when it is started alongside)."""
    skip = set(skip)
    pairs: list[tuple[int, int]] = []
    port = base
    while len(pairs) < count:
        if port + 1 > 65535:
            raise ValueError(f"{count} port pairs from {base} do not fit below 65536")
        if port not in skip and port + 1 not in skip:
            pairs.append((port, port + 1))
        port += 2
    return pairs


def host_port(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_host(bind: str) -> str:
    """The address to reach a listener bound to ``bind`` from this host:
    loopback for a wildcard bind (0.0.0.0, ::, empty), else ``bind``."""
    if not bind:
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(bind)
    except ValueError:
        return bind
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return bind


def _die_with_parent(parent: int) -> Any:
    """A Popen preexec_fn: the child gets SIGTERM when this process dies
    (Linux prctl PR_SET_PDEATHSIG), so a SIGKILLed parent leaves no nsqd."""
    def preexec() -> None:
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before prctl
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


class Daemon:
    """One `nsq nsqd` or `nsq lookupd` child process of a :class:`Fleet`.

    It runs in its own session, so a Ctrl-C on the terminal reaches only the
    parent, which then stops the children in order (nsqds, then lookupd).
    ``log`` is where its output goes: None for this process's stdout and
    stderr, a path for a file (appended to).
    """

    def __init__(self, name: str, argv: list[str], tcp: str, http: str, log: str | None) -> None:
        self.name, self.argv, self.tcp, self.http, self.log = name, argv, tcp, http, log
        out = open(log, "ab") if log else None  # the child keeps its own copy
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
        finally:
            if out:
                out.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http}/ping", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def log_tail(self, lines: int = 10) -> str:
        if not self.log:
            return "(its output is above)"
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:]).rstrip() or "(no output)"
        except OSError:
            return "(no log)"


class Fleet:
    """``count`` `nsq nsqd` processes registered with one nsqlookupd.

    Unless ``lookupd_tcp`` names existing lookupds, one `nsq lookupd` is
    started too, on ``lookupd_port`` (TCP) and the next port (HTTP), or on
    free ports when ``lookupd_port`` is 0.

    Ports: with ``base_port`` > 0, nsqd i gets the i-th pair of
    :func:`port_pairs` (TCP base+2i, HTTP base+2i+1, the pairs holding a
    port of our own lookupd left out: from 4150 with lookupd on 4160/4161,
    nsqd-5 gets 4162/4163); with 0, free ports. Every listener binds
    ``bind``. Each nsqd gets:

    - ``--data-path=<data_root>/nsqd-<i>`` (created),
    - ``--node-id`` = (Go's default for this hostname + i) mod 1024, so the
      message IDs of the nsqds on one host differ,
    - ``--broadcast-address``: ``broadcast_address``, else ``bind`` when it
      is a specific address, else nsqd's default (the hostname),
    - ``--https-address=`` (no HTTPS listener: one default port for all
      would collide),
    - ``--log-prefix=[nsqd-<i>] `` so their logs can be told apart,

    then ``extra`` (the same for every nsqd; it comes last, so it overrides
    any of the above). ``log_dir``: None sends the children's logs to this
    process's stdout/stderr; a directory gets one ``<name>.log`` each.
    """

    def __init__(self, count: int, data_root: str, *, bind: str = "127.0.0.1", base_port: int = 0,
                 lookupd_port: int = 0, lookupd_tcp: Sequence[str] = (), lookupd_http: Sequence[str] = (),
                 broadcast_address: str | None = None, extra: Sequence[str] = (),
                 log_dir: str | None = None) -> None:
        if count < 1:
            raise ValueError("count must be >= 1")
        self.count, self.data_root, self.bind, self.base_port = count, os.path.abspath(data_root), bind, base_port
        self.lookupd_port = lookupd_port
        self.external_lookupd_tcp, self.external_lookupd_http = list(lookupd_tcp), list(lookupd_http)
        self.broadcast_address = broadcast_address
        self.extra, self.log_dir = list(extra), log_dir
        self.lookupd: Daemon | None = None
        self.nsqds: list[Daemon] = []

    # -- addresses --

    @property
    def lookupd_tcp_addresses(self) -> list[str]:
        return [self.lookupd.tcp] if self.lookupd else self.external_lookupd_tcp

    @property
    def lookupd_http_addresses(self) -> list[str]:
        return [self.lookupd.http] if self.lookupd else self.external_lookupd_http

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        return [d.tcp for d in self.nsqds]

    @property
    def nsqd_http_addresses(self) -> list[str]:
        return [d.http for d in self.nsqds]

    def data_path(self, i: int) -> str:
        return os.path.join(self.data_root, f"nsqd-{i}")

    # -- lifecycle --

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _log(self, name: str) -> str | None:
        return os.path.join(self.log_dir, f"{name}.log") if self.log_dir else None

    def start(self, timeout: float = 30.0) -> None:
        """Start the lookupd (if ours) and the nsqds; return once every one
        answers /ping. Raises RuntimeError (after stopping whatever was
        started) when one exits or does not answer within ``timeout``."""
        host = connect_host(self.bind)
        try:
            if not self.external_lookupd_tcp:
                if self.lookupd_port:
                    ltcp, lhttp = self.lookupd_port, self.lookupd_port + 1
                else:
                    ltcp, lhttp = free_port(), free_port()
                self.lookupd = Daemon(
                    "lookupd",
                    [*NSQ, "lookupd", f"--tcp-address={host_port(self.bind, ltcp)}",
                     f"--http-address={host_port(self.bind, lhttp)}"],
                    host_port(host, ltcp), host_port(host, lhttp), self._log("lookupd"))
                self._wait_ping([self.lookupd], timeout)
                skip = (ltcp, lhttp)
            else:
                skip = ()
            if self.base_port:
                pairs = port_pairs(self.base_port, self.count, skip)
            else:
                pairs = [(free_port(), free_port()) for _ in range(self.count)]
            broadcast = self.broadcast_address
            if broadcast is None and connect_host(self.bind) == self.bind:
                broadcast = self.bind
            node0 = default_node_id()
            os.makedirs(self.data_root, exist_ok=True)
            for i, (tcp, http) in enumerate(pairs):
                os.makedirs(self.data_path(i), exist_ok=True)
                argv = [*NSQ, "nsqd", f"--tcp-address={host_port(self.bind, tcp)}",
                        f"--http-address={host_port(self.bind, http)}", "--https-address=",
                        f"--data-path={self.data_path(i)}", f"--node-id={(node0 + i) % 1024}",
                        f"--log-prefix=[nsqd-{i}] "]
                if broadcast:
                    argv.append(f"--broadcast-address={broadcast}")
                argv += [f"--lookupd-tcp-address={a}" for a in self.lookupd_tcp_addresses]
                argv += self.extra
                self.nsqds.append(Daemon(f"nsqd-{i}", argv, host_port(host, tcp), host_port(host, http),
                                         self._log(f"nsqd-{i}")))
            self._wait_ping(self.nsqds, timeout)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _wait_ping(daemons: list[Daemon], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(daemons)
        while waiting:
            for d in list(waiting):
                if d.proc.poll() is not None:
                    raise RuntimeError(f"{d.name} exited with status {d.proc.returncode} "
                                       f"while starting: {d.log_tail()}")
                if d.ping():
                    waiting.remove(d)
            if waiting:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{', '.join(d.name for d in waiting)} did not answer /ping "
                                       f"within {timeout:.0f} s")
                time.sleep(0.05)

    def registered(self) -> int:
        """How many of our nsqds the lookupds list in /nodes (by their TCP
        and HTTP ports); 0 when no lookupd HTTP address is known."""
        ports = {(int(d.tcp.rsplit(":", 1)[1]), int(d.http.rsplit(":", 1)[1])) for d in self.nsqds}
        seen: set[tuple[int, int]] = set()
        for address in self.lookupd_http_addresses:
            try:
                with urllib.request.urlopen(f"http://{address}/nodes", timeout=5) as r:
                    body = json.load(r)
            except (OSError, ValueError):
                continue
            for p in body.get("producers") or []:
                seen.add((p.get("tcp_port"), p.get("http_port")))
        return len(ports & seen)

    def wait_registered(self, timeout: float = 10.0) -> int:
        """Wait until the lookupds list every nsqd (at most ``timeout``);
        the number listed."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.registered()
            if n >= len(self.nsqds) or time.monotonic() > deadline:
                return n
            time.sleep(0.1)

    def exited(self) -> list[Daemon]:
        """The children that are no longer running."""
        return [d for d in self.children() if d.proc.poll() is not None]

    def children(self) -> list[Daemon]:
        return [*self.nsqds, *([self.lookupd] if self.lookupd else [])]

    def nsqd_cpu_seconds(self) -> float:
        """User + system CPU of all the nsqds so far (/proc/<pid>/stat)."""
        return sum(d.cpu_seconds() for d in self.nsqds)

    def signal_running(self, sig: int) -> None:
        """Send ``sig`` to every child still running (e.g. a second SIGTERM
        cuts an nsqd's --drain-timeout wait short)."""
        for d in self.children():
            if d.proc.poll() is None:
                try:
                    d.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def stop(self, timeout: float = 60.0) -> dict[str, int]:
        """SIGTERM the nsqds (they unregister from lookupd and flush their
        queues to disk), wait, then the same for our lookupd; a child still
        running after ``timeout`` is SIGKILLed. Returns every child's exit
        status (negative: the signal that ended it)."""
        for group in (self.nsqds, [self.lookupd] if self.lookupd else []):
            for d in group:
                if d.proc.poll() is None:
                    d.proc.terminate()
            deadline = time.monotonic() + timeout
            for d in group:
                try:
                    d.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    d.proc.kill()
                    d.proc.wait()
        return {d.name: d.proc.returncode for d in self.children()}


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
    ``--deliver-published``. Its address is ``tcp``."""

    def __init__(self, size: int = 200, deliver_published: bool = False) -> None:
        port = free_port()
        self.tcp = f"127.0.0.1:{port}"
        argv = [sys.executable, os.path.join(ROOT, "scripts", "bench-ceiling"), "--serve", str(port),
                "--size", str(size)]
        if deliver_published:
            argv.append("--deliver-published")
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

    def stop(self) -> None:
        terminate(self.proc, 30)
        if self.proc.stdout:
            self.proc.stdout.close()
