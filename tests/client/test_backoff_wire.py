"""Consumer RDY and backoff as a real in-process nsqd sees them.

The RDY count is read from nsqd's side (``ClientV2.ready_count`` of the
subscribed clients, and once through ``GET /stats?format=json``), so these
tests check what actually goes over the wire, not the controller's books.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from nsq.client import Consumer
from nsq.server.nsqd.nsqd import NSQD


@pytest.fixture
async def nsqd(make_nsqd) -> NSQD:
    return await make_nsqd()


@pytest.fixture
async def make_consumer() -> AsyncIterator[Callable[..., Awaitable[Consumer]]]:
    consumers: list[Consumer] = []

    async def factory(nsqds: list[NSQD], handler, **kw: Any) -> Consumer:
        c = Consumer("t", "c", handler, [d.tcp_address for d in nsqds], **kw)
        consumers.append(c)
        await c.start()
        return c

    yield factory
    for c in consumers:
        await c.close()


async def wait_for(pred, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(0.002)


def subscribers(d: NSQD) -> list:
    return [cl for cl in d.clients.values() if cl.channel is not None]


def rdy(d: NSQD) -> int:
    """nsqd's view of the RDY of its single subscriber (-1: none yet)."""
    subs = subscribers(d)
    assert len(subs) <= 1
    return subs[0].ready_count if subs else -1


def publish(d: NSQD, *bodies: bytes) -> None:
    d.get_topic("t").publish(list(bodies))


class Sampler:
    """Samples ``fn()`` every ~1 ms in the background."""

    def __init__(self, fn: Callable[[], int]) -> None:
        self.fn = fn
        self.values: list[int] = []
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.values.append(self.fn())
            await asyncio.sleep(0.001)

    async def stop(self) -> list[int]:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self.values.append(self.fn())
        return self.values


async def test_rdy_starts_at_1_and_reaches_max_in_flight_after_first_message(nsqd, make_consumer):
    got: list[bytes] = []
    await make_consumer([nsqd], lambda m: got.append(m.body), max_in_flight=10)
    await wait_for(lambda: rdy(nsqd) >= 0, what="subscribed")
    await wait_for(lambda: rdy(nsqd) != 0, what="first RDY")
    assert rdy(nsqd) == 1
    publish(nsqd, b"first")
    await wait_for(lambda: got == [b"first"], what="first message")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json") as r:
            stats = await r.json()
    (client,) = [cl for t in stats["topics"] for ch in t["channels"] for cl in ch["clients"]]
    assert client["ready_count"] == 10


async def test_failure_backs_off_with_rdy_0_then_tests_the_waters_then_recovers(nsqd, make_consumer):
    failed_at: list[float] = []

    def handler(m):
        if m.body.startswith(b"bad"):
            failed_at.append(time.monotonic())
            return False
        return True

    # REQ delay 60 s: the failed message stays deferred and does not come back
    c = await make_consumer([nsqd], handler, max_in_flight=10, backoff_multiplier=0.1,
                            requeue_delay_ms=60_000)
    publish(nsqd, b"ok")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10")

    publish(nsqd, b"bad")
    await wait_for(lambda: failed_at, what="failure")
    await wait_for(lambda: rdy(nsqd) == 0, timeout=0.15, what="RDY 0 during backoff")
    assert c.rdy.backoff_level == 1 and c.rdy.in_backoff_wait
    await wait_for(lambda: rdy(nsqd) == 1, timeout=2.0, what="RDY 1 after backoff")
    # level 1 waits backoff_multiplier * 2 = 0.2 s
    assert time.monotonic() - failed_at[0] >= 0.18
    assert c.rdy.backoff_level == 1 and not c.rdy.in_backoff_wait

    publish(nsqd, b"good")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10 after a success")
    assert not c.rdy.in_backoff()
    assert subscribers(nsqd)[0].requeue_count == 1


async def test_repeated_failures_deepen_backoff_and_each_success_steps_back(nsqd, make_consumer):
    c = await make_consumer([nsqd], lambda m: not m.body.startswith(b"bad"), max_in_flight=10,
                            backoff_multiplier=0.05, requeue_delay_ms=60_000)
    publish(nsqd, b"ok")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10")

    async def zero_then_one() -> float:
        await wait_for(lambda: rdy(nsqd) == 0, timeout=0.08, what="RDY 0")
        t0 = time.monotonic()
        await wait_for(lambda: rdy(nsqd) == 1, timeout=2.0, what="RDY 1")
        return time.monotonic() - t0

    publish(nsqd, b"bad1")
    first = await zero_then_one()  # level 1: 0.1 s
    publish(nsqd, b"bad2")  # goes to the one connection testing the waters
    second = await zero_then_one()  # level 2: 0.2 s
    assert c.rdy.backoff_level == 2
    assert second >= 0.17 and second > first
    publish(nsqd, b"good1")  # level 2 -> 1: another (shorter) wait at RDY 0
    third = await zero_then_one()
    assert c.rdy.backoff_level == 1
    assert 0.08 <= third < second
    publish(nsqd, b"good2")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10 after recovery")
    assert c.rdy.backoff_level == 0


async def test_max_backoff_duration_0_disables_backoff(nsqd, make_consumer):
    c = await make_consumer([nsqd], lambda m: m.body == b"ok", max_in_flight=10, backoff_multiplier=0.1,
                            max_backoff_duration=0, requeue_delay_ms=60_000)
    publish(nsqd, b"ok")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10")
    sampler = Sampler(lambda: rdy(nsqd))
    publish(nsqd, b"bad1", b"bad2", b"bad3")
    await wait_for(lambda: subscribers(nsqd)[0].requeue_count == 3, what="3 requeues")
    await asyncio.sleep(0.05)  # a backoff would have sent RDY 0 at once
    values = await sampler.stop()
    assert set(values) == {10}
    assert c.rdy.backoff_level == 0 and not c.rdy.in_backoff()


async def test_requeue_without_backoff_keeps_rdy(nsqd, make_consumer):
    def handler(m):
        if m.body == b"again":
            m.requeue(60_000, backoff=False)

    c = await make_consumer([nsqd], handler, max_in_flight=10, backoff_multiplier=0.1)
    publish(nsqd, b"ok")
    await wait_for(lambda: rdy(nsqd) == 10, what="RDY 10")
    sampler = Sampler(lambda: rdy(nsqd))
    publish(nsqd, b"again", b"again")
    await wait_for(lambda: subscribers(nsqd)[0].requeue_count == 2, what="2 requeues")
    await asyncio.sleep(0.05)
    values = await sampler.stop()
    assert set(values) == {10}
    assert c.rdy.backoff_level == 0 and not c.rdy.in_backoff()
    assert c.requeue_count == 2


async def test_two_nsqds_max_in_flight_1_never_exceeds_1_and_all_messages_arrive(make_nsqd, make_consumer):
    d1, d2 = await make_nsqd(), await make_nsqd()
    got: list[bytes] = []
    c = await make_consumer([d1, d2], lambda m: got.append(m.body), max_in_flight=1, low_rdy_idle_timeout=0.2)
    await wait_for(lambda: len(c.connections) == 2 and len(subscribers(d1)) == len(subscribers(d2)) == 1,
                   what="both subscribed")
    await wait_for(lambda: rdy(d1) + rdy(d2) == 1, what="first RDY")
    assert sorted([rdy(d1), rdy(d2)]) == [0, 1]  # only one connection can start
    sampler = Sampler(lambda: (rdy(d1), rdy(d2)))
    expected = set()
    for i in range(5):
        for n, d in ((1, d1), (2, d2)):
            body = b"%d-%d" % (n, i)
            expected.add(body)
            publish(d, body)
    # Consumer._tick_loop ticks every 5 s; drive the controller's tick() by
    # hand every 50 ms instead so idle RDY moves within the test's time
    deadline = time.monotonic() + 10
    while set(got) != expected:
        assert time.monotonic() < deadline, f"only got {sorted(got)}"
        c._apply(c.rdy.tick(time.monotonic()))
        await asyncio.sleep(0.05)
    values = await sampler.stop()
    assert max(a + b for a, b in values) == 1
    # RDY really moved: each nsqd had the single RDY at some point
    assert (1, 0) in values and (0, 1) in values
    assert len(got) == 10  # each exactly once
    assert c.rdy.total_rdy <= 1
