"""`nsq lookupd` end to end: real processes, real sockets."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from tests.cli.conftest import NSQ, DaemonProcess, NSQDProcess, free_port, run_nsq


class LookupdProcess(DaemonProcess):
    """`nsq lookupd` as a subprocess on free ports."""

    name = "lookupd"

    def __init__(self, extra: list[str] | None = None) -> None:
        self.tcp_port = free_port()
        self.http_port = free_port()
        self.tcp = f"127.0.0.1:{self.tcp_port}"
        self.http = f"127.0.0.1:{self.http_port}"
        super().__init__(NSQ + ["lookupd", f"--tcp-address={self.tcp}", f"-http-address={self.http}",
                                "--broadcast-address=127.0.0.1"] + (extra or []))

    def get_json(self, path: str):
        return json.loads(self.get(path))


def poll(predicate, timeout: float = 5.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except (OSError, urllib.error.HTTPError):
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s (last {value!r})")
        time.sleep(interval)


@pytest.fixture
def lookupd_proc():
    lk = LookupdProcess()
    yield lk
    lk.stop()


def test_tail_through_lookupd_gets_messages_of_every_nsqd(lookupd_proc):
    lk = lookupd_proc
    extra = [f"--lookupd-tcp-address={lk.tcp}", "--broadcast-address=127.0.0.1"]
    nsqds = [NSQDProcess(NSQ, extra), NSQDProcess(NSQ, extra)]
    try:
        ports = {d.tcp_port for d in nsqds}
        poll(lambda: {p["tcp_port"] for p in lk.get_json("/nodes")["producers"]} == ports)
        for i, d in enumerate(nsqds):
            assert d.post("/pub?topic=lt", f"msg{i}".encode()) == b"OK"
        poll(lambda: {p["tcp_port"] for p in lk.get_json("/lookup?topic=lt")["producers"]} == ports)
        producer = lk.get_json("/lookup?topic=lt")["producers"][0]
        assert producer["broadcast_address"] == "127.0.0.1"

        r = run_nsq("tail", "--topic", "lt", "--lookupd-http-address", lk.http, "-n", "2")
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.splitlines()) == [b"msg0", b"msg1"]
        assert b"Traceback" not in r.stderr
    finally:
        for d in nsqds:
            assert d.stop() == 0


def test_tail_refuses_nsqd_and_lookupd_together():
    r = run_nsq("tail", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:4150",
                "--lookupd-http-address", "127.0.0.1:4161", "-n", "1", timeout=10)
    assert r.returncode != 0
    assert b"not both" in r.stderr
    assert b"Traceback" not in r.stderr


def test_lookupd_help_lists_its_flags():
    r = run_nsq("lookupd", "--help")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    for flag in ("--tombstone-lifetime", "--inactive-producer-timeout", "--tcp-address", "--http-address",
                 "--broadcast-address"):
        assert flag in out, flag


def test_lookupd_bad_address_is_a_clean_error():
    r = run_nsq("lookupd", "-tcp-address=bad", f"--http-address=127.0.0.1:{free_port()}", timeout=15)
    assert r.returncode != 0
    assert b"Traceback" not in r.stderr
    assert b"bad" in r.stderr


def test_lookupd_sigterm_exits_zero(lookupd_proc):
    lookupd_proc.proc.send_signal(signal.SIGTERM)
    assert lookupd_proc.proc.wait(10) == 0
    assert b"Traceback" not in lookupd_proc.proc.stderr.read()
