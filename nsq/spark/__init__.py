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
    (events.writeStream.format("parquet")
           .option("checkpointLocation", "/data/ckpt").start("/data/events"))

    df.write.format("nsq").option("topic", "out").option("nsqd_tcp_address", "127.0.0.1:4150").save()
    spark.read.format("nsq-archive").load("/archive")   # body, topic, file, line

Data sources:

- ``nsq`` (:class:`~nsq.spark.source.NSQDataSource`): streaming source,
  at-least-once (:mod:`nsq.spark.source`), and batch/streaming sink
  (:mod:`nsq.spark.sink`). Options: :mod:`nsq.spark.options`.
- ``nsq-archive`` (:class:`~nsq.spark.archive.NSQArchiveDataSource`):
  batch reads of to-file output, plain or gzip (:mod:`nsq.spark.archive`).

Spark starts Python workers with ``PYSPARK_PYTHON``; importing this package
sets it to the running interpreter when unset, which only helps if it
happens before the SparkSession is built.
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

__all__ = ["ARCHIVE_SCHEMA", "NSQArchiveDataSource", "NSQDataSource", "STREAM_SCHEMA", "register"]

# pyspark is imported on first use, so ``nsq.spark.options`` works without it
_LAZY = {
    "ARCHIVE_SCHEMA": "nsq.spark.archive",
    "NSQArchiveDataSource": "nsq.spark.archive",
    "NSQDataSource": "nsq.spark.source",
    "STREAM_SCHEMA": "nsq.spark.source",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nsq.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def register(spark: Any) -> None:
    """Register the ``nsq`` and ``nsq-archive`` data sources with a
    SparkSession (``spark.dataSource.register``).

    Raises:
        ImportError: pyspark or pyarrow is missing (install ``nsq[spark]``).
    """
    import pyarrow  # noqa: F401  (without it Python data source queries hang, then fail)

    from nsq.spark.archive import NSQArchiveDataSource
    from nsq.spark.source import NSQDataSource

    spark.dataSource.register(NSQDataSource)
    spark.dataSource.register(NSQArchiveDataSource)
