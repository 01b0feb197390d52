"""The offsets source's options and planning, without Spark or daemons:
offsets options, the rate limit over nsqds, the split into partitions, a
/topic/read page decoded into Arrow."""

from __future__ import annotations

import json
import struct

import pytest

from nsq.client.errors import ClientConfigError
from nsq.spark.options import EARLIEST, LATEST, http_key, offset_source_settings, source_mode

pytestmark = [pytest.mark.spark]

A, B = "10.0.0.1:4151", "10.0.0.2:4151"


def test_offsets_options():
    s = offset_source_settings({"topic": "t", "nsqd_http_address": f"http://{A}/, {B}",
                                "startingoffsets": json.dumps({A: {"t": 12}, B: {"t": -2}}),
                                "maxmessagespertrigger": "500", "numpartitions": "3", "auth_secret": "x"})
    assert s.nsqd_http_addresses == (A, B)
    assert s.starting_offsets == {A: 12, B: EARLIEST}
    assert s.ending_offsets == "latest"
    assert s.max_offsets_per_trigger == 500 and s.min_partitions == 3  # the in-flight names carry over
    assert s.auth_secret == "x" and s.fail_on_data_loss is True
    batch = offset_source_settings({"topic": "t", "lookupd_http_address": "l:4161", "failondataloss": "false",
                                    "endingoffsets": json.dumps({A: {"t": -1}})}, batch=True)
    assert batch.starting_offsets == "earliest" and batch.ending_offsets == {A: LATEST}
    assert batch.fail_on_data_loss is False
    assert http_key("https://h:1/") == "https://h:1"
    assert source_mode({}) == "auto" and source_mode({"mode": "Offsets"}) == "offsets"


@pytest.mark.parametrize("options, message", [
    ({"topic": "t", "nsqd_tcp_address": "x:4150"}, "nsqd_http_address or lookupd_http_address"),
    ({"topic": "t", "nsqd_http_address": A, "startingoffsets": "soon"}, "neither earliest, latest nor JSON"),
    ({"topic": "t", "nsqd_http_address": A, "startingoffsets": json.dumps({A: {"u": 1}})}, "names topic 'u'"),
    ({"topic": "t", "nsqd_http_address": A, "startingoffsets": json.dumps({A: {"t": -3}})}, "is not an offset"),
    ({"topic": "t", "nsqd_http_address": A, "startingoffsets": json.dumps({A: 5})}, "must map to"),
    ({"topic": "t", "nsqd_http_address": A, "endingoffsets": "latest"}, "for batch queries"),
    ({"topic": "t", "nsqd_http_address": A, "failondataloss": "maybe"}, "not true or false"),
    ({"topic": "t", "nsqd_http_address": "nohost"}, "no port"),
])
def test_offsets_option_errors(options, message):
    with pytest.raises(ClientConfigError, match=message):
        offset_source_settings(options)


def test_ending_offsets_take_no_earliest():
    with pytest.raises(ClientConfigError, match="not an end"):
        offset_source_settings({"topic": "t", "nsqd_http_address": A, "endingoffsets": "earliest"}, batch=True)
    with pytest.raises(ClientConfigError, match="is not an offset"):
        offset_source_settings({"topic": "t", "nsqd_http_address": A,
                                "endingoffsets": json.dumps({A: {"t": -2}})}, batch=True)
    with pytest.raises(ClientConfigError, match="mode"):
        source_mode({"mode": "exactly-once"})


def test_rate_limit_shares_by_backlog():
    pytest.importorskip("pyspark")
    from nsq.spark.offsets import rate_limit

    assert rate_limit({A: 0, B: 0}, {A: 100, B: 300}, None) == {A: 100, B: 300}
    assert rate_limit({A: 0, B: 0}, {A: 100, B: 300}, 1000) == {A: 100, B: 300}
    assert rate_limit({A: 0, B: 0}, {A: 100, B: 300}, 40) == {A: 10, B: 30}
    # a share below one message still moves; a new nsqd (not in start) counts from 0
    assert rate_limit({A: 50}, {A: 1050, B: 2}, 100) == {A: 149, B: 1}
    assert rate_limit({A: 7, B: 5}, {A: 7, B: 5}, 10) == {A: 7, B: 5}


def test_plan_partitions():
    pytest.importorskip("pyspark")
    from nsq.spark.offsets import NSQOffsetRange, plan_partitions

    # one range per nsqd; nothing where the end is not past the start
    assert plan_partitions({A: 10, B: 5}, {A: 30, B: 5}, "t") == [NSQOffsetRange(A, "t", 10, 30)]
    # split by maxRecordsPerPartition into even pieces
    assert [(p.start, p.end) for p in plan_partitions({A: 0}, {A: 250}, "t", max_records=100)] == \
        [(0, 84), (84, 167), (167, 250)]
    # minPartitions: shared by size
    parts = plan_partitions({A: 0, B: 0}, {A: 300, B: 100}, "t", min_partitions=4)
    assert [(p.nsqd, len(p)) for p in parts] == [(A, 100), (A, 100), (A, 100), (B, 100)]
    # a new nsqd reads from its oldest message: each piece may start past what retention deleted
    parts = plan_partitions({A: 0}, {A: 10, B: 40}, "t", max_records=20)
    assert [(p.nsqd, p.start, p.end, p.clamp) for p in parts] == \
        [(A, 0, 10, False), (B, 0, 20, True), (B, 20, 40, True)]
    # the same offsets plan the same partitions
    assert plan_partitions({A: 3}, {A: 99}, "t", 3, 10) == plan_partitions({A: 3}, {A: 99}, "t", 3, 10)


def test_resolve_offsets_options_against_the_logs():
    pytest.importorskip("pyspark")
    from nsq.spark.logcluster import LogState
    from nsq.spark.offsets import resolve

    states = {A: LogState(A, True, True, head=500, first=100),
              B: LogState(B, False, False)}  # no such topic there yet: its log will start at 0
    assert resolve("earliest", states, "t") == {A: 100, B: 0}
    assert resolve("latest", states, "t") == {A: 500, B: 0}
    assert resolve({A: 120}, states, "t") == {A: 120, B: 0}
    assert resolve({A: LATEST, "10.0.0.3:4151": 7}, states, "t", LATEST) == {A: 500, B: 0, "10.0.0.3:4151": 7}
    with pytest.raises(ValueError, match="--storage=wal"):
        resolve("earliest", {A: LogState(A, True, False)}, "t")


def test_decode_page_rows():
    pytest.importorskip("pyarrow")
    from nsq.spark.logread import READ_HEADER, decode_page

    ts = 1_795_642_571_706_760_819
    page = b"".join(READ_HEADER.pack(40 + i, ts + i * 1000, i % 2, b"%016x" % i, len(body)) + body
                    for i, body in enumerate([b"a", b"", b"line\nwith\x00bytes"]))
    batch, after = decode_page(page, "t", A)
    assert after == 43
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [40, 41, 42]
    assert [r["body"] for r in rows] == [b"a", b"", b"line\nwith\x00bytes"]
    assert rows[2]["id"] == "0000000000000002" and rows[1]["attempts"] == 2  # the log's 1, plus this read
    assert {r["topic"] for r in rows} == {"t"} and {r["nsqd"] for r in rows} == {A}
    assert int(rows[0]["timestamp"].timestamp() * 1_000_000) == ts // 1000
    with pytest.raises(ValueError, match="truncated"):
        decode_page(page[:-1], "t", A)
    assert decode_page(page, "t", A, stop=42)[0].column("offset").to_pylist() == [40, 41]
    assert decode_page(b"", "t", A)[1] == -1
    assert struct.calcsize(">qqH16si") == READ_HEADER.size == 38
