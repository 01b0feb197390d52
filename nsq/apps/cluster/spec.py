"""What a local cluster is made of: :class:`ClusterSpec` (the ``nsq cluster``
flags) and the port layout (:func:`port_pairs`)."""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from nsq._internal.addresses import split_host_port

__all__ = ["ClusterError", "ClusterSpec", "LOOKUPD_PORT", "NSQD_BASE_PORT", "connect_host", "display_command",
           "free_port", "nsq_command", "port_pairs"]

#: nsqlookupd's default TCP port (Go's; its HTTP port is the next one)
LOOKUPD_PORT = 4160
#: nsqd's default TCP port (Go's): nsqd-1 gets it, and 4151 for HTTP
NSQD_BASE_PORT = 4150

class ClusterError(Exception):
    """A cluster that cannot start: bad settings, a port taken, a daemon
    that exited or did not answer ``/ping`` in time."""


@dataclass
class ClusterSpec:
    """What to start (the ``nsq cluster`` flags)."""

    #: how many nsqd processes (leaders, with ``replicas``)
    nsqds: int = 1
    #: replicas per nsqd (``--storage=wal --replica-of``; docs/operations/replication.md)
    replicas: int = 0
    #: base directory holding ``nsqd-<i>``; "" = a temporary one removed at exit
    data_path: str = ""
    #: the address every listener binds
    bind: str = "127.0.0.1"
    #: nsqd-1's TCP port; 0 = free ports
    base_port: int = NSQD_BASE_PORT
    #: the lookupd's TCP port (HTTP on the next); None = 4160, or free ports with base_port 0
    lookupd_port: int | None = None
    #: running nsqlookupds to register with instead of starting one
    lookupd_tcp_addresses: list[str] = field(default_factory=list)
    #: their HTTP addresses (to print and to check the registrations)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    #: the address the daemons announce; "" = ``bind`` when it is a specific
    #: address, else nsqd's default (the hostname)
    broadcast_address: str = ""
    #: every nsqd's --mem-queue-size (None: nsqd's default, 10000)
    mem_queue_size: int | None = None
    #: every daemon's --log-level ("" = their default, info)
    log_level: str = ""
    #: more flags for every nsqd, after the ones above (so they win)
    nsqd_flags: list[str] = field(default_factory=list)
    #: seconds to wait for each daemon after SIGTERM before SIGKILL
    stop_timeout: float = 60.0
    #: how to run ``nsq`` (default :func:`nsq_command`)
    command: list[str] = field(default_factory=lambda: nsq_command())

    def check(self) -> None:
        """Raises:
            ClusterError: a setting that cannot work."""
        if self.nsqds < 1:
            raise ClusterError("-n/--nsqds must be at least 1")
        if self.replicas < 0:
            raise ClusterError("--replicas must not be negative")
        if not 0 <= self.base_port <= 65535:
            raise ClusterError(f"--base-port {self.base_port} is not a port")
        if self.lookupd_port is not None and not 0 <= self.lookupd_port <= 65534:
            raise ClusterError(f"--lookupd-port {self.lookupd_port} is not a port (its HTTP port is the next)")
        if self.lookupd_http_addresses and not self.lookupd_tcp_addresses:
            raise ClusterError("--lookupd-http-address goes with --lookupd-tcp-address (a running nsqlookupd)")
        if self.lookupd_tcp_addresses and self.lookupd_port is not None:
            raise ClusterError("--lookupd-port starts a lookupd; --lookupd-tcp-address uses a running one")
        for address in (*self.lookupd_tcp_addresses, *self.lookupd_http_addresses):
            try:
                split_host_port(address)
            except ValueError as exc:
                raise ClusterError(str(exc)) from None
        if self.stop_timeout < 0:
            raise ClusterError("--stop-timeout must not be negative")


def nsq_command() -> list[str]:
    """How to run ``nsq`` again from this process: this zipapp (``nsq.pyz``)
    when it is one, else ``python -m nsq`` with this interpreter."""
    script = sys.argv[0] if sys.argv else ""
    if script.endswith(".pyz") and os.path.isfile(script):
        return [sys.executable, os.path.abspath(script)]
    return [sys.executable, "-m", "nsq"]


def display_command() -> str:
    """``nsq`` as the user typed it, for the commands printed (``nsq admin ...``)."""
    script = sys.argv[0] if sys.argv else ""
    return script if script.endswith(".pyz") else "nsq"


def port_pairs(base: int, count: int, skip: Iterable[int] = ()) -> list[tuple[int, int]]:
    """``count`` (TCP, HTTP) port pairs from ``base`` up, two apart:
    (base, base+1), (base+2, base+3), ..., leaving out every pair that holds
    a port of ``skip`` (the lookupd's, when it is started alongside).

    Raises:
        ClusterError: they do not fit below 65536.
    """
    skip = set(skip)
    pairs: list[tuple[int, int]] = []
    port = base
    while len(pairs) < count:
        if port + 1 > 65535:
            raise ClusterError(f"{count} port pairs from {base} do not fit below 65536")
        if port not in skip and port + 1 not in skip:
            pairs.append((port, port + 1))
        port += 2
    return pairs


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


def free_port(host: str) -> int:
    """A TCP port nobody listens on now on ``host`` (bind port 0, close).

    Raises:
        ClusterError: ``host`` is not an address of this host.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, 0))
        except OSError as exc:
            raise ClusterError(f"cannot listen on {host}: {exc.strerror or exc}") from None
        port: int = s.getsockname()[1]
        return port
