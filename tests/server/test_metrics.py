"""``GET /metrics`` (Prometheus text format, beyond Go NSQ) of nsqd and
nsqlookupd: real in-process daemons, the page parsed with
``prometheus_client.parser`` and compared with ``/stats`` and the lookupd
HTTP API read at the same moment.

The tests named ``*_over_http`` GET the ``/metrics`` route of the daemons'
HTTP listeners; the others call the render functions directly.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import statistics
import time
from typing import Any

import aiohttp
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nsq._internal.durations import parse_duration
from nsq.protocol import commands as c
from nsq.server.lookupd import NSQLookupd
from nsq.server.lookupd import metrics as lookupd_metrics
from nsq.server.nsqd.stats import metrics as nsqd_metrics
from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.stats.collect import get_stats

from .helpers import HTTP, Conn, wait_for

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

#: /stats field -> metric sample name (as exposed: counters with _total)
TOPIC_FIELDS = {
    "depth": "nsq_topic_depth",
    "backend_depth": "nsq_topic_backend_depth",
    "message_count": "nsq_topic_messages_total",
    "message_bytes": "nsq_topic_message_bytes_total",
    "paused": "nsq_topic_paused",
}
CHANNEL_FIELDS = {
    "depth": "nsq_channel_depth",
    "backend_depth": "nsq_channel_backend_depth",
    "in_flight_count": "nsq_channel_in_flight",
    "deferred_count": "nsq_channel_deferred",
    "message_count": "nsq_channel_messages_total",
    "requeue_count": "nsq_channel_requeued_total",
    "timeout_count": "nsq_channel_timed_out_total",
    "dead_letter_count": "nsq_channel_dead_lettered_total",
    "client_count": "nsq_channel_clients",
    "paused": "nsq_channel_paused",
}
E2E = "nsq_channel_e2e_processing_latency_seconds"
E2E_SAMPLES = "nsq_channel_e2e_processing_latency_samples"


def parse(body: bytes | str) -> tuple[dict[str, str], Samples]:
    """(family name -> type, (sample name, sorted labels) -> value)."""
    text = body.decode() if isinstance(body, bytes) else body
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, key
            samples[key] = s.value
    return types, samples


def nsq_samples(samples: Samples) -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith("nsq_")}


def lbl(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def expected_from_stats(stats: dict[str, Any], nsqd: NSQD) -> Samples:
    """What /metrics must say, built from a /stats JSON object."""
    out: Samples = {}
    e2e_on = bool(nsqd.options.e2e_processing_latency_percentiles)
    for t in stats["topics"] or []:
        tl = lbl(topic=t["topic_name"])
        for field, name in TOPIC_FIELDS.items():
            out[(name, tl)] = float(t[field])
        if "head_offset" in t:  # --storage=wal: the topic log's window
            out[("nsq_topic_head_offset", tl)] = float(t["head_offset"])
            out[("nsq_topic_first_offset", tl)] = float(t["first_offset"])
            out[("nsq_topic_retained_bytes", tl)] = float(t["retained_bytes"])
            out[("nsq_topic_synced_offset", tl)] = float(t["synced_offset"])
            out[("nsq_topic_retention_seconds", tl)] = parse_duration(t["retention_time"])
            out[("nsq_topic_retention_bytes", tl)] = float(t["retention_bytes"])
            out[("nsq_topic_oldest_timestamp_seconds", tl)] = t["oldest_timestamp"] / 1e9
        for ch in t["channels"]:
            cl = lbl(topic=t["topic_name"], channel=ch["channel_name"])
            for field, name in CHANNEL_FIELDS.items():
                out[(name, cl)] = float(ch[field])
            if "offset" in ch:
                out[("nsq_channel_offset", cl)] = float(ch["offset"])
                out[("nsq_channel_committed_offset", cl)] = float(ch["committed_offset"])
            if e2e_on:
                latency = ch["e2e_processing_latency"]
                out[(E2E_SAMPLES, cl)] = float(latency["count"])
                for p in latency["percentiles"]:
                    q = nsqd_metrics.quantile_label(p["quantile"])
                    value = p["value"] / 1e9 if latency["count"] else math.nan
                    out[(E2E, lbl(topic=t["topic_name"], channel=ch["channel_name"], quantile=q))] = value
    rep = stats.get("replication")
    if rep is not None:  # --storage=wal (docs/operations/replication.md)
        leader = rep["role"] == "leader"
        out[("nsq_replication_leader", ())] = 1.0 if leader else 0.0
        out[("nsq_replication_epoch", ())] = float(rep["epoch"])
        out[("nsq_replication_replicas", ())] = float(len(rep["replicas"]) if leader else rep["connected"])
        out[("nsq_replication_lag_messages", ())] = float(
            max((r["lag_messages"] for r in rep["replicas"]), default=0) if leader else rep["lag_messages"])
        out[("nsq_replication_lag_seconds", ())] = float(
            max((r["lag_seconds"] for r in rep["replicas"]), default=0) if leader else rep["lag_seconds"])
    out[("nsq_clients", ())] = float(len(nsqd.clients))
    out[("nsq_health", ())] = 1.0 if stats["health"] == "OK" else 0.0
    out[("nsq_draining", ())] = 1.0 if nsqd.draining else 0.0
    return out


def assert_same(got: Samples, want: Samples) -> None:
    assert set(got) == set(want), (set(got) ^ set(want))
    for key, value in want.items():
        if math.isnan(value):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == value, (key, got[key], value)


async def consume(conn: Conn, n: int) -> list[bytes]:
    """RDY n, read n messages, RDY 0; their ids."""
    await conn.send(c.rdy(n))
    ids = [(await conn.read_message()).id for _ in range(n)]
    await conn.send(c.rdy(0))
    return ids


async def busy_nsqd(make_nsqd, tmp_path) -> tuple[NSQD, list[Conn]]:
    """An nsqd with two topics with channels, after known traffic.

    alpha: 10 messages; channel a1 had 3 delivered: one REQ'd now, one REQ'd
    with a delay (deferred), one still in flight; channel a2 untouched and
    paused. beta: 7 messages; channel b1 (max attempts 1) had 3 delivered: 2
    finished (e2e latencies), 1 REQ'd and so dead-lettered. gamma: paused,
    no channel, 3 messages held. mem-queue-size 4: the rest is on disk.
    """
    nsqd = await make_nsqd(data_path=str(tmp_path), mem_queue_size=4, msg_timeout=60,
                           e2e_processing_latency_percentiles=[0.99, 0.5])
    prod = await Conn.open(nsqd.tcp_port)
    a1 = await Conn.open(nsqd.tcp_port)
    b1 = await Conn.open(nsqd.tcp_port)
    await a1.subscribe("alpha", "a1", rdy=0)
    await b1.subscribe("beta", "b1", rdy=0)
    nsqd.get_topic("alpha").get_channel("a2").pause()
    nsqd.get_topic("beta").get_channel("b1").max_attempts = 1
    nsqd.get_topic("gamma").pause()
    for topic, n in (("alpha", 10), ("beta", 7), ("gamma", 3)):
        await prod.send(c.mpub(topic, [b"%s-%d" % (topic.encode(), i) for i in range(n)]))
        await prod.expect_ok()

    ids = await consume(a1, 3)
    await a1.send(c.req(ids[0], 0), c.req(ids[1], 60_000))
    ids = await consume(b1, 3)
    await asyncio.sleep(0.005)  # latencies of a few ms
    await b1.send(c.fin(ids[0]), c.fin(ids[1]), c.req(ids[2], 0))
    a1_channel = nsqd.get_topic("alpha").channels["a1"]
    b1_channel = nsqd.get_topic("beta").channels["b1"]

    async def settled() -> bool:
        return (a1_channel.requeue_count, len(a1_channel.deferred), len(a1_channel.in_flight),
                b1_channel.dead_letter_count, b1_channel.e2e.summary()[1] if b1_channel.e2e else 0,
                len(b1_channel.in_flight)) == (2, 1, 1, 1, 2, 0)

    await wait_for(settled, timeout=5)
    return nsqd, [prod, a1, b1]


# -- nsqd -----------------------------------------------------------------------


async def test_nsqd_metrics_equal_stats(make_nsqd, tmp_path):
    nsqd, conns = await busy_nsqd(make_nsqd, tmp_path)
    try:
        # same loop turn: nothing changes between the two reads
        stats = get_stats(nsqd)
        body, content_type = nsqd_metrics.render(nsqd)
        assert content_type == CONTENT_TYPE_LATEST
        types, samples = parse(body)
        assert_same(nsq_samples(samples), expected_from_stats(stats, nsqd))

        # the scenario is what the docstring says (so the comparison covered it)
        a1 = lbl(topic="alpha", channel="a1")
        assert samples[("nsq_channel_requeued_total", a1)] == 2
        assert samples[("nsq_channel_deferred", a1)] == 1
        assert samples[("nsq_channel_in_flight", a1)] == 1
        assert samples[("nsq_channel_clients", a1)] == 1
        assert samples[("nsq_channel_messages_total", a1)] == 10
        assert samples[("nsq_channel_paused", lbl(topic="alpha", channel="a2"))] == 1
        assert samples[("nsq_channel_depth", lbl(topic="alpha", channel="a2"))] == 10
        assert samples[("nsq_channel_backend_depth", lbl(topic="alpha", channel="a2"))] > 0
        assert samples[("nsq_channel_dead_lettered_total", lbl(topic="beta", channel="b1"))] == 1
        assert samples[("nsq_topic_messages_total", lbl(topic="alpha"))] == 10
        assert samples[("nsq_topic_messages_total", lbl(topic="beta"))] == 7
        assert samples[("nsq_topic_depth", lbl(topic="gamma"))] == 3
        assert samples[("nsq_topic_paused", lbl(topic="gamma"))] == 1
        assert samples[("nsq_topic_paused", lbl(topic="alpha"))] == 0
        assert samples[("nsq_topic_messages_total", lbl(topic="beta.b1.dead"))] == 1
        assert samples[("nsq_clients", ())] == 3
        assert samples[("nsq_health", ())] == 1

        # types and exposed names (CounterMetricFamily adds _total)
        assert types["nsq_topic_messages"] == "counter"
        assert types["nsq_channel_requeued"] == "counter"
        assert types["nsq_channel_timed_out"] == "counter"
        assert types["nsq_channel_dead_lettered"] == "counter"
        assert types["nsq_topic_depth"] == "gauge"
        assert types[E2E] == "summary"
        text = body.decode()
        assert "# TYPE nsq_topic_messages_total counter\n" in text
        assert "# TYPE nsq_channel_e2e_processing_latency_seconds summary\n" in text
        assert 'nsq_channel_requeued_total{channel="a1",topic="alpha"} 2.0\n' in text

        # e2e summary: the configured quantiles, seconds; NaN while a window is empty
        b1 = dict(topic="beta", channel="b1")
        p99 = samples[(E2E, lbl(**b1, quantile="0.99"))]
        p50 = samples[(E2E, lbl(**b1, quantile="0.5"))]
        assert 0.004 < p50 <= p99 < 60
        assert samples[(E2E_SAMPLES, lbl(**b1))] == 2
        assert math.isnan(samples[(E2E, lbl(topic="alpha", channel="a1", quantile="0.99"))])
        assert samples[(E2E_SAMPLES, a1)] == 0
        assert not any(k[0] in (E2E + "_sum", E2E + "_count") for k in samples)

        # the library's process metrics, on this daemon's registry
        assert samples[("process_resident_memory_bytes", ())] > 0
        assert ("python_info" in types) and ("process_cpu_seconds" in types)
    finally:
        for conn in conns:
            await conn.aclose()


async def test_nsqd_metrics_over_http(make_nsqd, tmp_path):
    """Needs the ``/metrics`` route on nsqd's HTTP listener."""
    nsqd, conns = await busy_nsqd(make_nsqd, tmp_path)
    try:
        async with aiohttp.ClientSession() as session:
            http = HTTP(session, nsqd.http_port)
            stats = await http.stats()
            status, body, headers = await http.request("GET", "/metrics")
            assert status == 200, body
            assert headers["Content-Type"] == CONTENT_TYPE_LATEST
            # aiohttp's client accepts gzip and deflate (aiohttp's server picks deflate)
            assert headers.get("Content-Encoding") in ("gzip", "deflate")
            _, samples = parse(body)
            assert_same(nsq_samples(samples), expected_from_stats(stats, nsqd))
            assert samples[("process_resident_memory_bytes", ())] > 0
            # without Accept-Encoding: plain text
            async with session.get(f"http://127.0.0.1:{nsqd.http_port}/metrics",
                                   headers={"Accept-Encoding": "identity"}) as resp:
                assert resp.status == 200 and "Content-Encoding" not in resp.headers
                assert b"nsq_health 1.0\n" in await resp.read()
            # a wrong method is the API's usual 405
            status, _ = await http.post("/metrics")
            assert status == 405
    finally:
        for conn in conns:
            await conn.aclose()


async def test_gzip_body_over_http(make_nsqd, tmp_path):
    """Needs the ``/metrics`` route on nsqd's HTTP listener."""
    nsqd = await make_nsqd(data_path=str(tmp_path))
    nsqd.get_topic("t").get_channel("c")
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(f"http://127.0.0.1:{nsqd.http_port}/metrics",
                               headers={"Accept-Encoding": "gzip"}) as resp:
            assert resp.status == 200 and resp.headers["Content-Encoding"] == "gzip"
            raw = await resp.read()
    _, samples = parse(gzip.decompress(raw))
    assert samples[("nsq_channel_depth", lbl(topic="t", channel="c"))] == 0


async def test_no_e2e_families_without_the_option(make_nsqd, tmp_path):
    nsqd = await make_nsqd(data_path=str(tmp_path))
    nsqd.get_topic("t").get_channel("c")
    nsqd.get_topic("empty")
    types, samples = parse(nsqd_metrics.render(nsqd)[0])
    assert E2E not in types and E2E_SAMPLES not in types
    assert_same(nsq_samples(samples), expected_from_stats(get_stats(nsqd), nsqd))
    # a topic without channels has its topic series and no channel series
    assert ("nsq_topic_depth", lbl(topic="empty")) in samples
    assert not any(dict(k[1]).get("topic") == "empty" for k in samples if k[0].startswith("nsq_channel_"))


async def test_health_draining_and_quantile_labels(make_nsqd, tmp_path):
    nsqd = await make_nsqd(data_path=str(tmp_path), e2e_processing_latency_percentiles=[1.0, 0.5, 0.999])
    nsqd.get_topic("t").get_channel("c")
    _, samples = parse(nsqd_metrics.render(nsqd)[0])
    quantiles = sorted(dict(k[1])["quantile"] for k in samples if k[0] == E2E)
    assert quantiles == ["0.5", "0.999", "1"]
    nsqd.set_health("disk full")
    try:
        _, samples = parse(nsqd_metrics.render(nsqd)[0])
        assert samples[("nsq_health", ())] == 0
    finally:
        nsqd.set_health(None)
    _, samples = parse(nsqd_metrics.render(nsqd)[0])
    assert samples[("nsq_health", ())] == 1
    assert samples[("nsq_draining", ())] == 0
    nsqd.draining = True  # what POST /drain sets first
    try:
        _, samples = parse(nsqd_metrics.render(nsqd)[0])
        assert samples[("nsq_draining", ())] == 1 and samples[("nsq_health", ())] == 1
    finally:
        nsqd.draining = False


async def test_each_daemon_has_its_own_registry(make_nsqd, tmp_path):
    one = await make_nsqd(data_path=str(tmp_path / "one"))
    two = await make_nsqd(data_path=str(tmp_path / "two"))
    one.get_topic("only_one")
    two.get_topic("only_two")
    assert nsqd_metrics.registry_for(one) is nsqd_metrics.registry_for(one)
    assert nsqd_metrics.registry_for(one) is not nsqd_metrics.registry_for(two)
    _, s1 = parse(nsqd_metrics.render(one)[0])
    _, s2 = parse(nsqd_metrics.render(two)[0])
    assert ("nsq_topic_depth", lbl(topic="only_one")) in s1 and ("nsq_topic_depth", lbl(topic="only_two")) in s2
    assert ("nsq_topic_depth", lbl(topic="only_two")) not in s1
    assert ("nsq_topic_depth", lbl(topic="only_one")) not in s2
    # nothing registered on the library's global registry
    assert b"nsq_topic_depth" not in generate_latest(REGISTRY)


async def test_scrape_time_10000_topics(make_nsqd, tmp_path):
    """10,000 topics with one channel each, created in-process: one scrape's
    render time (the page is about 16 samples per topic)."""
    nsqd = await make_nsqd(data_path=str(tmp_path))
    started = time.perf_counter()
    for i in range(10_000):
        nsqd.get_topic(f"topic{i:05d}").get_channel("c")
    created = time.perf_counter() - started
    nsqd_metrics.render(nsqd)  # first call makes the registry
    times = []
    for _ in range(3):
        started = time.perf_counter()
        body, _ = nsqd_metrics.render(nsqd)
        times.append(time.perf_counter() - started)
    families = list(nsqd_metrics.NSQDCollector(nsqd).collect())
    print(f"\n10,000 topics (created in {created * 1000:.0f} ms): /metrics render "
          f"min {min(times) * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms, "
          f"{len(body) / 1e6:.1f} MB, {sum(len(f.samples) for f in families)} nsq samples")
    _, samples = parse(body)
    assert samples[("nsq_channel_depth", lbl(topic="topic09999", channel="c"))] == 0
    assert sum(1 for k in samples if k[0] == "nsq_topic_depth") == 10_000
    assert min(times) < 5.0


# -- nsqlookupd -----------------------------------------------------------------


def lookupd_expected(nodes: dict[str, Any], topics: dict[str, Any], channels: dict[str, list[str]]) -> Samples:
    return {
        ("nsqlookupd_producers", ()): float(len(nodes["producers"])),
        ("nsqlookupd_topics", ()): float(len(topics["topics"])),
        ("nsqlookupd_channels", ()): float(sum(len(v) for v in channels.values())),
        ("nsqlookupd_tombstones", ()): float(sum(sum(1 for t in p["tombstones"] if t)
                                                 for p in nodes["producers"])),
    }


def lookupd_samples(samples: Samples) -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith("nsqlookupd_")}


async def lookupd_api(http: HTTP) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[str]]]:
    """(/nodes, /topics, {topic: /channels}) read over HTTP."""
    nodes = json.loads((await http.get("/nodes"))[1])
    topics = json.loads((await http.get("/topics"))[1])
    channels = {t: json.loads((await http.get("/channels", topic=t))[1])["channels"] for t in topics["topics"]}
    return nodes, topics, channels


async def small_cluster(make_nsq_cluster, tmp_path) -> tuple[NSQLookupd, list[NSQD]]:
    """A lookupd and two nsqds registered with it: nsqd 0 has topics a (channels
    x, y) and b (channel z); nsqd 1 has topic a (channel x) and c (no channel)."""
    # identified before the topics ask lookupd for channels
    cluster = await make_nsq_cluster(2, data_path=str(tmp_path))
    lookupd, nsqds = cluster.lookupd, cluster.nsqds
    for topic, channel in (("a", "x"), ("a", "y"), ("b", "z")):
        nsqds[0].get_topic(topic).get_channel(channel)
    nsqds[1].get_topic("a").get_channel("x")
    nsqds[1].get_topic("c")

    async def registered() -> bool:
        figures = lookupd_metrics.lookupd_figures(lookupd)
        regs = {(r[0], r[1], r[2], len(p)) for r, p in lookupd.db.items()}
        return figures == {"producers": 2, "topics": 3, "channels": 3, "tombstones": 0} and regs >= {
            ("topic", "a", "", 2), ("channel", "a", "x", 2)}

    await wait_for(registered, timeout=5)
    return lookupd, nsqds


async def test_lookupd_metrics_equal_api(make_nsq_cluster, tmp_path):
    lookupd, nsqds = await small_cluster(make_nsq_cluster, tmp_path)
    async with aiohttp.ClientSession() as session:
        http = HTTP(session, lookupd.http_port)
        api = await lookupd_api(http)
        body, content_type = lookupd_metrics.render(lookupd)
        assert content_type == CONTENT_TYPE_LATEST
        types, samples = parse(body)
        assert lookupd_samples(samples) == lookupd_expected(*api)
        assert lookupd_samples(samples) == {("nsqlookupd_producers", ()): 2, ("nsqlookupd_topics", ()): 3,
                                            ("nsqlookupd_channels", ()): 3, ("nsqlookupd_tombstones", ()): 0}
        assert all(types[name] == "gauge" for name in
                   ("nsqlookupd_producers", "nsqlookupd_topics", "nsqlookupd_channels", "nsqlookupd_tombstones"))
        assert samples[("process_resident_memory_bytes", ())] > 0

        # a tombstone, then a channel created over lookupd's HTTP API
        status, _ = await http.post("/topic/tombstone", topic="a", node=f"127.0.0.1:{nsqds[1].http_port}")
        assert status == 200
        status, _ = await http.post("/channel/create", topic="d", channel="w")
        assert status == 200
        api = await lookupd_api(http)
        _, samples = parse(lookupd_metrics.render(lookupd)[0])
        assert lookupd_samples(samples) == lookupd_expected(*api)
        assert samples[("nsqlookupd_tombstones", ())] == 1
        assert samples[("nsqlookupd_topics", ())] == 4 and samples[("nsqlookupd_channels", ())] == 4

        # an nsqd going away takes its registrations with it
        await nsqds.pop().stop()

        async def gone() -> bool:
            return lookupd_metrics.lookupd_figures(lookupd)["producers"] == 1

        await wait_for(gone, timeout=5)
        api = await lookupd_api(http)
        _, samples = parse(lookupd_metrics.render(lookupd)[0])
        assert lookupd_samples(samples) == lookupd_expected(*api)
        assert samples[("nsqlookupd_tombstones", ())] == 0


async def test_lookupd_metrics_over_http(make_nsq_cluster, tmp_path):
    """Needs the ``/metrics`` route on nsqlookupd's HTTP listener."""
    lookupd, nsqds = await small_cluster(make_nsq_cluster, tmp_path)
    async with aiohttp.ClientSession() as session:
        http = HTTP(session, lookupd.http_port)
        api = await lookupd_api(http)
        status, body, headers = await http.request("GET", "/metrics")
        assert status == 200, body
        assert headers["Content-Type"] == CONTENT_TYPE_LATEST
        _, samples = parse(body)
        assert lookupd_samples(samples) == lookupd_expected(*api)
        assert samples[("nsqlookupd_producers", ())] == 2
        assert samples[("process_resident_memory_bytes", ())] > 0


class _Odd:
    """A collector with what the fast writer must format as generate_latest
    does: escapes, special floats, big numbers, timestamps, created samples,
    info and unknown types, and a name it hands over to generate_latest."""

    def __init__(self, odd_name: bool = False) -> None:
        self.odd_name = odd_name

    def collect(self):
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily,
                                            SummaryMetricFamily, UnknownMetricFamily)

        g = GaugeMetricFamily("odd_gauge", 'help with \\ backslash\nand "quotes"', labels=["a", "b"])
        shared = {"a": 'quo"te', "b": "back\\slash\nnew line é"}
        for value in (0, -0.0, 1, 1234567, 10**20, 0.1, 1e-9, float("inf"), float("-inf"), float("nan"),
                      True, 2.5e300):
            g.add_sample("odd_gauge", shared, value)
        g.add_sample("odd_gauge", {"b": "z", "a": "y"}, 3, timestamp=1234.5678)
        yield g
        cnt = CounterMetricFamily("odd_events", "counted", labels=["k"])
        cnt.add_metric(["v"], 7, created=1700000000.25)
        yield cnt
        info = InfoMetricFamily("odd_build", "build info", value={"version": "1.2", "commit": "abc"})
        yield info
        yield UnknownMetricFamily("odd_unknown", "untyped one", value=4)
        s = SummaryMetricFamily("odd_summary", "s", count_value=3, sum_value=1.5)
        yield s
        if self.odd_name:
            try:
                yield GaugeMetricFamily("odd.dotted", "a name generate_latest escapes", value=1)
            except ValueError:
                pass  # prometheus_client before UTF-8 names (< 0.21) refuses it


def test_text_exposition_is_generate_latest():
    from prometheus_client import CollectorRegistry

    for odd_name in (False, True):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Odd(odd_name))
        assert nsqd_metrics.text_exposition(registry) == generate_latest(registry)


async def test_text_exposition_of_an_nsqd_is_generate_latest(make_nsqd, tmp_path):
    from prometheus_client import CollectorRegistry

    nsqd, conns = await busy_nsqd(make_nsqd, tmp_path)
    try:
        registry = CollectorRegistry(auto_describe=False)  # without the process figures, which move
        registry.register(nsqd_metrics.NSQDCollector(nsqd))
        fast = nsqd_metrics.text_exposition(registry)
        assert fast == generate_latest(registry)
        assert b'nsq_channel_e2e_processing_latency_seconds{channel="a1",quantile="0.99",topic="alpha"} NaN\n' \
            in fast
    finally:
        for conn in conns:
            await conn.aclose()
