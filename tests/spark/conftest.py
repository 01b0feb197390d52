"""Fixtures for the PySpark connector tests: one SparkSession (local[2]) for
the whole test session, real ``nsq nsqd`` / ``nsq lookupd`` subprocesses.

* ``spark``: needs pyspark, pyarrow and ``java`` on PATH. When one is
  missing the tests are skipped, unless ``NSQ_REQUIRE_SPARK=1`` is set,
  which turns that into a failure (CI installs Java 17 and ``.[spark]``).
* ``cluster``: an nsqlookupd and an nsqd registered with it (broadcasting
  127.0.0.1), shared by the session; each test uses its own topics.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
import urllib.request

import pytest

from tests.cli.conftest import NSQ, NSQDProcess
from tests.cli.test_lookupd_cli import LookupdProcess


def spark_missing() -> str | None:
    """Why the Spark tests cannot run here, or None."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not on PATH (Spark needs Java 17)"
    return None


def require_spark() -> None:
    """Skip (or, with NSQ_REQUIRE_SPARK=1, fail) when Spark cannot run."""
    reason = spark_missing()
    if reason is None:
        return
    if os.environ.get("NSQ_REQUIRE_SPARK", "") not in ("", "0"):
        pytest.fail(f"NSQ_REQUIRE_SPARK is set but {reason}")
    pytest.skip(reason)


def build_session(app: str = "nsq-tests"):
    """A local[2] SparkSession with the nsq data sources registered (the
    interpreter running this is the one Spark starts for Python workers)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import nsq.spark

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    nsq.spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def spark():
    require_spark()
    session = build_session()
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


class Cluster:
    """An nsqlookupd and one nsqd registered with it, as subprocesses."""

    def __init__(self) -> None:
        self.lookupd = LookupdProcess()
        try:
            self.nsqd = NSQDProcess(NSQ, [f"--lookupd-tcp-address={self.lookupd.tcp}",
                                          "--broadcast-address=127.0.0.1"])
        except BaseException:
            self.lookupd.stop()
            raise

    def stop(self) -> None:
        self.nsqd.stop()
        self.lookupd.stop()

    def mpub(self, topic: str, bodies: list[bytes], chunk: int = 2000) -> None:
        """Publish with HTTP /mpub (binary mode: bodies may hold newlines)."""
        import struct

        for i in range(0, len(bodies), chunk):
            part = bodies[i:i + chunk]
            data = struct.pack(">I", len(part)) + b"".join(struct.pack(">I", len(b)) + b for b in part)
            assert self.nsqd.post(f"/mpub?topic={topic}&binary=true", data) == b"OK"

    def channel_stats(self, topic: str, channel: str) -> dict | None:
        """The channel's entry in nsqd's /stats (None if it does not exist)."""
        stats = json.loads(self.nsqd.get(f"/stats?format=json&topic={topic}"))
        for t in stats.get("topics") or []:
            if t["topic_name"] == topic:
                for c in t.get("channels") or []:
                    if c["channel_name"] == channel:
                        return c
        return None

    def wait_registered(self, topic: str, timeout: float = 10.0) -> None:
        """Wait until the lookupd lists the nsqd as a producer of ``topic``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.lookupd.http}/lookup?topic={topic}", timeout=5) as r:
                    if json.loads(r.read()).get("producers"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"lookupd never listed a producer of {topic}")


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    yield c
    c.stop()


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached within {timeout}s (last: {value!r})")


def drained(cluster: Cluster, topic: str, channel: str) -> bool:
    """True when the channel exists with nothing queued, in flight or deferred."""
    c = cluster.channel_stats(topic, channel)
    return c is not None and c["depth"] == 0 and c["in_flight_count"] == 0 and c["deferred_count"] == 0
