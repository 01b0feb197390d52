"""The sink (``df.write.format("nsq")``, ``writeStream.format("nsq")``) on real Spark and nsqd."""

from __future__ import annotations

import asyncio

import pytest

from tests.cli.conftest import free_port

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def consume(address: str, topic: str, n: int, timeout: float = 60.0) -> list[bytes]:
    """Receive ``n`` messages of ``topic`` with the nsq client (channel ``check``)."""
    from nsq.client import Consumer

    async def run() -> list[bytes]:
        got: list[bytes] = []
        done = asyncio.Event()

        def handle(message) -> None:
            got.append(message.body)
            if len(got) >= n:
                done.set()

        consumer = Consumer(topic, "check", handle, nsqd_tcp_addresses=[address], max_in_flight=2500)
        await consumer.start()
        try:
            await asyncio.wait_for(done.wait(), timeout)
            await asyncio.sleep(0.2)  # anything beyond n would show up here
        finally:
            await consumer.close()
        return got

    return asyncio.run(run())


def test_writer_publishes_10k_rows(spark, cluster):
    topic = "spark_sink"
    n = 10_000
    df = spark.range(n).selectExpr("concat('row-', cast(id as string)) as body")  # a string body
    (df.write.format("nsq").mode("append").option("topic", topic).option("nsqd_tcp_address", cluster.nsqd.tcp)
     .option("batchSize", "300").save())
    got = consume(cluster.nsqd.tcp, topic, n)
    assert sorted(got) == sorted(f"row-{i}".encode() for i in range(n))


def test_writer_topic_column_and_binary_body(spark, cluster):
    df = spark.range(1000).selectExpr(
        "if(id % 2 = 0, 'spark_even', 'spark_odd') as topic",
        "cast(concat('b', cast(id as string)) as binary) as body",
        "id")  # other columns are ignored
    df.write.format("nsq").mode("append").option("lookupd_http_address", cluster.lookupd.http).save()
    even = consume(cluster.nsqd.tcp, "spark_even", 500)
    odd = consume(cluster.nsqd.tcp, "spark_odd", 500)
    assert sorted(even) == sorted(f"b{i}".encode() for i in range(0, 1000, 2))
    assert sorted(odd) == sorted(f"b{i}".encode() for i in range(1, 1000, 2))


def test_stream_from_nsq_to_nsq(spark, cluster, tmp_path):
    sent = [f"pipe-{i}".encode() for i in range(2000)]
    cluster.mpub("spark_pipe_in", sent)
    df = (spark.readStream.format("nsq").option("topic", "spark_pipe_in")
          .option("nsqd_tcp_address", cluster.nsqd.tcp).option("availableNowIdle", "1s").load())
    query = (df.selectExpr("upper(cast(body as string)) as body").writeStream.format("nsq")
             .option("topic", "spark_pipe_out").option("nsqd_tcp_address", cluster.nsqd.tcp)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = consume(cluster.nsqd.tcp, "spark_pipe_out", len(sent))
    assert sorted(got) == sorted(b.upper() for b in sent)


def test_failed_publish_fails_the_write(spark, cluster):
    df = spark.range(10).selectExpr("cast(id as string) as body")
    with pytest.raises(Exception, match="(?i)connect|refused"):
        (df.write.format("nsq").mode("append").option("topic", "spark_nowhere")
         .option("nsqd_tcp_address", f"127.0.0.1:{free_port()}").save())
    # nsqd refuses (a body over --max-msg-size, 1 MiB by default)
    big = spark.range(3).selectExpr("repeat('x', 1100000) as body")
    with pytest.raises(Exception, match="E_BAD_MESSAGE"):
        big.write.format("nsq").mode("append").option("topic", "spark_big").option(
            "nsqd_tcp_address", cluster.nsqd.tcp).save()
    bad = spark.range(3).selectExpr("'bad topic!' as topic", "cast(id as string) as body")
    with pytest.raises(Exception, match="not a valid topic name"):
        bad.write.format("nsq").mode("append").option("nsqd_tcp_address", cluster.nsqd.tcp).save()
    with pytest.raises(Exception, match="body"):
        (spark.range(3).write.format("nsq").mode("append").option("topic", "t")
         .option("nsqd_tcp_address", cluster.nsqd.tcp).save())
