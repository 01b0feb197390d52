"""The foreground run of ``nsq cluster``: start, print the addresses, wait
for a signal or a daemon's exit, stop."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO

from nsq.apps.cluster.processes import Daemon, ProcessCluster
from nsq.apps.cluster.spec import ClusterError, ClusterSpec, connect_host, display_command

__all__ = ["TableRow", "format_table", "parse_table", "run"]

#: a row of the table :func:`run` prints: name, tcp, http, pid ("-": not
#: started here), data ("-": none)
_ROW = re.compile(r"^(lookupd|nsqd-\d+(?:-r\d+)?)\s+(\S+)\s+(\S+)\s+(\d+|-)\s+(\S+)\s*$")


def format_table(cluster: ProcessCluster) -> list[str]:
    """The table of addresses :func:`run` prints (parsed by :func:`parse_table`)."""
    rows = [("NAME", "TCP", "HTTP", "PID", "DATA")]
    if cluster.lookupd:
        d = cluster.lookupd
        rows.append((d.name, d.tcp, d.http, str(d.pid), "-"))
    else:
        rows.append(("lookupd", ",".join(cluster.lookupd_tcp_addresses),
                     ",".join(cluster.lookupd_http_addresses) or "?", "-", "-"))
    rows += [(d.name, d.tcp, d.http, str(d.pid), d.data) for d in cluster.nsqds]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]


@dataclass
class TableRow:
    """One daemon as :func:`run` printed it."""

    name: str
    tcp: str
    http: str
    #: 0: not started here (a running lookupd)
    pid: int
    #: "" for the lookupd
    data: str


def parse_table(lines: Iterable[str]) -> dict[str, TableRow]:
    """The rows of the table :func:`run` printed, by daemon name."""
    rows = {}
    for line in lines:
        m = _ROW.match(line)
        if m:
            name, tcp, http, pid, data = m.groups()
            rows[name] = TableRow(name, tcp, http, 0 if pid == "-" else int(pid), "" if data == "-" else data)
    return rows


async def run(spec: ClusterSpec, out: Callable[[str], None] | None = None, logs: IO[str] | None = None,
              colour: bool = False) -> int:
    """Start the cluster of ``spec``, print its addresses, relay its logs,
    and stop it on SIGINT/SIGTERM (see :mod:`nsq.apps.cluster`).

    Args:
        spec: what to start.
        out: where the table and the status lines go (default: stdout,
            flushed per line).
        logs: where the daemons' prefixed log lines go (default: stderr).
        colour: colour the daemon names in ``logs``.

    Returns:
        The exit status: 0 after a signal with every daemon stopped
        cleanly, 1 when one could not start, exited on its own, or ended
        with a non-zero status.

    Raises:
        ClusterError: a setting that cannot work (:meth:`ClusterSpec.check`).
    """
    say = out or _print
    cluster = ProcessCluster(spec, logs, colour)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals: list[int] = []

    def on_signal(sig: int) -> None:
        signals.append(sig)
        if len(signals) == 1:
            stop.set()
        elif len(signals) == 2:
            cluster.note("signal again: passing it on to the daemons (a third kills them)")
            cluster.signal_running(signal.SIGTERM)
        else:
            cluster.signal_running(signal.SIGKILL)

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    code = 0
    died: list[Daemon] = []
    statuses: dict[str, int] | None = None
    try:
        starting = asyncio.ensure_future(cluster.start())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # a signal while starting
            starting.cancel()
            await asyncio.wait({starting})
            say(f"{signal.Signals(signals[0]).name}: stopped while starting")
            await cluster.stop()
            return 1
        stopping.cancel()
        try:
            starting.result()
        except ClusterError as exc:
            cluster.note(str(exc))
            return 1
        say(_header(cluster))
        for line in format_table(cluster):
            say(line)
        for line in await _footer(cluster):
            say(line)
        exited = asyncio.ensure_future(cluster.wait_exit())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if exited.done():
            died = exited.result()
            stopping.cancel()
            for d in died:
                cluster.note(f"{d.name} exited with status {d.returncode}; stopping the others")
            code = 1
        else:
            exited.cancel()
            say(f"{signal.Signals(signals[0]).name}: stopping {len(cluster.nsqds)} "
                f"nsqd{'s' if len(cluster.nsqds) > 1 else ''}{' and the lookupd' if cluster.lookupd else ''}")
        statuses = await cluster.stop()
    finally:
        if statuses is None:  # an error of ours, or the run was cancelled: the daemons go too
            await asyncio.shield(cluster.stop(5.0))
        for sig in installed:
            loop.remove_signal_handler(sig)
    gone = {d.name for d in died}
    for name, rc in statuses.items():
        if rc != 0 and name not in gone:
            cluster.note(f"{name} ended with status {rc}")
            code = 1
    if code == 0:
        say("stopped" + (f" (removed {cluster.data_path})" if cluster.temporary else ""))
    return code


def _print(line: str) -> None:
    try:
        print(line, flush=True)
    except (OSError, ValueError):
        pass  # stdout is gone (a closed pipe): the cluster runs on, its logs still go to stderr


def _header(cluster: ProcessCluster) -> str:
    n = len(cluster.nsqds)
    what = f"{n} nsqd{'s' if n > 1 else ''}" + (" and a lookupd" if cluster.lookupd else "")
    if cluster.temporary:
        where = f"data in {cluster.data_path} (temporary: removed at exit; --data-path DIR keeps it)"
    else:
        where = f"data in {cluster.data_path} (kept)"
    return f"nsq cluster: {what}, {where}"


async def _footer(cluster: ProcessCluster) -> list[str]:
    spec, lines = cluster.spec, []
    if connect_host(spec.bind) != spec.bind:
        lines.append(f"(every listener binds {spec.bind or '*'}; the addresses above are this host's loopback)")
    idle = cluster.idle_data()
    if idle:
        lines.append(f"not started: {', '.join(idle)} in {cluster.data_path} hold data; "
                     f"-n {len(cluster.nsqds) + len(idle)} serves it again")
    extra = ([f"--mem-queue-size={spec.mem_queue_size}"] if spec.mem_queue_size is not None else []) \
        + list(spec.nsqd_flags)
    if extra:
        lines.append(f"every nsqd also has: {' '.join(extra)}")
    lookupds = cluster.lookupd_http_addresses
    if lookupds:
        replicas = len(cluster.nsqds) - len(cluster.registering)
        lines.append(f"registered with lookupd: {await cluster.wait_registered()}/{len(cluster.registering)}"
                     + (f" ({replicas} replicas do not register)" if replicas else ""))
    nsq = display_command()
    lines.append("producers: " + " ".join(f"--nsqd-tcp-address={a}" for a in cluster.nsqd_tcp_addresses)
                 + (" (one nsqd each, or round robin)" if len(cluster.nsqds) > 1 else ""))
    if lookupds:
        flags = " ".join(f"--lookupd-http-address={a}" for a in lookupds)
        lines.append(f"consumers: {flags}")
    else:
        flags = " ".join(f"--nsqd-http-address={a}" for a in cluster.nsqd_http_addresses)
    lines.append(f"admin:     {nsq} admin {flags}")
    lines.append(f"ready: {len(cluster.nsqds)} nsqd process{'es' if len(cluster.nsqds) > 1 else ''}; "
                 "Ctrl-C (SIGINT) or SIGTERM stops them all")
    return lines
