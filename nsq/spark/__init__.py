"""PySpark connector: NSQ topics as streams, and ``nsq to-file`` archives as datasets.

Needs the ``spark`` extra (``pip install 'nsq[spark]'``: pyspark >= 4.0
with the Python Data Source API, and pyarrow) and Java 17. Example::

    import nsq.spark
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    nsq.spark.register(spark)

    events = (spark.readStream.format("nsq")
              .option("topic", "events").option("channel", "spark")
              .option("lookupd_http_address", "127.0.0.1:4161")
              .load())                       # body, id, attempts, timestamp, topic, nsqd
                                             # (+ offset when the nsqds run --storage=wal)
    (events.writeStream.format("parquet")
           .option("checkpointLocation", "/data/ckpt").start("/data/events"))

    df.write.format("nsq").option("topic", "out").option("nsqd_tcp_address", "127.0.0.1:4150").save()
    spark.read.format("nsq-archive").load("/archive")   # body, topic, file, line

Data sources:

- ``nsq`` (:class:`~nsq.spark.source.NSQDataSource`): streaming source,
  at-least-once (:mod:`nsq.spark.source`); with nsqds started with
  ``--storage=wal``, streaming and batch reads by offset, exactly-once
  with a replayable sink (:mod:`nsq.spark.offsets`; :mod:`nsq.spark.mode`
  picks); and batch/streaming sink (:mod:`nsq.spark.sink`). Options:
  :mod:`nsq.spark.options`.
- ``nsq-archive`` (:class:`~nsq.spark.archive.NSQArchiveDataSource`):
  batch reads of to-file output, plain or gzip (:mod:`nsq.spark.archive`).

Spark starts Python workers with the interpreter its SparkContext read
from ``PYSPARK_PYTHON`` when it was built (``python3`` when unset), on the
driver (planning, the streaming source) and on every executor (reading,
writing): that interpreter needs pyarrow and nsq's dependencies, and nsq
itself installed or shipped (``--py-files nsq-*.whl``). Importing this
package changes nothing; :func:`register` points Spark at the running
interpreter when ``PYSPARK_PYTHON`` is unset and the master is local, and
puts wheels given with ``--py-files`` on the workers' Python path (see
there).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["ARCHIVE_SCHEMA", "NSQArchiveDataSource", "NSQDataSource", "OFFSETS_SCHEMA", "STREAM_SCHEMA", "register"]

# pyspark is imported on first use, so ``nsq.spark.options`` works without it
_LAZY = {
    "ARCHIVE_SCHEMA": "nsq.spark.archive",
    "NSQArchiveDataSource": "nsq.spark.archive",
    "NSQDataSource": "nsq.spark.source",
    "OFFSETS_SCHEMA": "nsq.spark.columns",
    "STREAM_SCHEMA": "nsq.spark.columns",
}

log = logging.getLogger("nsq.spark")


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nsq.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def register(spark: Any) -> None:
    """Register the ``nsq`` and ``nsq-archive`` data sources with a
    SparkSession (``spark.dataSource.register``).

    When ``PYSPARK_PYTHON`` is unset and the master is local (``local``,
    ``local[N]``, ``local-cluster[...]``: the workers run on this machine),
    this sets it to the running interpreter (``sys.executable``) for
    SparkContexts built later, and points ``spark``'s own context at it if
    that context was built with Spark's default (``python3``): the Python
    workers that plan and read the data sources must import nsq. On any
    other master the interpreter is left to Spark (its path here means
    nothing on the executors' machines): set ``PYSPARK_PYTHON`` (or
    ``spark.pyspark.python`` with spark-submit) to an interpreter every node
    has.

    What ``--py-files`` (``spark.submit.pyFiles``) shipped, nsq's wheel
    for one, is put on the path of the Python workers Spark starts from now
    on, for the functions wrapped after this call (these data sources). On
    its own Spark leaves out wheels (it takes ``.zip``, ``.egg`` and
    ``.jar`` only, pyspark's ``SparkContext.PACKAGE_EXTENSIONS``), and the
    streaming source runner on the driver misses every shipped file
    (:func:`_reach_shipped_files`): without this, a stream fails with
    ``No module named 'nsq'`` unless nsq is installed on the driver.

    Raises:
        ImportError: pyspark or pyarrow is missing (install ``nsq[spark]``).
    """
    import pyarrow  # noqa: F401  (without it Python data source queries hang, then fail)

    from nsq.spark.archive import NSQArchiveDataSource
    from nsq.spark.source import NSQDataSource

    _use_this_python(spark)
    _reach_shipped_files(spark)
    spark.dataSource.register(NSQDataSource)
    spark.dataSource.register(NSQArchiveDataSource)


def _context(spark: Any) -> Any:
    """``spark.sparkContext``, or None on a Spark Connect session (no JVM context)."""
    try:
        return spark.sparkContext
    except Exception:  # noqa: BLE001  (pyspark raises its own error types there)
        return None


def _use_this_python(spark: Any) -> None:
    """Make Spark start this interpreter for Python workers, unless
    ``PYSPARK_PYTHON`` says otherwise or the master is not local (see
    :func:`register`)."""
    if os.environ.get("PYSPARK_PYTHON"):
        return
    context = _context(spark)
    master = getattr(context, "master", None)
    if isinstance(master, str) and not master.startswith("local"):
        log.info("nsq.spark: master %s, PYSPARK_PYTHON unset: Spark starts %s for Python workers on the "
                 "driver and the executors", master, getattr(context, "pythonExec", "python3"))
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if context is None:
        return
    # pyspark reads PYSPARK_PYTHON once, when the context is built, and
    # wraps every Python function (a data source too) with that value
    if getattr(context, "pythonExec", None) == "python3":
        context.pythonExec = sys.executable


#: what --py-files may name that Python imports from (a wheel is a zip)
_IMPORTABLE = (".whl", ".zip", ".egg")


def _reach_shipped_files(spark: Any, root: str | None = None) -> tuple[list[str], list[str]]:
    """Make what ``--py-files`` (``spark.submit.pyFiles``) shipped importable
    by every Python worker Spark starts from now on (see :func:`register`):

    - the ``.whl`` files join the context's Python includes (names
      relative to each node's SparkFiles directory, which Spark puts on its
      workers' path; pyspark includes only ``.zip``, ``.egg`` and ``.jar``);
    - the shipped ``.whl``, ``.zip`` and ``.egg`` files, at their place in
      the driver's SparkFiles directory ``root``, join ``PYTHONPATH`` in
      the context's worker environment: Spark 4's streaming source runner
      (the driver-side process that runs a stream reader) looks for the
      includes in a ``streaming_job`` subdirectory, where they are not, and
      fails to unpickle the data source (paths that do not exist on a
      node, the executors', are skipped by Python).

    Returns:
        (names added to the includes, paths added to ``PYTHONPATH``).
    """
    context = _context(spark)
    includes = getattr(context, "_python_includes", None)
    environment = getattr(context, "environment", None)
    if context is None or not isinstance(includes, list) or not isinstance(environment, dict):
        return [], []
    try:
        shipped = context.getConf().get("spark.submit.pyFiles", "") or ""
        if root is None:
            root = str(context._jvm.org.apache.spark.SparkFiles.getRootDirectory())
    except Exception:  # noqa: BLE001  (no JVM behind a stand-in context)
        return [], []
    names = [p.strip().rstrip("/").rsplit("/", 1)[-1] for p in shipped.split(",") if p.strip()]
    wheels = [n for n in dict.fromkeys(names) if n.lower().endswith(".whl") and n not in includes]
    includes.extend(wheels)
    path = [p for p in (environment.get("PYTHONPATH") or "").split(os.pathsep) if p]
    local = [os.path.join(root, n) for n in dict.fromkeys(names) if n.lower().endswith(_IMPORTABLE)]
    added = [p for p in local if p not in path and os.path.isfile(p)]
    if added:
        environment["PYTHONPATH"] = os.pathsep.join(path + added)
    if wheels or added:
        log.info("nsq.spark: --py-files on the Python workers' path: %s", ", ".join(wheels + added))
    return wheels, added
