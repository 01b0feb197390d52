"""A utility that cannot reach a daemon names the address it tried, in
plain words (real subprocesses; a port nobody listens on, a name that does
not resolve)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.cli.conftest import NSQ, free_port, run_nsq

#: what the resolver says about a name that does not resolve (offline or not)
UNRESOLVED = ("name or service not known", "temporary failure in name resolution")


@pytest.fixture
def dead() -> str:
    return f"127.0.0.1:{free_port()}"


def error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 1, r.stderr
    text = r.stderr.decode()
    assert "Traceback" not in text and "[Errno" not in text, text
    return text.splitlines()[-1]


def test_pub_dead_port(dead):
    r = run_nsq("pub", "--topic=t", f"--nsqd-tcp-address={dead}", input=b"x\n")
    assert error_line(r) == f"Error: publish failed: cannot connect to {dead}: connection refused"
    assert r.stderr.count(b"\n") == 1


def test_pub_unresolvable_name():
    r = run_nsq("pub", "--topic=t", "--nsqd-tcp-address=nonsense", input=b"x\n")
    line = error_line(r)
    assert line.startswith("Error: publish failed: cannot connect to nonsense:4150: ")
    assert line.endswith(UNRESOLVED)


def test_tail_dead_port(dead):
    r = run_nsq("tail", "--topic=t", f"--nsqd-tcp-address={dead}", "-n", "1")
    assert error_line(r) == f"Error: cannot connect to {dead}: connection refused"
    assert f"[{dead}] connect failed: connection refused" in r.stderr.decode()


def test_to_file_dead_port(dead, tmp_path):
    r = run_nsq("to-file", "--topic=t", f"--nsqd-tcp-address={dead}", f"--output-dir={tmp_path}")
    assert error_line(r) == f"Error: cannot connect to {dead}: connection refused"


@pytest.mark.parametrize("flag, expected", [
    ("--nsqd-http-address", "Error: failed to get nsqd stats - {a}: connection refused"),
    ("--lookupd-http-address",
     "Error: failed to get topic producers - failed to query any nsqlookupd: lookupd {a}: connection refused"),
])
def test_stat_dead_port(dead, flag, expected):
    r = run_nsq("stat", "--topic=t", "--channel=c", f"{flag}={dead}", "--count=1")
    assert error_line(r) == expected.format(a=dead)


def test_pub_through_dead_lookupd(dead):
    r = run_nsq("pub", "--topic=t", f"--lookupd-http-address={dead}", input=b"x\n")
    assert error_line(r) == f"Error: publish failed: failed to query any nsqlookupd: lookupd {dead}: connection refused"


@pytest.mark.parametrize("mode", ["writer", "reader"])
def test_bench_dead_port(dead, mode):
    r = run_nsq("bench", mode, f"--nsqd-tcp-address={dead}", "--runfor=0.2s")
    assert error_line(r) == f"Error: cannot connect to {dead}: connection refused"


def test_to_nsq_dead_destination_is_logged_with_its_address(nsqd_proc, dead):
    proc = subprocess.Popen(NSQ + ["to-nsq", "--topic=t", f"--nsqd-tcp-address={nsqd_proc.tcp}",
                                   f"--destination-nsqd-tcp-address={dead}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while b'"channels":[{' not in nsqd_proc.get("/stats?format=json&topic=t").replace(b" ", b""):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        nsqd_proc.post("/pub?topic=t", b"m")
        time.sleep(1.0)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert f"publish to {dead} (t) failed: connection refused" in err.decode()
