"""``nsq pub`` given several nsqds goes on with the others when one fails.

:func:`nsq.apps.pub.publish` against in-process nsqds: one that cannot be
reached at start, and one stopped in the middle of a run. Every body is
acknowledged by some nsqd (a body whose connection dropped before its OK
may be stored twice: at least once).
"""

from __future__ import annotations

import socket

import pytest

from nsq.apps.pub import publish


def _dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"127.0.0.1:{port}"


def _stored(*nsqds, topic: str = "t") -> int:
    return sum(d.topics[topic].message_count for d in nsqds if topic in d.topics)


async def test_an_nsqd_down_at_start_is_skipped(make_nsqd):
    live = await make_nsqd()
    bodies = [b"m%d" % i for i in range(50)]
    count = await publish("t", [_dead_address(), live.tcp_address], bodies)
    assert count == 50
    assert _stored(live) == 50


async def test_an_nsqd_lost_mid_run_is_left_for_the_others(make_nsqd):
    a = await make_nsqd()
    b = await make_nsqd()

    async def bodies():
        for i in range(400):
            if i == 100:
                await b.stop()
            yield b"m%d" % i

    count = await publish("t", [a.tcp_address, b.tcp_address], bodies(), retry_after=60)
    assert count == 400
    assert _stored(a, b) >= 400


async def test_every_nsqd_down_fails(make_nsqd):
    with pytest.raises(OSError):
        await publish("t", [_dead_address(), _dead_address()], [b"x"])
