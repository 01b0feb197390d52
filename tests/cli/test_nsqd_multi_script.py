"""scripts/nsqd-multi: N nsqds behind one lookupd, found by consumers through it.

Runs the script with two nsqds on free loopback ports and a temp data root,
checks both registered with its lookupd, publishes to each, reads every
message back through lookupd discovery (`nsq tail --lookupd-http-address`),
then SIGTERMs the script: it exits 0 and leaves no child running.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "nsqd-multi"


def get_json(address: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
        return json.load(r)


def post(address: str, path: str, body: bytes) -> bytes:
    req = urllib.request.Request(f"http://{address}{path}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read()


def read_until_ready(proc: subprocess.Popen, timeout: float = 60.0) -> list[str]:
    """The script's stdout lines up to its ``ready:`` line."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line is not None, f"nsqd-multi ended before it was ready: {seen}"
        seen.append(line)
        if line.startswith("ready:"):
            return seen


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_nsqd_multi_two_nsqds_through_lookupd(tmp_path):
    data_root = tmp_path / "data"
    log = open(tmp_path / "children.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "-n", "2", "--data-root", str(data_root), "--bind", "127.0.0.1",
         "--base-port", "0", "--", "--mem-queue-size=100"],
        stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "NSQ_BENCH_NO_VENV": "1"})
    pids: list[int] = []
    try:
        lines = read_until_ready(proc)
        text = "\n".join(lines)
        lookupd = re.search(r"^lookupd\s+tcp=(\S+)\s+http=(\S+)\s+pid=(\d+)", text, re.M)
        nsqds = re.findall(r"^nsqd-\d\s+tcp=(\S+)\s+http=(\S+)\s+pid=(\d+)\s+data=(\S+)", text, re.M)
        assert lookupd and len(nsqds) == 2, text
        pids = [int(lookupd.group(3)), *(int(n[2]) for n in nsqds)]
        lookupd_http = lookupd.group(2)
        assert "registered with lookupd: 2/2" in text
        assert sorted(Path(n[3]).name for n in nsqds) == ["nsqd-0", "nsqd-1"]
        assert all(Path(n[3]).parent == data_root for n in nsqds)

        producers = get_json(lookupd_http, "/nodes")["producers"]
        assert len(producers) == 2, producers
        assert {(p["tcp_port"], p["http_port"]) for p in producers} == {
            (int(tcp.rsplit(":", 1)[1]), int(http.rsplit(":", 1)[1])) for tcp, http, *_ in nsqds}

        # three messages on each nsqd, then one consumer that only knows the lookupd
        sent = set()
        for i, (_tcp, http, *_) in enumerate(nsqds):
            for k in range(3):
                body = f"nsqd-{i} message {k}"
                assert post(http, "/pub?topic=multi", body.encode()) == b"OK"
                sent.add(body)
        topic_nodes = get_json(lookupd_http, "/lookup?topic=multi")["producers"]
        assert len(topic_nodes) == 2, topic_nodes
        tail = subprocess.run(
            [sys.executable, "-m", "nsq", "tail", "--topic=multi", "--channel=check", "-n", str(len(sent)),
             f"--lookupd-http-address={lookupd_http}"],
            capture_output=True, text=True, timeout=60)
        assert tail.returncode == 0, tail.stderr
        assert set(tail.stdout.splitlines()) == sent

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(90)
        assert rc == 0, (tmp_path / "children.log").read_text()[-2000:]
        assert [pid for pid in pids if alive(pid)] == []
        assert (data_root / "nsqd-0").is_dir() and (data_root / "nsqd-1").is_dir()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()
