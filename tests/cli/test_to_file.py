"""`nsq to-file` end to end: a real nsqd (and lookupd), the command as a subprocess."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time

import pytest

from tests.cli.conftest import NSQ, NSQDProcess, run_nsq
from tests.cli.test_lookupd_cli import LookupdProcess

pytestmark = pytest.mark.timeout(60)


def channel_stats(d: NSQDProcess, topic: str, channel: str = "nsq_to_file") -> dict | None:
    stats = json.loads(d.get(f"/stats?format=json&topic={topic}"))
    for t in stats["topics"] or []:
        for c in t["channels"] or []:
            if c["channel_name"] == channel:
                return c
    return None


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def read_lines(directory) -> list[bytes]:
    lines: list[bytes] = []
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(root, name)
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                lines += f.read().splitlines()
    return lines


def start_to_file(*args: str) -> subprocess.Popen:
    return subprocess.Popen(NSQ + ["to-file", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, bytes]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    return proc.returncode, err


def test_help_and_flag_errors(script_runner):
    r = script_runner.run(["nsq", "to-file", "--help"])
    assert r.success
    for flag in ("--output-dir", "--work-dir", "--filename-format", "--datetime-format", "--host-identifier",
                 "--gzip", "--gzip-level", "--rotate-interval", "--rotate-size", "--skip-empty-files",
                 "--sync-interval", "--topic-pattern", "--topic-refresh", "--consumer-opt", "--max-in-flight"):
        assert flag in r.stdout
    cases = [
        ([], "--nsqd-tcp-address or --lookupd-http-address required"),
        (["--nsqd-tcp-address=127.0.0.1:1"], "--topic or --topic-pattern required"),
        (["--nsqd-tcp-address=127.0.0.1:1", "--topic-pattern=a"],
         "--lookupd-http-address must be specified when no --topic specified"),
        (["--nsqd-tcp-address=127.0.0.1:1", "--lookupd-http-address=127.0.0.1:2", "--topic=t"], "not both"),
        (["--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--gzip-level=10"], "should be 1-9"),
        (["--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--gzip", "--filename-format=<TOPIC>.log"],
         "missing <REV>"),
        (["--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--consumer-opt=bogus,1"], "unknown option"),
        (["--nsqd-tcp-address=127.0.0.1:1", "--topic=t", "--rotate-interval=soon"], "invalid duration"),
    ]
    for args, message in cases:
        r = script_runner.run(["nsq", "to-file", *args])
        assert not r.success, args
        assert message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = script_runner.run(["nsq", "to-file", "--version"])
    assert r.success and "nsq_to_file" in r.stdout


def test_writes_gzip_and_fins_only_after_sync(nsqd_proc, tmp_path):
    bodies = [b"msg-%04d" % i for i in range(500)]
    nsqd_proc.post("/mpub?topic=arch", b"\n".join(bodies))
    out = tmp_path / "out"
    proc = start_to_file("--topic=arch", f"--nsqd-tcp-address={nsqd_proc.tcp}", f"--output-dir={out}", "--gzip",
                         "--max-in-flight=100", "--sync-interval=1h", "--host-identifier=box")
    try:
        # a batch is synced, then FINed, once the consumer is starved (85%
        # of RDY 100 in flight, as Go's IsStarved) or 100 wait; the rest,
        # fewer than 85, waits for the hour-long sync interval (or the exit)
        state = wait_for(lambda: (c := channel_stats(nsqd_proc, "arch")) and c["depth"] == 0
                         and c["in_flight_count"] < 85 and c, what="all delivered, fewer than 85 unsynced")
        held = state["in_flight_count"]
        nsqd_proc.post("/pub?topic=arch", b"straggler")
        if held + 1 < 85:  # still not starved: it waits with the others
            wait_for(lambda: (c := channel_stats(nsqd_proc, "arch")) and c["in_flight_count"] == held + 1,
                     what="the straggler in flight")
            time.sleep(0.5)
            c = channel_stats(nsqd_proc, "arch")
            assert c is not None and c["in_flight_count"] == held + 1, c  # nothing FINed without a sync
    finally:
        code, err = stop(proc)
    assert code == 0, err
    c = channel_stats(nsqd_proc, "arch")
    assert c is not None
    assert c["in_flight_count"] == 0 and c["depth"] == 0 and c["requeue_count"] == 0  # synced and FINed at exit
    files = os.listdir(out)
    assert len(files) == 1 and files[0].startswith("arch.box-000000.") and files[0].endswith(".log.gz")
    with gzip.open(out / files[0]) as f:  # a valid (multi-member) gzip file
        assert f.read().splitlines() == bodies + [b"straggler"]


def test_rotate_by_size_into_work_and_output_dirs(nsqd_proc, tmp_path):
    nsqd_proc.post("/mpub?topic=rot", b"\n".join(b"%099d" % i for i in range(300)))  # 100 bytes a line
    work, out = tmp_path / "work", tmp_path / "out"
    proc = start_to_file("--topic=rot", f"--nsqd-tcp-address={nsqd_proc.tcp}", f"--output-dir={out}",
                         f"--work-dir={work}", "--rotate-size=5000", "--max-in-flight=50")
    try:
        wait_for(lambda: (c := channel_stats(nsqd_proc, "rot")) and c["depth"] == 0 and c["in_flight_count"] == 0,
                 what="channel drained")
        # finished files moved to the output dir while the current one is still being written
        assert len(os.listdir(out)) >= 5
        assert len(os.listdir(work)) == 1
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert os.listdir(work) == []
    names = sorted(os.listdir(out))
    assert len(names) == 6  # 300 lines of 100 bytes, > 5000 bytes rotates: 51 lines a file
    assert read_lines(out) == [b"%099d" % i for i in range(300)]


def test_rotate_by_interval(nsqd_proc, tmp_path):
    out = tmp_path / "out"
    proc = start_to_file("--topic=iv", f"--nsqd-tcp-address={nsqd_proc.tcp}", f"--output-dir={out}",
                         "--rotate-interval=1s", "--sync-interval=200ms", "--max-in-flight=1")
    try:
        nsqd_proc.post("/pub?topic=iv", b"first")
        wait_for(lambda: read_lines(out) == [b"first"], what="first message written")
        time.sleep(1.5)
        nsqd_proc.post("/pub?topic=iv", b"second")
        wait_for(lambda: read_lines(out) == [b"first", b"second"], what="second message written")
    finally:
        code, err = stop(proc)
    assert code == 0, err
    names = sorted(os.listdir(out))
    assert len(names) >= 2  # rotated after 1s (empty files too: no --skip-empty-files)
    assert read_lines(out) == [b"first", b"second"]


def test_nothing_lost_across_sigterm_under_load(nsqd_proc, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    total = 3000
    pub = subprocess.Popen(NSQ + ["pub", "--topic=load", f"--nsqd-tcp-address={nsqd_proc.tcp}", "--rate=1500"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = start_to_file("--topic=load", f"--nsqd-tcp-address={nsqd_proc.tcp}", f"--output-dir={out}",
                         f"--work-dir={work}", "--gzip", "--sync-interval=1h")
    try:
        pub.stdin.write(b"".join(b"m%05d\n" % i for i in range(total)))
        pub.stdin.close()
        time.sleep(1.0)  # stop in the middle of the stream
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert pub.wait(30) == 0
    pub.stdout.close()
    pub.stderr.close()
    assert os.listdir(work) == []
    written = read_lines(out)
    assert len(written) == len(set(written))
    c = channel_stats(nsqd_proc, "load")
    assert c["in_flight_count"] == 0  # everything received was written, synced and FINed
    # the rest waits in the channel: drain it with a second run
    assert 0 < len(written) < total or c["depth"] == 0
    proc = start_to_file("--topic=load", f"--nsqd-tcp-address={nsqd_proc.tcp}", f"--output-dir={out}",
                         f"--work-dir={work}", "--gzip", "--sync-interval=200ms")
    try:
        wait_for(lambda: (c := channel_stats(nsqd_proc, "load")) and c["depth"] == 0 and c["in_flight_count"] == 0,
                 what="channel drained")
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert sorted(read_lines(out)) == [b"m%05d" % i for i in range(total)]


def test_topic_pattern_discovers_topics_from_lookupd(tmp_path):
    lookupd = LookupdProcess()
    nsqd = NSQDProcess(NSQ, [f"--lookupd-tcp-address={lookupd.tcp}", "--broadcast-address=127.0.0.1"])
    out = tmp_path / "out"
    proc = None
    try:
        nsqd.post("/pub?topic=logs_a", b"a1")
        nsqd.post("/pub?topic=other", b"o1")
        wait_for(lambda: len(lookupd.get_json("/topics")["topics"]) == 2, what="topics registered")
        proc = start_to_file("--topic-pattern=^logs_", f"--lookupd-http-address={lookupd.http}",
                             f"--output-dir={out}", "--topic-refresh=300ms", "--sync-interval=200ms",
                             "--filename-format=<TOPIC>/<HOST>.log", "--host-identifier=h")
        wait_for(lambda: (out / "logs_a" / "h.log").exists() and read_lines(out) == [b"a1"], what="logs_a written")
        nsqd.post("/pub?topic=logs_b", b"b1")  # a new topic found by the refresh
        wait_for(lambda: (out / "logs_b" / "h.log").exists() and sorted(read_lines(out)) == [b"a1", b"b1"],
                 what="logs_b written")
        assert not (out / "other").exists()
    finally:
        if proc is not None:
            code, err = stop(proc)
            assert code == 0, err
        nsqd.stop()
        lookupd.stop()


def test_skip_empty_files(nsqd_proc, tmp_path):
    out = tmp_path / "out"
    proc = start_to_file("--topic=quiet", f"--nsqd-tcp-address={nsqd_proc.tcp}", f"--output-dir={out}",
                         "--skip-empty-files", "--sync-interval=100ms", "--rotate-interval=200ms")
    try:
        wait_for(lambda: channel_stats(nsqd_proc, "quiet") is not None, what="subscribed")
        time.sleep(0.8)
        assert not out.exists() or os.listdir(out) == []
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert not out.exists() or os.listdir(out) == []


def test_unreachable_nsqd_is_a_clean_error(tmp_path):
    r = run_nsq("to-file", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1", f"--output-dir={tmp_path}")
    assert r.returncode != 0 and b"Traceback" not in r.stderr
