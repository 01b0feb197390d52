"""``nsq to-http`` (nsq_to_http): real nsqd, real local HTTP endpoints, the command as a subprocess.

Plus unit tests of the pure parts: the ``--mode`` choosers
(:mod:`nsq.client.hostpool`), header parsing, GET escaping, the status line.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import subprocess
import sys

import aiohttp
import pytest
from aiohttp import web

from nsq.apps.status import TimerMetrics
from nsq.apps.to_http import Slots, check_address, fill_get_url, parse_headers
from nsq.client.hostpool import EpsilonGreedy, HostPool, RoundRobin, make_chooser
from tests.cli.conftest import NSQ, free_port, run_nsq

# consumer settings that make requeues and backoff fast
FAST = ["--consumer-opt=default_requeue_delay,100ms", "--consumer-opt=max_backoff_duration,1s",
        "--consumer-opt=backoff_multiplier,100ms"]


# -- helpers ---------------------------------------------------------------------------


class Endpoint:
    """A loopback aiohttp server that records every request.

    ``fail_first``: answer 500 to the first N requests for each body (POST)
    or URL (GET); ``delay``: seconds to wait before answering.
    """

    def __init__(self, fail_first: int = 0, delay: float = 0.0) -> None:
        self.fail_first = fail_first
        self.delay = delay
        self.requests: list[dict] = []
        self.attempts: collections.Counter = collections.Counter()
        self.succeeded: list[bytes] = []
        self.received = asyncio.Event()
        self.active = 0
        self.max_active = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> Endpoint:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        key = body if request.method == "POST" else request.raw_path.encode()
        self.attempts[key] += 1
        self.requests.append({"method": request.method, "raw_path": request.raw_path,
                              "headers": dict(request.headers), "body": body})
        self.received.set()
        if self.attempts[key] <= self.fail_first:
            return web.Response(status=500, text="not yet")
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.active -= 1
        self.succeeded.append(key)
        return web.Response(text="OK")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def endpoints():
    made: list[Endpoint] = []

    async def factory(**kw) -> Endpoint:
        e = await Endpoint(**kw).start()
        made.append(e)
        return e

    yield factory
    for e in made:
        await e.stop()


class ToHTTP:
    """``nsq to-http`` as a subprocess; stderr goes to a file (no pipe to fill)."""

    def __init__(self, args: list[str], log_path) -> None:
        self.args = args
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> ToHTTP:
        self._log = open(self.log_path, "wb")
        self.proc = await asyncio.create_subprocess_exec(
            *NSQ, "to-http", *self.args, stdout=subprocess.DEVNULL, stderr=self._log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), timeout)

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        self._log.close()


@pytest.fixture
async def to_http(tmp_path):
    started: list[ToHTTP] = []

    async def factory(*args: str) -> ToHTTP:
        t = await ToHTTP(list(args), tmp_path / f"to_http{len(started)}.log").start()
        started.append(t)
        return t

    yield factory
    for t in started:
        t.kill()
        if t.proc is not None:
            await t.proc.wait()


async def wait_until(cond, timeout: float = 20.0, what: str = "condition"):
    """Poll ``cond`` (sync or async) until truthy; fail after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = cond()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def http_post(url: str, body: bytes) -> None:
    async with aiohttp.ClientSession() as s, s.post(url, data=body) as r:
        assert r.status == 200, await r.text()


async def mpub(nsqd, topic: str, bodies: list[bytes]) -> None:
    await http_post(f"http://{nsqd.http_address}/mpub?topic={topic}", b"\n".join(bodies))


async def channel_stats(nsqd, topic: str, channel: str) -> dict | None:
    url = f"http://{nsqd.http_address}/stats?format=json&topic={topic}&channel={channel}"
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        stats = await r.json()
    for t in stats.get("topics") or []:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c
    return None


async def drained(nsqd, topic: str, channel: str, count: int) -> dict | None:
    """The channel's stats once ``count`` messages went through and none is left."""
    c = await channel_stats(nsqd, topic, channel)
    if c and c["message_count"] == count and c["depth"] == 0 and c["in_flight_count"] == 0 \
            and c["deferred_count"] == 0:
        return c
    return None


# -- end to end -----------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_post_every_message_with_content_type_headers_and_status(make_nsqd, endpoints, to_http):
    nsqd = await make_nsqd()
    ep = await endpoints()
    bodies = [f"msg-{i}".encode() for i in range(12)]
    await mpub(nsqd, "posts", bodies)
    await http_post(f"http://{nsqd.http_address}/pub?topic=posts", b"bin\x00\xff\nary")
    bodies.append(b"bin\x00\xff\nary")
    t = await to_http("--topic", "posts", "--nsqd-tcp-address", nsqd.tcp_address, "--post", f"{ep.url}/in",
                      "--content-type", "text/plain", "--header", "X-Token: s3cret",
                      "--header", "X-Other:two:parts", "--status-every", "5")
    await wait_until(lambda: len(ep.succeeded) >= len(bodies), what="every message POSTed")
    await wait_until(lambda: drained(nsqd, "posts", "nsq_to_http", len(bodies)), what="channel drained")
    assert await t.stop() == 0
    assert sorted(r["body"] for r in ep.requests) == sorted(bodies)
    for r in ep.requests:
        assert r["method"] == "POST" and r["raw_path"] == "/in"
        assert r["headers"]["Content-Type"] == "text/plain"
        assert r["headers"]["X-Token"] == "s3cret"
        assert r["headers"]["X-Other"] == "two:parts"
        assert r["headers"]["User-Agent"].startswith("nsq_to_http v")
    err = t.stderr()
    assert "[aggregate]: finished 5 - 99th: " in err, err
    assert "use more than 100 status values" in err
    assert "Traceback" not in err


@pytest.mark.timeout(60)
async def test_get_replaces_percent_s_with_query_escaped_body(make_nsqd, endpoints, to_http):
    nsqd = await make_nsqd()
    ep = await endpoints()
    # Go's url.QueryEscape: space -> '+', unreserved -_.~ kept, every other byte %XX
    cases = {b"hello world": "hello+world", b"a&b=c/d?e": "a%26b%3Dc%2Fd%3Fe",
             "ün~*".encode(): "%C3%BCn~%2A", b"plain-_.": "plain-_."}
    await mpub(nsqd, "gets", list(cases))
    t = await to_http("--topic", "gets", "--nsqd-tcp-address", nsqd.tcp_address,
                      "--get", f"{ep.url}/hook?k=1&data=%s&z=%2F", "--header", "Authorization: Bearer x")
    await wait_until(lambda: len(ep.succeeded) >= len(cases), what="every message GOT")
    await wait_until(lambda: drained(nsqd, "gets", "nsq_to_http", len(cases)), what="channel drained")
    assert await t.stop() == 0
    assert sorted(r["raw_path"] for r in ep.requests) == sorted(f"/hook?k=1&data={v}&z=%2F" for v in cases.values())
    for r in ep.requests:
        assert r["method"] == "GET" and r["body"] == b""
        assert r["headers"]["Authorization"] == "Bearer x"


@pytest.mark.timeout(60)
async def test_500_requeues_until_the_endpoint_accepts(make_nsqd, endpoints, to_http):
    nsqd = await make_nsqd()
    ep = await endpoints(fail_first=2)
    bodies = [b"retry-1", b"retry-2", b"retry-3"]
    await mpub(nsqd, "retries", bodies)
    t = await to_http("--topic", "retries", "--nsqd-tcp-address", nsqd.tcp_address, "--post", ep.url, *FAST)
    await wait_until(lambda: sorted(ep.succeeded) == bodies, what="every message accepted at last")
    stats = await wait_until(lambda: drained(nsqd, "retries", "nsq_to_http", len(bodies)), what="channel drained")
    assert await t.stop() == 0
    assert all(ep.attempts[b] == 3 for b in bodies), ep.attempts
    assert stats["requeue_count"] == 2 * len(bodies)
    assert "got status code 500" in t.stderr()


@pytest.mark.timeout(60)
async def test_round_robin_alternates_two_endpoints(make_nsqd, endpoints, to_http):
    nsqd = await make_nsqd()
    a, b = await endpoints(), await endpoints()
    bodies = [f"rr-{i}".encode() for i in range(10)]
    await mpub(nsqd, "rr", bodies)
    t = await to_http("--topic", "rr", "--nsqd-tcp-address", nsqd.tcp_address, "--mode", "round-robin",
                      "--post", a.url, "--post", b.url)
    await wait_until(lambda: len(a.succeeded) + len(b.succeeded) >= len(bodies), what="every message POSTed")
    assert await t.stop() == 0
    assert len(a.requests) == len(b.requests) == 5
    assert sorted(a.succeeded + b.succeeded) == sorted(bodies)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["hostpool", "epsilon-greedy"])
async def test_pool_modes_route_around_a_dead_endpoint(make_nsqd, endpoints, to_http, mode):
    nsqd = await make_nsqd()
    live = await endpoints()
    dead = f"http://127.0.0.1:{free_port()}/"  # nothing listens: connection refused
    bodies = [f"{mode}-{i}".encode() for i in range(8)]
    await mpub(nsqd, "pool", bodies)
    t = await to_http("--topic", "pool", "--nsqd-tcp-address", nsqd.tcp_address, "--mode", mode,
                      "--post", dead, "--post", live.url, *FAST)
    await wait_until(lambda: sorted(live.succeeded) == sorted(bodies), what="every message at the live endpoint")
    await wait_until(lambda: drained(nsqd, "pool", "nsq_to_http", len(bodies)), what="channel drained")
    assert await t.stop() == 0
    err = t.stderr()
    assert "handler returned error" in err  # the first pick is the dead one in both modes
    assert "Traceback" not in err


@pytest.mark.timeout(60)
async def test_n_bounds_concurrent_requests(make_nsqd, endpoints, to_http):
    nsqd = await make_nsqd()
    ep = await endpoints(delay=0.2)
    bodies = [f"n-{i}".encode() for i in range(6)]
    await mpub(nsqd, "bounded", bodies)
    t = await to_http("--topic", "bounded", "--nsqd-tcp-address", nsqd.tcp_address, "--post", ep.url, "-n", "2")
    await wait_until(lambda: sorted(ep.succeeded) == sorted(bodies), what="every message POSTed")
    assert await t.stop() == 0
    assert 1 <= ep.max_active <= 2


@pytest.mark.timeout(60)
async def test_sample_zero_finishes_everything_without_requests(make_nsqd, endpoints, to_http):
    nsqd = await make_nsqd()
    ep = await endpoints()
    await mpub(nsqd, "sampled", [f"s-{i}".encode() for i in range(10)])
    t = await to_http("--topic", "sampled", "--nsqd-tcp-address", nsqd.tcp_address, "--post", ep.url,
                      "--sample", "0")
    stats = await wait_until(lambda: drained(nsqd, "sampled", "nsq_to_http", 10), what="channel drained")
    assert await t.stop() == 0
    assert stats["requeue_count"] == 0
    assert ep.requests == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_signal_lets_the_request_under_way_finish_then_exits_zero(make_nsqd, endpoints, to_http, sig):
    nsqd = await make_nsqd()
    ep = await endpoints(delay=1.0)
    await mpub(nsqd, "slow", [b"slow-1"])
    t = await to_http("--topic", "slow", "--nsqd-tcp-address", nsqd.tcp_address, "--post", ep.url)
    await asyncio.wait_for(ep.received.wait(), 20)
    assert await t.stop(sig) == 0  # SIGTERM/SIGINT while the request is being answered
    assert ep.succeeded == [b"slow-1"]
    # FINed before the connection closed: nothing in flight, nothing requeued
    stats = await wait_until(lambda: drained(nsqd, "slow", "nsq_to_http", 1), what="message finished")
    assert stats["requeue_count"] == 0
    assert "Traceback" not in t.stderr()


def test_help_and_version(script_runner):
    r = script_runner.run(["nsq", "to-http", "--help"])
    assert r.success
    for flag in ("--post", "--get", "--header", "--content-type", "--mode", "-n", "--sample", "--status-every",
                 "--http-client-request-timeout"):
        assert flag in r.stdout
    r = script_runner.run(["nsq", "to-http", "-version"])
    assert r.success and r.stdout.startswith("nsq_to_http v")


BASE = ["--topic", "t", "--nsqd-tcp-address", "127.0.0.1:4150"]


@pytest.mark.parametrize("args, message", [
    (["--nsqd-tcp-address", "127.0.0.1:4150", "--post", "http://h/"], "--topic and --channel are required"),
    (["--topic", "t", "--post", "http://h/"], "--nsqd-tcp-address or --lookupd-http-address required"),
    (BASE, "--get or --post required"),
    (BASE + ["--get", "http://h/?d=%s", "--post", "http://h/"], "use --get or --post not both"),
    (BASE + ["--get", "http://h/"], "invalid GET address - must be a printf string"),
    (BASE + ["--get", "http://h/%s/%s"], "invalid GET address - must be a printf string"),
    (BASE + ["--get", "http://h/?d=%s", "--content-type", "text/plain"], "--content-type only used with --post"),
    (BASE + ["--post", "http://h/", "--content-type", ""], "--content-type requires a value when used"),
    (BASE + ["--post", "http://h/", "--sample", "1.5"], "--sample must be between 0.0 and 1.0"),
    (BASE + ["--post", "http://h/", "--sample=-0.1"], "--sample must be between 0.0 and 1.0"),
    (BASE + ["--post", "http://h/", "--mode", "multicast"], "invalid --mode"),
    (BASE + ["--post", "http://h/", "--header", "NoColon"], "invalid --header"),
    (BASE + ["--post", "http://h/", "--header", ": value"], "invalid --header"),
    (BASE + ["--post", "http://h/", "--header", "Name:"], "invalid --header"),
    (BASE + ["--post", "http://h/", "--header", "Bad Name: v"], "invalid --header"),
    (BASE + ["--post", "http://h/", "-n", "0"], "-n must be >= 1"),
    (BASE + ["--post", "http://h/", "--status-every", "-1"], "--status-every must be >= 0"),
    (BASE + ["--post", "localhost:8080/x"], "invalid --post address"),
    (BASE + ["--post", "http:///nohost"], "invalid --post address"),
    (BASE + ["--post", "http://h/", "--consumer-opt", "bogus,1"], "unknown option"),
    (BASE + ["--post", "http://h/", "--lookupd-http-address", "127.0.0.1:4161"],
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
])
def test_bad_flags_are_one_clean_error_line(script_runner, args, message):
    r = script_runner.run(["nsq", "to-http", *args])
    assert not r.success
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr


def test_unreachable_nsqd_is_a_clean_error():
    dead = f"127.0.0.1:{free_port()}"
    r = run_nsq("to-http", "--topic", "t", "--nsqd-tcp-address", dead, "--post", "http://h/")
    assert r.returncode == 1
    assert r.stderr.endswith(f"Error: cannot connect to {dead}: connection refused\n".encode())
    assert b"Traceback" not in r.stderr


# -- unit: the pure parts ------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_round_robin_starts_at_the_second_host_and_ignores_failures():
    rr = RoundRobin(["a", "b", "c"])
    picks = []
    for _ in range(5):
        host = rr.get()
        rr.mark(host, False)
        picks.append(host)
    assert picks == ["b", "c", "a", "b", "c"]


def test_hostpool_skips_a_failed_host_and_retries_it_with_doubling_delay():
    clock = FakeClock()
    pool = HostPool(["a", "b"], clock=clock)
    assert [pool.get(), pool.get(), pool.get()] == ["a", "b", "a"]
    pool.mark("a", False)
    assert pool.is_dead("a")
    assert [pool.get() for _ in range(3)] == ["b", "b", "b"]
    clock.now += 29
    assert pool.get() == "b"
    clock.now += 2  # past 30 s: "a" gets one try, next retry in 60 s
    assert pool.get() == "a"
    pool.mark("a", False)  # still dead: keeps the doubled delay
    assert [pool.get() for _ in range(2)] == ["b", "b"]
    clock.now += 59
    assert pool.get() == "b"
    clock.now += 2
    assert pool.get() == "a"
    pool.mark("a", True)  # revived
    assert not pool.is_dead("a")
    assert [pool.get(), pool.get()] == ["b", "a"]


def test_hostpool_all_dead_resets_and_returns_the_first():
    pool = HostPool(["a", "b"], clock=FakeClock())
    pool.mark("a", False)
    pool.mark("b", False)
    assert pool.get() == "a"
    assert not pool.is_dead("a") and not pool.is_dead("b")


def test_hostpool_counts_a_repeated_host_once():
    pool = HostPool(["a", "a", "b"], clock=FakeClock())
    assert pool.hosts == ["a", "b"]


def test_epsilon_greedy_prefers_the_faster_host():
    clock = FakeClock()
    pool = EpsilonGreedy(["slow", "fast"], clock=clock, rng=random.Random(7))
    for _ in range(20):
        pool.mark("fast", True, 0.010)
        pool.mark("slow", True, 0.100)
    assert pool.average_ms("fast") == pytest.approx(10.0)
    picks = collections.Counter(pool.get() for _ in range(2000))
    # weights 1/10 vs 1/100: ~90% of exploiting picks go to "fast"
    assert picks["fast"] > 1600 and picks["slow"] > 50, picks
    assert pool.epsilon == pytest.approx(EpsilonGreedy.MIN_EPSILON)


def test_epsilon_greedy_forgets_old_timings_and_skips_dead_hosts():
    clock = FakeClock()
    pool = EpsilonGreedy(["a", "b"], clock=clock, rng=random.Random(1))
    pool.mark("a", True, 0.005)
    clock.now += 299
    assert pool.average_ms("a") > 0
    clock.now += 2  # past the 5 minute window
    assert pool.average_ms("a") == 0
    pool.epsilon = 0.0  # no exploration: weighted picks only
    pool.mark("a", True, 0.001)
    pool.mark("b", True, 0.001)
    pool.mark("a", False)
    assert {pool.get() for _ in range(50)} == {"b"}


def test_make_chooser_modes():
    assert isinstance(make_chooser("round-robin", ["a"]), RoundRobin)
    assert type(make_chooser("hostpool", ["a"])) is HostPool
    assert isinstance(make_chooser("epsilon-greedy", ["a"]), EpsilonGreedy)
    with pytest.raises(ValueError):
        make_chooser("multicast", ["a"])


def test_parse_headers_as_go():
    assert parse_headers(["header1: value1", "header2:value2", " h3 :  v3 "]) == {
        "header1": "value1", "header2": "value2", "h3": "v3"}
    assert parse_headers(["X-A: 1", "X-A: 2"]) == {"X-A": "2"}
    for bad in (["header1:"], [": value2"], [":"], ["novalue"], ["a b: c"], ["X: a\nb"]):
        with pytest.raises(ValueError):
            parse_headers(bad)


def test_fill_get_url_query_escapes_like_go():
    assert fill_get_url("http://h/?d=%s", b"a b&c=d/\xc3\xa9~*+") == "http://h/?d=a+b%26c%3Dd%2F%C3%A9~%2A%2B"
    assert fill_get_url("http://h/%s", b"\x00\xff") == "http://h/%00%FF"


def test_check_address():
    check_address("http://127.0.0.1:8080/x?y=%s", "--get")
    check_address("https://example.com", "--post")
    for bad in ("localhost:8080", "ftp://h/", "http://h/a b", "http://h/\x01", "http:///x"):
        with pytest.raises(ValueError):
            check_address(bad, "--post")


def test_timer_metrics_line_and_percentiles():
    m = TimerMetrics(4, "[aggregate]:")
    assert [m.status(s / 1000) for s in (4, 1, 3)] == [None, None, None]
    assert m.status(0.002) == "[aggregate]: finished 4 - 99th: 4.00ms - 95th: 4.00ms - avg: 2.50ms"
    assert m.status(0.001) is None  # a new window
    ordered = [float(i) for i in range(1, 251)]
    assert TimerMetrics.percentile(99.0, ordered) == 249.0  # index ceil(247.5 + 0.5) = 248
    assert TimerMetrics.percentile(50.0, []) == 0.0
    assert TimerMetrics(0, "x").status(1.0) is None


async def test_slots_bound_and_close():
    slots = Slots(2)
    assert await slots.acquire() and await slots.acquire()
    waiter = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    slots.release()  # handed straight to the waiter
    assert await waiter is True
    late = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    slots.close()
    assert await late is False
    assert await slots.acquire() is False


def test_module_runs_without_a_console_script():
    r = subprocess.run([sys.executable, "-m", "nsq", "to-http", "--version"], capture_output=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith(b"nsq_to_http v")
