"""The `nsq` command end to end: real subprocesses, real sockets."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from nsq import NSQ_VERSION, __version__
from tests.cli.conftest import NSQ, NSQDProcess, run_nsq


def test_version_and_help(script_runner):
    r = script_runner.run(["nsq", "--version"])
    assert r.success
    assert __version__ in r.stdout
    r = script_runner.run(["nsq", "--help"])
    assert r.success
    for name in ("nsqd", "pub", "tail"):
        assert name in r.stdout
    r = script_runner.run(["nsq", "nsqd", "--version"])
    assert r.success and f"nsqd v{NSQ_VERSION}" in r.stdout


def test_python_dash_m():
    r = run_nsq("--version")
    assert r.returncode == 0 and __version__ in r.stdout.decode()


def test_nsqd_flags_accept_go_spellings(script_runner):
    # single dash, =value, Go durations and bools all parse; bad ones fail cleanly
    r = script_runner.run(["nsq", "nsqd", "-mem-queue-size=5", "--msg-timeout", "1m0s", "--snappy=false",
                           "--version"])
    assert r.success, r.stderr
    r = script_runner.run(["nsq", "nsqd", "--msg-timeout=banana"])
    assert not r.success
    assert "invalid duration" in r.stderr
    assert "Traceback" not in r.stderr
    r = script_runner.run(["nsq", "nsqd", "--node-id=5000"])
    assert not r.success and "node-id" in r.stderr and "Traceback" not in r.stderr


def test_nsqd_config_file(tmp_path):
    cfg = tmp_path / "nsqd.toml"
    cfg.write_text('mem_queue_size = 3\nmsg_timeout = "2s"\nmax_rdy_count = 7\n')
    d = NSQDProcess(NSQ, [f"--config={cfg}", "--max-rdy-count=9"])
    try:
        assert json.loads(d.get("/config/mem_queue_size")) == 3
        assert json.loads(d.get("/config/msg_timeout")) == 2_000_000_000
        assert json.loads(d.get("/config/max_rdy_count")) == 9  # flag beats config
    finally:
        assert d.stop() == 0


def test_bad_config_file_is_a_clean_error(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("mem_queue_size = [")
    r = run_nsq("nsqd", f"--config={cfg}")
    assert r.returncode != 0
    assert b"invalid TOML" in r.stderr and b"Traceback" not in r.stderr


def test_port_in_use_exits_nonzero(nsqd_proc, tmp_path):
    r = run_nsq("nsqd", f"--tcp-address={nsqd_proc.tcp}", "--http-address=127.0.0.1:0", f"--data-path={tmp_path}")
    assert r.returncode == 1
    assert r.stderr == f"Error: cannot listen on {nsqd_proc.tcp} (TCP): address already in use\n".encode()


def test_sigterm_exits_zero(nsqd_proc):
    nsqd_proc.proc.send_signal(signal.SIGTERM)
    assert nsqd_proc.proc.wait(10) == 0


def test_quickstart_round_trip(nsqd_proc):
    """The README's quick start: curl /pub, `nsq pub` from stdin, `nsq tail` shows all."""
    assert nsqd_proc.post("/pub?topic=t", b"hi") == b"OK"
    r = run_nsq("pub", "--topic", "t", "--nsqd-tcp-address", nsqd_proc.tcp, input=b"a\nb\n")
    assert r.returncode == 0, r.stderr
    r = run_nsq("tail", "--topic", "t", "--nsqd-tcp-address", nsqd_proc.tcp, "-n", "3", "--channel", "c")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [b"hi", b"a", b"b"]


def test_pub_delimiter_args_and_print_topic(nsqd_proc):
    r = run_nsq("pub", "--topic=t2", f"--nsqd-tcp-address={nsqd_proc.tcp}", "--delimiter=,", input=b"x,y,,z")
    assert r.returncode == 0, r.stderr
    r = run_nsq("pub", "--topic=t2", f"--nsqd-tcp-address={nsqd_proc.tcp}", "one", "two")
    assert r.returncode == 0, r.stderr
    r = run_nsq("tail", "--topic=t2", f"--nsqd-tcp-address={nsqd_proc.tcp}", "-n", "5", "--print-topic")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [b"t2 | x", b"t2 | y", b"t2 | z", b"t2 | one", b"t2 | two"]


def test_tail_live_and_ephemeral_channel(nsqd_proc):
    tail = subprocess.Popen(NSQ + ["tail", "--topic", "live", "--nsqd-tcp-address", nsqd_proc.tcp, "-n", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            stats = json.loads(nsqd_proc.get("/stats?format=json"))
            chans = [c["channel_name"] for t in stats["topics"] or [] for c in t["channels"]]
            if chans:
                break
            time.sleep(0.05)
        assert chans and chans[0].startswith("tail") and chans[0].endswith("#ephemeral")
        nsqd_proc.post("/mpub?topic=live", b"m1\nm2\n")
        out, err = tail.communicate(timeout=10)
        assert tail.returncode == 0, err
        assert out.splitlines() == [b"m1", b"m2"]
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()
    # the ephemeral channel goes with its only client
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = json.loads(nsqd_proc.get("/stats?format=json"))
        if not [c for t in stats["topics"] or [] for c in t["channels"]]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("ephemeral channel not deleted")


def test_pub_errors_are_clean(nsqd_proc):
    r = run_nsq("pub", "--topic", "bad!", "--nsqd-tcp-address", nsqd_proc.tcp, "x")
    assert r.returncode != 0 and b"invalid --topic" in r.stderr
    r = run_nsq("pub", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", "x")
    assert r.returncode != 0 and b"Traceback" not in r.stderr
    r = run_nsq("pub", "--topic", "t", "x")
    assert r.returncode != 0 and b"--nsqd-tcp-address or --lookupd-http-address required" in r.stderr
    r = run_nsq("tail", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1")
    assert r.returncode != 0 and b"Traceback" not in r.stderr
    r = run_nsq("tail", "--topic", "t", "--nsqd-tcp-address", nsqd_proc.tcp, "--consumer-opt", "bogus,1")
    assert r.returncode != 0 and b"unknown option" in r.stderr


def test_nsqd_duration_flags_are_seconds_not_milliseconds():
    """Regression: `--msg-timeout 5s` once came out as 5 ms (a float from the
    flag parser was read again as milliseconds)."""
    d = NSQDProcess(NSQ, ["--msg-timeout=5s", "-max-req-timeout", "1m0s", "--sync-timeout=250ms"])
    try:
        assert json.loads(d.get("/config/msg_timeout")) == 5_000_000_000
        assert json.loads(d.get("/config/max_req_timeout")) == 60_000_000_000
        assert json.loads(d.get("/config/sync_timeout")) == 250_000_000
    finally:
        assert d.stop() == 0


def test_stat_prints_go_columns(nsqd_proc):
    """`nsq stat`: Go nsq_stat's header, then one row per interval after the
    first poll, with the channel's counters summed from /stats."""
    nsqd_proc.post("/topic/create?topic=st", b"")
    nsqd_proc.post("/channel/create?topic=st&channel=c", b"")
    for _ in range(3):
        assert nsqd_proc.post("/pub?topic=st", b"m") == b"OK"
    r = run_nsq("stat", "--topic=st", "--channel=c", f"--nsqd-http-address={nsqd_proc.http}",
                "--count=2", "--interval=200ms")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("------rate------+") and "depth" in lines[0] and "metadata" in lines[0]
    assert lines[1].split() == ["ingress", "egress", "|", "total", "mem", "disk", "inflt", "def", "|",
                                "req", "t-o", "msgs", "clients"]
    assert len(lines) == 4, lines  # --count=2: two rows, as Go's nsq_stat
    assert lines[2].split() == ["0", "0", "|", "3", "3", "0", "0", "0", "|", "0", "0", "3", "0"]
    assert lines[3] == lines[2]

    r = run_nsq("stat", "--topic=st", "--channel=nope", f"--nsqd-http-address={nsqd_proc.http}", "--count=1")
    assert r.returncode != 0 and b"failed to find channel(nope)" in r.stderr and b"Traceback" not in r.stderr
    r = run_nsq("stat", "--topic=st", "--channel=c")
    assert r.returncode != 0 and b"--nsqd-http-address or --lookupd-http-address required" in r.stderr


def test_go_flag_spellings_for_short_flags_and_negative_values(script_runner):
    # -n=5 is Go's spelling of -n 5; "-0.1" and "-5" are values, not flags
    r = script_runner.run(["nsq", "tail", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "-n=-1"])
    assert not r.success and "-n must be >= 0" in r.stderr
    r = script_runner.run(["nsq", "tail", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "-n", "-5"])
    assert not r.success and "-n must be >= 0" in r.stderr
    r = script_runner.run(["nsq", "to-http", "--topic=t", "--nsqd-tcp-address=127.0.0.1:1",
                           "--post=http://127.0.0.1:1/", "--sample", "-0.1"])
    assert not r.success and "--sample must be between 0.0 and 1.0" in r.stderr
