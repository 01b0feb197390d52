"""`nsq stat` end to end against a real nsqd subprocess."""

from __future__ import annotations

import asyncio
import io
import json
import time

import aiohttp

from nsq.cluster.stat import NodeReport, PlainWriter, StatPoller, replication_line
from tests.cli.conftest import NSQ, NSQDProcess, free_port, run_nsq
from tests.server.helpers import HTTP
from tests.server.test_replication import pair, wait_for


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


# -- replication (docs/operations/replication.md): one line per replicating nsqd ----------


def _wait_json(proc, path: str, predicate, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        data = json.loads(proc.get(path))
        if predicate(data):
            return data
        assert time.monotonic() < deadline, data
        time.sleep(0.05)


def test_replication_lines_for_a_leader_and_its_replica():
    """A wal leader alone prints Go's lines; with a replica (both given with
    --nsqd-http-address) each adds its replication line before the header,
    and the replica's copy of the channel is not summed (depth 2, not 4)."""
    leader = NSQDProcess(NSQ, ["--storage=wal"])
    replica = None
    try:
        _channel(leader, 2)
        args = ["stat", "--topic=st", "--channel=c", "--plain", "--count=1", "--interval=100ms"]
        r = run_nsq(*args, f"--nsqd-http-address={leader.http}")
        assert r.returncode == 0, r.stderr
        alone = r.stdout.decode().splitlines()
        assert len(alone) == 3 and alone[0].startswith("------rate------+"), alone  # leader, no replica: Go's
        assert alone[2].split() == ["0", "0", "|", "2", "2", "0", "0", "0", "|", "0", "0", "2", "0"]

        replica = NSQDProcess(NSQ, ["--storage=wal", f"--replica-of={leader.http}", "--broadcast-address=127.0.0.1"])

        def caught_up(data: dict) -> bool:
            reps = data["replication"]["replicas"]
            return len(reps) == 1 and reps[0]["topics"].get("st", {}).get("lag_messages", 1) == 0

        _wait_json(leader, "/stats?format=json", caught_up)
        _wait_json(replica, "/stats?format=json&topic=st",
                   lambda d: d["replication"]["connected"] and not d["replication"]["lag_messages"]
                   and any(c["channel_name"] == "c" for t in d["topics"] or [] for c in t["channels"]))
        r = run_nsq(*args, f"--nsqd-http-address={leader.http}", f"--nsqd-http-address={replica.http}")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.decode().splitlines()
        assert lines[:2] == [
            f"replication: {leader.http} leader epoch 0 acks 0, replica {replica.http} lag 0 msgs 0.00s",
            f"replication: {replica.http} replica of {leader.http} epoch 0 lag 0 msgs 0.00s"], lines
        assert lines[2:] == alone, lines
    finally:
        if replica is not None:
            replica.stop()
        leader.stop()


async def test_replication_line_through_lookupd(make_nsqd, make_lookupd, tmp_path):
    """Replicas do not register with nsqlookupd: found through it, only the
    leader is polled, and its line names the replica and its lag."""
    lookupd = await make_lookupd()
    leader, replica = await pair(make_nsqd, tmp_path, replica_acks=1,
                                 nsqlookupd_tcp_addresses=[lookupd.tcp_address])
    async with aiohttp.ClientSession() as session:
        http = HTTP(session, leader.http_port)
        assert (await http.post("/topic/create", topic="st"))[0] == 200
        assert (await http.post("/channel/create", topic="st", channel="c"))[0] == 200
        assert (await http.post("/pub", data="m", topic="st"))[0] == 200  # acks=1: the replica has it
    poller = StatPoller("st", "c", lookupd=[lookupd.http_address], interval=0.05)
    out = io.StringIO()
    writer = PlainWriter(out)
    try:
        await wait_for(lambda: lookupd.db.find_producers("topic", "st", ""), timeout=10)
        for _ in range(2):
            report = await poller.poll()
            assert report.first_error is None, report.first_error
            writer.write(report)
    finally:
        await poller.close()
    assert [n.address for n in report.nodes] == [leader.http_address]
    lines = out.getvalue().splitlines()
    assert lines[0] == (f"replication: {leader.http_address} leader epoch 0 acks 1, "
                        f"replica {replica.http_address} lag 0 msgs 0.00s"), lines
    assert lines[1].startswith("------rate------+") and lines[3].split()[2:4] == ["|", "1"], lines


def _node(rep) -> NodeReport:
    return NodeReport("a:4151", replication=rep)


def test_replication_line_wording():
    lag = {"lag_messages": 12, "lag_seconds": 0.04}
    assert replication_line(_node(None), "t") is None  # Go nsqd, diskqueue
    assert replication_line(_node({"role": "leader", "epoch": 0, "replica_acks": 0, "replicas": []}), "t") is None
    assert replication_line(_node({"role": "leader", "epoch": 2, "replica_acks": 1, "replicas": []}), "t") == \
        "replication: a:4151 leader epoch 2 acks 1, no replica"
    assert replication_line(_node({"role": "replica", "leader": "b:4151", "epoch": 3, "connected": False, **lag}),
                            "t") == "replication: a:4151 replica of b:4151 (not connected) epoch 3 lag 12 msgs 0.04s"
    replicas = [{"address": "r1:4151", "lag_messages": 7, "lag_seconds": 1.5, "topics": {"t": lag}},
                {"address": "r2:4151", "lag_messages": 7, "lag_seconds": 1.5, "topics": {}}]
    assert replication_line(_node({"role": "leader", "epoch": 3, "replica_acks": 0, "replicas": replicas}), "t") == \
        ("replication: a:4151 leader epoch 3 acks 0, replica r1:4151 lag 12 msgs 0.04s, "
         "replica r2:4151 lag 7 msgs 1.50s")  # r2 has no log of t: its lag over every topic
    assert replication_line(_node({"role": "leader", "epoch": "x", "replicas": 5}), "t") is None  # not nsqd's
