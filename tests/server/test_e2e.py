"""End-to-end processing latency: the quantile code and nsqd's /stats.

https://nsq.io/components/nsqd.html (e2e processing latency); Go nsqd v1.2.1 channel.go FinishMessage,
internal/quantile, http.go printStats.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import os
import random
import zlib
import re
import subprocess
import sys

import pytest

from nsq.server.nsqd.options import OPTION_SPECS, ConfigError, NSQDOptions, coerce
from nsq.server.nsqd.delivery.quantile import (
    BUFFER_SIZE,
    TargetedStream,
    WindowedQuantile,
    merge_summaries,
    merged_result,
    query_summary,
    target_epsilon,
)
from nsq.server.nsqd.stats.text import nanoseconds_to_human
from nsq.server.nsqd.nsqd import NSQD

from .helpers import HTTP, Conn, c, wait_for

# -- the quantile code -------------------------------------------------------------------


def rank_error(sorted_data: list[float], value: float, q: float) -> int:
    """How far (in ranks) ``value`` is from the nearest-rank ``q`` quantile."""
    n = len(sorted_data)
    target = max(1, math.ceil(q * n))
    lo = bisect.bisect_left(sorted_data, value) + 1  # ranks ``value`` occupies
    hi = bisect.bisect_right(sorted_data, value)
    assert hi >= lo, f"{value!r} was never inserted"
    if hi < target:
        return target - hi
    if lo > target:
        return lo - target
    return 0


def make_data(kind: str, n: int, rng: random.Random) -> list[float]:
    if kind == "uniform":
        return [rng.random() for _ in range(n)]
    if kind == "lognormal":  # latency-like, integers in ns
        return [int(rng.lognormvariate(13, 1.2)) for _ in range(n)]
    if kind == "ascending":
        return sorted(rng.random() for _ in range(n))
    if kind == "descending":  # a backlog draining
        return sorted((rng.random() for _ in range(n)), reverse=True)
    if kind == "duplicates":
        return [rng.randrange(7) for _ in range(n)]
    raise AssertionError(kind)


QUANTILE_SETS = [(0.5,), (0.99, 0.95, 0.5), (1.0, 0.99), (0.999, 0.5, 0.01)]


@pytest.mark.parametrize("kind", ["uniform", "lognormal", "ascending", "descending", "duplicates"])
@pytest.mark.parametrize("quantiles", QUANTILE_SETS)
def test_stream_within_documented_error(kind, quantiles):
    rng = random.Random(zlib.crc32(repr((kind, quantiles)).encode()))  # the same stream in every run
    data = make_data(kind, 20000, rng)
    stream = TargetedStream(quantiles)
    for x in data:
        stream.insert(x)
    assert len(stream) == len(data)
    exact = sorted(data)
    for q in quantiles:
        allowed = target_epsilon(q) * len(data) + 1
        assert rank_error(exact, stream.query(q), q) <= allowed, (kind, q)
    # the summary stays small (memory is not O(n))
    assert stream.summary_size < 2000
    # min and max are exact
    entries, n = stream.summary()
    assert n == len(data)
    assert entries[0][0] == exact[0] and entries[-1][0] == exact[-1]


def test_stream_exact_below_buffer_size():
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 99, BUFFER_SIZE - 1):
        data = [rng.randrange(1000) for _ in range(n)]
        stream = TargetedStream((0.99, 0.95, 0.5, 0.01, 1.0))
        for x in data:
            stream.insert(x)
        exact = sorted(data)
        for q in stream.quantiles:
            assert stream.query(q) == exact[max(1, math.ceil(q * n)) - 1], (n, q)


def test_stream_summary_bounds_are_true_ranks():
    """Every summary entry's value really has a rank within [rmin, rmax]."""
    rng = random.Random(11)
    data = make_data("lognormal", 7000, rng) + make_data("descending", 3000, rng)
    stream = TargetedStream((0.99, 0.5))
    for x in data:
        stream.insert(x)
    exact = sorted(data)
    entries, n = stream.summary()
    assert n == len(exact)
    for value, rmin, rmax in entries:
        lo = bisect.bisect_left(exact, value) + 1
        hi = bisect.bisect_right(exact, value)
        assert rmin <= hi and lo <= rmax, (value, rmin, rmax, lo, hi)


def test_empty_stream_and_quantile_one():
    stream = TargetedStream((1.0, 0.5))
    assert stream.query(0.5) == 0 and stream.query(1.0) == 0
    for x in range(10000, 0, -1):
        stream.insert(x)
    assert stream.query(1.0) == 10000
    stream.reset()
    assert len(stream) == 0 and stream.query(1.0) == 0


def test_stream_rejects_bad_targets():
    with pytest.raises(ValueError):
        TargetedStream(())
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            TargetedStream((bad,))


def test_merge_same_distribution():
    rng = random.Random(3)
    quantiles = (0.99, 0.95, 0.5)
    parts = [make_data("lognormal", 9000, rng), make_data("lognormal", 4000, rng),
             make_data("lognormal", 300, rng)]
    summary = ([], 0)
    for part in parts:
        stream = TargetedStream(quantiles)
        for x in part:
            stream.insert(x)
        summary = merge_summaries(summary, stream.summary())
    exact = sorted(x for part in parts for x in part)
    assert summary[1] == len(exact)
    for q in quantiles:
        allowed = 2 * target_epsilon(q) * len(exact) + len(parts)
        assert rank_error(exact, query_summary(summary, q), q) <= allowed, q
    # merged bounds stay true ranks
    for value, rmin, rmax in summary[0]:
        assert rmin <= bisect.bisect_right(exact, value) and bisect.bisect_left(exact, value) + 1 <= rmax


def test_merge_different_distributions_keeps_true_bounds():
    rng = random.Random(5)
    fast = [rng.uniform(0, 1) for _ in range(6000)]
    slow = [rng.uniform(10, 11) for _ in range(2000)]
    a, b = TargetedStream((0.99, 0.5)), TargetedStream((0.99, 0.5))
    for x in fast:
        a.insert(x)
    for x in slow:
        b.insert(x)
    summary = merge_summaries(a.summary(), b.summary())
    exact = sorted(fast + slow)
    for value, rmin, rmax in summary[0]:
        assert rmin <= bisect.bisect_right(exact, value) and bisect.bisect_left(exact, value) + 1 <= rmax
    # p50 of the union is a "fast" value, p99 a "slow" one
    assert query_summary(summary, 0.5) < 1 < 10 < query_summary(summary, 0.99)
    assert rank_error(exact, query_summary(summary, 0.5), 0.5) <= 0.02 * len(exact)
    assert rank_error(exact, query_summary(summary, 0.99), 0.99) <= 0.01 * len(exact)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        return self.now


def test_windowed_quantile_records_latency_and_rotates():
    clock = FakeClock()
    wq = WindowedQuantile(10.0, (0.99, 0.5), clock=clock)  # halves of 5 s
    half = 5_000_000_000
    for latency in range(1, 101):
        wq.insert(clock.now - latency * 1000)  # latency in ns = now - timestamp
    count, values = merged_result([wq], wq.percentiles)
    assert count == 100
    assert values == [(0.99, 99_000), (0.5, 50_000)]
    clock.now += half + 1  # the first half is now stale: a new half starts, old kept
    wq.insert(clock.now - 7)
    assert len(wq) == 101
    clock.now += half + 1  # the first half is dropped
    count, values = merged_result([wq], wq.percentiles)
    assert count == 1 and values == [(0.99, 7), (0.5, 7)]
    clock.now += 1000 * half  # long idle: both dropped at once, no per-half loop
    count, values = merged_result([wq], wq.percentiles)
    assert count == 0 and values == [(0.99, 0), (0.5, 0)]
    wq.insert(clock.now - 5)
    assert merged_result([wq], wq.percentiles) == (1, [(0.99, 5), (0.5, 5)])


def test_windowed_quantile_merge_of_channels():
    clock = FakeClock()
    a = WindowedQuantile(600, (0.5,), clock=clock)
    b = WindowedQuantile(600, (0.5,), clock=clock)
    for latency in (1, 2, 3):
        a.insert(clock.now - latency)
    for latency in (10, 20, 30, 40):
        b.insert(clock.now - latency)
    assert merged_result([a, b], (0.5,)) == (7, [(0.5, 10)])
    assert merged_result([], (0.5,)) == (0, [(0.5, 0)])


def test_nanoseconds_to_human():
    assert nanoseconds_to_human(0) == "0.0ns"
    assert nanoseconds_to_human(1000) == "1000.0ns"  # units switch strictly above 1000, as Go
    assert nanoseconds_to_human(1500) == "1.5us"
    assert nanoseconds_to_human(167_500_000) == "167.5ms"
    assert nanoseconds_to_human(6_600_000_000) == "6.6s"


# -- options ---------------------------------------------------------------------------------


def test_percentile_flag_parsing_and_validation():
    spec = next(s for s in OPTION_SPECS if s.flag == "e2e-processing-latency-percentile")
    assert "_LATER" not in spec.help and "later release" not in spec.help
    assert coerce(spec, ["0.5,0.99", "0.95"]) == [0.5, 0.99, 0.95]
    with pytest.raises(ConfigError):
        coerce(spec, ["0.5,abc"])


@pytest.mark.parametrize("bad, text", [(1.5, "1.5"), (0.0, "0"), (-0.25, "-0.25"), (2.0, "2")])
async def test_out_of_range_percentile_refused_at_start(bad, text):
    d = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                         e2e_processing_latency_percentiles=[0.5, bad]))
    with pytest.raises(ConfigError) as info:
        await d.start()
    assert str(info.value) == f"invalid E2E processing latency percentile: {text}"
    await d.stop()  # nothing was started: returns at once


async def test_nonpositive_window_refused():
    d = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                         e2e_processing_latency_percentiles=[0.5], e2e_processing_latency_window_time=0))
    with pytest.raises(ConfigError, match="window-time"):
        await d.start()
    await d.stop()


def test_cli_reports_bad_percentile(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "nsq", "nsqd", "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
         f"--data-path={tmp_path}", "--e2e-processing-latency-percentile=0.99,1.5"],
        capture_output=True, timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "invalid E2E processing latency percentile: 1.5" in err
    assert "Traceback" not in err
    assert not (tmp_path / "nsqd.dat").exists()


# -- nsqd ------------------------------------------------------------------------------------


async def consume_and_fin(conn: Conn, count: int, fin: bool = True) -> list[bytes]:
    ids = []
    for _ in range(count):
        msg = await conn.read_message(timeout=10)
        ids.append(msg.id)
        if fin:
            await conn.send(c.fin(msg.id))
    return ids


async def e2e_count(http: HTTP, topic: str, channel: str) -> int:
    ch = await http.channel_stats(topic, channel)
    return ch["e2e_processing_latency"]["count"] if ch else 0


async def test_fin_records_latency_in_stats(make_nsqd, session):
    nsqd = await make_nsqd(e2e_processing_latency_percentiles=[0.5, 0.99, 1.0], broadcast_address="127.0.0.1")
    assert nsqd.options.e2e_processing_latency_percentiles == [1.0, 0.99, 0.5]  # Go's order
    http = HTTP(session, nsqd.http_port)
    conn = await Conn.open(nsqd.tcp_port)
    try:
        await conn.subscribe("lat", "ch", rdy=100)
        bodies = [b"m%d" % i for i in range(40)]
        status, _ = await http.post("/mpub", b"\n".join(bodies), topic="lat")
        assert status == 200
        await asyncio.sleep(0.01)  # every latency is at least this long
        await consume_and_fin(conn, len(bodies))

        async def counted():
            return await e2e_count(http, "lat", "ch") == len(bodies)

        await wait_for(counted, timeout=20)
        stats = await http.stats()
        topic = stats["topics"][0]
        channel = topic["channels"][0]
        for latency, chan in ((channel["e2e_processing_latency"], "ch"), (topic["e2e_processing_latency"], "")):
            assert latency["count"] == len(bodies)
            assert latency["topic"] == "lat" and latency["channel"] == chan and latency["host"] == "127.0.0.1"
            assert [p["quantile"] for p in latency["percentiles"]] == [1, 0.99, 0.5]
            values = [p["value"] for p in latency["percentiles"]]
            assert all(isinstance(v, int) for v in values)
            assert values[2] >= 10_000_000  # slept 10 ms before the FINs
            assert values[0] >= values[1] >= values[2] > 0
        # Go's JSON writes quantile 1.0 as 1
        status, raw = await http.get("/stats", format="json")
        assert b'"quantile":1,' in raw.replace(b" ", b"")

        status, text = await http.get("/stats")
        text = text.decode()
        human = r"\d+\.\d(?:ns|us|ms|s)"
        assert re.search(rf"\[lat\s*\] depth: .* e2e%: {human}, {human}, {human}\n", text), text
        assert re.search(rf"\[ch\s*\] depth: .* e2e%: {human}, {human}, {human}\n", text), text
    finally:
        await conn.aclose()


async def test_only_fin_counts_and_topic_merges_channels(make_nsqd, session):
    nsqd = await make_nsqd(e2e_processing_latency_percentiles=[0.5], msg_timeout=60)
    http = HTTP(session, nsqd.http_port)
    a = await Conn.open(nsqd.tcp_port)
    b = await Conn.open(nsqd.tcp_port)
    try:
        await a.subscribe("merge", "a", rdy=50)
        await b.subscribe("merge", "b", rdy=50)
        status, _ = await http.post("/mpub", b"\n".join(b"x%d" % i for i in range(10)), topic="merge")
        assert status == 200
        await consume_and_fin(a, 10)
        ids = await consume_and_fin(b, 10, fin=False)
        for msg_id in ids[:4]:
            await b.send(c.fin(msg_id))
        for msg_id in ids[4:]:
            await b.send(c.req(msg_id, 0))  # REQ does not record a latency

        async def settled():
            return (await e2e_count(http, "merge", "a"), await e2e_count(http, "merge", "b")) == (10, 4)

        await wait_for(settled, timeout=20)
        topic = await http.topic_stats("merge")
        assert topic["e2e_processing_latency"]["count"] == 14
        # a channel filter still reports the topic over all its channels (Go)
        stats = await http.stats(topic="merge", channel="a")
        assert stats["topics"][0]["e2e_processing_latency"]["count"] == 14
    finally:
        await a.aclose()
        await b.aclose()


async def test_no_traffic_shapes(make_nsqd, session):
    nsqd = await make_nsqd(e2e_processing_latency_percentiles=[0.99, 0.5])
    http = HTTP(session, nsqd.http_port)
    assert (await http.post("/topic/create", topic="lonely"))[0] == 200
    assert (await http.post("/topic/create", topic="idle"))[0] == 200
    assert (await http.post("/channel/create", topic="idle", channel="c"))[0] == 200
    lonely = await http.topic_stats("lonely")
    # a topic without channels has no quantile at all (Go: nil)
    assert lonely["e2e_processing_latency"] == {"count": 0, "percentiles": None, "topic": "lonely",
                                                "channel": "", "host": nsqd.options.broadcast_address}
    idle = await http.topic_stats("idle")
    zero = [{"quantile": 0.99, "value": 0}, {"quantile": 0.5, "value": 0}]
    assert idle["e2e_processing_latency"]["percentiles"] == zero
    assert idle["channels"][0]["e2e_processing_latency"]["percentiles"] == zero
    status, text = await http.get("/stats")
    assert "e2e%: 0.0ns, 0.0ns\n" in text.decode()
    assert re.search(r"\[lonely\s*\] .*e2e%: \n", text.decode())


async def test_disabled_by_default(make_nsqd, session):
    nsqd = await make_nsqd()
    http = HTTP(session, nsqd.http_port)
    conn = await Conn.open(nsqd.tcp_port)
    try:
        await conn.subscribe("plain", "ch", rdy=5)
        assert (await http.post("/pub", b"hello", topic="plain"))[0] == 200
        await consume_and_fin(conn, 1)
        assert nsqd.topics["plain"].channels["ch"].e2e is None
        ch = await http.channel_stats("plain", "ch")
        assert ch["e2e_processing_latency"]["percentiles"] is None
        assert ch["e2e_processing_latency"]["count"] == 0
        status, text = await http.get("/stats")
        assert re.search(r"\[ch\s*\] .*e2e%: \n", text.decode())
        status, body = await http.get("/config/e2e_processing_latency_percentiles")
        assert json.loads(body) == []
    finally:
        await conn.aclose()
