"""A streaming query on offsets in its own process, for the kill test.

Usage: ``python -m tests.spark.offsets_stream_script TOPIC LOOKUPD_HTTP CHECKPOINT OUTPUT``

Reads TOPIC from the nsqds the lookupd lists (``--storage=wal``, mode
offsets, from the earliest offsets, 500 per trigger, channel ``spark``) into
Parquet at OUTPUT with its checkpoint at CHECKPOINT until killed; the test
watches ``CHECKPOINT/offsets`` and ``CHECKPOINT/commits``.
"""

from __future__ import annotations

import sys

from tests.spark.conftest import build_session


def main(topic: str, lookupd: str, checkpoint: str, output: str) -> None:
    spark = build_session("nsq-offsets-kill-test")
    df = (spark.readStream.format("nsq").option("topic", topic).option("lookupd_http_address", lookupd)
          .option("mode", "offsets").option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "500").load())
    query = df.writeStream.format("parquet").option("checkpointLocation", checkpoint).start(output)
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
