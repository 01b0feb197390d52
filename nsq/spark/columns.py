"""The Arrow schemas of the ``nsq`` source's rows, and the PySpark features
that only newer versions have.

Both sources (in flight, nsq/spark/source.py; on offsets,
nsq/spark/offsets.py) hand Spark ``pyarrow.RecordBatch``\\ es of the
columns ``body`` binary, ``id`` string, ``attempts`` int, ``timestamp``
(µs in UTC, as PySpark's ``to_arrow_schema`` gives it for the data source
API: https://spark.apache.org/docs/latest/api/python/tutorial/sql/python_data_source.html),
``topic`` string and ``nsqd`` string; the source on offsets adds
``offset`` long.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older pyspark: no read limits
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]  # absent before 4.2

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]  # a stand-in mixin before 4.2
        pass

__all__ = ["arrow_schema", "OFFSETS_SCHEMA", "OFFSETS_STRUCT", "ReadAllAvailable", "ReadMaxRows", "STREAM_SCHEMA",
           "STREAM_STRUCT", "SupportsTriggerAvailableNow"]

#: the in-flight source's columns (DDL)
STREAM_SCHEMA = "body binary, id string, attempts int, timestamp timestamp, topic string, nsqd string"
#: :data:`STREAM_SCHEMA` as a Spark ``StructType``
STREAM_STRUCT = StructType([
    StructField("body", BinaryType()),
    StructField("id", StringType()),
    StructField("attempts", IntegerType()),
    StructField("timestamp", TimestampType()),
    StructField("topic", StringType()),
    StructField("nsqd", StringType()),
])
#: the offsets source's columns (DDL): the in-flight ones and ``offset``
OFFSETS_SCHEMA = STREAM_SCHEMA + ", offset long"
#: :data:`OFFSETS_SCHEMA` as a Spark ``StructType``
OFFSETS_STRUCT = StructType([*STREAM_STRUCT.fields, StructField("offset", LongType())])

_SCHEMAS: dict[bool, Any] = {}


def arrow_schema(offset: bool = False) -> Any:
    """The ``pyarrow.Schema`` of the rows, with the ``offset`` column when
    ``offset`` (built once per process: pyarrow is imported on first use)."""
    schema = _SCHEMAS.get(offset)
    if schema is None:
        import pyarrow as pa

        fields = [
            ("body", pa.binary()),
            ("id", pa.string()),
            ("attempts", pa.int32()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("topic", pa.string()),
            ("nsqd", pa.string()),
        ]
        if offset:
            fields.append(("offset", pa.int64()))
        schema = _SCHEMAS[offset] = pa.schema(fields)
    return schema
