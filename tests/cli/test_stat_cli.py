"""`nsq stat` end to end against a real nsqd subprocess."""

from __future__ import annotations

import asyncio
import json
import time

from nsq.cluster.stat import StatPoller
from tests.cli.conftest import free_port, run_nsq


def _channel(nsqd_proc, n: int) -> None:
    nsqd_proc.post("/topic/create?topic=st")
    nsqd_proc.post("/channel/create?topic=st&channel=c")
    for _ in range(n):
        assert nsqd_proc.post("/pub?topic=st", b"m") == b"OK"


def test_count_n_prints_n_rows(nsqd_proc):
    """Go's nsq_stat loops i = 0..N: --count=1 is the header and one row."""
    _channel(nsqd_proc, 2)
    r = run_nsq("stat", "--topic=st", "--channel=c", f"--nsqd-http-address={nsqd_proc.http}", "--plain",
                "--count=1", "--interval=100ms")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 3, lines
    assert lines[2].split() == ["0", "0", "|", "2", "2", "0", "0", "0", "|", "0", "0", "2", "0"]
    r = run_nsq("stat", "--topic=st", "--channel=c", f"--nsqd-http-address={nsqd_proc.http}", "--plain",
                "--count=3", "--interval=100ms")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.decode().splitlines()) == 5


def test_unreachable_nsqd_reports_the_connection_error():
    dead = f"127.0.0.1:{free_port()}"
    r = run_nsq("stat", "--topic=t", "--channel=c", f"--nsqd-http-address={dead}", "--plain", "--count=1",
                "--interval=100ms")
    err = r.stderr.decode()
    assert r.returncode != 0
    assert "failed to get nsqd stats" in err and dead in err, err
    assert "failed to find channel" not in err and "Traceback" not in err


def test_rates_divide_by_the_measured_time(nsqd_proc):
    """10 messages over ~0.5 s are ~20/s, whatever the nominal interval (2 s)."""
    _channel(nsqd_proc, 0)

    async def run() -> int | None:
        poller = StatPoller("st", "c", nsqd=[nsqd_proc.http], interval=2.0)
        try:
            assert (await poller.poll()).totals is not None
            start = time.monotonic()
            await asyncio.to_thread(nsqd_proc.post, "/mpub?topic=st", b"\n".join([b"m"] * 10))
            await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - start)))
            report = await poller.poll()
            elapsed = time.monotonic() - start
            assert elapsed < 1.0, elapsed  # else the figures below prove nothing
            return report.ingress
        finally:
            await poller.close()

    ingress = asyncio.run(run())
    assert ingress is not None and 10 < ingress <= 20, ingress
    assert json.loads(nsqd_proc.get("/stats?format=json&topic=st"))["topics"][0]["message_count"] == 10
