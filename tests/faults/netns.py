"""Linux network namespaces for the cluster fault tests: one namespace per
host, each joined to a bridge by a veth pair, and real faults on the links.

Layout of one :class:`Net` (``NAME`` = ``nsqf<pytest pid>x<serial>``)::

    namespace NAME-hub:   bridge br0, and one veth end per host (v1, v2, ...)
    namespace NAME-<host>: lo, and eth0 = the other end, 10.A.B.<n>/24

Nothing is added to the root namespace: the addresses are reachable only
from inside the namespaces. The test process itself takes part through a
host of its own (usually ``tester``): :meth:`Host.enter` moves the calling
thread into that namespace (``setns(2)`` with ``CLONE_NEWNET`` only changes
the calling thread; threads it starts later inherit it) and
:meth:`Host.leave` moves it back.

Faults, on the hub's end of a host's veth:

- :meth:`Net.partition`: ``ip link set vN down``. Both directions stop,
  packets are dropped, nobody gets a RST (TCP retransmits until the link
  comes back or its own timers give up); :meth:`Net.heal` brings it up.
- :meth:`Net.slow`: ``tc qdisc add dev vN root tbf rate R burst B latency L``
  on the hub's end, i.e. on what the host receives (its download).

Processes run in a host with ``ip netns exec NAME-<host> argv...`` (ip
execs the command, so ``Popen.pid`` is the program's own pid and signals
reach it). Names and sizes: ip-netns(8), ip-link(8), tc-tbf(8).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

__all__ = ["Net", "Host", "PREFIX", "unusable", "cleanup_stale"]

#: every namespace this suite makes starts with this, then the pytest pid
PREFIX = "nsqf"
CLONE_NEWNET = 0x40000000
_serial = 0
_serial_lock = threading.Lock()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=check, timeout=30)


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_inside(ns: str) -> None:
    """SIGKILL every process still running in namespace ``ns``."""
    out = _ip("netns", "pids", ns, check=False).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _delete(ns: str) -> None:
    _kill_inside(ns)
    _ip("netns", "delete", ns, check=False)


def cleanup_stale() -> list[str]:
    """Delete this suite's namespaces left by pytest runs that are gone
    (the pid in the name no longer exists); returns their names."""
    gone = []
    for ns in _namespaces():
        if not ns.startswith(PREFIX):
            continue
        digits = ns[len(PREFIX):].split("x", 1)[0]
        if not digits.isdigit() or int(digits) == os.getpid() or os.path.exists(f"/proc/{digits}"):
            continue
        _delete(ns)
        gone.append(ns)
    return gone


def unusable(need_tc: bool = False) -> str | None:
    """Why network namespaces cannot be used here (a skip reason), or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` (apt-get install iproute2)"
    if need_tc and shutil.which("tc") is None:
        return "needs iproute2's `tc` (apt-get install iproute2)"
    probe = f"{PREFIX}{os.getpid()}xprobe"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace: {made.stderr.strip()}"
        veth = _ip("link", "add", "p0", "netns", probe, "type", "veth", "peer", "name", "p1", "netns", probe,
                   check=False)
        if veth.returncode != 0:
            return f"cannot create a veth pair: {veth.stderr.strip()}"
        bridge = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"cannot create a bridge: {bridge.stderr.strip()}"
        if need_tc:
            tbf = _tc("-n", probe, "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "1mbit", "burst", "32kbit",
                      "latency", "400ms", check=False)
            if tbf.returncode != 0:
                return f"cannot add a tbf qdisc: {tbf.stderr.strip()}"
    finally:
        _ip("netns", "delete", probe, check=False)
    return None


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Host:
    """One namespace on the bridge.

    Attributes:
        name: the short name given to :meth:`Net.add` (``n0``, ``tester``).
        ns: the namespace's name (for ``ip netns exec``).
        ip: its address on the bridge (a str, no prefix length).
        link: the name of the hub's end of its veth (what faults act on).
    """

    def __init__(self, net: Net, name: str, ns: str, ip: str, link: str) -> None:
        self.net = net
        self.name = name
        self.ns = ns
        self.ip = ip
        self.link = link
        self._saved: list[int] = []

    def __repr__(self) -> str:
        return f"Host({self.name} {self.ip})"

    def argv(self, *argv: str) -> list[str]:
        """``ip netns exec NS argv...``."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside this host (``subprocess.Popen`` keywords)."""
        return subprocess.Popen(self.argv(*argv), **kwargs)

    def enter(self) -> None:
        """Move the calling thread into this namespace (undo with :meth:`leave`)."""
        self._saved.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY))
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    def leave(self) -> None:
        """Move the calling thread back to where :meth:`enter` found it."""
        fd = self._saved.pop()
        try:
            _setns(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """The calling thread in this namespace for the block."""
        self.enter()
        try:
            yield
        finally:
            self.leave()


class Net:
    """A bridge, and hosts on it in their own namespaces, in a private /24.

    Args:
        tag: a few characters naming the test (in the namespace names).
    """

    def __init__(self, tag: str = "") -> None:
        global _serial
        with _serial_lock:
            _serial += 1
            serial = _serial
        pid = os.getpid()
        self.name = f"{PREFIX}{pid}x{serial}{tag}"
        # 10.A.B.0/24 from the pid and the serial: parallel runs differ, and
        # nothing outside these namespaces routes it anyway
        self.subnet = f"10.{200 + (pid + serial) % 50}.{(pid // 50 + serial) % 256}"
        self.hub = f"{self.name}-hub"
        self.hosts: dict[str, Host] = {}
        self._faults: dict[str, str] = {}
        self._closed = False
        try:
            _ip("netns", "add", self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
            _ip("-n", self.hub, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def add(self, name: str) -> Host:
        """A new host on the bridge (addresses .10, .11, ... in order)."""
        n = len(self.hosts) + 1
        ns = f"{self.name}-{name}"
        ip = f"{self.subnet}.{9 + n}"
        link = f"v{n}"
        _ip("netns", "add", ns)
        try:
            _ip("link", "add", link, "netns", self.hub, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.hub, "link", "set", link, "master", "br0")
            _ip("-n", self.hub, "link", "set", link, "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            _delete(ns)
            raise
        host = Host(self, name, ns, ip, link)
        self.hosts[name] = host
        return host

    # -- faults ------------------------------------------------------------------------

    def partition(self, host: Host) -> None:
        """Cut ``host`` off: its link goes down (packets dropped, no RST)."""
        _ip("-n", self.hub, "link", "set", host.link, "down")
        self._faults[host.name] = "partition"

    def heal(self, host: Host) -> None:
        """Bring ``host``'s link back up."""
        _ip("-n", self.hub, "link", "set", host.link, "up")
        self._faults.pop(host.name, None)

    def slow(self, host: Host, rate: str = "1mbit", burst: str = "32kbit", latency: str = "400ms") -> None:
        """Shape what ``host`` receives to ``rate`` (tc-tbf(8) units)."""
        _tc("-n", self.hub, "qdisc", "replace", "dev", host.link, "root", "tbf", "rate", rate, "burst", burst,
            "latency", latency)

    def unslow(self, host: Host) -> None:
        """Remove :meth:`slow`'s shaping."""
        _tc("-n", self.hub, "qdisc", "del", "dev", host.link, "root", check=False)

    def link_stats(self, host: Host) -> str:
        """``tc -s qdisc`` of ``host``'s link (for failure messages)."""
        return _tc("-s", "-n", self.hub, "qdisc", "show", "dev", host.link, check=False).stdout

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> None:
        """Kill what still runs in the hosts and delete every namespace."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts.values():
            _delete(host.ns)
        _delete(self.hub)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(ns.startswith(self.name) for ns in _namespaces()):
            time.sleep(0.05)
