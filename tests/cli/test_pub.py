"""`nsq pub` (to_nsq) flags beyond the basics: lookupd discovery, producer options."""

from __future__ import annotations

import json
import time

from tests.cli.conftest import NSQ, NSQDProcess, run_nsq
from tests.cli.test_lookupd_cli import LookupdProcess


def topic_depth(d: NSQDProcess, topic: str) -> int | None:
    for t in json.loads(d.get(f"/stats?format=json&topic={topic}"))["topics"] or []:
        if t["topic_name"] == topic:
            return t["depth"]
    return None


def test_pub_via_lookupd_nodes_then_producers():
    lookupd = LookupdProcess()
    nsqd = NSQDProcess(NSQ, [f"--lookupd-tcp-address={lookupd.tcp}", "--broadcast-address=127.0.0.1"])
    try:
        deadline = time.monotonic() + 10
        while not lookupd.get_json("/nodes")["producers"]:
            assert time.monotonic() < deadline, "nsqd never registered"
            time.sleep(0.05)
        # no nsqd has the topic yet: every known nsqd (/nodes) is a destination
        r = run_nsq("pub", "--topic=fresh", f"--lookupd-http-address={lookupd.http}", "a", "b")
        assert r.returncode == 0, r.stderr
        assert topic_depth(nsqd, "fresh") == 2
        # now /lookup lists it
        r = run_nsq("pub", "-topic", "fresh", "-lookupd-http-address", lookupd.http, "--producer-opt=dial_timeout,2s",
                    input=b"c\nd\n")
        assert r.returncode == 0, r.stderr
        assert topic_depth(nsqd, "fresh") == 4
    finally:
        nsqd.stop()
        lookupd.stop()


def test_pub_flag_errors(script_runner):
    r = script_runner.run(["nsq", "pub", "--topic=t", "x"])
    assert not r.success and "--nsqd-tcp-address or --lookupd-http-address required" in r.stderr
    r = script_runner.run(["nsq", "pub", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1",
                           "--lookupd-http-address=127.0.0.1:2", "x"])
    assert not r.success and "not both" in r.stderr
    r = script_runner.run(["nsq", "pub", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--producer-opt=nope,1", "x"])
    assert not r.success and "unknown option 'nope'" in r.stderr
    r = script_runner.run(["nsq", "pub", "--topic=t", "--lookupd-http-address=127.0.0.1:1", "x"])
    assert not r.success and "Traceback" not in r.stderr
    r = script_runner.run(["nsq", "pub", "--version"])
    assert r.success and "to_nsq" in r.stdout
