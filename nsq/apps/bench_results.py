"""``nsq bench``'s settings and results: :class:`BenchOptions` in,
:class:`BenchResult` / :class:`LatencyResult` out, and their log lines in
Go's format (:meth:`BenchResult.line`) with the parsers scripts use to read
them back (:func:`parse_result_line`, :func:`parse_latency_line`).

No sockets or processes here: :mod:`nsq.apps.bench` runs the workers,
:mod:`nsq.apps.bench_wire` holds their socket loops.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from nsq._internal.durations import format_duration, parse_duration

__all__ = [
    "DEADLINE_FORMAT",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHANNEL",
    "DEFAULT_DEFLATE_LEVEL",
    "DEFAULT_NSQD_TCP_ADDRESS",
    "DEFAULT_RDY",
    "DEFAULT_RUNFOR",
    "DEFAULT_SIZE",
    "DEFAULT_TOPIC",
    "LATENCY_LINE",
    "RESULT_LINE",
    "BenchError",
    "BenchOptions",
    "BenchResult",
    "LatencyResult",
    "default_connections",
    "go_float",
    "go_log_prefix",
    "parse_deadline",
    "parse_latency_line",
    "parse_result_line",
]


# Go's defaults (nsqio/nsq bench/bench_writer/bench_writer.go, bench/bench_reader/bench_reader.go)
DEFAULT_NSQD_TCP_ADDRESS = "127.0.0.1:4150"
DEFAULT_TOPIC = "sub_bench"
DEFAULT_CHANNEL = "ch"
DEFAULT_SIZE = 200
DEFAULT_BATCH_SIZE = 200
DEFAULT_RUNFOR = 10.0
DEFAULT_RDY = 2500
#: go-nsq's ``deflate_level`` default
DEFAULT_DEFLATE_LEVEL = 6
#: Go's ``time.Parse("2006-01-02 15:04:05", deadline)``: UTC
DEADLINE_FORMAT = "%Y-%m-%d %H:%M:%S"


class BenchError(Exception):
    """A worker could not connect, or nsqd answered with an error."""


@dataclass
class BenchOptions:
    """One run's settings (Go's flags).

    Attributes:
        nsqd_tcp_address: ``host:port`` of nsqd.
        topic: topic to publish to / receive from.
        channel: channel to receive on (reader, latency).
        size: message size in bytes.
        batch_size: messages per MPUB (writer).
        runfor: seconds to run.
        rdy: RDY count (reader).
        deadline: UTC time to start the run at, or None for at once.
        connections: connections, one OS process each (latency: always 1 pair).
        until: what a latency sample ends at: ``"delivered"`` (the message
            frame read by a RDY 1 consumer) or ``"ok"`` (the PUB's ``OK``
            read by the producer; no consumer).
        tls_v1: IDENTIFY ``tls_v1`` and upgrade every connection to TLS
            (go-nsq's ``tls_v1``); nsqd needs ``--tls-cert``/``--tls-key``.
        tls_insecure_skip_verify: do not check nsqd's certificate.
        tls_root_ca_file: CA file to check nsqd's certificate against
            (default: the system's CAs).
        snappy: IDENTIFY ``snappy``: snappy-framed streams both ways.
        deflate: IDENTIFY ``deflate``: raw deflate both ways, at
            ``deflate_level`` (1-9).
    """

    nsqd_tcp_address: str = DEFAULT_NSQD_TCP_ADDRESS
    topic: str = DEFAULT_TOPIC
    channel: str = DEFAULT_CHANNEL
    size: int = DEFAULT_SIZE
    batch_size: int = DEFAULT_BATCH_SIZE
    runfor: float = DEFAULT_RUNFOR
    rdy: int = DEFAULT_RDY
    deadline: _dt.datetime | None = None
    until: str = "delivered"
    connections: int = field(default_factory=lambda: default_connections())
    tls_v1: bool = False
    tls_insecure_skip_verify: bool = False
    tls_root_ca_file: str = ""
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = DEFAULT_DEFLATE_LEVEL

    def features(self) -> dict[str, Any]:
        """The IDENTIFY keys asking for this run's upgrades (empty: none)."""
        wanted: dict[str, Any] = {}
        if self.tls_v1:
            wanted["tls_v1"] = True
        if self.snappy:
            wanted["snappy"] = True
        if self.deflate:
            wanted["deflate"] = True
            wanted["deflate_level"] = self.deflate_level
        return wanted


def default_connections() -> int:
    """Go's ``runtime.GOMAXPROCS(0)``: ``$GOMAXPROCS`` if set, else the CPUs
    this process may run on."""
    env = os.environ.get("GOMAXPROCS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_deadline(text: str) -> _dt.datetime:
    """``"2006-01-02 15:04:05"`` (UTC, as Go parses it) -> aware datetime.

    Raises:
        ValueError: another format.
    """
    return _dt.datetime.strptime(text, DEADLINE_FORMAT).replace(tzinfo=_dt.UTC)


def go_float(value: float) -> str:
    """``fmt.Sprintf("%.03f", value)``, including ``+Inf`` and ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.3f}"


def go_log_prefix(name: str) -> str:
    """``log.SetPrefix("[bench_writer] ")`` with Go's default ``LstdFlags``
    (local time): ``"[name] 2006/01/02 15:04:05 "``."""
    return f"[{name}] {time.strftime('%Y/%m/%d %H:%M:%S')} "


@dataclass
class BenchResult:
    """A writer or reader run.

    Attributes:
        mode: ``writer`` or ``reader``.
        duration_ns: release of the workers -> last result.
        count: messages published (acknowledged) or received.
        size: message size used for ``mb_per_s``.
    """

    mode: str
    duration_ns: int
    count: int
    size: int

    @property
    def seconds(self) -> float:
        return self.duration_ns / 1e9

    @property
    def mb_per_s(self) -> float:
        return _div(self.count * self.size, self.seconds) / 1024 / 1024

    @property
    def ops_per_s(self) -> float:
        return _div(self.count, self.seconds)

    @property
    def us_per_op(self) -> float:
        # Go: float64(duration/time.Microsecond)/float64(tmc)
        return _div(self.duration_ns // 1000, self.count)

    def line(self) -> str:
        """Go's final log line."""
        return (f"{go_log_prefix('bench_' + self.mode)}duration: {format_duration(self.duration_ns / 1e9)} - "
                f"{go_float(self.mb_per_s)}mb/s - {go_float(self.ops_per_s)}ops/s - {go_float(self.us_per_op)}us/op")


@dataclass
class LatencyResult:
    """A latency run: one sample (ns) per message, PUB written -> message
    read (or -> ``OK`` read, with ``until="ok"``)."""

    duration_ns: int
    samples_ns: list[int]

    @property
    def count(self) -> int:
        return len(self.samples_ns)

    def percentile_us(self, q: float) -> float:
        """The ``q`` quantile (0..1, nearest rank) in microseconds; NaN without samples."""
        if not self.samples_ns:
            return math.nan
        ordered = sorted(self.samples_ns)
        rank = max(1, math.ceil(q * len(ordered)))
        return ordered[rank - 1] / 1000

    def line(self) -> str:
        """``duration: 10.0001s - 12345 msgs - p50: 42.000us - p90: ... - p99: ... - max: ...``."""
        parts = [f"{go_log_prefix('bench_latency')}duration: {format_duration(self.duration_ns / 1e9)}",
                 f"{self.count} msgs"]
        parts += [f"{name}: {go_float(self.percentile_us(q))}us"
                  for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))]
        return " - ".join(parts)


_NUM = r"([-+]?(?:[\d.]+|Inf|NaN))"
#: Go's bench result line (what bench.py parses): mode, duration, mb/s, ops/s, us/op
RESULT_LINE = re.compile(r"\[bench_(\w+)\] .*?duration: (\S+) - " + _NUM + r"mb/s - " + _NUM + r"ops/s - "
                         + _NUM + r"us/op")
#: the latency line: duration, count, p50, p90, p99, max (us)
LATENCY_LINE = re.compile(r"\[bench_latency\] .*?duration: (\S+) - (\d+) msgs - p50: " + _NUM + r"us - p90: "
                          + _NUM + r"us - p99: " + _NUM + r"us - max: " + _NUM + r"us")


def parse_result_line(text: str) -> dict[str, Any] | None:
    """The first writer/reader result line in ``text`` as ``{"mode", "seconds",
    "mb_per_s", "ops_per_s", "us_per_op"}``, or None."""
    m = RESULT_LINE.search(text)
    if m is None:
        return None
    return {"mode": m.group(1), "seconds": parse_duration(m.group(2)), "mb_per_s": float(m.group(3)),
            "ops_per_s": float(m.group(4)), "us_per_op": float(m.group(5))}


def parse_latency_line(text: str) -> dict[str, Any] | None:
    """The first latency line in ``text`` as ``{"seconds", "count", "p50",
    "p90", "p99", "max"}`` (microseconds), or None."""
    m = LATENCY_LINE.search(text)
    if m is None:
        return None
    out: dict[str, Any] = {"seconds": parse_duration(m.group(1)), "count": int(m.group(2))}
    for i, name in enumerate(("p50", "p90", "p99", "max")):
        out[name] = float(m.group(3 + i))
    return out


def _div(a: float, b: float) -> float:
    if b:
        return a / b
    if a:
        return math.inf
    return math.nan

