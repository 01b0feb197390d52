"""Topic and Channel called directly, as Go's nsqd/topic_test.go and
channel_test.go do: a real in-process nsqd holds them, no sockets. A small
consumer object records what a channel sends it (it has the members a
channel uses of a V2 client)."""

from __future__ import annotations

import pytest

import time
from typing import NamedTuple

from nsq.server.nsqd.tcp.identify import Negotiated
from nsq.server.nsqd.storage.message import ATTEMPTS, BODY, ID
from nsq.server.nsqd.delivery.topic import Topic

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages



class Delivered(NamedTuple):
    """What a message frame a channel sent carries."""

    id: bytes
    body: bytes
    attempts: int


class Consumer:
    """The members of a V2 client a channel uses; records message frames."""

    def __init__(self, rdy: int, msg_timeout: float = 60.0) -> None:
        self.ready_count = rdy
        self.in_flight_count = 0
        self.negotiated = Negotiated(client_id="", hostname="", user_agent="", heartbeat_interval=30.0,
                                     output_buffer_timeout=0.25, output_buffer_size=16384, sample_rate=0,
                                     msg_timeout=msg_timeout)
        self.closing = False
        self.write_paused = False
        self.out_full = False
        self.received = []
        self.timed_out = 0
        self.id = id(self)

    def send_messages(self, msgs) -> int:
        self.received += [Delivered(m[ID], m[BODY], m[ATTEMPTS]) for m in msgs]
        self.in_flight_count += len(msgs)
        return len(msgs)

    def timed_out_message(self) -> None:
        self.timed_out += 1
        self.in_flight_count -= 1

    def close(self) -> None:
        self.closing = True


def subscribe(topic: Topic, channel_name: str, rdy: int, **kw) -> tuple:
    channel = topic.get_channel(channel_name)
    consumer = Consumer(rdy, **kw)
    channel.add_client(consumer)
    channel.client_ready(consumer)
    return channel, consumer


def finish(channel, consumer, msgs) -> None:
    for m in msgs:
        channel.finish(consumer, m.id)
        consumer.in_flight_count -= 1


async def test_every_channel_gets_every_message_sharing_bodies(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    a, b = topic.get_channel("a"), topic.get_channel("b")
    topic.publish([b"one", b"two"])
    assert [e[1] for e in a.queue] == [b"one", b"two"] == [e[1] for e in b.queue]
    assert a.queue[0] is b.queue[0]  # one entry, shared
    assert (topic.message_count, a.message_count, b.message_count) == (2, 2, 2)


async def test_topic_holds_messages_until_a_channel_appears(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    topic.publish([b"early"])
    assert topic.depth == 1
    channel = topic.get_channel("c")
    assert topic.depth == 0 and [e[1] for e in channel.queue] == [b"early"]


async def test_ready_consumer_gets_messages_up_to_rdy(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    channel, consumer = subscribe(topic, "c", rdy=2)
    topic.publish([b"1", b"2", b"3"])
    assert [m.body for m in consumer.received] == [b"1", b"2"]
    assert [m.attempts for m in consumer.received] == [1, 1]
    assert len(channel.in_flight) == 2 and channel.depth == 1
    finish(channel, consumer, consumer.received[:1])
    channel.client_ready(consumer)
    assert [m.body for m in consumer.received] == [b"1", b"2", b"3"]


async def test_in_flight_timeout_requeues_with_attempts(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    channel, consumer = subscribe(topic, "c", rdy=1, msg_timeout=1.0)
    topic.publish([b"x"])
    consumer.ready_count = 0  # take nothing more for now
    channel.process_timeouts(time.monotonic() + 2.0)
    assert consumer.timed_out == 1 and channel.timeout_count == 1 and not channel.in_flight
    assert channel.depth == 1 and channel.queue[0][3] == 1  # attempts kept
    consumer.ready_count = 1
    channel.client_ready(consumer)
    assert consumer.received[-1].attempts == 2


async def test_requeue_with_delay_is_deferred_then_released(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    channel, consumer = subscribe(topic, "c", rdy=1)
    topic.publish([b"x"])
    msg = consumer.received[0]
    channel.requeue(consumer, msg.id, 500)
    consumer.in_flight_count -= 1
    assert msg.id in channel.deferred and channel.requeue_count == 1 and not channel.queue
    channel.process_timeouts(time.monotonic() + 0.1)
    assert msg.id in channel.deferred
    consumer.ready_count = 0
    channel.process_timeouts(time.monotonic() + 1.0)
    assert not channel.deferred and channel.depth == 1


async def test_finished_messages_leave_the_timeout_heap(make_nsqd):
    """FIN removes a message from in_flight at once; its heap entry goes at
    the next compaction, long before --msg-timeout (memory stays flat)."""
    d = await make_nsqd()
    topic = d.get_topic("t")
    channel, consumer = subscribe(topic, "c", rdy=10)
    for i in range(3000):
        topic.publish([b"m%d" % i])
        finish(channel, consumer, consumer.received[-1:])
        channel.client_ready(consumer)
    assert len(consumer.received) == 3000 and not channel.in_flight
    refs = sum(len(batch) for _, _, batch in channel._in_flight_pq)
    assert refs <= channel.PQ_SLACK + 1, refs


async def test_paused_channel_queues_and_unpause_delivers(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    channel, consumer = subscribe(topic, "c", rdy=5)
    channel.pause()
    topic.publish([b"a", b"b"])
    assert not consumer.received and channel.depth == 2
    channel.unpause()
    assert [m.body for m in consumer.received] == [b"a", b"b"]


async def test_empty_drops_queued_in_flight_and_deferred(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t")
    channel, consumer = subscribe(topic, "c", rdy=1)
    topic.publish([b"in flight", b"queued"])
    topic.publish([b"later"], defer_ms=60_000)
    assert len(channel.in_flight) == 1 and channel.depth == 1 and len(channel.deferred) == 1
    channel.empty()
    assert not channel.in_flight and channel.depth == 0 and not channel.deferred
    assert consumer.in_flight_count == 0


async def test_ephemeral_channel_goes_with_its_last_consumer_and_topic_with_it(make_nsqd):
    d = await make_nsqd()
    topic = d.get_topic("t#ephemeral")
    channel, consumer = subscribe(topic, "c#ephemeral", rdy=1)
    channel.remove_client(consumer)
    assert channel.deleted and "t#ephemeral" not in d.topics
