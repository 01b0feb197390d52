"""`nsq bench`: the tools run against a real nsqd and print sane lines (no timing asserted)."""

from __future__ import annotations

import json
import re
import urllib.request

from nsq.apps.bench import (
    BenchResult,
    LatencyResult,
    _fins,
    parse_deadline,
    parse_latency_line,
    parse_result_line,
)
import pytest

from nsq.protocol import commands
from tests.cli.conftest import NSQ, NSQDProcess, free_port, run_nsq
from tests.tlsutil import make_pki


class _Run:
    def __init__(self, *args: str) -> None:
        r = run_nsq(*args, timeout=30)
        self.returncode, self.stdout, self.stderr = r.returncode, r.stdout.decode(), r.stderr.decode()


def test_writer_reader_latency_against_nsqd(nsqd_proc):
    r = _Run("bench", "writer", f"--nsqd-tcp-address={nsqd_proc.tcp}", "--runfor=0.5s", "--connections=2",
                "--batch-size=50")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"\[bench_writer\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d duration: [\d.]+m?s - [\d.]+mb/s - "
                        r"[\d.]+ops/s - [\d.]+us/op\n", r.stdout), r.stdout
    w = parse_result_line(r.stdout)
    assert w["mode"] == "writer" and w["seconds"] >= 0.5 and w["ops_per_s"] > 0 and w["mb_per_s"] > 0

    # Go's single-dash flags work too; the reader drains what the writer left
    # (long enough that a loaded machine still reads something in it)
    r = _Run("bench", "reader", "-nsqd-tcp-address", nsqd_proc.tcp, "-runfor=2s", "--connections=1",
                "--rdy=100")
    assert r.returncode == 0, r.stderr
    rd = parse_result_line(r.stdout)
    assert rd["mode"] == "reader" and rd["ops_per_s"] > 0 and rd["us_per_op"] > 0

    r = _Run("bench", "latency", f"--nsqd-tcp-address={nsqd_proc.tcp}", "--runfor=0.5s", "--topic=lat")
    assert r.returncode == 0, r.stderr
    lat = parse_latency_line(r.stdout)
    assert lat["count"] > 0 and 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]

    # PUB -> OK: no consumer; every sample's message stays on the topic
    r = _Run("bench", "latency", f"--nsqd-tcp-address={nsqd_proc.tcp}", "--runfor=0.3s", "--topic=latok",
             "--until=ok")
    assert r.returncode == 0, r.stderr
    ok = parse_latency_line(r.stdout)
    assert ok["count"] > 0 and 0 < ok["p50"] <= ok["max"]
    stats = json.loads(urllib.request.urlopen(f"http://{nsqd_proc.http}/stats?format=json&topic=latok").read())
    assert stats["topics"][0]["message_count"] == ok["count"]


@pytest.fixture(scope="module")
def tls_nsqd(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    d = NSQDProcess(NSQ, [f"--tls-cert={pki.server_cert}", f"--tls-key={pki.server_key}"])
    d.ca = pki.ca
    yield d
    d.stop()


@pytest.mark.parametrize("upgrade", [["--tls-v1", "--tls-root-ca-file={ca}"], ["--snappy"], ["--deflate"],
                                     ["--tls-v1", "--tls-insecure-skip-verify", "--deflate", "--deflate-level=1"]],
                         ids=" ".join)
def test_writer_and_reader_upgraded(tls_nsqd, upgrade):
    """IDENTIFY tls_v1 / snappy / deflate, the upgrade, then the usual run: the
    reader counts what the writer published, over the upgraded stream."""
    flags = [f.format(ca=tls_nsqd.ca) for f in upgrade]
    topic = "up" + str(abs(hash(" ".join(upgrade))))[:8]
    common = [f"--nsqd-tcp-address={tls_nsqd.tcp}", f"--topic={topic}", "--connections=1", *flags]
    w = _Run("bench", "writer", *common, "--runfor=0.5s", "--batch-size=50")
    assert w.returncode == 0, w.stderr
    published = parse_result_line(w.stdout)
    assert published["ops_per_s"] > 0
    r = _Run("bench", "reader", *common, "--runfor=1s", "--rdy=100")
    assert r.returncode == 0, r.stderr
    read = parse_result_line(r.stdout)
    assert read["mode"] == "reader" and read["ops_per_s"] > 0
    lat = _Run("bench", "latency", *common[:2], *flags, "--runfor=0.2s", "--topic=" + topic + "lat")
    assert lat.returncode == 0, lat.stderr
    assert parse_latency_line(lat.stdout)["count"] > 0


def test_upgrade_errors(tls_nsqd, nsqd_proc):
    r = _Run("bench", "writer", f"--nsqd-tcp-address={nsqd_proc.tcp}", "--runfor=0.2s", "--connections=1",
             "--tls-v1")
    assert r.returncode != 0 and "nsqd did not agree to tls_v1" in r.stderr and "Traceback" not in r.stderr
    # a self-signed CA the system does not know
    r = _Run("bench", "reader", f"--nsqd-tcp-address={tls_nsqd.tcp}", "--runfor=0.2s", "--connections=1",
             "--tls-v1")
    assert r.returncode != 0 and "certificate verify failed" in r.stderr and "Traceback" not in r.stderr
    r = _Run("bench", "writer", "--snappy", "--deflate")
    assert r.returncode != 0 and "mutually exclusive" in r.stderr


def test_upgrade_flags_in_help():
    for mode in ("writer", "reader", "latency"):
        r = _Run("bench", mode, "--help")
        text = " ".join(r.stdout.split())
        for flag in ("--tls-v1 ", "--tls-insecure-skip-verify ", "--tls-root-ca-file TEXT", "--snappy ",
                     "--deflate ", "--deflate-level INTEGER RANGE"):
            assert flag in text, (mode, flag)
        assert "9 (default 6)" in text


def test_refused_connection_is_one_line():
    r = _Run("bench", "writer", f"--nsqd-tcp-address=127.0.0.1:{free_port()}", "--runfor=0.2s",
                "--connections=1")
    assert r.returncode != 0
    assert r.stderr.startswith("Error: cannot connect to 127.0.0.1:") and "Traceback" not in r.stderr


def test_flag_errors():
    r = _Run("bench", "reader", "--deadline=tomorrow")
    assert r.returncode != 0 and "invalid --deadline" in r.stderr
    r = _Run("bench", "writer", "--topic=bad topic")
    assert r.returncode != 0 and "invalid --topic" in r.stderr


def test_line_formats_match_go():
    line = BenchResult("writer", 10_000_512_345, 9_002_426, 200).line()
    assert line.endswith("duration: 10.000512345s - 171.699mb/s - 900196.479ops/s - 1.111us/op")
    assert line.startswith("[bench_writer] ")
    # Go's float formatting of a run that counted nothing
    assert BenchResult("reader", 1_000_000_000, 0, 200).line().endswith(
        "duration: 1s - 0.000mb/s - 0.000ops/s - +Infus/op")
    lat = LatencyResult(2_000_000_000, [i * 1000 for i in range(1, 101)])
    assert lat.line().endswith("duration: 2s - 100 msgs - p50: 50.000us - p90: 90.000us - p99: 99.000us - "
                               "max: 100.000us")
    assert parse_latency_line(lat.line())["p99"] == 99.0


def test_fins_are_fin_commands():
    ids = [b"0123456789abcdef", b"fedcba9876543210"]
    assert _fins(ids) == commands.fin(ids[0]) + commands.fin(ids[1])


def test_deadline_is_utc():
    d = parse_deadline("2030-01-02 03:04:05")
    assert d.utcoffset().total_seconds() == 0 and d.hour == 3


def test_bench_scale_script_runs_every_check_small():
    """scripts/bench-scale at toy sizes: every check builds its situation
    (verified against /stats inside the script) and prints its table rows."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, NSQ_BENCH_NO_VENV="1")
    r = subprocess.run([sys.executable, os.path.join(root, "scripts", "bench-scale"), "--idle", "0.2",
                        "--topics", "20", "--deferred", "300", "--consumers", "5", "--consumer-messages", "200",
                        "--in-flight", "2600"], capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and not line.startswith("| check")]
    checks = {line.split(" | ")[0][2:] for line in rows if not line.startswith("| ---")}
    assert checks == {"idle-topics", "deferred", "consumers", "in-flight"}, r.stdout
    assert "| deferred | 300 DPUB" in r.stdout and "2,600 in flight" in r.stdout
