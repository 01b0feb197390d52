"""A real Prometheus scrapes nsqd's and nsqlookupd's ``GET /metrics``: every
target is up without a scrape error, every family docs/reference/metrics.md
names is stored, and every nsq series holds what ``/stats`` (and
nsqlookupd's HTTP API) says."""

from __future__ import annotations

import math
import re
import time
from typing import Any

from tests.monitoring.conftest import (
    LOOKUPD_JOB,
    METRICS_DOC,
    NSQD_JOB,
    Monitored,
    get_json,
    http_get,
    wait_for,
)

#: metric -> /stats field (x scale) per topic, per channel
TOPIC_FIELDS = {"nsq_topic_depth": "depth", "nsq_topic_backend_depth": "backend_depth",
                "nsq_topic_messages_total": "message_count", "nsq_topic_message_bytes_total": "message_bytes",
                "nsq_topic_paused": "paused"}
WAL_TOPIC_FIELDS = {"nsq_topic_head_offset": "head_offset", "nsq_topic_first_offset": "first_offset",
                    "nsq_topic_retained_bytes": "retained_bytes", "nsq_topic_retention_bytes": "retention_bytes"}
CHANNEL_FIELDS = {"nsq_channel_depth": "depth", "nsq_channel_backend_depth": "backend_depth",
                  "nsq_channel_in_flight": "in_flight_count", "nsq_channel_deferred": "deferred_count",
                  "nsq_channel_messages_total": "message_count", "nsq_channel_requeued_total": "requeue_count",
                  "nsq_channel_timed_out_total": "timeout_count",
                  "nsq_channel_dead_lettered_total": "dead_letter_count", "nsq_channel_clients": "client_count",
                  "nsq_channel_paused": "paused"}
WAL_CHANNEL_FIELDS = {"nsq_channel_offset": "offset", "nsq_channel_committed_offset": "committed_offset"}

#: the other families compared with /stats below
OTHER_FAMILIES = {"nsq_topic_oldest_timestamp_seconds", "nsq_channel_e2e_processing_latency_seconds",
                  "nsq_channel_e2e_processing_latency_samples", "nsq_clients", "nsq_health", "nsq_draining",
                  "nsqlookupd_producers", "nsqlookupd_topics", "nsqlookupd_channels", "nsqlookupd_tombstones"}
#: every family test_values_agree_with_stats compares (a family added to
#: /metrics later is left to the other tests until it is added here)
COMPARED = {*TOPIC_FIELDS, *WAL_TOPIC_FIELDS, *CHANNEL_FIELDS, *WAL_CHANNEL_FIELDS, *OTHER_FAMILIES}

Key = tuple[str, str, tuple[tuple[str, str], ...]]


def documented_families() -> dict[str, str]:
    """The metric names of docs/reference/metrics.md's Prometheus section
    (its tables' first column, and the process metrics its text names),
    each with its table row ("" for the process metrics)."""
    text = METRICS_DOC.read_text()
    section = text.split("\n## Prometheus", 1)[1].split("\n## ", 1)[0]
    names = {name: row for row, name in re.findall(r"^(\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \|.*)$", section, re.M)}
    for name in re.findall(r"`(process_[a-z_]+)`", section):
        names.setdefault(name, "")
    return names


def test_targets_up_without_scrape_errors(monitored: Monitored) -> None:
    targets = monitored.prometheus.targets()
    seen = {}
    for t in targets:
        assert t["health"] == "up", t
        assert t["lastError"] == "", t
        seen.setdefault(t["labels"]["job"], []).append(t["labels"]["instance"])
    assert {job: sorted(v) for job, v in seen.items()} == {job: sorted(v) for job, v in monitored.jobs.items()}
    print(f"\n{len(targets)} targets up, no scrape error: {seen}")


def _where(family: str, row: str, m: Monitored) -> set[str]:
    """The instances that must have ``family`` (its doc table ``row``)."""
    if family.startswith("process_"):
        return set(m.nsqds) | {m.lookupd}
    if family.startswith("nsqlookupd_"):
        return {m.lookupd}
    if "`--storage=wal`" in row:
        return {m.wal_nsqd}
    return set(m.nsqds)


def test_every_documented_family_is_scraped(monitored: Monitored) -> None:
    m = monitored
    families = documented_families()
    assert len(families) >= 30, families  # the doc's tables parsed
    stored = set(m.prometheus.api("label/__name__/values"))
    assert set(families) - stored == set(), "documented but not in Prometheus"
    series = 0
    for family, row in sorted(families.items()):
        result = m.prometheus.query(f'count by (instance, job) ({{__name__="{family}"}})')
        instances = {r["metric"]["instance"] for r in result}
        assert instances == _where(family, row, m), family
        series += sum(int(r["value"][1]) for r in result)
    # nothing nsq-specific that the doc does not name
    undocumented = {n for n in stored if n.startswith(("nsq_", "nsqlookupd_"))} - set(families)
    assert undocumented == set()
    print(f"\n{len(families)} documented families present in Prometheus ({series} series), "
          f"on the expected targets")


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _quantile_label(q: float) -> str:
    text = repr(float(q))
    return text[:-2] if text.endswith(".0") else text


def expected_series(m: Monitored) -> dict[Key, float]:
    """Every nsq series each target should have now, from ``/stats``,
    ``/ping`` and nsqlookupd's ``/nodes``, ``/topics`` and ``/channels``."""
    out: dict[Key, float] = {}
    for nsqd in m.nsqds:
        stats = m.stats(nsqd)
        clients = 0
        for topic in stats["topics"] or []:
            tl = _labels(topic=topic["topic_name"])
            wal = "head_offset" in topic
            for name, fld in TOPIC_FIELDS.items():
                out[(name, nsqd, tl)] = float(topic[fld])
            if wal:
                for name, fld in WAL_TOPIC_FIELDS.items():
                    out[(name, nsqd, tl)] = float(topic[fld])
                out[("nsq_topic_oldest_timestamp_seconds", nsqd, tl)] = topic["oldest_timestamp"] / 1e9
            for ch in topic["channels"]:
                cl = _labels(topic=topic["topic_name"], channel=ch["channel_name"])
                for name, fld in CHANNEL_FIELDS.items():
                    out[(name, nsqd, cl)] = float(ch[fld])
                if wal:
                    for name, fld in WAL_CHANNEL_FIELDS.items():
                        out[(name, nsqd, cl)] = float(ch[fld])
                e2e = ch["e2e_processing_latency"]
                out[("nsq_channel_e2e_processing_latency_samples", nsqd, cl)] = float(e2e["count"])
                for p in e2e["percentiles"]:
                    ql = _labels(topic=topic["topic_name"], channel=ch["channel_name"],
                                 quantile=_quantile_label(p["quantile"]))
                    out[("nsq_channel_e2e_processing_latency_seconds", nsqd, ql)] = \
                        p["value"] / 1e9 if e2e["count"] else math.nan
                clients += ch["client_count"]
        out[("nsq_clients", nsqd, ())] = float(clients)  # each consumer has one connection per nsqd
        out[("nsq_health", nsqd, ())] = 1.0 if stats["health"] == "OK" else 0.0
        out[("nsq_draining", nsqd, ())] = 0.0 if http_get(f"http://{nsqd}/ping") == b"OK" else 1.0
    lk = m.lookupd
    nodes = get_json(f"http://{lk}/nodes")["producers"]
    topics = get_json(f"http://{lk}/topics")["topics"]
    channels = sum(len(get_json(f"http://{lk}/channels?topic={t}")["channels"]) for t in topics)
    out[("nsqlookupd_producers", lk, ())] = float(len(nodes))
    out[("nsqlookupd_topics", lk, ())] = float(len(topics))
    out[("nsqlookupd_channels", lk, ())] = float(channels)
    out[("nsqlookupd_tombstones", lk, ())] = float(sum(sum(n["tombstones"]) for n in nodes))
    return out


def scraped_series(m: Monitored) -> dict[Key, float]:
    """Every series of the :data:`COMPARED` families Prometheus holds now
    (its latest sample)."""
    out: dict[Key, float] = {}
    for r in m.prometheus.query('{__name__=~"nsq_.+|nsqlookupd_.+"}'):
        labels = dict(r["metric"])
        name, instance = labels.pop("__name__"), labels.pop("instance")
        if name not in COMPARED:
            continue
        job = labels.pop("job")
        assert job == (LOOKUPD_JOB if name.startswith("nsqlookupd_") else NSQD_JOB)
        out[(name, instance, tuple(sorted(labels.items())))] = float(r["value"][1])
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def test_values_agree_with_stats(monitored: Monitored) -> None:
    """After the traffic, every nsq series equals its ``/stats`` figure
    (waiting for the next scrape when one was taken before a change)."""
    m = monitored
    assert COMPARED <= set(documented_families())
    checked: dict[str, Any] = {}

    def agree() -> bool:
        expected, scraped = expected_series(m), scraped_series(m)
        checked["expected"], checked["scraped"] = expected, scraped
        return expected.keys() == scraped.keys() and all(_same(v, scraped[k]) for k, v in expected.items())

    started = time.monotonic()
    try:
        wait_for(agree, "Prometheus's series agree with /stats", timeout=20, interval=0.5)
    except AssertionError:
        expected, scraped = checked["expected"], checked["scraped"]
        diff = {k: (expected.get(k), scraped.get(k)) for k in expected.keys() | scraped.keys()
                if k not in expected or k not in scraped or not _same(expected[k], scraped[k])}
        raise AssertionError(f"(stats, prometheus) differ: {diff}") from None
    expected = checked["expected"]
    families = {k[0] for k in expected}
    # the traffic reached every family: counters that moved, the WAL log, the e2e window
    fast = {k[0]: v for k, v in expected.items()
            if k[1] == m.wal_nsqd and dict(k[2]).get("channel") == "fast" and "quantile" not in dict(k[2])}
    for name in ("nsq_channel_requeued_total", "nsq_channel_timed_out_total", "nsq_channel_dead_lettered_total",
                 "nsq_channel_deferred", "nsq_channel_clients", "nsq_channel_e2e_processing_latency_samples",
                 "nsq_channel_offset", "nsq_channel_committed_offset"):
        assert fast[name] > 0, name
    print(f"\n{len(expected)} series in {len(families)} families equal /stats "
          f"(after {time.monotonic() - started:.1f} s)")
