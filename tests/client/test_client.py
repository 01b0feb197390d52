"""nsq.client Producer and Consumer against a real in-process nsqd."""

from __future__ import annotations

import asyncio

import pytest

from nsq.client import Consumer, ErrorResponse, Producer


@pytest.fixture
async def nsqd(make_nsqd):
    return await make_nsqd(msg_timeout=2.0)


async def wait_for(pred, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_producer_pipelined_and_errors(nsqd):
    async with Producer(nsqd.tcp_address) as p:
        await asyncio.gather(*(p.publish("t", b"m%d" % i) for i in range(100)))
        await p.multi_publish("t", [b"a", b"b"])
        await p.deferred_publish("t", b"later", 50)
        with pytest.raises(ErrorResponse) as exc:
            await p.publish("t", b"")
        assert exc.value.code == "E_BAD_MESSAGE"
        # the fatal error closed the connection; the next publish reconnects
        await p.publish("t", b"after")
    assert nsqd.topics["t"].message_count == 104


async def test_consumer_finish_requeue_and_rdy_spread(nsqd):
    seen: list[tuple[bytes, int]] = []

    def handler(msg):
        seen.append((msg.body, msg.attempts))
        if msg.body == b"retry" and msg.attempts == 1:
            msg.requeue(0)
            return None
        return True

    c = Consumer("t", "c", handler, [nsqd.tcp_address], max_in_flight=10)
    await c.start()
    async with Producer(nsqd.tcp_address) as p:
        await p.multi_publish("t", [b"x", b"retry", b"y"])
    await wait_for(lambda: len(seen) == 4)
    assert (b"retry", 2) in seen
    ch = nsqd.topics["t"].channels["c"]
    await wait_for(lambda: not ch.in_flight)
    client = next(iter(ch.clients.values()))
    assert client.ready_count == 10
    assert client.finish_count == 3 and client.requeue_count == 1
    await c.close()
    await wait_for(lambda: not ch.clients)


async def test_async_handler_and_max_attempts(nsqd):
    gave_up = []

    async def handler(msg):
        await asyncio.sleep(0)
        return False  # always fail

    c = Consumer("t", "c", handler, [nsqd.tcp_address], max_in_flight=1, max_attempts=2,
                 requeue_delay_ms=0, on_give_up=gave_up.append, backoff_multiplier=0.02)
    await c.start()
    async with Producer(nsqd.tcp_address) as p:
        await p.publish("t", b"doomed")
    await wait_for(lambda: len(gave_up) == 1)
    assert gave_up[0].attempts == 3
    ch = nsqd.topics["t"].channels["c"]
    await wait_for(lambda: not ch.in_flight and ch.depth == 0)
    await c.close()


async def test_consumer_reconnects_after_nsqd_restart(nsqd, make_nsqd):
    got = []
    c = Consumer("t", "c", lambda m: got.append(m.body), [nsqd.tcp_address], max_in_flight=5)
    c.reconnect_max_delay = 1.0
    await c.start()
    port = nsqd.tcp_port
    await nsqd.stop()
    await wait_for(lambda: not c.connections)
    d2 = await make_nsqd(tcp_address=f"127.0.0.1:{port}")
    try:
        await wait_for(lambda: c.connections, timeout=8)
        async with Producer(d2.tcp_address) as p:
            await p.publish("t", b"back")
        await wait_for(lambda: got == [b"back"])
    finally:
        await c.close()


async def test_consumer_start_fails_cleanly_without_nsqd():
    c = Consumer("t", "c", lambda m: None, ["127.0.0.1:1"])
    with pytest.raises(OSError):
        await c.start()
    await c.close()


async def test_disable_auto_response_and_close_waits_for_in_flight(nsqd):
    held = []

    def handler(msg):
        msg.disable_auto_response()
        held.append(msg)
        return True  # ignored: the message stays in flight

    c = Consumer("t", "c", handler, [nsqd.tcp_address], max_in_flight=5)
    await c.start()
    async with Producer(nsqd.tcp_address) as p:
        await p.multi_publish("t", [b"a", b"b"])
    await wait_for(lambda: len(held) == 2)
    ch = nsqd.topics["t"].channels["c"]
    await asyncio.sleep(0.1)
    assert len(ch.in_flight) == 2  # nothing answered yet

    async def answer_later():
        await asyncio.sleep(0.3)
        for m in held:
            m.finish()

    task = asyncio.ensure_future(answer_later())
    await c.close(timeout=5)  # CLS, then waits for the two FINs before closing
    await task
    await wait_for(lambda: not ch.clients)
    assert not ch.in_flight and ch.requeue_count == 0 and ch.timeout_count == 0


async def test_connection_batched_sends_fins_in_one_write(nsqd):
    held = []

    def handler(msg):
        msg.disable_auto_response()
        held.append(msg)

    c = Consumer("t", "c", handler, [nsqd.tcp_address], max_in_flight=50)
    await c.start()
    async with Producer(nsqd.tcp_address) as p:
        await p.multi_publish("t", [b"m%d" % i for i in range(20)])
    await wait_for(lambda: len(held) == 20)
    ch = nsqd.topics["t"].channels["c"]
    conn = next(iter(c.connections.values()))
    sent = []
    transport = conn._transport
    real_write = transport.write

    with conn.batched():
        with conn.batched():  # nested: the outer block writes
            for m in held[:10]:
                m.finish()
        for m in held[10:]:
            m.requeue(0, backoff=False)
        transport.write = sent.append  # nothing reaches the socket inside the block
        await asyncio.sleep(0.05)
        assert sent == [] and len(ch.in_flight) == 20
        transport.write = real_write
    await wait_for(lambda: ch.requeue_count == 10)
    await wait_for(lambda: len(held) == 30)  # the 10 requeued came back
    for m in held[20:]:
        m.finish()
    await wait_for(lambda: not ch.in_flight)
    assert ch.message_count == 20 and ch.requeue_count == 10
    await c.close(timeout=5)
