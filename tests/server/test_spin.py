"""--spin-before-sleep: the event loop polls instead of sleeping for a
window after each read, and stops when it lapses (nsq/server/spin.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from nsq.server.nsqd.options import ConfigError, NSQDOptions, validate
from nsq.server.spin import Spinner

from .helpers import Conn, c


async def test_spinner_polls_for_its_window_then_stops():
    loop = asyncio.get_running_loop()
    spinner = Spinner(loop, 0.02, when_idle_cpu=False)
    spinner.touch(loop.time())
    await asyncio.sleep(0.005)
    assert spinner.running
    spinning = spinner.turns
    assert spinning > 10  # the loop kept turning: no sleep in epoll
    await asyncio.sleep(0.1)
    assert not spinner.running
    stopped = spinner.turns
    await asyncio.sleep(0.1)
    assert spinner.turns == stopped  # idle: no turns, no CPU


async def test_each_touch_restarts_the_window():
    loop = asyncio.get_running_loop()
    spinner = Spinner(loop, 0.5, when_idle_cpu=False)
    for _ in range(4):
        touched = loop.time()
        spinner.touch(touched)
        await asyncio.sleep(0.02)
        if loop.time() - touched < 0.5:  # a loaded machine may oversleep the window
            assert spinner.running
    deadline = loop.time() + 10
    while spinner.running:  # it lapses once nobody touches it
        assert loop.time() < deadline, "still spinning 10 s after the last touch"
        await asyncio.sleep(0.02)


async def test_no_window_while_every_core_is_busy():
    """With as many busy processes as cores, a read starts no window (the
    spinning would take a core from them); once they stop, it does."""
    loop = asyncio.get_running_loop()
    spinner = Spinner(loop, 0.5)
    cores = len(os.sched_getaffinity(0))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        deadline = loop.time() + 30
        while True:  # the burners are running: the next read after a check starts nothing
            await asyncio.sleep(Spinner.CHECK_EVERY)
            spinner.touch(loop.time())
            if not spinner.running:
                break
            assert loop.time() < deadline, "spinning while every core is busy"
            while spinner.running:
                await asyncio.sleep(0.05)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    deadline = loop.time() + 30
    while not spinner.running:  # this test's process alone (a loaded machine may take a while)
        assert loop.time() < deadline, "no window with the cores idle again"
        await asyncio.sleep(Spinner.CHECK_EVERY)
        spinner.touch(loop.time())
    spinner.close()


async def test_a_peer_waiting_for_the_answer_is_not_counted_busy():
    """With one busy process fewer than cores (this test's is the last), a
    read starts no window, unless the spinner leaves one peer out of the
    count (the lone producer waiting for its OK); with every core busy,
    not even then."""
    loop = asyncio.get_running_loop()
    plain, peered = Spinner(loop, 0.05), Spinner(loop, 0.05, peers=1)
    cores = os.cpu_count() or 1  # the spinner's count, as the kernel's runnable count is machine-wide

    async def windows(spinner: Spinner, want: bool) -> None:
        deadline = loop.time() + 30
        while True:  # a reading is kept CHECK_EVERY: touch after it, until the burners are counted
            await asyncio.sleep(Spinner.CHECK_EVERY)
            spinner.touch(loop.time())
            if spinner.running == want:
                break
            assert loop.time() < deadline, f"spinning={spinner.running} with {len(burners)} busy processes"
            while spinner.running:
                await asyncio.sleep(0.02)
        while spinner.running:
            await asyncio.sleep(0.02)

    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores - 1)]
    try:
        await windows(plain, False)
        await windows(peered, True)
        burners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        await windows(peered, False)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        plain.close()
        peered.close()


def test_spinner_needs_a_positive_window():
    with pytest.raises(ValueError):
        Spinner(asyncio.new_event_loop(), 0)


@pytest.mark.parametrize("value", [-0.001, 1.5])
def test_spin_before_sleep_bounds(value):
    with pytest.raises(ConfigError, match="--spin-before-sleep"):
        validate(NSQDOptions(spin_before_sleep=value))


async def test_nsqd_with_spin_before_sleep_serves_and_goes_idle(make_nsqd):
    d = await make_nsqd(spin_before_sleep=0.2)
    assert d.spinner is not None
    d.spinner.close()  # a window at every read, whatever else this machine runs
    sub = await Conn.open(d.tcp_port)
    pub = await Conn.open(d.tcp_port)
    try:
        await sub.subscribe("t", "ch", 100)
        for i in range(20):
            await pub.publish("t", b"m%d" % i)
            assert d.spinner.running  # the read just now started a window
        got = [(await sub.read_message()).body for _ in range(20)]
        assert got == [b"m%d" % i for i in range(20)]
        await asyncio.sleep(0.5)
        assert not d.spinner.running
    finally:
        await sub.aclose()
        await pub.aclose()


async def test_nsqd_without_the_flag_has_no_spinner(make_nsqd):
    d = await make_nsqd()
    assert d.spinner is None
    conn = await Conn.open(d.tcp_port)
    try:
        await conn.send(c.nop())
        await conn.expect_nothing(0.05)
    finally:
        await conn.aclose()


class _Recording(Spinner):
    """A Spinner that records the windows :meth:`Spinner.touch_alone` starts."""

    __slots__ = ("touched",)

    def touch(self, now: float) -> None:
        self.touched.append(now)


async def test_touch_alone_starts_windows_only_for_a_lone_source():
    spinner = _Recording(asyncio.get_running_loop(), 10e-6, when_idle_cpu=False)
    spinner.touched = []
    a, b = object(), object()
    spinner.touch_alone(a, 1.0)
    spinner.touch_alone(a, 1.0002)  # the same producer again: still alone
    assert spinner.touched == [1.0, 1.0002]
    spinner.touch_alone(b, 1.0004)  # another producer within 1 ms: shared, no window
    spinner.touch_alone(a, 1.0006)
    spinner.touch_alone(a, 1.0012)  # within 1 ms of the last sharing
    assert spinner.touched == [1.0, 1.0002]
    spinner.touch_alone(a, 1.0030)  # 1 ms of only this producer: alone again
    assert spinner.touched == [1.0, 1.0002, 1.0030]
    spinner.touch_alone(b, 1.0100)  # another producer, but long after: alone too
    assert spinner.touched[-1] == 1.0100


async def test_a_lone_producers_pub_starts_a_window_and_an_mpub_does_not(make_nsqd):
    d = await make_nsqd()
    assert d.spinner is None and d.pub_spinner is not None
    d.pub_spinner.close()  # a window at every lone PUB, whatever else this machine runs
    conn = await Conn.open(d.tcp_port)
    try:
        await conn.send(c.mpub("t", [b"a", b"b"]))
        await conn.expect_ok()
        assert d.pub_spinner.turns == 0
        for i in range(5):
            before = d.pub_spinner.turns
            await conn.publish("t", b"m%d" % i)
            assert d.pub_spinner.turns > before  # this PUB's read started a window (one turn at least)
    finally:
        await conn.aclose()


async def test_spin_after_lone_pub_off(make_nsqd):
    d = await make_nsqd(spin_after_lone_pub=0)
    assert d.pub_spinner is None
    with pytest.raises(ConfigError, match="--spin-after-lone-pub"):
        validate(NSQDOptions(spin_after_lone_pub=2))
