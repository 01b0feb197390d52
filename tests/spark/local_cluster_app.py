"""A Spark application for tests/spark/test_local_cluster.py, run the way one
runs on a cluster::

    spark-submit --master 'local-cluster[2,1,1024]' --py-files nsq-<version>-py3-none-any.whl \\
        --conf spark.pyspark.python=<an interpreter without nsq> local_cluster_app.py SPEC.json

The test copies this file out of the checkout and submits it from a
directory of its own, with an interpreter that has pyspark, pyarrow and
nsq's dependencies but not nsq: this file imports nsq only once Spark has
put the shipped wheel on its path, and so do the executors. Nothing here
imports the test suite.

SPEC.json's ``phase``:

- ``kill-run``: a streaming query on offsets (``startingOffsets``
  earliest, 500 per trigger) into Parquet with a checkpoint, until killed.
- ``main``: where the executors run and import nsq from (``probe``); the
  batch sink (``sink``); the in-flight source with ``Trigger.AvailableNow``
  into Parquet (``inflight``); a batch read on offsets (``offsets_batch``);
  a stream on offsets into the nsq sink (``offsets_to_nsq``); the killed
  query restarted from its checkpoint (``restart``). Each phase's result, or
  its error, goes into the JSON file ``SPEC["result"]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import urllib.request
from typing import Any, Callable

MIN_EXECUTORS = 2


def session(app: str) -> Any:
    """The SparkSession spark-submit configured, with the nsq data sources,
    once ``MIN_EXECUTORS`` executors have registered."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(app).config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import nsq.spark  # from the --py-files wheel: spark-submit put it on this interpreter's path

    nsq.spark.register(spark)
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + 120
    while len(tracker.getExecutorInfos()) < MIN_EXECUTORS + 1:  # the driver is listed too
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {MIN_EXECUTORS} executors registered within 120 s")
        time.sleep(0.1)
    return spark


def jvm_ancestor(pid: int) -> int:
    """The nearest ancestor of ``pid`` (or itself) that is a java process (0: none)."""
    while pid > 1:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "java":
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return 0
    return 0


def probe(spark: Any) -> dict:
    """Which processes run the tasks, with which interpreter, importing nsq from where."""
    import nsq

    def where(_: Any) -> Any:
        import os
        import sys
        import time

        try:
            import nsq as shipped

            found = shipped.__file__
        except ImportError as exc:
            found = f"ImportError: {exc}"
        time.sleep(0.5)  # hold the executor, so the other one takes the next task
        yield {"pid": os.getpid(), "jvm": jvm_ancestor(os.getpid()), "python": sys.executable, "nsq": found,
               "cwd": os.getcwd()}

    tasks = spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect()
    return {"driver_jvm": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(),
            "driver_python": sys.executable, "driver_nsq": nsq.__file__,
            "python_exec": spark.sparkContext.pythonExec, "master": spark.sparkContext.master, "tasks": tasks}


def sink(spark: Any, spec: dict) -> dict:
    n = spec["sink_rows"]
    df = spark.range(0, n, 1, 4).selectExpr("concat('lc-', cast(id as string)) as body")
    (df.write.format("nsq").mode("append").option("topic", spec["sink_topic"])
     .option("nsqd_tcp_address", spec["nsqd_tcp"]).option("batchSize", "300").save())
    return {"rows": n}


def inflight(spark: Any, spec: dict) -> dict:
    df = (spark.readStream.format("nsq").option("topic", spec["inflight_topic"])
          .option("lookupd_http_address", spec["lookupd_http"]).option("maxMessagesPerTrigger", "4000")
          .option("numPartitions", "2").option("availableNowIdle", "1s").load())
    query = (df.writeStream.format("parquet").option("checkpointLocation", spec["inflight_ckpt"])
             .trigger(availableNow=True).start(spec["inflight_out"]))
    if not query.awaitTermination(150):
        query.stop()
        raise RuntimeError("the AvailableNow query did not stop by itself within 150 s")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    rows = spark.read.parquet(spec["inflight_out"]).select("body", "id", "attempts", "topic", "nsqd").collect()
    return {"rows": [[bytes(r.body).decode(), r.id, r.attempts, r.topic, r.nsqd] for r in rows],
            "batches": len([p for p in query.recentProgress if p["numInputRows"]])}


def offsets_batch(spark: Any, spec: dict) -> dict:
    df = (spark.read.format("nsq").option("topic", spec["batch_topic"])
          .option("nsqd_http_address", ",".join(spec["wal_nsqds"]))
          .option("startingOffsets", json.dumps(spec["batch_start"]))
          .option("endingOffsets", json.dumps(spec["batch_end"])).option("minPartitions", "4").load())
    rows = df.select("nsqd", "offset", "body").collect()
    return {"partitions": df.rdd.getNumPartitions(),
            "rows": [[r.nsqd, r.offset, bytes(r.body).decode()] for r in rows]}


def offsets_to_nsq(spark: Any, spec: dict) -> dict:
    df = (spark.readStream.format("nsq").option("topic", spec["pipe_topic"])
          .option("lookupd_http_address", spec["wal_lookupd"]).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "1500").load())
    query = (df.selectExpr("upper(cast(body as string)) as body").writeStream.format("nsq")
             .option("topic", spec["pipe_out_topic"]).option("nsqd_tcp_address", spec["nsqd_tcp"])
             .option("checkpointLocation", spec["pipe_ckpt"]).trigger(availableNow=True).start())
    if not query.awaitTermination(150):
        query.stop()
        raise RuntimeError("the AvailableNow query did not stop by itself within 150 s")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return {"batches": len([p for p in query.recentProgress if p["numInputRows"]])}


def channel_offsets(nsqd: str, topic: str, channel: str = "spark") -> tuple[int, int]:
    """(the topic's head, the channel's offset; -1 without it) on ``nsqd``."""
    with urllib.request.urlopen(f"http://{nsqd}/stats?format=json&topic={topic}", timeout=10) as r:
        for t in json.load(r).get("topics") or []:
            if t["topic_name"] == topic:
                for c in t.get("channels") or []:
                    if c["channel_name"] == channel:
                        return int(t.get("head_offset", 0)), int(c.get("offset", -1))
                return int(t.get("head_offset", 0)), -1
    return 0, -1


def restart(spark: Any, spec: dict) -> dict:
    """The killed query again, from its checkpoint, until every nsqd's
    progress channel stands at the head the test expects."""
    topic, want = spec["kill_topic"], spec["kill_heads"]
    df = (spark.readStream.format("nsq").option("topic", topic).option("lookupd_http_address", spec["wal_lookupd"])
          .option("maxOffsetsPerTrigger", "2000").load())  # startingOffsets: the checkpoint's
    query = df.writeStream.format("parquet").option("checkpointLocation", spec["kill_ckpt"]).start(spec["kill_out"])
    try:
        deadline = time.monotonic() + 150
        while not all(channel_offsets(n, topic) == (head, head) for n, head in want.items()):
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if time.monotonic() > deadline:
                raise RuntimeError(f"progress channels not at the heads within 150 s: "
                                   f"{ {n: channel_offsets(n, topic) for n in want} }")
            time.sleep(0.1)
    finally:
        query.stop()
    rows = spark.read.parquet(spec["kill_out"]).select("nsqd", "offset", "body").collect()
    return {"rows": [[r.nsqd, r.offset, bytes(r.body).decode()] for r in rows]}


def kill_run(spark: Any, spec: dict) -> None:
    df = (spark.readStream.format("nsq").option("topic", spec["kill_topic"])
          .option("lookupd_http_address", spec["wal_lookupd"]).option("mode", "offsets")
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500").load())
    query = df.writeStream.format("parquet").option("checkpointLocation", spec["kill_ckpt"]).start(spec["kill_out"])
    print("started", flush=True)
    query.awaitTermination()


PHASES: dict[str, Callable[[Any, dict], dict]] = {
    "sink": sink, "inflight": inflight, "offsets_batch": offsets_batch, "offsets_to_nsq": offsets_to_nsq,
    "restart": restart,
}


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    spark = session(f"nsq-local-cluster-{spec['phase']}")
    if spec["phase"] == "kill-run":
        kill_run(spark, spec)
        return 0
    results: dict[str, Any] = {}
    failed = False
    for name, phase in [("probe", lambda s, _: probe(s)), *PHASES.items()]:
        started = time.monotonic()
        try:
            results[name] = phase(spark, spec)
        except Exception:  # reported per phase: one failure does not hide the others
            results[name] = {"error": traceback.format_exc()}
            failed = True
        results[name]["seconds"] = round(time.monotonic() - started, 2)
        print(f"{name}: {results[name]['seconds']} s", flush=True)
    with open(spec["result"] + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(spec["result"] + ".tmp", spec["result"])
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
