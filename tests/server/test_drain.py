"""Graceful drain (beyond Go nsqd): --drain-timeout, POST /drain, a second
SIGTERM. Real daemons, raw V2 connections, HTTP, subprocesses for signals."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from .helpers import HTTP, Conn

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages



async def test_drain_refuses_publishes_stops_delivery_and_waits_for_fin(make_nsqd, session):
    d = await make_nsqd()
    http = HTTP(session, d.http_port)
    prod = await Conn.open(d.tcp_port)
    for i in range(4):
        await prod.publish("t", b"m%d" % i)
    cons = await Conn.open(d.tcp_port)
    await cons.subscribe("t", "c", rdy=2)
    held = [await cons.read_message() for _ in range(2)]
    drain = asyncio.ensure_future(d.drain(10.0))
    await asyncio.sleep(0.2)
    assert not drain.done()
    assert await http.get("/ping") == (503, b"DRAINING")
    status, body = await http.post("/pub", b"x", topic="t")
    assert (status, json.loads(body)) == (503, {"message": "DRAINING"})
    await prod.send(b"PUB t\n", (1).to_bytes(4, "big"), b"x")
    assert (await prod.expect_error()) == b"E_PUB_FAILED PUB failed draining"
    with pytest.raises(OSError):
        await asyncio.wait_for(asyncio.open_connection("127.0.0.1", d.tcp_port), 1)
    for m in held:  # FINs free RDY, but nothing new is delivered while draining
        await cons.send(b"FIN " + m.id + b"\n")
    assert await asyncio.wait_for(drain, 2) is True
    await cons.expect_nothing(0.3)
    assert d.get_topic("t").channels["c"].depth == 2


async def test_timeout_bounds_the_wait_and_in_flight_survives_the_restart(make_nsqd, tmp_path):
    d = await make_nsqd(data_path=str(tmp_path))
    prod = await Conn.open(d.tcp_port)
    await prod.publish("t", b"slow")
    cons = await Conn.open(d.tcp_port)
    await cons.subscribe("t", "c", rdy=1)
    msg = await cons.read_message()
    started = time.monotonic()
    assert await d.drain(0.5) is False  # never finished
    assert 0.45 < time.monotonic() - started < 2.0
    await d.stop()
    d = await make_nsqd(data_path=str(tmp_path))
    again = await Conn.open(d.tcp_port)
    await again.subscribe("t", "c", rdy=1)
    got = await again.read_message()
    assert got.id == msg.id and got.body == b"slow"


async def test_drain_unregisters_from_lookupd(lookupd, make_nsqd, session):
    d = await make_nsqd(nsqlookupd_tcp_addresses=[lookupd.tcp_address])
    d.get_topic("t")
    lookup = HTTP(session, lookupd.http_port)

    async def producers() -> int:
        status, body = await lookup.get("/lookup", topic="t")
        return len(json.loads(body).get("producers") or []) if status == 200 else 0

    deadline = time.monotonic() + 5
    while await producers() == 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await d.drain(0.1)
    deadline = time.monotonic() + 5
    while await producers():
        assert time.monotonic() < deadline, "still registered while draining"
        await asyncio.sleep(0.05)


def _ping(http_port: int) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/ping", timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_sigterm_drains_slow_consumers_without_redelivery(tmp_path):
    """SIGTERM with --drain-timeout: a consumer that takes its time finishes
    everything it holds, nsqd exits 0, and after a restart nothing is
    delivered again."""
    from tests.reliability.daemons import NSQDDaemon
    from tests.reliability.v2sock import V2Socket

    flags = (f"--data-path={tmp_path}", "--drain-timeout=10s")
    d = NSQDDaemon(*flags)
    pub = V2Socket(d.tcp_port)
    for i in range(5):
        assert pub.pub("t", b"%d" % i) == (0, b"OK")
    cons = V2Socket(d.tcp_port)
    cons.sub("t", "c", 3)
    held = [cons.read_message() for _ in range(3)]
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert d.alive() and _ping(d.http_port) == (503, b"DRAINING")
    for msg_id, _, _ in held:  # slowly
        time.sleep(0.2)
        cons.fin(msg_id)
    assert d.proc.wait(10) == 0
    assert d.log_count("NSQ: drained") == 1
    d.stop()
    d = NSQDDaemon(*flags)
    try:
        again = V2Socket(d.tcp_port, timeout=1.0)
        again.sub("t", "c", 10)
        bodies = set()
        try:
            while True:
                msg_id, _, body = again.read_message()
                bodies.add(body)
                again.fin(msg_id)
        except (TimeoutError, OSError):
            pass
        assert bodies == {b"%d" % i for i in range(5)} - {b for _, _, b in held}  # the rest, once
    finally:
        d.stop()


def test_second_sigterm_ends_the_wait_and_post_drain_exits(tmp_path):
    from tests.reliability.daemons import NSQDDaemon
    from tests.reliability.v2sock import V2Socket

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()  # nsqd refuses a data path that does not exist, as Go
    d = NSQDDaemon(f"--data-path={tmp_path / 'a'}", "--drain-timeout=60s")
    try:
        V2Socket(d.tcp_port).pub("t", b"x")
        cons = V2Socket(d.tcp_port)
        cons.sub("t", "c", 1)
        cons.read_message()  # held, never finished
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert d.alive()
        started = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(10) == 0 and time.monotonic() - started < 5
    finally:
        d.stop()
    d = NSQDDaemon(f"--data-path={tmp_path / 'b'}", "--drain-timeout=5s")
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{d.http_port}/drain", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.read() == b"OK"
        assert d.proc.wait(10) == 0
    finally:
        d.stop()
