"""Consumer: subscribe to a topic/channel on nsqd(s) and handle messages.

Follows https://nsq.io/clients/building_client_libraries.html for what it covers:
IDENTIFY, SUB, RDY spread over connections (``max_in_flight`` split evenly,
at least 1 each, never above nsqd's ``max_rdy_count``), FIN/REQ by handler
result, ``max_attempts`` with a give-up callback, requeue delay growing with
attempts, heartbeats answered, reconnect with exponential backoff for direct
nsqd addresses, and a clean close (CLS, wait for in-flight handlers).

Discovery (https://nsq.io/clients/building_client_libraries.html,
"Discovery"): with ``lookupd_http_addresses`` the consumer asks every
lookupd's ``/lookup`` at start and then every ``lookupd_poll_interval``
(with jitter) through :func:`nsq.client.lookupd.topic_producers`, connects
to each producer of the topic (``broadcast_address:tcp_port``, the union
over all lookupds) and drops connections to producers no lookupd lists any
more. A discovered
connection that closes is not retried on its own: the lookupds are asked
again at once, and list the nsqd if it is still there.
RDY counts and backoff are decided by :class:`nsq.client.rdy.RdyController`
(sans-IO): start at RDY 1, share ``max_in_flight``, back off exponentially
after failures and test the waters with RDY 1.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from nsq.client.connection import Connection
from nsq.client.errors import ClientConfigError
from nsq.client.message import Message
from nsq.client.rdy import RdyController, Sends
from nsq.protocol import commands
from nsq.protocol.message import DecodedMessage
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["Consumer", "Handler"]


def _now() -> float:
    return time.monotonic()

log = logging.getLogger("nsq.client")

#: a handler returns True/None (finish) or False (requeue), or raises (requeue)
Handler = Callable[[Message], "bool | None | Awaitable[bool | None]"]


class Consumer:
    """Consumes ``topic``/``channel`` from one or more nsqd.

    Args:
        topic: topic name (``#ephemeral`` allowed).
        channel: channel name (``#ephemeral`` allowed).
        handler: called with each :class:`~nsq.client.message.Message`;
            sync or async. True/None finishes, False or an exception
            requeues, unless the handler already answered the message.
        nsqd_tcp_addresses: ``host:port`` of each nsqd to connect to.
        max_in_flight: messages in flight over all connections.
        max_attempts: give up after this many attempts (0 = never; 5 as
            go-nsq and pynsq): the message is finished and ``on_give_up``
            called.
        requeue_delay_ms: base REQ delay; grows linearly with attempts up to
            ``max_requeue_delay_ms``.
        identify: extra IDENTIFY fields (``msg_timeout`` ms,
            ``heartbeat_interval`` ms, ``user_agent``, ``sample_rate`` ...).
        on_give_up: called with a message past ``max_attempts``.
        reconnect_max_delay: seconds between reconnect tries at most.
        lookupd_http_addresses: nsqlookupd HTTP addresses (``host:port`` or
            URL) to discover producers of ``topic`` from.
        lookupd_poll_interval: seconds between lookupd queries (go-nsq's 60 s).
        lookupd_poll_jitter: fraction of the interval each wait varies by
            (0..1), so many consumers do not ask at once.
        backoff_multiplier: seconds; backoff level n waits
            ``backoff_multiplier * 2**n`` (go-nsq's 1 s).
        max_backoff_duration: seconds; the longest backoff wait (go-nsq's
            2 min); 0 turns backoff off.
        low_rdy_idle_timeout: seconds without a message before a
            connection's RDY moves elsewhere when connections outnumber
            ``max_in_flight`` (go-nsq's 10 s).
        connect_timeout: seconds for TCP connect plus IDENTIFY (go-nsq's
            ``dial_timeout``).
        tls_context: an ``ssl.SSLContext`` for the ``tls_v1`` upgrade (with
            ``identify={"tls_v1": True}``; default: the system CAs, see
            :func:`nsq.client.tls.client_context`). ``identify`` may also
            ask for ``snappy`` or ``deflate`` (+ ``deflate_level``).
        auth_secret: sent with AUTH when nsqd answers ``auth_required``.
        lookupd_client: a :class:`~nsq.client.lookupd.LookupdHTTPClient`
            to share (its timeouts are used; the consumer does not close
            it); by default the consumer makes and closes its own.

    Raises:
        ClientConfigError: invalid names or numbers.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Handler,
        nsqd_tcp_addresses: Iterable[str] = (),
        max_in_flight: int = 1,
        max_attempts: int = 5,
        requeue_delay_ms: int = 90_000,
        max_requeue_delay_ms: int = 900_000,
        identify: dict[str, Any] | None = None,
        on_give_up: Callable[[Message], None] | None = None,
        reconnect_max_delay: float = 60.0,
        lookupd_http_addresses: Iterable[str] = (),
        lookupd_poll_interval: float = 60.0,
        lookupd_poll_jitter: float = 0.3,
        backoff_multiplier: float = 1.0,
        max_backoff_duration: float = 120.0,
        low_rdy_idle_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        lookupd_client: Any = None,
        tls_context: Any = None,
        auth_secret: str | None = None,
    ) -> None:
        if not is_valid_topic_name(topic):
            raise ClientConfigError(f"invalid topic name {topic!r}")
        if not is_valid_channel_name(channel):
            raise ClientConfigError(f"invalid channel name {channel!r}")
        if max_in_flight < 0:
            raise ClientConfigError("max_in_flight must be >= 0")
        if lookupd_poll_interval <= 0:
            raise ClientConfigError("lookupd_poll_interval must be > 0")
        if not 0 <= lookupd_poll_jitter <= 1:
            raise ClientConfigError("lookupd_poll_jitter must be in [0, 1]")
        self.topic = topic
        self.channel = channel
        self.handler = handler
        self.addresses = list(dict.fromkeys(nsqd_tcp_addresses))
        self.max_in_flight = max_in_flight
        self.max_attempts = max_attempts
        self.requeue_delay = requeue_delay_ms
        self.max_requeue_delay = max_requeue_delay_ms
        self.identify = dict(identify or {})
        self.on_give_up = on_give_up
        self.reconnect_max_delay = reconnect_max_delay
        self.connect_timeout = connect_timeout
        self.tls_context = tls_context
        self.auth_secret = auth_secret
        self.lookupd_http_addresses = list(dict.fromkeys(lookupd_http_addresses))
        self.lookupd_poll_interval = lookupd_poll_interval
        self.lookupd_poll_jitter = lookupd_poll_jitter
        self._lookupd_client = lookupd_client
        self._own_lookupd_client = lookupd_client is None
        self._poll_task: asyncio.Task[None] | None = None
        self._recheck = asyncio.Event()
        #: nsqd addresses found through lookupd (not in ``addresses``)
        self._discovered: set[str] = set()
        self._connecting: set[str] = set()
        self.connections: dict[str, Connection] = {}
        self.max_backoff_duration = max_backoff_duration
        self.rdy: RdyController[Connection] = RdyController(max_in_flight, backoff_multiplier, max_backoff_duration or 1.0,
                                 low_rdy_idle_timeout)
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._in_flight: dict[Connection, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reconnect_tasks: dict[str, asyncio.Task[None]] = {}
        self._closing = False
        self._closed = asyncio.Event()
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect to every configured nsqd, and to the producers the
        lookupds list (then keep polling them in the background).

        Raises:
            OSError / asyncio.TimeoutError / ErrorResponse: every direct
                connection failed and no lookupd is configured (otherwise
                failed ones are retried in the background).
        """
        if self._tick_task is None:
            self._tick_task = asyncio.get_running_loop().create_task(self._tick_loop())
        if self.lookupd_http_addresses:
            from nsq.client.lookupd import LookupdHTTPClient

            if self._lookupd_client is None:
                self._lookupd_client = LookupdHTTPClient(user_agent=self.identify.get("user_agent"))
            await self.query_lookupd()
            self._poll_task = asyncio.get_running_loop().create_task(self._poll_lookupd())
        if not self.addresses:
            return
        results = await asyncio.gather(*(self._connect(a) for a in self.addresses), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for address, result in zip(self.addresses, results):
            if isinstance(result, BaseException):
                # a ConnectError's text names the address again: its reason is enough here
                log.warning("[%s] connect failed: %s", address, getattr(result, "reason", None) or result)
                self._schedule_reconnect(address)
        if errors and len(errors) == len(results) and not self.lookupd_http_addresses:
            raise errors[0]

    # -- discovery ---------------------------------------------------------------

    async def query_lookupd(self) -> None:
        """Ask every lookupd for the topic's producers once; connect to new
        ones, drop discovered ones none lists. If every lookupd fails,
        nothing changes."""
        if self._lookupd_client is None or self._closing:
            return
        from nsq.client.lookupd import LookupdQueryError, topic_producers

        try:
            producers = await topic_producers(self.lookupd_http_addresses, self.topic, client=self._lookupd_client)
        except LookupdQueryError as exc:
            for err in exc.errors:
                log.warning("%s", err)
            return
        for err in producers.errors:
            log.warning("%s", err)
        found = [p.tcp_address for p in producers]
        for address in found:
            if address in self.addresses or address in self.connections or address in self._connecting:
                continue
            self._connecting.add(address)
            task = asyncio.get_running_loop().create_task(self._connect_discovered(address))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for address in list(self._discovered):
            if address not in found and address not in self.addresses:
                self._discovered.discard(address)
                conn = self.connections.get(address)
                if conn is not None:
                    log.info("[%s] no longer a producer of %s, disconnecting", address, self.topic)
                    del self.connections[address]
                    self._drop(conn)
                    self._apply(self.rdy.remove(conn, _now()))

    async def _connect_discovered(self, address: str) -> None:
        try:
            await self._connect(address)
            self._discovered.add(address)
        except Exception as exc:
            log.warning("[%s] connect to discovered nsqd failed: %s", address, exc)
        finally:
            self._connecting.discard(address)

    def _drop(self, conn: Connection) -> None:
        """Close a connection cleanly: CLS, then close once nsqd answers."""
        self._in_flight.pop(conn, None)

        async def cls() -> None:
            try:
                await asyncio.wait_for(conn.command(commands.cls()), 5)
            except Exception:
                pass
            conn.close()

        task = asyncio.get_running_loop().create_task(cls())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _poll_lookupd(self) -> None:
        while not self._closing:
            interval = self.lookupd_poll_interval
            wait = interval * (1 + self.lookupd_poll_jitter * (random.random() - 0.5))
            try:
                await asyncio.wait_for(self._recheck.wait(), wait)
                await asyncio.sleep(1.0)  # a burst of closes -> one query
            except TimeoutError:
                pass
            self._recheck.clear()
            try:
                await self.query_lookupd()
            except Exception:
                log.exception("lookupd query failed")

    async def connect_to_nsqd(self, address: str) -> None:
        """Add an nsqd (``host:port``) and connect to it."""
        if address not in self.addresses:
            self.addresses.append(address)
        await self._connect(address)

    async def _connect(self, address: str) -> None:
        conn = Connection(address, self.identify, on_message=self._on_message, on_close=self._on_close,
                          connect_timeout=self.connect_timeout, tls_context=self.tls_context,
                          auth_secret=self.auth_secret)
        await conn.connect()
        await conn.command(commands.sub(self.topic, self.channel))
        if self._closing:
            conn.close()
            return
        self.connections[address] = conn
        self._in_flight[conn] = 0
        log.info("[%s] subscribed to %s/%s", address, self.topic, self.channel)
        cap = conn.features.get("max_rdy_count") if isinstance(conn.features, dict) else None
        self._apply(self.rdy.add(conn, int(cap) if isinstance(cap, int) and cap > 0 else None, _now()))

    def _apply(self, sends: Sends[Connection]) -> None:
        """Send the RDY commands the controller decided."""
        for conn, count in sends:
            if not conn.closed:
                conn.send(commands.rdy(count))

    async def _tick_loop(self) -> None:
        """Every 5 s: RDY redistribution when connections outnumber max_in_flight."""
        while not self._closing:
            await asyncio.sleep(5.0)
            self._apply(self.rdy.tick(_now()))

    def _schedule_backoff(self, wait: float | None) -> None:
        if wait is None or self._closing:
            return
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        log.warning("backing off for %.1fs (backoff level %d), RDY 0", wait, self.rdy.backoff_level)
        self._backoff_timer = asyncio.get_running_loop().call_later(wait, self._backoff_expired)

    def _backoff_expired(self) -> None:
        self._backoff_timer = None
        sends, wait = self.rdy.backoff_expired(_now())
        if sends:
            log.warning("backoff timeout expired, sending RDY 1 to test the waters")
        self._apply(sends)
        self._schedule_backoff(wait)

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change ``max_in_flight`` live (0 pauses the consumer)."""
        self.max_in_flight = max_in_flight
        self._apply(self.rdy.set_max_in_flight(max_in_flight, _now()))

    def is_starved(self) -> bool:
        """True if some connection has at least 85% of its RDY in flight
        (https://nsq.io/clients/building_client_libraries.html: time to process a batch)."""
        for conn, state in self.rdy.conns.items():
            in_flight = self._in_flight.get(conn, 0)
            if in_flight > 0 and in_flight >= state.rdy * 0.85:
                return True
        return False

    async def close(self, timeout: float = 5.0) -> None:
        """CLS every connection, wait (up to ``timeout`` s) for nsqd's
        CLOSE_WAIT, for handlers and for messages still in flight to be
        answered, then close."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        self._apply(self.rdy.close(_now()))
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        if self._tick_task is not None:
            self._tick_task.cancel()
        for task in self._reconnect_tasks.values():
            task.cancel()
        if self._poll_task is not None:
            self._poll_task.cancel()
        if self._lookupd_client is not None and self._own_lookupd_client:
            await self._lookupd_client.close()
        waits = []
        for conn in list(self.connections.values()):
            if not conn.closed:
                try:
                    waits.append(conn.command(commands.cls()))
                except Exception:
                    pass
        if waits:
            await asyncio.wait(waits, timeout=timeout)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        # messages still in flight (a handler that disabled auto response
        # answers later): wait for them so they are not left to time out
        deadline = _now() + timeout
        while any(self._in_flight.values()) and _now() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections.values()):
            conn.close()
        for conn in list(self.connections.values()):
            try:
                await asyncio.wait_for(conn.wait_closed(), 1)
            except asyncio.TimeoutError:
                pass
        self._closed.set()

    async def wait_closed(self) -> None:
        """Wait until :meth:`close` has finished."""
        await self._closed.wait()

    # -- messages ----------------------------------------------------------------

    def requeue_delay_ms(self, attempts: int) -> int:
        """REQ delay for a message on its ``attempts``-th try (ms)."""
        return min(self.requeue_delay * attempts, self.max_requeue_delay)

    def _on_message(self, conn: Connection, decoded: DecodedMessage) -> None:
        self.message_count += 1
        self._in_flight[conn] = self._in_flight.get(conn, 0) + 1
        sends = self.rdy.message(conn, _now())
        if sends:
            self._apply(sends)
        msg = Message(decoded.id, decoded.body, decoded.timestamp, decoded.attempts, self.topic, conn, self)
        if self.max_attempts and msg.attempts > self.max_attempts:
            log.warning("msg %s attempted %d times, giving up", msg.id.decode(), msg.attempts)
            if self.on_give_up is not None:
                try:
                    self.on_give_up(msg)
                except Exception:
                    log.exception("give-up callback failed")
            msg.finish()
            return
        try:
            result = self.handler(msg)
        except Exception:
            log.exception("handler failed for msg %s", msg.id.decode())
            msg.requeue()
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._handler_done, msg=msg))
        else:
            self._respond(msg, result)

    def _handler_done(self, task: asyncio.Task[Any], msg: Message) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            # shutting down: hand it back at once, not as a failure
            msg.requeue(0, backoff=False)
            return
        exc = task.exception()
        if exc is not None:
            log.error("handler failed for msg %s: %r", msg.id.decode(), exc)
            msg.requeue()
            return
        self._respond(msg, task.result())

    @staticmethod
    def _respond(msg: Message, result: Any) -> None:
        if msg.responded or not msg.auto_response:
            return
        if result is False:
            msg.requeue()
        else:
            msg.finish()

    def _finished(self, msg: Message, conn: Connection, data: bytes, failed: bool = False,
                  backoff: bool = True) -> None:
        if failed:
            self.requeue_count += 1
        else:
            self.finish_count += 1
        if conn in self._in_flight and self._in_flight[conn] > 0:
            self._in_flight[conn] -= 1
        if not conn.closed:
            conn.send(data)
        if self.max_backoff_duration > 0:
            outcome = None if (failed and not backoff) else not failed
            if outcome is not None and (outcome is False or self.rdy.backoff_level):
                sends, wait = self.rdy.result(outcome, _now())
                self._apply(sends)
                self._schedule_backoff(wait)

    # -- connections ---------------------------------------------------------------

    def _on_close(self, conn: Connection) -> None:
        address = conn.address
        if self.connections.get(address) is conn:
            del self.connections[address]
        self._in_flight.pop(conn, None)
        sends = self.rdy.remove(conn, _now())
        if self._closing:
            return
        log.warning("[%s] connection closed%s", address, f": {conn.close_error}" if conn.close_error else "")
        self._apply(sends)
        if address in self._discovered:
            self._discovered.discard(address)
            self._recheck.set()  # ask the lookupds again rather than retry blindly
            return
        if address in self.addresses:
            self._schedule_reconnect(address)

    def _schedule_reconnect(self, address: str) -> None:
        if self._closing or address in self._reconnect_tasks:
            return
        task = asyncio.get_running_loop().create_task(self._reconnect(address))
        self._reconnect_tasks[address] = task

    async def _reconnect(self, address: str) -> None:
        delay = 1.0
        try:
            while not self._closing:
                await asyncio.sleep(delay)
                try:
                    await self._connect(address)
                    return
                except Exception as exc:
                    log.warning("[%s] reconnect failed: %s (retry in %.0fs)", address,
                                getattr(exc, "reason", None) or exc, delay)
                    delay = min(delay * 2, self.reconnect_max_delay)
        finally:
            self._reconnect_tasks.pop(address, None)
