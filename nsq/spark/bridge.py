"""A blocking face on the asyncio :class:`~nsq.client.Consumer`.

The Spark stream reader is synchronous and lives in one Python process on
the driver (Spark's streaming source runner), while the client is asyncio.
:class:`ConsumerBridge` runs the consumers on an event loop in a daemon
thread it owns. Messages are held, not answered: each one's auto response
is disabled and it waits in :attr:`ConsumerBridge.incoming` until the
reader FINs or REQs it (:meth:`~ConsumerBridge.finish`,
:meth:`~ConsumerBridge.requeue`, both safe from any thread). A message
held long is TOUCHed about every third of the in-flight timeout, so a slow
micro-batch does not make nsqd hand it to someone else
(up to nsqd's ``--max-msg-timeout``, after which nsqd times it out anyway).
The FINs (REQs, TOUCHes) of one call go out as one socket write per
connection.

``connections`` consumers run side by side, each with one connection per
nsqd, sharing ``max_in_flight``: nsqd caps one connection's RDY at its
``--max-rdy-count`` (2500 by default,
https://nsq.io/components/nsqd.html), so this is how the source can hold
more than that from one nsqd. By default there are just enough of them
for ``max_in_flight`` at that cap over the nsqds known at start
(:func:`auto_connections`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from typing import Any, Iterator

from nsq.client import Consumer, Message
from nsq.protocol.v2 import Limits

__all__ = ["ConsumerBridge"]

log = logging.getLogger("nsq.spark")

#: nsqd's default --msg-timeout, seconds (used to pace TOUCH when none is asked for)
_NSQD_MSG_TIMEOUT = 60.0
#: nsqd's default --max-rdy-count: the most one connection may have in flight
NSQD_MAX_RDY_COUNT = Limits().max_rdy_count


def auto_connections(max_in_flight: int, nsqds: int) -> int:
    """Consumers needed to hold ``max_in_flight`` messages from ``nsqds``
    nsqds (at least 1) when each connection holds at most
    :data:`NSQD_MAX_RDY_COUNT`: ``ceil(max_in_flight / (nsqds * 2500))``,
    at least 1."""
    per_consumer = max(1, nsqds) * NSQD_MAX_RDY_COUNT
    return max(1, -(-max_in_flight // per_consumer))


class ConsumerBridge:
    """Consumers of ``topic``/``channel`` on a background event loop.

    Args:
        topic, channel: what to subscribe to.
        nsqd_tcp_addresses, lookupd_http_addresses: where (as
            :class:`~nsq.client.Consumer`).
        max_in_flight: messages held at most, over every connection.
        connections: consumers (so connections per nsqd) to run; None:
            :func:`auto_connections` over the nsqds given and those the
            lookupds list for ``topic`` at start.
        identify: IDENTIFY fields (``msg_timeout`` ms, ``tls_v1`` ...).
        consumer_kwargs: further :class:`~nsq.client.Consumer` arguments
            (``tls_context``, ``auth_secret``, ``max_attempts`` ...).
        msg_timeout: the in-flight timeout in force, seconds (None: nsqd's
            default, 60 s); TOUCH runs every third of it.

    Attributes:
        incoming: received messages not yet answered, in arrival order; the
            reader pops from the left (a deque: appends and pops are safe
            across threads).
        last_arrival: ``time.monotonic()`` of the latest message (0.0: none).
        received: messages received so far.
    """

    def __init__(self, topic: str, channel: str, nsqd_tcp_addresses: tuple[str, ...] = (),
                 lookupd_http_addresses: tuple[str, ...] = (), max_in_flight: int = 2500,
                 connections: int | None = 1,
                 identify: dict[str, Any] | None = None, consumer_kwargs: dict[str, Any] | None = None,
                 msg_timeout: float | None = None) -> None:
        self.topic = topic
        self.channel = channel
        self.nsqd_tcp_addresses = tuple(nsqd_tcp_addresses)
        self.lookupd_http_addresses = tuple(lookupd_http_addresses)
        self.max_in_flight = max_in_flight
        self.connections = None if connections is None else max(1, min(connections, max_in_flight))
        self.identify = dict(identify or {})
        self.consumer_kwargs = dict(consumer_kwargs or {})
        self.touch_interval = (msg_timeout or _NSQD_MSG_TIMEOUT) / 3.0
        self.incoming: collections.deque[Message] = collections.deque()
        self.last_arrival = 0.0
        self.received = 0
        #: held message -> monotonic time it arrived or was last TOUCHed
        self._held: dict[Message, float] = {}
        self._consumers: list[Consumer] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._touch_task: asyncio.Task | None = None
        self._lookupd_client: Any = None
        self._close_future: Any = None
        self._closing = False
        self.closed = False

    # -- lifecycle (caller's thread) -------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the loop thread and the consumers; returns once they are
        connected (or, with lookupds, once the first query is done).

        Raises:
            OSError / ErrorResponse / TimeoutError: no nsqd could be reached
                and no lookupd is configured (as :meth:`Consumer.start`).
            ClientConfigError: invalid names or options.
        """
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"nsq-spark-{self.topic}", daemon=True)
        self._thread.start()
        ready.wait()
        try:
            self._call(self._start(), timeout)
        except BaseException:
            self.close(timeout=2.0)
            raise

    def _call(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def finish(self, messages: list[Message]) -> None:
        """FIN ``messages`` (on the connections they came from); returns at
        once, the FINs are written by the loop thread."""
        if messages and self._loop is not None and not self.closed:
            self._loop.call_soon_threadsafe(self._answer, messages, None)

    def requeue(self, messages: list[Message], delay_ms: int = 0) -> None:
        """REQ ``messages`` with ``delay_ms`` (no backoff: they were not
        failures); returns at once."""
        if messages and self._loop is not None and not self.closed:
            self._loop.call_soon_threadsafe(self._answer, messages, delay_ms)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the flow (RDY 0), REQ (delay 0) every message still held or
        arriving meanwhile, CLS every connection, wait up to ``timeout`` s
        for nsqd's answers, close, and end the loop thread.

        Idempotent; a call made while another is running (a signal handler
        on the same thread) waits for that one to finish.
        """
        loop = self._loop
        if loop is None:
            self.closed = True
            return
        if self._close_future is None:
            self._close_future = asyncio.run_coroutine_threadsafe(self._close(timeout), loop)
        try:
            self._close_future.result(timeout + 5.0)
        except Exception as exc:  # the loop is going away regardless
            log.warning("nsq source: close: %r", exc)
        finally:
            if not self.closed:
                self.closed = True
                loop.call_soon_threadsafe(loop.stop)
                if self._thread is not None:
                    self._thread.join(timeout)

    # -- on the loop thread ----------------------------------------------------------

    async def _start(self) -> None:
        if self.lookupd_http_addresses:
            from nsq.client.lookupd import LookupdHTTPClient

            self._lookupd_client = LookupdHTTPClient(user_agent=self.identify.get("user_agent"))
        if self.connections is None:
            self.connections = max(1, min(auto_connections(self.max_in_flight, await self._count_nsqds()),
                                          self.max_in_flight))
        share = max(1, self.max_in_flight // self.connections)
        for _ in range(self.connections):
            consumer = Consumer(self.topic, self.channel, self._handle,
                                nsqd_tcp_addresses=self.nsqd_tcp_addresses,
                                lookupd_http_addresses=self.lookupd_http_addresses,
                                lookupd_client=self._lookupd_client,
                                max_in_flight=share, identify=self.identify, **self.consumer_kwargs)
            self._consumers.append(consumer)
        await asyncio.gather(*(c.start() for c in self._consumers))
        self._touch_task = asyncio.get_running_loop().create_task(self._touch_loop())

    async def _count_nsqds(self) -> int:
        """The nsqds given plus those the lookupds list for the topic now
        (0 when none is known yet)."""
        nsqds = set(self.nsqd_tcp_addresses)
        if self._lookupd_client is not None:
            from nsq.client.lookupd import LookupdQueryError, topic_producers

            try:
                producers = await topic_producers(self.lookupd_http_addresses, self.topic,
                                                  client=self._lookupd_client)
                nsqds.update(p.tcp_address for p in producers)
            except LookupdQueryError:  # the consumers report it
                pass
        return len(nsqds)

    def _handle(self, message: Message) -> None:
        message.disable_auto_response()
        if self._closing:  # sent before nsqd saw RDY 0: give it back at once
            message.requeue(0, backoff=False)
            return
        self.last_arrival = now = time.monotonic()
        self._held[message] = now
        self.received += 1
        self.incoming.append(message)

    def _answer(self, messages: list[Message], delay_ms: int | None) -> None:
        held = self._held
        with self._coalesced_writes():
            for message in messages:
                held.pop(message, None)
                try:
                    if delay_ms is None:
                        message.finish()
                    else:
                        message.requeue(delay_ms, backoff=False)
                except Exception as exc:  # a closed connection: nsqd times it out
                    log.debug("nsq source: answer %s: %r", message.id, exc)

    @contextlib.contextmanager
    def _coalesced_writes(self) -> Iterator[None]:
        """Within the block, the FINs, REQs and TOUCHes sent on every
        consumer connection go out as one write per connection
        (:meth:`nsq.client.Connection.batched`): a batch's thousands of
        FINs cost one socket write per nsqd connection instead of one each.
        Loop thread only; the block must not await."""
        with contextlib.ExitStack() as stack:
            for consumer in self._consumers:
                for conn in consumer.connections.values():
                    if not conn.closed:
                        stack.enter_context(conn.batched())
            yield

    async def _touch_loop(self) -> None:
        """Every third of the in-flight timeout, TOUCH what has been held
        a sixth of it or more since it arrived or was last TOUCHed (so at
        most about half the timeout passes between a message's arrival or
        TOUCH and the next; messages answered sooner are never TOUCHed)."""
        interval = self.touch_interval
        held = self._held
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            due = [m for m, since in held.items() if now - since >= interval / 2]
            with self._coalesced_writes():
                for message in due:
                    if not message.responded:
                        message.touch()
                        held[message] = now

    async def _close(self, timeout: float) -> None:
        self._closing = True
        if self._touch_task is not None:
            self._touch_task.cancel()
        for consumer in self._consumers:
            consumer.set_max_in_flight(0)  # RDY 0 first, or nsqd hands the REQed messages straight back
        self.incoming.clear()
        held = list(self._held)
        if held:
            log.info("nsq source: requeueing %d held messages", len(held))
        self._answer(held, 0)
        await asyncio.gather(*(c.close(timeout=timeout) for c in self._consumers), return_exceptions=True)
        if self._lookupd_client is not None:
            await self._lookupd_client.close()
