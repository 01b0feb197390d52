"""``nsq to-nsq`` (Go nsq_to_nsq v1.2, https://nsq.io/components/utilities.html#nsq_to_nsq) end to end.

Real parts only: two in-process nsqds (source and destination) on loopback
ports, ``nsq to-nsq`` as a subprocess, messages published over HTTP and
read back from the destination with our Consumer. Every wait polls a
condition with a generous deadline; nothing asserts on speed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from nsq.apps.status import TimerMetrics
from nsq.apps.to_nsq import BACKOFF, DROP, PASS, JSONFilter
from nsq.client import Consumer
from tests.cli.conftest import free_port

DEADLINE = 30.0  # seconds; generous, the machine is shared


# -- helpers ------------------------------------------------------------------------------


class ToNSQ:
    """``python -m nsq to-nsq ...`` as a subprocess, stderr to a file."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, *args: str) -> ToNSQ:
        self._log = open(self.log_path, "wb")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nsq", "to-nsq", *args,
            stdout=asyncio.subprocess.DEVNULL, stderr=self._log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), 20)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            self._log.close()


@pytest.fixture
async def to_nsq(tmp_path):
    started: list[ToNSQ] = []

    async def factory(*args: str) -> ToNSQ:
        t = await ToNSQ(tmp_path / f"to_nsq{len(started)}.log").start(*args)
        started.append(t)
        return t

    yield factory
    for t in started:
        if t.proc is not None and t.proc.returncode is None:
            await t.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def pub(http, d, topic: str, body: bytes) -> None:
    async with http.post(f"http://{d.http_address}/pub", params={"topic": topic}, data=body) as r:
        assert r.status == 200, await r.text()


async def mpub(http, d, topic: str, bodies: list[bytes]) -> None:
    async with http.post(f"http://{d.http_address}/mpub", params={"topic": topic, "binary": "true"},
                         data=len(bodies).to_bytes(4, "big")
                         + b"".join(len(b).to_bytes(4, "big") + b for b in bodies)) as r:
        assert r.status == 200, await r.text()


async def topic_stats(http, d, topic: str) -> dict | None:
    async with http.get(f"http://{d.http_address}/stats", params={"format": "json", "topic": topic}) as r:
        data = json.loads(await r.text())
    for t in data.get("topics") or []:
        if t["topic_name"] == topic:
            return t
    return None


async def channel_stats(http, d, topic: str, channel: str = "nsq_to_nsq") -> dict | None:
    t = await topic_stats(http, d, topic)
    for c in (t or {}).get("channels") or []:
        if c["channel_name"] == channel:
            return c
    return None


async def wait_for(check, what: str, proc: ToNSQ | None = None, deadline: float = DEADLINE):
    """Poll the coroutine function ``check`` until it returns a truthy value."""
    end = time.monotonic() + deadline
    while True:
        value = await check()
        if value:
            return value
        if proc is not None and proc.proc.returncode is not None:
            pytest.fail(f"to-nsq exited ({proc.proc.returncode}) waiting for {what}:\n{proc.log()}")
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}" + (f"\n{proc.log()}" if proc else ""))
        await asyncio.sleep(0.05)


async def wait_subscribed(http, d, topics, proc, channel: str = "nsq_to_nsq") -> None:
    for topic in topics:
        async def subscribed(topic=topic):
            c = await channel_stats(http, d, topic, channel)
            return c is not None and c["client_count"] >= 1

        await wait_for(subscribed, f"to-nsq to subscribe to {topic}", proc)


async def wait_drained(http, d, topic: str, count: int, proc, channel: str = "nsq_to_nsq") -> dict:
    """Until ``count`` messages went through the source channel and every one
    was answered (depth, in flight and deferred all 0)."""
    async def drained():
        c = await channel_stats(http, d, topic, channel)
        if c and c["message_count"] >= count and c["depth"] == 0 and c["in_flight_count"] == 0 \
                and c["deferred_count"] == 0:
            return c
        return None

    return await wait_for(drained, f"{topic}/{channel} to drain", proc)


async def read_bodies(d, topic: str, count: int) -> list[bytes]:
    """The ``count`` messages of ``topic`` on nsqd ``d`` (a fresh channel)."""
    got: list[bytes] = []
    enough = asyncio.Event()

    def handle(msg):
        got.append(msg.body)
        if len(got) >= count:
            enough.set()

    c = Consumer(topic, "check", handle, [d.tcp_address], max_in_flight=100)
    await c.start()
    try:
        await asyncio.wait_for(enough.wait(), DEADLINE)
    finally:
        await c.close(timeout=2)
    return got


async def dest_count(http, d, topic: str) -> int:
    t = await topic_stats(http, d, topic)
    return t["message_count"] if t else 0


# -- forwarding -------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_forwards_every_message_and_drains_source(make_nsqd, to_nsq, http):
    src, dst = await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=events", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address={dst.tcp_address}", "--status-every=5")
    await wait_subscribed(http, src, ["events"], proc)
    bodies = [f"msg-{i}".encode() for i in range(3)]
    for b in bodies:
        await pub(http, src, "events", b)
    more = [f"batch-{i}".encode() for i in range(7)] + [b"\x00binary\xff"]
    await mpub(http, src, "events", more)
    bodies += more

    c = await wait_drained(http, src, "events", len(bodies), proc)
    assert c["requeue_count"] == 0 and c["timeout_count"] == 0
    assert await dest_count(http, dst, "events") == len(bodies)  # final: FIN only after OK
    assert sorted(await read_bodies(dst, "events", len(bodies))) == sorted(bodies)

    # every message was FINed by to-nsq's connection
    async with http.get(f"http://{src.http_address}/stats",
                        params={"format": "json", "topic": "events", "channel": "nsq_to_nsq"}) as r:
        clients = json.loads(await r.text())["topics"][0]["channels"][0]["clients"]
    assert sum(cl["finish_count"] for cl in clients) == len(bodies)
    assert all(cl["user_agent"].startswith("nsq_to_nsq/") for cl in clients)

    assert await proc.stop() == 0
    log = proc.log()
    assert "[aggregate]: finished 5 - 99th:" in log
    assert "Traceback" not in log


@pytest.mark.timeout(60)
async def test_destination_topic_renames_all_topics(make_nsqd, to_nsq, http):
    src, dst = await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=a", "--topic=b", "-channel=relay", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address={dst.tcp_address}", "--destination-topic=all")
    await wait_subscribed(http, src, ["a", "b"], proc, channel="relay")
    await mpub(http, src, "a", [b"a1", b"a2"])
    await mpub(http, src, "b", [b"b1", b"b2", b"b3"])
    await wait_drained(http, src, "a", 2, proc, channel="relay")
    await wait_drained(http, src, "b", 3, proc, channel="relay")
    assert await dest_count(http, dst, "all") == 5
    assert await topic_stats(http, dst, "a") is None and await topic_stats(http, dst, "b") is None
    assert sorted(await read_bodies(dst, "all", 5)) == [b"a1", b"a2", b"b1", b"b2", b"b3"]
    assert await proc.stop() == 0


@pytest.mark.timeout(60)
async def test_round_robin_spreads_over_two_destinations(make_nsqd, to_nsq, http):
    src, d1, d2 = await make_nsqd(), await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=t", f"--nsqd-tcp-address={src.tcp_address}", "--mode=round-robin",
                        f"--destination-nsqd-tcp-address={d1.tcp_address}",
                        f"--destination-nsqd-tcp-address={d2.tcp_address}", "--status-every=4")
    await wait_subscribed(http, src, ["t"], proc)
    bodies = [f"{i}".encode() for i in range(10)]
    await mpub(http, src, "t", bodies)
    await wait_drained(http, src, "t", 10, proc)
    n1, n2 = await dest_count(http, d1, "t"), await dest_count(http, d2, "t")
    assert (n1, n2) == (5, 5)  # strict alternation, every publish succeeded
    got = await read_bodies(d1, "t", 5) + await read_bodies(d2, "t", 5)
    assert sorted(got) == sorted(bodies)
    assert await proc.stop(signal.SIGINT) == 0
    log = proc.log()
    # per-destination status lines as well as the aggregate, with several destinations
    assert f"[{d1.tcp_address}]: finished" in log and "[aggregate]: finished 4" in log


@pytest.mark.timeout(60)
async def test_destination_down_at_first_loses_nothing(make_nsqd, to_nsq, http):
    src = await make_nsqd()
    port = free_port()
    proc = await to_nsq("--topic=t", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address=127.0.0.1:{port}",
                        "--consumer-opt=default_requeue_delay,100ms", "--consumer-opt=max_backoff_duration,1s",
                        "--consumer-opt=backoff_multiplier,100ms", "--consumer-opt=max_attempts,0")
    await wait_subscribed(http, src, ["t"], proc)
    bodies = [f"m{i}".encode() for i in range(5)]
    await mpub(http, src, "t", bodies)

    async def requeued():
        c = await channel_stats(http, src, "t")
        return c and c["requeue_count"] >= 1

    await wait_for(requeued, "a failed publish to requeue", proc)
    dst = await make_nsqd(tcp_address=f"127.0.0.1:{port}")
    c = await wait_drained(http, src, "t", 5, proc)
    assert c["requeue_count"] >= 1
    assert await dest_count(http, dst, "t") == 5
    assert sorted(await read_bodies(dst, "t", 5)) == sorted(bodies)
    assert await proc.stop() == 0
    assert "publish to 127.0.0.1:" in proc.log()


# -- JSON filtering (Go v1.2's results) ---------------------------------------------------


@pytest.mark.timeout(60)
async def test_require_json_field(make_nsqd, to_nsq, http):
    src, dst = await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=t", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address={dst.tcp_address}", "--require-json-field=f")
    await wait_subscribed(http, src, ["t"], proc)
    bodies = [b'{"f": 1}', b'{"g": 1}', b"not json", b"[1]", b"null", b'{"f": null}', b'"f"', b'{"a":{"f":1}}']
    await mpub(http, src, "t", bodies)
    c = await wait_drained(http, src, "t", len(bodies), proc)
    assert c["requeue_count"] == 0  # filtered messages are FINed
    assert await dest_count(http, dst, "t") == 2
    # forwarded bodies are unchanged (no whitelist)
    assert sorted(await read_bodies(dst, "t", 2)) == [b'{"f": 1}', b'{"f": null}']
    assert await proc.stop() == 0
    assert "Unable to decode json: not json" in proc.log()


@pytest.mark.timeout(60)
async def test_require_json_value(make_nsqd, to_nsq, http):
    src, dst = await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=t", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address={dst.tcp_address}",
                        "--require-json-field=f", "--require-json-value=1",
                        "--consumer-opt=max_attempts,2", "--consumer-opt=default_requeue_delay,50ms",
                        "--consumer-opt=backoff_multiplier,50ms", "--consumer-opt=max_backoff_duration,200ms")
    await wait_subscribed(http, src, ["t"], proc)
    passing = [b'{"f":1}', b'{"f":"1"}', b'{"f":1.0,"x":2}', b'{"f":1e0}']
    failing = [b'{"f":"1.0"}', b'{"f":true}', b'{"f":2}', b'{"f":[1]}', b'{"f":null}', b"nope"]
    missing = [b'{"g":1}']  # Go: an error, so REQ with backoff until max_attempts, then given up
    await mpub(http, src, "t", passing + failing + missing)
    c = await wait_drained(http, src, "t", len(passing + failing + missing), proc)
    assert c["requeue_count"] == 2  # attempts 1 and 2 requeued, attempt 3 > max_attempts: FIN
    assert await dest_count(http, dst, "t") == len(passing)
    assert sorted(await read_bodies(dst, "t", len(passing))) == sorted(passing)
    assert await proc.stop() == 0
    log = proc.log()
    assert "missing field to check required value" in log and "giving up" in log


@pytest.mark.timeout(60)
async def test_whitelist_json_fields(make_nsqd, to_nsq, http):
    src, dst = await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=t", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address={dst.tcp_address}",
                        "--whitelist-json-field=c", "--whitelist-json-field=a")
    await wait_subscribed(http, src, ["t"], proc)
    cases = {
        # input -> what Go's json.Marshal of the kept fields gives (keys sorted)
        b'{"c": "<&>", "b": 2, "a": 1}': b'{"a":1,"c":"\\u003c\\u0026\\u003e"}',
        b'{"a": 1.5, "c": [1, 2.0, 1e21, 1e-7, {"z": 0, "y": "\xc3\xa9"}]}':
            b'{"a":1.5,"c":[1,2,1e+21,1e-7,{"y":"\xc3\xa9","z":0}]}',
        b'{"b": 1}': b"{}",
        b"null": b"{}",
        b'{"a": 12345678901234567890}': b'{"a":12345678901234567000}',
        b'{"a": -0.0, "c": "\\u2028\\n"}': b'{"a":0,"c":"\\u2028\\n"}',
    }
    dropped = [b"[1, 2]", b"not json", b'{"a": NaN}', b'"a"']
    await mpub(http, src, "t", list(cases) + dropped)
    c = await wait_drained(http, src, "t", len(cases) + len(dropped), proc)
    assert c["requeue_count"] == 0
    assert await dest_count(http, dst, "t") == len(cases)
    assert sorted(await read_bodies(dst, "t", len(cases))) == sorted(cases.values())
    assert await proc.stop() == 0


def test_json_filter_is_go_v1_2():
    """The filter's verdicts and re-encodings, sans-IO."""
    f = JSONFilter("f", "abc")
    assert f.apply(b'{"f":"abc"}') == (PASS, b'{"f":"abc"}')
    assert f.apply(b'{"f":"abcd"}')[0] == DROP
    assert f.apply(b'{"f":1}')[0] == DROP  # "abc" is not a number: non-strings never match
    assert f.apply(b'{}')[0] == BACKOFF
    assert f.apply(b"null")[0] == BACKOFF  # null is an empty (nil) map in Go
    assert f.apply(b"{")[0] == DROP
    n = JSONFilter("f", "1e2")
    assert n.apply(b'{"f":100}')[0] == PASS and n.apply(b'{"f":"100"}')[0] == DROP
    assert JSONFilter("f", " 1").apply(b'{"f":1}')[0] == DROP  # ParseFloat allows no spaces
    assert JSONFilter("f", "1_0").apply(b'{"f":10}')[0] == DROP  # nor underscores
    assert JSONFilter("f").apply(b'{"f":false}') == (PASS, b'{"f":false}')
    w = JSONFilter(whitelist=["a"])
    assert w.apply(b'{"a":9007199254740993}') == (PASS, b'{"a":9007199254740992}')  # via float64
    assert w.apply(b'{"a":1e400}')[0] == DROP  # out of float64 range: Unmarshal fails
    assert w.apply(b'{"a":"\xff"}') == (PASS, '{"a":"\ufffd"}'.encode())
    assert w.apply(b'{"a":"\\u0007\x7f"}') == (PASS, b'{"a":"\\u0007\x7f"}')
    assert w.apply(b'{"a":1,"a":2}') == (PASS, b'{"a":2}')
    assert JSONFilter().apply(b"anything") == (PASS, b"anything")  # no JSON options: untouched


def test_timer_metrics_line():
    lines: list[str] = []
    m = TimerMetrics(4, "[aggregate]:", lines.append)
    for ms in (4, 1, 3, 2):
        m.status(ms / 1000)
    assert lines == ["[aggregate]: finished 4 - 99th: 4.00ms - 95th: 4.00ms - avg: 2.50ms"]
    m.status(1.0)
    assert len(lines) == 1  # starts over
    off = TimerMetrics(0, "x", lines.append)
    off.status(1.0)
    assert len(lines) == 1


# -- flags and signals --------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    ([], "--topic and --channel are required"),
    (["--topic=t", "--channel="], "--topic and --channel are required"),
    (["--topic=bad topic"], "--topic is invalid"),
    (["--topic=t", "--destination-topic=bad/topic"], "--destination-topic is invalid"),
    (["--topic=t", "--channel=bad channel"], "--channel is invalid"),
    (["--topic=t", "--destination-nsqd-tcp-address=127.0.0.1:1"],
     "--nsqd-tcp-address or --lookupd-http-address required"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--lookupd-http-address=127.0.0.1:2",
      "--destination-nsqd-tcp-address=127.0.0.1:1"], "use --nsqd-tcp-address or --lookupd-http-address not both"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1"], "--destination-nsqd-tcp-address required"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--destination-nsqd-tcp-address=127.0.0.1:1",
      "--mode=random"], "invalid --mode"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--destination-nsqd-tcp-address=127.0.0.1:1",
      "--require-json-value=x"], "--require-json-value requires --require-json-field"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--destination-nsqd-tcp-address=127.0.0.1:1",
      "--consumer-opt=bogus,1"], "unknown option 'bogus'"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--destination-nsqd-tcp-address=127.0.0.1:1",
      "--producer-opt=max_in_flight,x"], "invalid value"),
    (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--destination-nsqd-tcp-address=127.0.0.1:1",
      "--max-in-flight=-1"], "--max-in-flight must be >= 0"),
])
def test_bad_flags_are_clean_errors(script_runner, args, message):
    r = script_runner.run(["nsq", "to-nsq", *args])
    assert not r.success
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_version_and_unreachable_source(script_runner):
    r = script_runner.run(["nsq", "to-nsq", "--version"])
    assert r.success and r.stdout.startswith("nsq_to_nsq v")
    dead = f"127.0.0.1:{free_port()}"
    r = script_runner.run(["nsq", "to-nsq", "-topic", "t", "-nsqd-tcp-address", dead,
                           "-destination-nsqd-tcp-address", "127.0.0.1:1"])
    assert not r.success
    assert f"Error: cannot connect to {dead}: connection refused" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.timeout(60)
async def test_sigterm_exits_zero_and_leaves_nothing_in_flight(make_nsqd, to_nsq, http):
    src, dst = await make_nsqd(), await make_nsqd()
    proc = await to_nsq("--topic=t", f"--nsqd-tcp-address={src.tcp_address}",
                        f"--destination-nsqd-tcp-address={dst.tcp_address}", "--mode=epsilon-greedy")
    await wait_subscribed(http, src, ["t"], proc)
    total = 2000
    await mpub(http, src, "t", [f"{i}".encode() for i in range(total)])

    async def started():
        return await dest_count(http, dst, "t") > 0

    await wait_for(started, "forwarding to start", proc)
    assert await proc.stop(signal.SIGTERM) == 0
    # whatever was consumed before the signal was answered (FIN after publish), the
    # rest is still queued: nothing is lost, nothing left in flight or duplicated
    c = await channel_stats(http, src, "t")
    assert c["in_flight_count"] == 0 and c["client_count"] == 0
    forwarded = await dest_count(http, dst, "t")
    assert forwarded + c["depth"] + c["deferred_count"] == total
    assert "Traceback" not in proc.log()
