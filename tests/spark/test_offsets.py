"""The source on offsets (``mode=offsets``) on real Spark (local[2]) against
two in-process nsqds with ``--storage=wal`` and a lookupd (nsq.testing's
ThreadedCluster): batch reads of ranges, startingOffsets / endingOffsets, a
killed query restarted from its checkpoint, the progress channel, and the
mode ``auto`` picks."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.spark.conftest import require_spark, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


class WalCluster:
    """A lookupd and two nsqds with ``storage="wal"`` in this process."""

    def __init__(self, data_path: str) -> None:
        from nsq.testing import ThreadedCluster

        self.threaded = ThreadedCluster(nsqds=2, data_path=data_path, storage="wal").start()
        self.nsqds = self.threaded.nsqd_http_addresses
        self.lookupd = self.threaded.lookupd_http_addresses[0]

    def stop(self) -> None:
        self.threaded.stop()

    def mpub(self, nsqd: str, topic: str, bodies: list[bytes], chunk: int = 2000) -> None:
        for i in range(0, len(bodies), chunk):
            part = bodies[i:i + chunk]
            data = struct.pack(">I", len(part)) + b"".join(struct.pack(">I", len(b)) + b for b in part)
            request = urllib.request.Request(f"http://{nsqd}/mpub?topic={topic}&binary=true", data=data)
            with urllib.request.urlopen(request, timeout=10) as r:
                assert r.read() == b"OK"

    def topic_stats(self, nsqd: str, topic: str) -> dict:
        with urllib.request.urlopen(f"http://{nsqd}/stats?format=json&topic={topic}", timeout=10) as r:
            for t in json.load(r).get("topics") or []:
                if t["topic_name"] == topic:
                    return t
        return {}

    def channel(self, nsqd: str, topic: str, channel: str = "spark") -> dict:
        for c in self.topic_stats(nsqd, topic).get("channels") or []:
            if c["channel_name"] == channel:
                return c
        return {}


@pytest.fixture(scope="module")
def wal(tmp_path_factory):
    require_spark()
    c = WalCluster(str(tmp_path_factory.mktemp("wal")))
    yield c
    c.stop()


def bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def offsets_json(topic: str, **by_nsqd: int) -> str:
    return json.dumps({nsqd: {topic: n} for nsqd, n in by_nsqd.items()})


def read(spark, wal: WalCluster, topic: str, **options: str):
    reader = spark.read.format("nsq").option("topic", topic).option("nsqd_http_address", ",".join(wal.nsqds))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_of_a_range_twice_gives_identical_rows(spark, wal):
    topic = "off_range"
    a, b = wal.nsqds
    sent = {a: bodies("a", 3000), b: bodies("b", 2000)}
    for nsqd, bs in sent.items():
        wal.mpub(nsqd, topic, bs)
    df = read(spark, wal, topic, startingOffsets=json.dumps({a: {topic: 500}, b: {topic: 0}}),
              endingOffsets=json.dumps({a: {topic: 2500}, b: {topic: 1500}}), minPartitions="3")
    assert df.schema.simpleString() == ("struct<body:binary,id:string,attempts:int,timestamp:timestamp,"
                                        "topic:string,nsqd:string,offset:bigint>")
    assert df.rdd.getNumPartitions() >= 3
    first = sorted(df.collect(), key=lambda r: (r.nsqd, r.offset))
    second = sorted(df.collect(), key=lambda r: (r.nsqd, r.offset))
    assert first == second
    assert len(first) == 2000 + 1500
    by_nsqd = {a: [r for r in first if r.nsqd == a], b: [r for r in first if r.nsqd == b]}
    assert [r.offset for r in by_nsqd[a]] == list(range(500, 2500))
    assert [r.offset for r in by_nsqd[b]] == list(range(0, 1500))
    for nsqd, rows in by_nsqd.items():
        assert [bytes(r.body) for r in rows] == [sent[nsqd][r.offset] for r in rows]
    assert len({(r.nsqd, r.id) for r in first}) == len(first)
    assert {r.topic for r in first} == {topic} and all(r.timestamp for r in first)


def test_batch_starting_and_ending_offsets(spark, wal):
    topic = "off_bounds"
    a, b = wal.nsqds
    wal.mpub(a, topic, bodies("a", 100))
    wal.mpub(b, topic, bodies("b", 50))
    assert read(spark, wal, topic).count() == 150  # earliest to latest
    assert read(spark, wal, topic, startingOffsets="latest").count() == 0
    # an nsqd the JSON does not name: earliest at the start, latest at the end
    df = read(spark, wal, topic, startingOffsets=offsets_json(topic, **{a: 90}),
              endingOffsets=offsets_json(topic, **{b: 10}))
    assert sorted((r.nsqd, r.offset) for r in df.collect()) == \
        sorted([(a, i) for i in range(90, 100)] + [(b, i) for i in range(10)])
    df = read(spark, wal, topic, startingOffsets=offsets_json(topic, **{a: -2, b: 45}),
              endingOffsets=offsets_json(topic, **{a: 5, b: -1}))
    assert sorted((r.nsqd, r.offset) for r in df.collect()) == \
        sorted([(a, i) for i in range(5)] + [(b, i) for i in range(45, 50)])
    with pytest.raises(Exception, match="is past endingOffsets"):
        read(spark, wal, topic, startingOffsets=offsets_json(topic, **{a: 60}),
             endingOffsets=offsets_json(topic, **{a: 40})).collect()


def test_stream_starting_offsets(spark, wal, tmp_path):
    topic = "off_start"
    a, b = wal.nsqds
    wal.mpub(a, topic, bodies("a", 300))
    wal.mpub(b, topic, bodies("b", 200))
    wal.threaded.wait_registered(topic=topic)

    def stream(name: str, **options: str):
        reader = (spark.readStream.format("nsq").option("topic", topic).option("channel", name)
                  .option("lookupd_http_address", wal.lookupd))
        for key, value in options.items():
            reader = reader.option(key, value)
        return (reader.load().writeStream.format("memory").queryName(name)
                .option("checkpointLocation", str(tmp_path / name)))

    def run_available_now(name: str, **options: str) -> list:
        query = stream(name, **options).trigger(availableNow=True).start()
        assert query.awaitTermination(120), "the AvailableNow query did not stop by itself"
        assert query.exception() is None
        return spark.sql(f"select nsqd, offset from {name}").collect()

    got = run_available_now("off_earliest", startingOffsets="earliest", maxOffsetsPerTrigger="150")
    assert sorted((r.nsqd, r.offset) for r in got) == sorted([(a, i) for i in range(300)] + [(b, i) for i in range(200)])
    got = run_available_now("off_json", startingOffsets=offsets_json(topic, **{a: 250}))
    assert sorted((r.nsqd, r.offset) for r in got) == \
        sorted([(a, i) for i in range(250, 300)] + [(b, i) for i in range(200)])  # b not named: from its earliest
    # latest: only what comes after the query started
    query = stream("off_latest").start()  # startingOffsets latest is the default for streams
    try:
        wait_for(lambda: all(wal.channel(n, topic, "off_latest") for n in (a, b)), 60,
                 "the progress channel made on both nsqds")
        assert [wal.channel(n, topic, "off_latest")["offset"] for n in (a, b)] == [300, 200]
        wal.mpub(a, topic, bodies("later", 40))
        wait_for(lambda: spark.sql("select count(*) from off_latest").collect()[0][0] >= 40 or query.exception(),
                 60, "40 rows")
        assert query.exception() is None
        time.sleep(0.5)
        rows = spark.sql("select body, nsqd, offset from off_latest").collect()
    finally:
        query.stop()
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies("later", 40))
    assert sorted(r.offset for r in rows) == list(range(300, 340))


def test_progress_channel_offset_advances_with_commits(spark, wal, tmp_path):
    topic = "off_progress"
    a, _ = wal.nsqds
    wal.mpub(a, topic, bodies("p", 5000))
    query = (spark.readStream.format("nsq").option("topic", topic).option("nsqd_http_address", a)
             .option("startingOffsets", offsets_json(topic, **{a: 1000})).option("maxOffsetsPerTrigger", "800")
             .load().writeStream.format("memory").queryName("off_progress")
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            c = wal.channel(a, topic)
            if c:
                seen.append((c["offset"], c["depth"]))
                if c["offset"] == 5000:
                    break
            time.sleep(0.05)
        rows = spark.sql("select offset from off_progress").collect()
    finally:
        query.stop()
    offsets = [o for o, _ in seen]
    assert offsets[-1] == 5000, seen[-5:]
    assert offsets == sorted(offsets) and offsets[0] >= 1000  # made at the start, then only forward
    assert len(set(offsets)) >= 3, "the offset moved batch by batch"
    assert all(depth == 5000 - o for o, depth in seen)  # the lag nsq admin shows: head - offset
    assert sorted(r.offset for r in rows) == list(range(1000, 5000))


def test_killed_stream_restarts_from_checkpoint_exactly_once(spark, wal, tmp_path):
    """SIGKILL the query while a planned micro-batch is not committed yet,
    restart it from its checkpoint: the Parquet output holds every message
    once (the file sink's log drops the dead run's partial files; the
    replayed batch reads the same offsets again). No dedup anywhere."""
    topic = "off_kill"
    a, b = wal.nsqds
    sent = {a: bodies("a", 4000), b: bodies("b", 4000)}
    for nsqd, bs in sent.items():
        wal.mpub(nsqd, topic, bs)
    wal.threaded.wait_registered(topic=topic)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    log = open(tmp_path / "query.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark.offsets_stream_script", topic, wal.lookupd,
                             str(ckpt), str(out)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def batches(kind: str) -> int:
        d = ckpt / kind
        return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0

    try:
        wait_for(lambda: (batches("commits") >= 3 and batches("offsets") > batches("commits"))
                 or proc.poll() is not None, 150, "a planned, uncommitted batch after three committed", 0.01)
        assert proc.poll() is None, (tmp_path / "query.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # driver, JVM and Python workers at once
        proc.wait()
        log.close()
    planned, committed = batches("offsets"), batches("commits")
    more = {a: bodies("a2", 1000), b: bodies("b2", 1000)}
    for nsqd, bs in more.items():
        wal.mpub(nsqd, topic, bs)
    df = (spark.readStream.format("nsq").option("topic", topic).option("lookupd_http_address", wal.lookupd)
          .option("maxOffsetsPerTrigger", "2000").load())  # startingOffsets: the checkpoint's
    query = df.writeStream.format("parquet").option("checkpointLocation", str(ckpt)).start(str(out))
    try:
        wait_for(lambda: all(wal.channel(n, topic).get("offset") == 5000 for n in (a, b)), 120,
                 "every message committed (progress channels at the heads)")
    finally:
        query.stop()
    assert planned > committed  # a batch was replayed
    rows = spark.read.parquet(str(out)).select("body", "nsqd", "offset").collect()
    keys = [(r.nsqd, r.offset) for r in rows]
    assert len(keys) == len(set(keys)) == 10_000  # no duplicates, no losses
    expected = {nsqd: sent[nsqd] + more[nsqd] for nsqd in (a, b)}
    assert all(bytes(r.body) == expected[r.nsqd][r.offset] for r in rows)


def test_auto_mode_picks_by_what_the_nsqds_report(spark, wal, cluster):
    from nsq.client.errors import ClientConfigError
    from nsq.spark.mode import choose_mode
    from nsq.spark.offsets import OFFSETS_SCHEMA
    from nsq.spark.source import STREAM_SCHEMA, NSQDataSource

    def ddl(df) -> str:
        return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in df.schema.fields)

    topic = "off_auto"
    cluster.mpub(topic, bodies("d", 5))
    cluster.wait_registered(topic)
    wal.mpub(wal.nsqds[0], topic, bodies("w", 5))
    # a --storage=diskqueue nsqd: the in-flight source, by lookupd or by the nsqd's HTTP address
    disk = (spark.readStream.format("nsq").option("topic", topic)
            .option("lookupd_http_address", cluster.lookupd.http).load())
    assert ddl(disk) == STREAM_SCHEMA
    source = NSQDataSource({"topic": topic, "nsqd_http_address": cluster.nsqd.http})
    assert source.schema().simpleString() == disk.schema.simpleString()
    reader = source.streamReader(source.schema())
    assert reader.settings.nsqd_tcp_addresses == (cluster.nsqd.tcp,)  # from the nsqd's /info
    with pytest.raises(Exception, match="--storage=wal"):
        spark.read.format("nsq").option("topic", topic).option("nsqd_http_address", cluster.nsqd.http).load() \
            .collect()
    # WAL nsqds: offsets; also for a topic no nsqd has yet; mode= overrides
    assert ddl(read(spark, wal, topic)) == OFFSETS_SCHEMA.replace("offset long", "offset bigint")
    assert choose_mode({"topic": "off_nowhere_yet", "nsqd_http_address": wal.nsqds[0]}) == "offsets"
    assert choose_mode({"topic": topic, "lookupd_http_address": wal.lookupd}) == "offsets"
    assert choose_mode({"topic": topic, "nsqd_tcp_address": cluster.nsqd.tcp}) == "inflight"
    assert choose_mode({"topic": topic, "nsqd_http_address": wal.nsqds[0], "mode": "inflight"}) == "inflight"
    with pytest.raises(ClientConfigError, match="set option mode"):
        choose_mode({"topic": topic, "nsqd_http_address": f"{wal.nsqds[0]},{cluster.nsqd.http}"})


def test_read_range_past_the_head_is_data_loss(wal):
    from nsq.spark.logread import DataLossError, read_range

    topic = "off_loss"
    a, _ = wal.nsqds
    wal.mpub(a, topic, bodies("l", 10))
    assert sum(b.num_rows for b in read_range(a, topic, 2, 10)) == 8
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        list(read_range(a, topic, 5, 20))  # the head is 10
    assert sum(b.num_rows for b in read_range(a, topic, 5, 20, fail_on_data_loss=False)) == 5
    with pytest.raises(DataLossError):
        list(read_range(a, "off_no_such_topic", 0, 5))


def test_latest_start_survives_a_restart_before_the_first_commit(wal):
    """Spark plans the first batch from initialOffset again after a
    restart if it was not committed: with startingOffsets latest, the
    progress channel keeps the first answer."""
    from nsq.spark.offsets import NSQOffsetStreamReader
    from nsq.spark.options import offset_source_settings

    topic = "off_latest_restart"
    a, _ = wal.nsqds
    wal.mpub(a, topic, bodies("x", 30))
    settings = offset_source_settings({"topic": topic, "nsqd_http_address": a, "channel": "restart"})
    first = NSQOffsetStreamReader(settings).initialOffset()
    assert first == {a: {topic: 30}}
    assert wal.channel(a, topic, "restart")["offset"] == 30
    wal.mpub(a, topic, bodies("y", 20))
    assert NSQOffsetStreamReader(settings).initialOffset() == first  # not the head (50)
    fresh = offset_source_settings({"topic": topic, "nsqd_http_address": a, "channel": "restart2"})
    assert NSQOffsetStreamReader(fresh).initialOffset() == {a: {topic: 50}}


def test_retention_keeps_what_the_query_has_not_committed(tmp_path):
    """Small log segments, retention at its default (a segment goes once
    every channel is past it): the query's progress channel holds the log
    from its committed offset on, and a commit lets retention go on."""
    require_spark()
    from nsq.spark.offsets import NSQOffsetStreamReader
    from nsq.spark.options import offset_source_settings
    from nsq.testing import ThreadedCluster

    topic = "off_retention"
    with ThreadedCluster(nsqds=1, lookupd=False, data_path=str(tmp_path), storage="wal",
                         max_bytes_per_file=4096, sync_timeout=0.1) as c:
        nsqd = WalCluster.__new__(WalCluster)
        a = c.nsqd_http_address
        nsqd.mpub(a, topic, bodies("r", 2000), chunk=50)  # a segment rolls between MPUBs past 4 KiB
        reader = NSQOffsetStreamReader(offset_source_settings({"topic": topic, "nsqd_http_address": a,
                                                               "startingoffsets": "earliest"}))
        start = reader.initialOffset()
        assert start == {a: {topic: 0}}
        time.sleep(1.0)  # several checkpoints and retention passes
        assert nsqd.topic_stats(a, topic)["first_offset"] == 0
        reader.commit({a: {topic: 1000}})
        first = wait_for(lambda: nsqd.topic_stats(a, topic)["first_offset"], 30, "segments below 1000 deleted")
        assert 0 < first <= 1000
        time.sleep(1.0)
        assert nsqd.topic_stats(a, topic)["first_offset"] <= 1000  # nothing the query has not committed
        rows = [r for b in reader.read(reader.partitions({a: {topic: 1000}}, {a: {topic: 2000}})[0]) for r in
                b.column("offset").to_pylist()]
        assert rows == list(range(1000, 2000))
