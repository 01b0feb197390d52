"""The daemons of a local cluster as child processes: :class:`ProcessCluster`
starts them, relays their output line by line with each daemon's name in
front, waits for them to answer ``/ping`` and stops them in order."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from nsq._internal.addresses import fmt_addr, split_host_port
from nsq.apps.cluster.spec import LOOKUPD_PORT, ClusterError, ClusterSpec, connect_host, free_port, port_pairs
from nsq.protocol.message import default_node_id

__all__ = ["Daemon", "ProcessCluster", "http_get"]

#: the longest log line relayed whole (longer ones are relayed in pieces)
LINE_LIMIT = 1 << 20
#: ANSI colours for the daemon names when the log stream is a terminal
_COLOURS = ("36", "33", "32", "35", "34", "31", "96", "93", "92", "95", "94", "91")



@dataclass
class Daemon:
    """One child: ``nsq lookupd`` or ``nsq nsqd``."""

    #: ``lookupd`` or ``nsqd-<i>``
    name: str
    argv: list[str]
    #: the addresses to reach it from this host
    tcp: str
    http: str
    #: its data path ("" for the lookupd)
    data: str = ""
    process: asyncio.subprocess.Process | None = None
    relay: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process else None


class ProcessCluster:
    """The lookupd (unless running ones are given) and the nsqds of ``spec``
    as child processes; see :mod:`nsq.apps.cluster` for ports and data.

    Args:
        spec: what to start (checked by :meth:`ClusterSpec.check`).
        logs: where the children's lines go, each prefixed ``<name> | ``
            (default: this process's stderr).
        colour: colour the names (ANSI; for a terminal).
    """

    def __init__(self, spec: ClusterSpec, logs: IO[str] | None = None, colour: bool = False) -> None:
        spec.check()
        self.spec = spec
        self.logs = logs if logs is not None else sys.stderr
        self.colour = colour
        self.lookupd: Daemon | None = None
        self.nsqds: list[Daemon] = []
        #: the base data directory; temporary when the spec gives none
        self.data_path = os.path.abspath(spec.data_path) if spec.data_path else ""
        self.temporary = not spec.data_path
        self._width = max(len("lookupd"), len(f"nsqd-{spec.nsqds}"))

    # -- addresses ---------------------------------------------------------------

    @property
    def lookupd_tcp_addresses(self) -> list[str]:
        return [self.lookupd.tcp] if self.lookupd else list(self.spec.lookupd_tcp_addresses)

    @property
    def lookupd_http_addresses(self) -> list[str]:
        return [self.lookupd.http] if self.lookupd else list(self.spec.lookupd_http_addresses)

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        return [d.tcp for d in self.nsqds]

    @property
    def nsqd_http_addresses(self) -> list[str]:
        return [d.http for d in self.nsqds]

    def children(self) -> list[Daemon]:
        return [*self.nsqds, *([self.lookupd] if self.lookupd else [])]

    # -- the plan ----------------------------------------------------------------

    def plan(self) -> None:
        """Fill :attr:`lookupd` and :attr:`nsqds` (names, argv, addresses)
        without starting anything; creates the data directories.

        Raises:
            ClusterError: no free port on ``bind``, a data directory that
                cannot be made, ports that do not fit below 65536.
        """
        spec, bind = self.spec, self.spec.bind
        host = connect_host(bind)
        command = [*spec.command]
        broadcast = spec.broadcast_address or (bind if connect_host(bind) == bind else "")
        common = [f"--log-level={spec.log_level}"] if spec.log_level else []
        common.append("--log-prefix=")  # the relay prefixes every line with the daemon's name
        if broadcast:
            common.append(f"--broadcast-address={broadcast}")
        skip: tuple[int, ...] = ()
        if not spec.lookupd_tcp_addresses:
            lookupd_port = spec.lookupd_port
            if lookupd_port is None:
                lookupd_port = LOOKUPD_PORT if spec.base_port else 0
            if lookupd_port:
                ltcp, lhttp = lookupd_port, lookupd_port + 1
            else:
                ltcp, lhttp = free_port(host), free_port(host)
            skip = (ltcp, lhttp)
            self.lookupd = Daemon("lookupd", [*command, "lookupd", f"--tcp-address={fmt_addr(bind, ltcp)}",
                                              f"--http-address={fmt_addr(bind, lhttp)}", *common],
                                  fmt_addr(host, ltcp), fmt_addr(host, lhttp))
        per = 1 + spec.replicas  # a leader and its replicas, side by side
        count = spec.nsqds * per
        if spec.base_port:
            pairs = port_pairs(spec.base_port, count, skip)
        else:
            pairs = []
            while len(pairs) < count:
                pair = (free_port(host), free_port(host))
                if not set(pair) & set(skip) and pair[0] != pair[1] and pair not in pairs:
                    pairs.append(pair)
        try:
            if self.temporary and not self.data_path:
                self.data_path = tempfile.mkdtemp(prefix="nsq-cluster-")
            os.makedirs(self.data_path, exist_ok=True)
            names = [f"nsqd-{i}" if k == 0 else f"nsqd-{i}-r{k}"
                     for i in range(1, spec.nsqds + 1) for k in range(per)]
            for name in names:
                os.makedirs(os.path.join(self.data_path, name), exist_ok=True)
        except OSError as exc:
            raise ClusterError(f"cannot make the data path {exc.filename or self.data_path}: "
                               f"{exc.strerror or exc}") from None
        node0 = default_node_id()
        lookupds = [f"--lookupd-tcp-address={a}" for a in self.lookupd_tcp_addresses]
        mem = [f"--mem-queue-size={spec.mem_queue_size}"] if spec.mem_queue_size is not None else []
        self.nsqds = []
        leader_http = ""
        for i, ((tcp, http), name) in enumerate(zip(pairs, names), 1):
            data = os.path.join(self.data_path, name)
            role = []
            if spec.replicas:
                role = ["--storage=wal"]
                if (i - 1) % per == 0:
                    leader_http = fmt_addr(host, http)
                else:
                    role.append(f"--replica-of={leader_http}")
            argv = [*command, "nsqd", f"--tcp-address={fmt_addr(bind, tcp)}",
                    f"--http-address={fmt_addr(bind, http)}", "--https-address=", f"--data-path={data}",
                    f"--node-id={(node0 + i - 1) % 1024}", *common, *lookupds, *mem, *role, *spec.nsqd_flags]
            self.nsqds.append(Daemon(name, argv, fmt_addr(host, tcp), fmt_addr(host, http), data))

    def idle_data(self) -> list[str]:
        """``nsqd-<k>`` directories under the data path with files in them
        that no nsqd of this run uses (left by a run with a larger -n)."""
        ours = {os.path.basename(d.data) for d in self.nsqds}
        found = []
        try:
            names = os.listdir(self.data_path)
        except OSError:
            return []
        for name in sorted(names, key=lambda n: (len(n), n)):
            path = os.path.join(self.data_path, name)
            if re.fullmatch(r"nsqd-\d+(-r\d+)?", name) and name not in ours and os.path.isdir(path) and os.listdir(path):
                found.append(name)
        return found

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, timeout: float = 30.0) -> None:
        """Start the lookupd (if ours), then the nsqds; return once every one
        answers ``/ping``.

        Raises:
            ClusterError: a daemon exited or did not answer within
                ``timeout`` seconds, a data directory could not be made,
                a free port could not be had on ``bind`` (what was started
                is stopped again).
        """
        try:
            self.plan()
            if self.lookupd:
                await self._spawn(self.lookupd)
                await self._wait_ping([self.lookupd], timeout)
            for d in self.nsqds:
                await self._spawn(d)
            await self._wait_ping(self.nsqds, timeout)
        except OSError as exc:  # a free port on --bind, whatever else the host refuses
            await self.stop(5.0)
            raise ClusterError(str(exc)) from None
        except BaseException:
            await self.stop(5.0)
            raise

    async def _spawn(self, d: Daemon) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            d.process = await asyncio.create_subprocess_exec(
                *d.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True, limit=LINE_LIMIT,
                preexec_fn=_die_with_parent(os.getpid()))
        except OSError as exc:
            raise ClusterError(f"cannot start {d.name} ({d.argv[0]}): {exc}") from None
        d.relay = asyncio.get_running_loop().create_task(self._relay(d))

    def _prefix(self, name: str) -> str:
        text = name.ljust(self._width)
        if self.colour:
            if name == "lookupd":
                code = "1"
            else:
                code = _COLOURS[(int(name.rsplit("-", 1)[1]) - 1) % len(_COLOURS)]
            text = f"\x1b[{code}m{text}\x1b[0m"
        return f"{text} | "

    async def _relay(self, d: Daemon) -> None:
        """Copy ``d``'s output to :attr:`logs`, a prefix on every line."""
        assert d.process is not None and d.process.stdout is not None
        stream, prefix = d.process.stdout, self._prefix(d.name)
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line longer than LINE_LIMIT: pass it on in pieces
                line = await stream.read(LINE_LIMIT)
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\r\n")
            try:
                self.logs.write(f"{prefix}{text}\n")
                self.logs.flush()
            except (OSError, ValueError):
                pass  # our stderr is gone (a closed pipe): keep draining the child's

    async def _wait_ping(self, daemons: list[Daemon], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waiting = list(daemons)
        while waiting:
            for d in list(waiting):
                if d.returncode is not None:
                    if d.relay:
                        await asyncio.wait({d.relay}, timeout=2)  # its last words first
                    raise ClusterError(f"{d.name} exited with status {d.returncode} while starting "
                                       f"(its log is above)")
                status, _ = await http_get(d.http, "/ping", 1.0)
                if status == 200:
                    waiting.remove(d)
            if waiting:
                if loop.time() > deadline:
                    raise ClusterError(f"{', '.join(d.name for d in waiting)} did not answer /ping "
                                       f"within {timeout:.0f} s")
                await asyncio.sleep(0.05)

    @property
    def registering(self) -> list[Daemon]:
        """The nsqds that register with the lookupds (a replica does not)."""
        return [d for d in self.nsqds if not any(a.startswith("--replica-of=") for a in d.argv)]

    async def registered(self) -> int:
        """How many of our nsqds the lookupds list in ``/nodes`` (by their
        TCP and HTTP ports); 0 when no lookupd HTTP address is known."""
        import json

        ports = {(split_host_port(d.tcp)[1], split_host_port(d.http)[1]) for d in self.registering}
        seen: set[tuple[int, int]] = set()
        for address in self.lookupd_http_addresses:
            status, body = await http_get(address, "/nodes", 5.0)
            if status != 200:
                continue
            try:
                producers = json.loads(body).get("producers") or []
            except (ValueError, AttributeError):
                continue
            seen.update((int(p.get("tcp_port") or 0), int(p.get("http_port") or 0))
                        for p in producers if isinstance(p, dict))
        return len(ports & seen)

    async def wait_registered(self, timeout: float = 10.0) -> int:
        """Wait until the lookupds list every nsqd (at most ``timeout``
        seconds); the number listed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            n = await self.registered()
            if n >= len(self.registering) or loop.time() > deadline:
                return n
            await asyncio.sleep(0.1)

    async def wait_exit(self) -> list[Daemon]:
        """Wait until a child exits; the children that have."""
        waits = {asyncio.ensure_future(d.process.wait()) for d in self.children() if d.process}
        if not waits:
            return []
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return [d for d in self.children() if d.returncode is not None]

    def signal_running(self, sig: int) -> None:
        """Send ``sig`` to every child still running."""
        for d in self.children():
            if d.process and d.returncode is None:
                try:
                    d.process.send_signal(sig)
                except ProcessLookupError:
                    pass

    async def stop(self, timeout: float | None = None) -> dict[str, int]:
        """SIGTERM the nsqds (they unregister from lookupd and write their
        queues to disk), wait, then the same for our lookupd; a child still
        running after ``timeout`` seconds (default the spec's
        ``stop_timeout``) is SIGKILLed. Removes a temporary data path.
        Returns every started child's exit status (negative: the signal
        that ended it)."""
        timeout = self.spec.stop_timeout if timeout is None else timeout
        for group in (self.nsqds, [self.lookupd] if self.lookupd else []):
            started = [d for d in group if d.process]
            for d in started:
                if d.process is not None and d.process.returncode is None:
                    try:
                        d.process.terminate()
                    except ProcessLookupError:
                        pass
            for d in started:
                assert d.process is not None
                try:
                    await asyncio.wait_for(d.process.wait(), timeout)
                except asyncio.TimeoutError:
                    self.note(f"{d.name} did not stop within {timeout:g} s: killing it")
                    try:
                        d.process.kill()
                    except ProcessLookupError:
                        pass
                    await d.process.wait()
            relays = {d.relay for d in started if d.relay}
            if relays:
                await asyncio.wait(relays, timeout=5)  # every line they wrote before exiting
        if self.temporary and self.data_path:
            shutil.rmtree(self.data_path, ignore_errors=True)
        return {d.name: d.returncode for d in self.children() if d.process and d.returncode is not None}

    def note(self, text: str) -> None:
        """One line of our own on :attr:`logs` (``nsq cluster: ...``)."""
        try:
            self.logs.write(f"nsq cluster: {text}\n")
            self.logs.flush()
        except (OSError, ValueError):
            pass


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A Popen preexec_fn: the child gets SIGTERM when this process dies
    (Linux ``prctl(PR_SET_PDEATHSIG)``), so a SIGKILLed parent leaves no
    daemon running. None where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


async def http_get(address: str, path: str, timeout: float) -> tuple[int, bytes]:
    """GET ``http://address/path`` (HTTP/1.0, one connection); (status,
    body), or (0, b"") when it cannot be reached or does not answer."""
    try:
        host, port = split_host_port(address)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, ValueError, asyncio.TimeoutError):
        return 0, b""
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), timeout)
    except (OSError, asyncio.TimeoutError):
        return 0, b""
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return 0, b""
    return int(parts[1]), body
