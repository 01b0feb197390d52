"""Fixtures for the monitoring tests: a real Prometheus scraping a small cluster.

* :func:`require_tool`: the path of ``prometheus`` or ``promtool`` (on PATH
  or in /usr/bin, Debian's ``prometheus`` package). When missing the tests
  are skipped, unless ``NSQ_REQUIRE_PROMETHEUS=1`` is set, which turns that
  into a failure (CI installs the package).
* ``monitored`` (package scope: one for every test here): a lookupd and two nsqds in this process
  (:class:`nsq.testing.ThreadedCluster`; nsqd 1 with disk queues, nsqd 2
  with ``--storage=wal``), after traffic that gives every metric family data
  (publishes, a consumer that finishes, requeues, lets one message time out,
  defers one and dead-letters two, a channel nobody consumes), and a
  Prometheus scraping the three every second with the alert rules of
  contrib/prometheus/nsq-alerts.yml loaded. When the fixture returns the
  traffic has stopped, every target is up and has been scraped a few times.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "contrib" / "prometheus" / "nsq-alerts.yml"
ALERT_TESTS = REPO / "contrib" / "prometheus" / "nsq-alerts.test.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "nsq.json"
METRICS_DOC = REPO / "docs" / "reference" / "metrics.md"

#: the job names the docs, the dashboard and the alert rules use
NSQD_JOB = "nsqd"
LOOKUPD_JOB = "nsqlookupd"

#: messages each nsqd gets: plain ones to "orders" (over TCP) and "clicks" (HTTP /mpub)
ORDERS = 100
CLICKS = 50
#: special "orders" bodies and what the "fast" consumer does with them
SPECIAL = [b"req-1", b"req-2", b"timeout-1", b"dead-1", b"dead-2", b"defer-1"]
#: nsqd --max-attempts: a "dead" message is dead-lettered at its third REQ
MAX_ATTEMPTS = 3
#: a "defer" message is requeued this long (stays deferred while the tests run)
DEFER_MS = 600_000
#: e2e quantiles nsqd tracks
QUANTILES = [0.5, 0.99]

T = TypeVar("T")


def find_tool(name: str) -> str | None:
    """``name`` on PATH or in /usr/bin (Debian's package), else None."""
    path = shutil.which(name)
    if path is None and os.access(f"/usr/bin/{name}", os.X_OK):
        path = f"/usr/bin/{name}"
    return path


def require_tool(name: str) -> str:
    """The path of ``name`` (``prometheus`` or ``promtool``); skip (or, with
    NSQ_REQUIRE_PROMETHEUS=1, fail) when it is missing."""
    path = find_tool(name)
    if path is not None:
        return path
    reason = f"{name} is not installed (Debian: apt-get install prometheus)"
    if os.environ.get("NSQ_REQUIRE_PROMETHEUS", "") not in ("", "0"):
        pytest.fail(f"NSQ_REQUIRE_PROMETHEUS is set but {reason}")
    pytest.skip(reason)


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.1,
             describe: Callable[[], Any] | None = None) -> T:
    """Poll ``predicate`` until it returns something true (returned), at
    most ``timeout`` s; OSError (a connection refused) counts as not yet.
    On timeout the AssertionError shows the last value, or ``describe()``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except OSError as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            if describe is not None:
                try:
                    last = describe()
                except Exception as e:  # the state could not be read: say so
                    last = f"({e!r})"
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def http_post(url: str, body: bytes = b"", timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=timeout) as r:
        return r.read()


def get_json(url: str) -> Any:
    return json.loads(http_get(url))


class Prometheus:
    """A ``prometheus`` server on a free loopback port with its own config
    and TSDB under ``workdir``; :meth:`stop` ends it."""

    def __init__(self, binary: str, workdir: Path, jobs: dict[str, list[str]],
                 rule_files: list[Path] | None = None) -> None:
        self.binary = binary
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files or []],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in jobs.items()],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self) -> None:
        """Start the process (not waiting: :meth:`wait_ready`)."""
        self.address = f"127.0.0.1:{free_port()}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address={self.address}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for ``/-/ready``; when the process exits first because its
        port was taken meanwhile, start again on another one (3 tries)."""
        for attempt in range(3):
            assert self.proc is not None
            deadline = time.monotonic() + timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    if http_get(f"http://{self.address}/-/ready", timeout=2).strip():
                        return
                except (OSError, urllib.error.HTTPError):
                    pass
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.stop()
                raise AssertionError(f"prometheus not ready within {timeout:g} s:\n{self.log_tail()}")
            if "address already in use" not in self.log_tail() or attempt == 2:
                raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n{self.log_tail()}")
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def api(self, path: str, **params: str) -> Any:
        """``/api/v1/<path>``'s ``data``; AssertionError unless ``status`` is success."""
        url = f"http://{self.address}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            answer = get_json(url)
        except urllib.error.HTTPError as e:
            answer = json.loads(e.read() or b"{}")
        if answer.get("status") != "success":
            raise AssertionError(f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` gives now (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        data = self.api("query", query=expr)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return result

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets", state="active")["activeTargets"]


@dataclass
class Monitored:
    """What the ``monitored`` fixture set up."""

    cluster: Any  # nsq.testing.ThreadedCluster
    prometheus: Prometheus
    #: job -> the HTTP addresses (Prometheus ``instance`` labels) it scrapes
    jobs: dict[str, list[str]]
    #: the nsqd with --storage=wal
    wal_nsqd: str
    consumers: list[Any] = field(default_factory=list)

    @property
    def nsqds(self) -> list[str]:
        return self.jobs[NSQD_JOB]

    @property
    def lookupd(self) -> str:
        return self.jobs[LOOKUPD_JOB][0]

    def stats(self, nsqd: str) -> dict[str, Any]:
        return get_json(f"http://{nsqd}/stats?format=json")


def handle_order(msg: Any) -> bool | None:
    """The "orders/fast" consumer: finishes plain messages; requeues "req"
    ones once, "dead" ones every time (nsqd dead-letters them), defers
    "defer" ones for DEFER_MS; leaves the first delivery of "timeout" ones
    unanswered, so it times out."""
    kind = msg.body.split(b"-")[0]
    first = msg.attempts == 1
    if kind == b"dead" or (kind == b"req" and first):
        msg.requeue(0, backoff=False)
    elif kind == b"defer" and first:
        msg.requeue(DEFER_MS, backoff=False)
    elif kind == b"timeout" and first:
        msg.disable_auto_response()
    return None


def _pending(m: Monitored) -> list[str]:
    """What the planned traffic has not done yet on each nsqd ([] once every
    message has been handled as planned)."""
    out = []
    for nsqd in m.nsqds:
        topics = {t["topic_name"]: t for t in m.stats(nsqd)["topics"] or []}
        if set(topics) != {"orders", "clicks", "orders.fast.dead"}:
            out.append(f"{nsqd} topics {sorted(topics)}")
            continue
        orders = {c["channel_name"]: c for c in topics["orders"]["channels"]}
        clicks = {c["channel_name"]: c for c in topics["clicks"]["channels"]}
        fast, slow, stream = orders["fast"], orders["slow"], clicks["stream"]
        checks = {
            "fast depth 0": fast["depth"] == 0,
            "fast in flight 0": fast["in_flight_count"] == 0,
            "fast deferred 1": fast["deferred_count"] == 1,
            "fast timed out": fast["timeout_count"] >= 1,
            "fast dead letters 2": fast["dead_letter_count"] == 2,
            "fast 1 client": fast["client_count"] == 1,
            "fast e2e samples": fast["e2e_processing_latency"]["count"] > 0,
            f"slow depth {ORDERS + len(SPECIAL)}": slow["depth"] == ORDERS + len(SPECIAL),
            "stream depth 0": stream["depth"] == 0,
            "stream in flight 0": stream["in_flight_count"] == 0,
            "stream 1 client": stream["client_count"] == 1,
            "2 dead letters": topics["orders.fast.dead"]["message_count"] == 2,
        }
        if not all(checks.values()):
            out.append(f"{nsqd} not yet {[k for k, ok in checks.items() if not ok]}: fast {fast}, "
                       f"stream {stream}")
    return out


def _traffic(m: Monitored) -> None:
    """Channels first (so each gets every message), then the publishes, then
    (once Prometheus has scraped the counters at their start, so that
    ``increase()`` sees the dead letters) the consumers, found through the
    lookupd; returns once all is handled."""
    from nsq.client import Consumer, Producer

    for nsqd in m.nsqds:
        for topic, channel in (("orders", "fast"), ("orders", "slow"), ("clicks", "stream")):
            http_post(f"http://{nsqd}/topic/create?topic={topic}")
            http_post(f"http://{nsqd}/channel/create?topic={topic}&channel={channel}")
        http_post(f"http://{nsqd}/mpub?topic=clicks", b"\n".join(b"click %d" % i for i in range(CLICKS)))

    async def produce() -> None:
        for address in m.cluster.nsqd_tcp_addresses:
            async with Producer(address) as p:
                await p.multi_publish("orders", [b"order %d" % i for i in range(ORDERS)])
                for body in SPECIAL:
                    await p.publish("orders", body)

    m.cluster.run(produce())
    m.cluster.wait_registered(topic="orders")
    m.cluster.wait_registered(topic="clicks")
    lookupds = m.cluster.lookupd_http_addresses
    m.prometheus.wait_ready()
    first = 'nsq_channel_dead_lettered_total{channel="fast"} == 0'
    wait_for(lambda: len(m.prometheus.query(first)) == len(m.nsqds), "the first scrape of the nsqds",
             timeout=30, interval=0.2, describe=lambda: (m.prometheus.targets(), m.prometheus.log_tail()))

    async def consume() -> list[Any]:
        common: dict[str, Any] = {"lookupd_http_addresses": lookupds, "max_in_flight": 50, "max_attempts": 0,
                                  "max_backoff_duration": 0, "identify": {"msg_timeout": 1000}}
        fast = Consumer("orders", "fast", handle_order, **common)
        stream = Consumer("clicks", "stream", lambda msg: None, **common)
        for c in (fast, stream):
            await c.start()
        return [fast, stream]

    m.consumers = m.cluster.run(consume())
    wait_for(lambda: not _pending(m), "the planned traffic handled on every nsqd", timeout=30,
             describe=lambda: _pending(m))


def wait_scraped(m: Monitored, scrapes: int = 3, timeout: float = 30.0) -> None:
    """Every target up, without a scrape error, scraped ``scrapes`` times
    (so ``rate()`` over a minute has points)."""
    prom = m.prometheus
    want = {(job, a) for job, addresses in m.jobs.items() for a in addresses}

    def ready() -> bool:
        targets = prom.targets()
        if {(t["labels"]["job"], t["labels"]["instance"]) for t in targets} != want:
            return False
        if not all(t["health"] == "up" and not t["lastError"] for t in targets):
            return False
        counts = prom.query("count_over_time(up[1m])")
        return len(counts) == len(want) and all(float(r["value"][1]) >= scrapes for r in counts)

    wait_for(ready, f"every target up and scraped {scrapes} times", timeout=timeout, interval=0.2,
             describe=lambda: (prom.targets(), prom.query("count_over_time(up[1m])"), prom.log_tail()))


@pytest.fixture(scope="package")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    binary = require_tool("prometheus")
    from nsq.testing import ThreadedCluster

    base = tmp_path_factory.mktemp("monitoring")
    common: dict[str, Any] = {"e2e_processing_latency_percentiles": QUANTILES, "max_attempts": MAX_ATTEMPTS}
    cluster = ThreadedCluster(nsqds=1, data_path=str(base / "nsqd"), **common).start()
    prom: Prometheus | None = None
    m: Monitored | None = None
    try:
        wal = cluster.run(cluster.cluster.add_nsqd(storage="wal"))
        assert cluster.lookupd is not None
        jobs = {NSQD_JOB: cluster.nsqd_http_addresses, LOOKUPD_JOB: [cluster.lookupd.http_address]}
        prom = Prometheus(binary, base / "prometheus", jobs, rule_files=[ALERTS])
        prom.start()  # starts up while the channels are made and the messages published
        m = Monitored(cluster, prom, jobs, wal.http_address)
        _traffic(m)
        wait_scraped(m)
        yield m
    finally:
        try:
            for consumer in m.consumers if m is not None else []:
                cluster.run(consumer.close(timeout=0.5))
        finally:
            try:
                if prom is not None:
                    prom.stop()
            finally:
                cluster.stop()
