"""``nsq cluster``: one lookupd and N nsqd processes in the foreground.

The command runs as a real subprocess on free loopback ports: both nsqds
register with its lookupd, a message published to each is read back through
lookupd discovery (``nsq tail --lookupd-http-address``), SIGINT stops every
daemon and frees every port; data survives a restart with the same
``--data-path``; a daemon that dies stops the rest. The port layout and the
nsqd command lines are checked without starting anything.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from nsq.apps.cluster import (LOOKUPD_PORT, ClusterError, ClusterSpec, ProcessCluster, format_table, parse_table,
                              port_pairs)
from tests.cli.conftest import NSQ, run_nsq


def get_json(address: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
        return json.load(r)


def post(address: str, path: str, body: bytes = b"") -> bytes:
    req = urllib.request.Request(f"http://{address}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def port_free(address: str) -> bool:
    """Whether a listener could bind ``address`` now (as the daemons do,
    SO_REUSEADDR: connections in TIME_WAIT do not count)."""
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
            s.listen()
        except OSError:
            return False
    return True


class Cluster:
    """``nsq cluster ARGS`` as a subprocess; stdout read up to ``ready:``,
    the daemons' prefixed logs (stderr) into ``log``."""

    def __init__(self, tmp_path: Path, *args: str, prefix: list[str] | None = None, name: str = "cluster") -> None:
        self.log_path = tmp_path / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([*(prefix or NSQ), "cluster", *args], stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.out: list[str] = []
        self.pids: list[int] = []

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def read_until(self, start: str, timeout: float = 60.0) -> str | None:
        """Stdout lines up to one starting with ``start``; that line (None: the command ended first)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                return None
            self.out.append(line)
            if line.startswith(start):
                return line

    def ready(self) -> dict:
        assert self.read_until("ready:") is not None, (self.out, self.logs())
        rows = parse_table(self.out)
        self.pids = [r.pid for r in rows.values() if r.pid]
        return rows

    def text(self) -> str:
        return "\n".join(self.out)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 90) -> int:
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self.read_until("\0", 10)  # the rest of stdout
        return rc

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._log.close()


def tail(lookupd_http: str, topic: str, count: int) -> list[str]:
    r = run_nsq("tail", f"--topic={topic}", "--channel=check", "-n", str(count),
                f"--lookupd-http-address={lookupd_http}", timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().splitlines()


def test_cluster_two_nsqds_through_lookupd_then_sigint(tmp_path):
    data = tmp_path / "data"
    c = Cluster(tmp_path, "-n", "2", "--data-path", str(data), "--base-port", "0", "--", "--mem-queue-size=100")
    try:
        rows = c.ready()
        text = c.text()
        assert set(rows) == {"lookupd", "nsqd-1", "nsqd-2"}, text
        lookupd_http = rows["lookupd"].http
        nsqds = [rows["nsqd-1"], rows["nsqd-2"]]
        assert "registered with lookupd: 2/2" in text
        assert [Path(n.data) for n in nsqds] == [data / "nsqd-1", data / "nsqd-2"]
        assert f"admin:     nsq admin --lookupd-http-address={lookupd_http}" in text
        assert "every nsqd also has: --mem-queue-size=100" in text
        assert f"data in {data} (kept)" in text

        producers = get_json(lookupd_http, "/nodes")["producers"]
        assert {(p["broadcast_address"], p["tcp_port"], p["http_port"]) for p in producers} == {
            ("127.0.0.1", int(n.tcp.rsplit(":", 1)[1]), int(n.http.rsplit(":", 1)[1])) for n in nsqds}
        # the flags after -- reached every nsqd
        for n in nsqds:
            assert get_json(n.http, "/config/mem_queue_size") == 100

        # three messages on each nsqd, then one consumer that only knows the lookupd
        sent = set()
        for i, n in enumerate(nsqds, 1):
            for k in range(3):
                body = f"nsqd-{i} message {k}"
                assert post(n.http, "/pub?topic=multi", body.encode()) == b"OK"
                sent.add(body)
        assert len(get_json(lookupd_http, "/lookup?topic=multi")["producers"]) == 2
        assert set(tail(lookupd_http, "multi", len(sent))) == sent

        assert c.stop(signal.SIGINT) == 0, c.logs()[-3000:]
        assert c.out[-1] == "stopped"
        assert [pid for pid in c.pids if alive(pid)] == []
        addresses = [a for r in rows.values() for a in (r.tcp, r.http)]
        assert [a for a in addresses if not port_free(a)] == []
        assert (data / "nsqd-1").is_dir() and (data / "nsqd-2").is_dir()
        # every daemon's lines came through with its name in front, and they said goodbye
        logs = c.logs()
        for name in ("lookupd | ", "nsqd-1  | ", "nsqd-2  | "):
            assert re.search(rf"^{re.escape(name)}\S", logs, re.M), logs[-2000:]
        assert re.search(r"^nsqd-2  \| .*NSQ: bye$", logs, re.M)
        assert re.search(r"^lookupd \| .*LOOKUPD: bye$", logs, re.M)
    finally:
        c.close()


def test_cluster_with_a_replica_of_each_nsqd(tmp_path):
    """--replicas 1: each nsqd with --storage=wal and a replica of it beside
    it (docs/operations/replication.md); replicas do not register, and a
    message published to a leader reaches its replica."""
    data = tmp_path / "data"
    c = Cluster(tmp_path, "-n", "2", "--replicas", "1", "--data-path", str(data), "--base-port", "0")
    try:
        rows = c.ready()
        text = c.text()
        assert set(rows) == {"lookupd", "nsqd-1", "nsqd-1-r1", "nsqd-2", "nsqd-2-r1"}, text
        assert "registered with lookupd: 2/2 (2 replicas do not register)" in text
        for i in (1, 2):
            leader, replica = rows[f"nsqd-{i}"], rows[f"nsqd-{i}-r1"]
            assert post(leader.http, "/pub?topic=rep", b"hello") == b"OK"
            deadline = time.monotonic() + 15
            while True:
                st = get_json(replica.http, "/stats?format=json&topic=rep")
                if st.get("topics") and st["topics"][0]["head_offset"] == 1:
                    break
                assert time.monotonic() < deadline, c.logs()[-3000:]
                time.sleep(0.1)
            assert st["replication"] == {**st["replication"], "role": "replica", "leader": leader.http}
        producers = get_json(rows["lookupd"].http, "/nodes")["producers"]
        assert len(producers) == 2
        assert c.stop(signal.SIGINT) == 0, c.logs()[-3000:]
    finally:
        c.close()


def test_cluster_keeps_data_across_restarts_and_names_idle_nsqds(tmp_path):
    data = tmp_path / "data"
    first = Cluster(tmp_path, "-n", "2", "--data-path", str(data), "--base-port", "0", name="first")
    try:
        rows = first.ready()
        # a topic without channels holds its messages; at exit they are written to disk
        assert post(rows["nsqd-1"].http, "/pub?topic=kept", b"from nsqd-1") == b"OK"
        assert post(rows["nsqd-2"].http, "/pub?topic=kept", b"from nsqd-2") == b"OK"
        assert first.stop(signal.SIGTERM) == 0, first.logs()[-3000:]
    finally:
        first.close()

    second = Cluster(tmp_path, "-n", "1", "--data-path", str(data), "--base-port", "0", name="second")
    try:
        rows = second.ready()
        assert set(rows) == {"lookupd", "nsqd-1"}
        assert f"not started: nsqd-2 in {data} hold data; -n 2 serves it again" in second.text()
        assert tail(rows["lookupd"].http, "kept", 1) == ["from nsqd-1"]
        assert second.stop() == 0, second.logs()[-3000:]
    finally:
        second.close()


def test_cluster_stops_everything_when_a_daemon_dies_and_removes_its_temporary_data(tmp_path):
    c = Cluster(tmp_path, "-n", "2", "--base-port", "0")
    try:
        rows = c.ready()
        m = re.search(r"data in (\S+) \(temporary: removed at exit", c.text())
        assert m, c.text()
        temporary = Path(m.group(1))
        assert (temporary / "nsqd-1").is_dir()
        os.kill(rows["nsqd-1"].pid, signal.SIGKILL)
        assert c.proc.wait(60) == 1
        assert [pid for pid in c.pids if alive(pid)] == []
        assert "nsq cluster: nsqd-1 exited with status -9; stopping the others" in c.logs()
        assert not temporary.exists()
    finally:
        c.close()


def test_cluster_port_taken_exits_1_and_leaves_nothing_running(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as s:  # the lookupd's pair: two free ports in a row are not guaranteed
            s.bind(("127.0.0.1", 0))
            lookupd_port = s.getsockname()[1]
        c = Cluster(tmp_path, "--base-port", str(port), "--lookupd-port", str(lookupd_port))
        try:
            assert c.proc.wait(60) == 1
            assert c.read_until("ready:", 5) is None
            logs = c.logs()
            assert "nsq cluster: nsqd-1 exited with status 1 while starting" in logs or \
                "nsq cluster: lookupd exited with status 1 while starting" in logs, logs
            assert port_free(f"127.0.0.1:{lookupd_port}")
        finally:
            c.close()


@pytest.mark.parametrize("args, message", [
    (["-n", "0"], "-n/--nsqds must be at least 1"),
    (["--lookupd-http-address", "127.0.0.1:4161"], "--lookupd-http-address goes with --lookupd-tcp-address"),
    (["--log-level", "loud"], "invalid --log-level"),
    (["--lookupd-tcp-address", "nowhere"], "has no port"),
])
def test_cluster_flag_errors(args, message):
    r = run_nsq("cluster", *args)
    assert r.returncode == 1
    assert message in r.stderr.decode()
    assert b"Traceback" not in r.stderr


# -- the plan, without starting anything ------------------------------------------------


def test_port_pairs_skip_the_lookupds_ports():
    pairs = port_pairs(4150, 8, (LOOKUPD_PORT, LOOKUPD_PORT + 1))
    assert pairs[:5] == [(4150, 4151), (4152, 4153), (4154, 4155), (4156, 4157), (4158, 4159)]
    assert pairs[5:] == [(4162, 4163), (4164, 4165), (4166, 4167)]
    with pytest.raises(ClusterError):
        port_pairs(65530, 4)


def test_plan_gives_each_nsqd_its_ports_data_node_id_and_the_flags_last(tmp_path):
    spec = ClusterSpec(nsqds=6, data_path=str(tmp_path / "d"), mem_queue_size=5, log_level="warn",
                       nsqd_flags=["--max-msg-size=10", "--mem-queue-size=7"], command=["nsq"])
    c = ProcessCluster(spec)
    c.plan()
    assert c.lookupd is not None
    assert c.lookupd.argv == ["nsq", "lookupd", "--tcp-address=127.0.0.1:4160", "--http-address=127.0.0.1:4161",
                              "--log-level=warn", "--log-prefix=", "--broadcast-address=127.0.0.1"]
    assert [d.tcp for d in c.nsqds] == [f"127.0.0.1:{p}" for p in (4150, 4152, 4154, 4156, 4158, 4162)]
    assert [d.http for d in c.nsqds] == [f"127.0.0.1:{p}" for p in (4151, 4153, 4155, 4157, 4159, 4163)]
    six = c.nsqds[5]
    assert six.name == "nsqd-6" and six.data == str(tmp_path / "d" / "nsqd-6") and os.path.isdir(six.data)
    assert six.argv[:7] == ["nsq", "nsqd", "--tcp-address=127.0.0.1:4162", "--http-address=127.0.0.1:4163",
                            "--https-address=", f"--data-path={six.data}", six.argv[6]]
    assert six.argv[7:] == ["--log-level=warn", "--log-prefix=", "--broadcast-address=127.0.0.1",
                            "--lookupd-tcp-address=127.0.0.1:4160", "--mem-queue-size=5", "--max-msg-size=10",
                            "--mem-queue-size=7"]
    ids = [int(d.argv[6].removeprefix("--node-id=")) for d in c.nsqds]
    assert ids == [(ids[0] + i) % 1024 for i in range(6)]
    assert not c.temporary


def test_plan_with_running_lookupds_and_a_wildcard_bind(tmp_path):
    spec = ClusterSpec(nsqds=1, data_path=str(tmp_path), bind="0.0.0.0", lookupd_tcp_addresses=["10.0.0.1:4160",
                       "10.0.0.2:4160"], lookupd_http_addresses=["10.0.0.1:4161"], command=["nsq"])
    c = ProcessCluster(spec)
    c.plan()
    assert c.lookupd is None
    (d,) = c.nsqds
    assert d.tcp == "127.0.0.1:4150" and "--tcp-address=0.0.0.0:4150" in d.argv
    assert not any(a.startswith("--broadcast-address") for a in d.argv)  # nsqd's default: the hostname
    assert [a for a in d.argv if a.startswith("--lookupd-tcp-address")] == [
        "--lookupd-tcp-address=10.0.0.1:4160", "--lookupd-tcp-address=10.0.0.2:4160"]
    rows = parse_table(format_table(c))
    assert rows["lookupd"].tcp == "10.0.0.1:4160,10.0.0.2:4160" and rows["lookupd"].pid == 0
    assert rows["nsqd-1"].data == d.data
