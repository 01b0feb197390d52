"""A streaming query in its own process, for the kill test.

Usage: ``python -m tests.spark.stream_script TOPIC NSQD_TCP CHECKPOINT OUTPUT``

Reads TOPIC (channel ``spark``, 300 messages per trigger, msg_timeout 3 s)
into Parquet at OUTPUT with its checkpoint at CHECKPOINT until killed; the
test watches ``CHECKPOINT/commits`` for finished micro-batches.
"""

from __future__ import annotations

import sys

from tests.spark.conftest import build_session


def main(topic: str, nsqd: str, checkpoint: str, output: str) -> None:
    spark = build_session("nsq-kill-test")
    df = (spark.readStream.format("nsq").option("topic", topic).option("nsqd_tcp_address", nsqd)
          .option("maxMessagesPerTrigger", "300").option("msg_timeout", "3s").load())
    query = df.writeStream.format("parquet").option("checkpointLocation", checkpoint).start(output)
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
