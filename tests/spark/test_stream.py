"""The streaming source on real Spark (local[2]) against real nsqd/lookupd processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import drained, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def make_bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def all_taken(cluster, topic: str, n: int, channel: str = "spark"):
    """Every one of ``n`` messages reached the channel and was FINed."""
    c = cluster.channel_stats(topic, channel)
    return c is not None and c["message_count"] >= n and drained(cluster, topic, channel)


def test_10k_messages_through_lookupd_into_parquet(spark, cluster, tmp_path):
    topic = "spark_parquet"
    sent = make_bodies("p", 10_000)
    cluster.mpub(topic, sent)
    cluster.wait_registered(topic)
    df = (spark.readStream.format("nsq").option("topic", topic)
          .option("lookupd_http_address", cluster.lookupd.http)
          .option("maxMessagesPerTrigger", "4000").load())
    query = (df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
             .start(str(tmp_path / "out")))
    try:
        wait_for(lambda: all_taken(cluster, topic, len(sent)), 120, "all messages FINed")
    finally:
        query.stop()
    out = spark.read.parquet(str(tmp_path / "out"))
    rows = out.select("body", "id", "attempts", "topic", "nsqd").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(sent)
    assert len({r.id for r in rows}) == len(sent)
    assert {r.topic for r in rows} == {topic}
    assert {r.nsqd for r in rows} == {cluster.nsqd.tcp}
    assert {r.attempts for r in rows} == {1}
    # stop() left nothing in flight and closed its connections
    c = cluster.channel_stats(topic, "spark")
    assert c["depth"] == 0 and c["in_flight_count"] == 0
    wait_for(lambda: cluster.channel_stats(topic, "spark")["client_count"] == 0, 10, "connections closed")


def test_killed_query_restarts_from_checkpoint_without_loss(spark, cluster, tmp_path):
    topic = "spark_kill"
    sent = make_bodies("k", 6000)
    cluster.mpub(topic, sent)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    log = open(tmp_path / "query.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark.stream_script", topic, cluster.nsqd.tcp,
                             str(ckpt), str(out)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        def commits() -> int:
            d = ckpt / "commits"
            return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0

        wait_for(lambda: commits() >= 3 or proc.poll() is not None, 150, "three committed micro-batches")
        assert proc.poll() is None, (tmp_path / "query.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # driver, JVM and Python workers at once
        proc.wait()
        log.close()
    # the dead query's consumer held messages: nsqd has them in flight until msg_timeout
    held = cluster.channel_stats(topic, "spark")
    assert held["in_flight_count"] > 0
    df = (spark.readStream.format("nsq").option("topic", topic).option("nsqd_tcp_address", cluster.nsqd.tcp)
          .option("msg_timeout", "3s").load())
    query = df.writeStream.format("parquet").option("checkpointLocation", str(ckpt)).start(str(out))
    try:
        wait_for(lambda: all_taken(cluster, topic, len(sent)), 120, "all messages FINed after restart")
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).select("body", "attempts").collect()
    got = [bytes(r.body) for r in rows]
    assert set(got) == set(sent)  # every message at least once
    assert len(got) >= len(sent)
    assert max(r.attempts for r in rows) >= 2  # the held ones came back from nsqd
    c = cluster.channel_stats(topic, "spark")
    assert c["depth"] == 0 and c["in_flight_count"] == 0 and c["deferred_count"] == 0


def test_available_now_drains_and_stops(spark, cluster, tmp_path):
    topic = "spark_avail"
    sent = make_bodies("a", 3000)
    cluster.mpub(topic, sent)

    def run(name: str):
        df = (spark.readStream.format("nsq").option("topic", topic).option("nsqd_tcp_address", cluster.nsqd.tcp)
              .option("maxMessagesPerTrigger", "1000").option("availableNowIdle", "1s").load())
        query = (df.writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the AvailableNow query did not stop by itself"
        assert query.exception() is None
        return [bytes(r.body) for r in spark.sql(f"select body from {name}").collect()]

    assert sorted(run("avail_first")) == sorted(sent)
    assert drained(cluster, topic, "spark")
    assert cluster.channel_stats(topic, "spark")["client_count"] == 0
    later = make_bodies("b", 5)
    cluster.mpub(topic, later)
    assert sorted(run("avail_second")) == sorted(later)
    assert drained(cluster, topic, "spark")


def test_stop_requeues_what_the_query_holds(spark, cluster):
    topic = "spark_stop"
    sent = make_bodies("s", 5000)
    cluster.mpub(topic, sent)
    df = (spark.readStream.format("nsq").option("topic", topic).option("nsqd_tcp_address", cluster.nsqd.tcp)
          .option("maxMessagesPerTrigger", "500").load())  # msg_timeout: nsqd's 60 s
    query = df.writeStream.format("memory").queryName("stopped").start()
    try:
        wait_for(lambda: (query.lastProgress or {}).get("numInputRows"), 120, "a first micro-batch")
        held = cluster.channel_stats(topic, "spark")["in_flight_count"]
    finally:
        query.stop()
    assert held > 0
    # long before msg_timeout: what was held went back to the channel (REQ), not to a timeout
    # (REQ first, then CLS and close: wait for both, under load they can be
    # a moment apart)
    c = wait_for(lambda: ((s := cluster.channel_stats(topic, "spark"))["in_flight_count"] == 0
                          and s["client_count"] == 0 and s), 30,
                 "nothing in flight and no consumer left after stop()")
    assert c["timeout_count"] == 0 and c["depth"] > 0
    rows = spark.sql("select count(*) from stopped").collect()[0][0]
    assert rows + c["depth"] >= len(sent)


def test_available_now_leaves_later_messages_for_the_next_run(cluster):
    """The reader itself (no SparkSession): messages nsqd accepted after
    prepareForTriggerAvailableNow are held aside, never planned, and REQed
    at stop."""
    from tests.spark.conftest import require_spark

    require_spark()
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from nsq.spark.options import source_settings
    from nsq.spark.source import NSQStreamReader

    topic = "spark_cutoff"
    before, after = make_bodies("old", 100), make_bodies("new", 50)
    cluster.mpub(topic, before)
    reader = NSQStreamReader(source_settings({"topic": topic, "nsqd_tcp_address": cluster.nsqd.tcp,
                                              "availablenowidle": "500ms"}), None)
    reader.prepareForTriggerAvailableNow()
    time.sleep(0.01)
    cluster.mpub(topic, after)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        got = []
        for part in reader.partitions(start, end):
            for batch in reader.read(part):
                got.extend(batch.column("body").to_pylist())
        while True:  # the old ones may come in more than one batch
            nxt = reader.latestOffset(end, ReadAllAvailable())
            if nxt == end:
                break
            for part in reader.partitions(end, nxt):
                for batch in reader.read(part):
                    got.extend(batch.column("body").to_pylist())
            end = nxt
        assert sorted(got) == sorted(before)
    finally:
        reader.stop()
    c = wait_for(lambda: (s := cluster.channel_stats(topic, "spark"))["in_flight_count"] == 0 and s, 10,
                 "nothing in flight after stop()")
    assert c["depth"] == len(after)
