"""Forward a topic/channel to HTTP endpoints: what ``nsq to-http`` runs (Go nsq_to_http v1.2).

Behaviour of Go nsq_to_http v1.2 (nsqio/nsq ``apps/nsq_to_http/nsq_to_http.go``;
https://nsq.io/components/utilities.html), as
:class:`HTTPForwarder` does it:

- POST (``--post URL``, repeatable): the message body is the request body,
  ``Content-Type`` from ``content_type`` (default
  ``application/octet-stream``). A 2xx status is success.
- GET (``--get URL``, repeatable): the URL must contain ``%s`` exactly once;
  it is replaced by the body escaped as Go's ``url.QueryEscape`` (space ->
  ``+``, every byte but ``A-Za-z0-9-_.~`` -> ``%XX``). Only status 200 is
  success for GET, as in Go.
- Each message goes to one address picked by ``mode``: ``hostpool``
  (default), ``round-robin`` or ``epsilon-greedy``
  (:mod:`nsq.client.hostpool`).
- Success FINs the message; a connection error, a timeout or another status
  requeues it with backoff (the handler "returned an error"), and in the
  hostpool modes marks the address failed.
- ``publishers`` (``-n``) requests run at once at most (Go's concurrent
  handlers); the consumer's ``max_in_flight`` bounds the messages taken
  from nsqd.
- ``sample`` (0..1): a message is sent with probability ``sample``; the
  others are FINed without a request.
- ``headers`` (``--header 'Name: value'``) are set on every request and may
  replace ``User-Agent``/``Content-Type``, as Go's ``Header.Set``.
- ``status_every`` N (default 250, 0 disables): after every N successful
  requests, log ``[aggregate]: finished N - 99th: <ms>ms - 95th: <ms>ms -
  avg: <ms>ms`` (and ``[<address>]: ...`` per address when there are
  several), Go's timer_metrics line (:mod:`nsq.apps.status`).
- Stopping: stop taking messages, let the requests under way finish (at
  most the request timeout + 1 s, never more than go-nsq's 30 s), hand back
  messages still waiting for a request slot (REQ 0, no backoff), close.

Deliberate differences from Go, all about refusing at start what Go would
accept and then fail on for every message (or silently ignore): an unknown
mode, ``-n`` < 1, a negative ``--status-every``, a URL that is not
``http(s)://host...`` or has blanks/control characters, and a header name
that is not an HTTP token are errors. The ``--header`` error names the
``Name: value`` format (Go's message says ``key=value``). In a GET URL only
the ``%s`` is replaced; other ``%`` sequences are kept as written (Go's
``Sprintf`` would treat them as verbs). HTTP requests carry Go's
``User-Agent: nsq_to_http v<version>``.

Importing this module is cheap (aiohttp and :mod:`nsq.client` are imported
when a forwarder starts), so ``nsq to-http --help`` stays fast.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote_plus

from nsq import __version__
from nsq.apps.status import TimerMetrics

__all__ = ["HTTPForwarder", "DEFAULT_CONTENT_TYPE", "parse_headers", "fill_get_url", "check_address", "Slots"]

log = logging.getLogger("nsq.to_http")

DEFAULT_CONTENT_TYPE = "application/octet-stream"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_URL_CHARS = re.compile(r"[\x00-\x20\x7f]")


def parse_headers(values: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--header`` values (``Name: value``) as ``{name: value}``, name and
    value stripped of blanks; a later name replaces an earlier one.

    Raises:
        ValueError: no ``:``, an empty name or value (Go's checks), a name
            that is not an HTTP token, or CR/LF/NUL in the value.
    """
    out: dict[str, str] = {}
    for raw in values:
        name, sep, value = raw.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError(f"invalid --header {raw!r} (format is 'Name: value')")
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"invalid --header {raw!r}: bad header name {name!r}")
        if any(c in value for c in "\r\n\x00"):
            raise ValueError(f"invalid --header {raw!r}: control character in value")
        out[name] = value
    return out


def fill_get_url(template: str, body: bytes) -> str:
    """``template`` with its ``%s`` replaced by ``body`` escaped as Go's
    ``url.QueryEscape`` (``b"a b&c"`` -> ``a+b%26c``)."""
    return template.replace("%s", quote_plus(body, safe=""), 1)


def check_address(address: str, flag: str) -> None:
    """Refuse a ``--get``/``--post`` address that cannot make a request
    (``flag`` names it in the error).

    Raises:
        ValueError: not ``http://`` or ``https://`` with a host, or blanks or
            control characters in it.
    """
    from yarl import URL

    problem = ""
    if _BAD_URL_CHARS.search(address):
        problem = "blank or control character"
    else:
        try:
            url = URL(address.replace("%s", "x"), encoded=True)
        except ValueError as exc:
            problem = str(exc)
        else:
            if url.scheme not in ("http", "https"):
                problem = "scheme must be http or https"
            elif not url.host:
                problem = "no host"
    if problem:
        raise ValueError(f"invalid {flag} address {address!r}: {problem}")


class Slots:
    """At most ``n`` holders at once (Go's ``-n`` handler goroutines);
    :meth:`close` turns every waiter (and later caller) away."""

    def __init__(self, n: int) -> None:
        self.free = n
        self.closed = False
        self._waiters: deque[asyncio.Future[bool]] = deque()

    async def acquire(self) -> bool:
        """Wait for a slot: True when held (call :meth:`release` after),
        False once closed."""
        if self.closed:
            return False
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result():
                self.release()  # handed a slot just as we were cancelled
            raise

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(True)
                return
        self.free += 1

    def close(self) -> None:
        self.closed = True
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(False)


class _StatusError(Exception):
    pass


class HTTPForwarder:
    """Consume ``topic``/``channel`` and make one HTTP request per message.

    Args:
        topic, channel: what to consume.
        urls: destination URLs (at least one); each message goes to one,
            picked by ``mode``. For GET each contains ``%s`` exactly once.
        method: ``"POST"`` (the body is the request body) or ``"GET"`` (the
            body fills the URL's ``%s``).
        nsqd_tcp_addresses: nsqd ``host:port`` TCP addresses to consume from;
        lookupd_http_addresses: or lookupd HTTP addresses to find them (one
            of the two, as :class:`~nsq.client.Consumer` takes them).
        headers: ``{name: value}`` set on every request (see
            :func:`parse_headers`); replaces ``User-Agent``/``Content-Type``
            case-insensitively.
        content_type: the ``Content-Type`` of POST requests.
        mode: ``"hostpool"``, ``"round-robin"`` or ``"epsilon-greedy"``.
        publishers: at most this many requests at once (>= 1; Go's ``-n``).
        sample: probability (0..1) that a message is sent; the others are
            FINed without a request.
        status_every: successful requests per status line, logged at INFO
            on the ``nsq.to_http`` logger (0 disables; 1..99 logs a warning).
        connect_timeout: seconds for an HTTP connect (0: no limit).
        request_timeout: seconds for a whole request (0: no limit); also
            bounds :meth:`stop` (timeout + 1 s, at most 30 s).
        identify: IDENTIFY fields of the nsqd connections (``user_agent`` ...).
        consumer_args: further :class:`~nsq.client.Consumer` keyword
            arguments (``max_in_flight``, ``max_attempts``, backoff ...).

    Raises:
        ValueError: ``method`` not GET/POST, no URL, a URL
            :func:`check_address` refuses, a GET URL without exactly one
            ``%s``, an unknown ``mode``, ``publishers`` < 1, ``sample``
            outside 0..1 or ``status_every`` < 0.
    """

    def __init__(self, topic: str, channel: str, urls: Iterable[str], method: str = "POST", *,
                 nsqd_tcp_addresses: Iterable[str] = (), lookupd_http_addresses: Iterable[str] = (),
                 headers: Mapping[str, str] | None = None, content_type: str = DEFAULT_CONTENT_TYPE,
                 mode: str = "hostpool", publishers: int = 100, sample: float = 1.0, status_every: int = 250,
                 connect_timeout: float = 2.0, request_timeout: float = 20.0,
                 identify: dict[str, Any] | None = None, consumer_args: dict[str, Any] | None = None) -> None:
        from multidict import CIMultiDict

        from nsq.client.hostpool import MODES

        self.urls = list(urls)
        if method not in ("GET", "POST"):
            raise ValueError(f"method must be GET or POST, not {method!r}")
        if not self.urls:
            raise ValueError("no URL to send messages to")
        for url in self.urls:
            check_address(url, method)
            if method == "GET" and url.count("%s") != 1:
                raise ValueError(f"GET URL {url!r} must contain '%s' exactly once")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (round-robin, hostpool, epsilon-greedy)")
        if publishers < 1:
            raise ValueError("publishers must be >= 1")
        if not 0.0 <= sample <= 1.0:
            raise ValueError("sample must be between 0.0 and 1.0")
        if status_every < 0:
            raise ValueError("status_every must be >= 0")
        self.topic = topic
        self.channel = channel
        self.method = method
        self.nsqd_tcp_addresses = list(nsqd_tcp_addresses)
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.mode = mode
        self.publishers = publishers
        self.sample = sample
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.identify = dict(identify or {})
        self.consumer_args = dict(consumer_args or {})
        base = CIMultiDict({"User-Agent": f"nsq_to_http v{__version__}"})
        if method == "POST":
            base["Content-Type"] = content_type
        for name, value in (headers or {}).items():
            base[name] = value  # replaces case-insensitively, as Go's Header.Set
        self.headers = base
        if 0 < status_every < 100:
            log.warning("use more than 100 status values for accurate percentiles (configured with %d)", status_every)
        self.aggregate = TimerMetrics(status_every, "[aggregate]:")
        # one address: no per-address line (Go disables it)
        per = status_every if len(self.urls) > 1 else 0
        self.per_address = {u: TimerMetrics(per, f"[{u}]:") for u in self.urls}
        #: the Consumer, once started
        self.consumer: Any = None
        self._session: Any = None
        self._slots = Slots(publishers)
        self._rng = random.Random()
        self._chooser: Any = None
        self._started = self._running = self._closed = False

    async def start(self) -> None:
        """Open the HTTP session and connect the consumer.

        Raises:
            RuntimeError: started before.
            OSError, asyncio.TimeoutError: no nsqd could be reached (what
                :meth:`Consumer.start` raises); everything is closed again.
        """
        import aiohttp

        from nsq.client import Consumer
        from nsq.client.hostpool import make_chooser

        if self._started:
            raise RuntimeError("HTTPForwarder already started")
        self._started = True
        self._chooser = make_chooser(self.mode, self.urls)
        timeout = aiohttp.ClientTimeout(total=self.request_timeout or None, sock_connect=self.connect_timeout or None)
        connector = aiohttp.TCPConnector(limit=self.publishers)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        try:
            self.consumer = Consumer(self.topic, self.channel, self._handle, self.nsqd_tcp_addresses,
                                     identify=self.identify, lookupd_http_addresses=self.lookupd_http_addresses,
                                     **self.consumer_args)
            await self.consumer.start()
        except BaseException:
            await self._close()
            raise
        self._running = True

    async def stop(self) -> None:
        """Stop taking messages; let the requests under way finish (bounded,
        see ``request_timeout``); hand back the messages waiting for a slot
        (REQ 0, no backoff); close the consumer and the HTTP session. Safe
        to call more than once or after a failed :meth:`start`."""
        if self._running:
            self._running = False
            log.info("stopping")
        await self._close()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._slots.close()
        try:
            if self.consumer is not None:
                grace = min(30.0, self.request_timeout + 1.0) if self.request_timeout else 30.0
                await self.consumer.close(timeout=grace)
        finally:
            if self._session is not None:
                await self._session.close()

    async def _handle(self, msg: Any) -> bool | None:
        if self.sample < 1.0 and self._rng.random() > self.sample:
            return True  # not sampled: FIN without a request, as Go
        if not await self._slots.acquire():
            msg.requeue(0, backoff=False)  # stopping: hand it back for another consumer
            return None
        try:
            error = await self._publish(msg.body)
        finally:
            self._slots.release()
        if error is not None:
            log.error("handler returned error (%s) for msg %s", error, msg.id.decode())
            return False
        return True

    async def _publish(self, body: bytes) -> str | None:
        """One request for ``body``; returns None on success, else the error text."""
        start = time.monotonic()
        url = self._chooser.get()
        try:
            await self._request(url, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._chooser.mark(url, False, time.monotonic() - start)
            text = str(exc) or type(exc).__name__
            return text if isinstance(exc, _StatusError) else f"{url}: {text}"
        elapsed = time.monotonic() - start
        self._chooser.mark(url, True, elapsed)
        for metrics in (self.per_address[url], self.aggregate):
            line = metrics.status(elapsed)
            if line:
                log.info("%s", line)
        return None

    async def _request(self, url: str, body: bytes) -> None:
        """Raises on a connection error, a timeout or an unsuccessful status."""
        from yarl import URL

        if self.method == "GET":
            target = URL(fill_get_url(url, body), encoded=True)
            data = None
        else:
            target = URL(url, encoded=True)
            data = body
        async with self._session.request(self.method, target, data=data, headers=self.headers) as resp:
            async for _ in resp.content.iter_any():  # read and drop the body, as Go
                pass
            ok = resp.status == 200 if self.method == "GET" else 200 <= resp.status < 300
            if not ok:
                raise _StatusError(f"got status code {resp.status}")
