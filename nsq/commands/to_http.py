"""``nsq to-http``: consume a topic/channel and make one HTTP request per message (nsq_to_http).

Behaviour of Go nsq_to_http v1.2 (seed 000 "nsq_to_http"):

- ``--post URL`` (repeatable): POST the message body, ``Content-Type`` from
  ``--content-type`` (default ``application/octet-stream``). A 2xx status
  is success.
- ``--get URL`` (repeatable): the URL must contain ``%s`` exactly once; it
  is replaced by the body escaped as Go's ``url.QueryEscape`` (space ->
  ``+``, every byte but ``A-Za-z0-9-_.~`` -> ``%XX``). Only status 200 is
  success for GET, as in Go.
- Each message goes to one address picked by ``--mode``: ``hostpool``
  (default), ``round-robin`` or ``epsilon-greedy``
  (:mod:`nsq.client.hostpool`).
- Success FINs the message; a connection error, a timeout or another status
  requeues it with backoff (the handler "returned an error"), and in the
  hostpool modes marks the address failed.
- ``-n`` requests run at once at most (Go's concurrent handlers);
  ``--max-in-flight`` bounds the messages taken from nsqd.
- ``--sample F`` (0..1): a message is sent with probability F; the others
  are FINed without a request.
- ``--header 'Name: value'`` (repeatable) is set on every request and may
  replace ``User-Agent``/``Content-Type``, as Go's ``Header.Set``.
- ``--status-every N`` (default 250, 0 disables): after every N successful
  requests, log ``[aggregate]: finished N - 99th: <ms>ms - 95th: <ms>ms -
  avg: <ms>ms`` (and ``[<address>]: ...`` per address when there are
  several), Go's timer_metrics line.
- SIGINT/SIGTERM: stop taking messages, let the requests under way finish
  (at most the request timeout + 1 s, never more than go-nsq's 30 s), hand
  back messages still waiting for a request slot (REQ 0, no backoff), close,
  exit 0.

Deliberate differences from Go, all about refusing at start what Go would
accept and then fail on for every message (or silently ignore): an unknown
``--mode``, ``-n`` < 1, a negative ``--status-every``, a URL that is not
``http(s)://host...`` or has blanks/control characters, and a header name
that is not an HTTP token are clean errors. The ``--header`` error names
the ``Name: value`` format (Go's message says ``key=value``). In a GET URL
only the ``%s`` is replaced; other ``%`` sequences are kept as written
(Go's ``Sprintf`` would treat them as verbs). HTTP requests carry Go's
``User-Agent: nsq_to_http v<version>``; the nsqd connections identify as
``nsq_to_http/<version> nsq-python/<version>``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import sys
import time
from collections import deque
from typing import Any
from urllib.parse import quote_plus

import click

from nsq.client.hostpool import MODES
from nsq import __version__
from nsq.commands._consumer import check_sources, consumer_flags, consumer_settings, stop_event
from nsq.commands._go import GoCommand, fail, run_async

__all__ = ["to_http", "parse_headers", "fill_get_url", "check_address", "TimerMetrics", "Slots"]

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
    """Refuse a ``--get``/``--post`` address that cannot make a request.

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


class TimerMetrics:
    """Request timings, summarised every ``status_every`` requests (Go's
    bitly/timer_metrics as nsq_to_http uses it).

    Args:
        status_every: requests per summary; 0 disables.
        prefix: ``[aggregate]:`` or ``[<address>]:``.
    """

    def __init__(self, status_every: int, prefix: str) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self._timings: list[float] = []

    @staticmethod
    def percentile(perc: float, ordered: list[float]) -> float:
        """timer_metrics' percentile of an ascending list: the element at
        ``ceil(perc/100 * len + 0.5)``, clamped to the last one."""
        if not ordered:
            return 0.0
        index = math.ceil(perc / 100.0 * len(ordered) + 0.5)
        return ordered[min(index, len(ordered) - 1)]

    def status(self, elapsed: float) -> str | None:
        """Record one request of ``elapsed`` seconds; returns the summary
        line when ``status_every`` requests have been recorded, else None."""
        if self.status_every <= 0:
            return None
        self._timings.append(elapsed)
        if len(self._timings) < self.status_every:
            return None
        ordered = sorted(self._timings)
        self._timings = []
        avg = sum(ordered) / len(ordered)
        return (f"{self.prefix} finished {len(ordered)} - 99th: {self.percentile(99.0, ordered) * 1000:.2f}ms - "
                f"95th: {self.percentile(95.0, ordered) * 1000:.2f}ms - avg: {avg * 1000:.2f}ms")


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


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_to_http", "nsq_to_http", request_timeout=20.0, topic_multiple=False)
@click.option("--get", "get_addrs", multiple=True, metavar="URL",
              help="HTTP address to make a GET request to. '%s' will be printf replaced with data "
                   "(may be given multiple times)")
@click.option("--post", "post_addrs", multiple=True, metavar="URL",
              help="HTTP address to make a POST request to.  data will be in the body (may be given multiple times)")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="Custom header for HTTP requests (may be given multiple times)")
@click.option("--content-type", default=DEFAULT_CONTENT_TYPE,
              help=f'the Content-Type used for POST requests (default "{DEFAULT_CONTENT_TYPE}")')
@click.option("--mode", default="hostpool",
              help="the upstream request mode options: round-robin, hostpool (default), epsilon-greedy")
@click.option("-n", "publishers", type=int, default=100, help="number of concurrent publishers (default 100)")
@click.option("--sample", type=float, default=1.0, help="% of messages to publish (float b/w 0 -> 1) (default 1)")
@click.option("--status-every", type=int, default=250,
              help="the # of requests between logging status (per handler), 0 disables (default 250)")
def to_http(topic: str, channel: str, addresses: tuple[str, ...], lookupd: tuple[str, ...], max_in_flight: int,
            consumer_opts: tuple[str, ...], http_connect_timeout: float, http_request_timeout: float,
            get_addrs: tuple[str, ...], post_addrs: tuple[str, ...], headers: tuple[str, ...], content_type: str,
            mode: str, publishers: int, sample: float, status_every: int) -> None:
    """Consume TOPIC/CHANNEL and GET or POST each message to one of the URLs.

    Exits 1 with one ``Error:`` line on a bad flag combination or when no
    nsqd can be reached at start; 0 after SIGINT/SIGTERM.
    """
    try:
        custom = parse_headers(headers)
    except ValueError as exc:
        fail(str(exc))
    if not topic or not channel:
        fail("--topic and --channel are required")
    if content_type != DEFAULT_CONTENT_TYPE:
        if not post_addrs:
            fail("--content-type only used with --post")
        if not content_type:
            fail("--content-type requires a value when used")
    check_sources([topic], channel, addresses, lookupd)
    if not get_addrs and not post_addrs:
        fail("--get or --post required")
    if get_addrs and post_addrs:
        fail("use --get or --post not both")
    for get in get_addrs:
        if get.count("%s") != 1:
            fail("invalid GET address - must be a printf string")
    if mode not in MODES:
        fail(f"invalid --mode {mode!r} (round-robin, hostpool, epsilon-greedy)")
    if not 0.0 <= sample <= 1.0:
        fail("--sample must be between 0.0 and 1.0")
    if publishers < 1:
        fail("-n must be >= 1")
    if status_every < 0:
        fail("--status-every must be >= 0")
    method, urls = ("POST", list(post_addrs)) if post_addrs else ("GET", list(get_addrs))
    for url in urls:
        try:
            check_address(url, "--post" if post_addrs else "--get")
        except ValueError as exc:
            fail(str(exc))
    identify, kwargs = consumer_settings("nsq_to_http", consumer_opts, max_in_flight)

    from nsq.server.logs import setup_logging

    setup_logging("", "info")
    if 0 < status_every < 100:
        log.warning("use more than 100 status values for accurate percentiles (configured with %d)", status_every)
    settings = _Settings(topic, channel, list(addresses), list(lookupd), method, urls, custom, content_type, mode,
                         publishers, sample, status_every, http_connect_timeout, http_request_timeout)
    try:
        code = run_async(_run(settings, identify, kwargs))
    except (OSError, asyncio.TimeoutError) as exc:
        fail(f"cannot connect to nsqd: {exc}")
    except Exception as exc:
        fail(str(exc))
    sys.exit(code)


class _Settings:
    def __init__(self, topic: str, channel: str, addresses: list[str], lookupd: list[str], method: str,
                 urls: list[str], headers: dict[str, str], content_type: str, mode: str, publishers: int,
                 sample: float, status_every: int, connect_timeout: float, request_timeout: float) -> None:
        self.topic = topic
        self.channel = channel
        self.addresses = addresses
        self.lookupd = lookupd
        self.method = method
        self.urls = urls
        self.headers = headers
        self.content_type = content_type
        self.mode = mode
        self.publishers = publishers
        self.sample = sample
        self.status_every = status_every
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout


class _Publisher:
    """Sends one message body to one chosen URL; keeps the timings."""

    def __init__(self, s: _Settings, session: Any) -> None:
        from multidict import CIMultiDict

        from nsq.client.hostpool import make_chooser

        self.session = session
        self.method = s.method
        self.chooser = make_chooser(s.mode, s.urls)
        base = CIMultiDict({"User-Agent": f"nsq_to_http v{__version__}"})
        if s.method == "POST":
            base["Content-Type"] = s.content_type
        for name, value in s.headers.items():
            base[name] = value  # replaces case-insensitively, as Go's Header.Set
        self.headers = base
        self.aggregate = TimerMetrics(s.status_every, "[aggregate]:")
        # one address: no per-address line (Go disables it)
        self.per_address = {u: TimerMetrics(s.status_every if len(s.urls) > 1 else 0, f"[{u}]:") for u in s.urls}

    async def _request(self, url: str, body: bytes) -> None:
        """Raises on a connection error, a timeout or an unsuccessful status."""
        from yarl import URL

        if self.method == "GET":
            target = URL(fill_get_url(url, body), encoded=True)
            data = None
        else:
            target = URL(url, encoded=True)
            data = body
        async with self.session.request(self.method, target, data=data, headers=self.headers) as resp:
            async for _ in resp.content.iter_any():  # read and drop the body, as Go
                pass
            ok = resp.status == 200 if self.method == "GET" else 200 <= resp.status < 300
            if not ok:
                raise _StatusError(f"got status code {resp.status}")

    async def publish(self, body: bytes) -> str | None:
        """One request for ``body``; returns None on success, else the error text."""
        start = time.monotonic()
        url = self.chooser.get()
        try:
            await self._request(url, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.chooser.mark(url, False, time.monotonic() - start)
            text = str(exc) or type(exc).__name__
            return text if isinstance(exc, _StatusError) else f"{url}: {text}"
        elapsed = time.monotonic() - start
        self.chooser.mark(url, True, elapsed)
        for metrics in (self.per_address[url], self.aggregate):
            line = metrics.status(elapsed)
            if line:
                log.info("%s", line)
        return None


class _StatusError(Exception):
    pass


async def _run(s: _Settings, identify: dict[str, Any], kwargs: dict[str, Any]) -> int:
    import aiohttp

    from nsq.client import Consumer

    done = stop_event()
    slots = Slots(s.publishers)
    rng = random.Random()
    timeout = aiohttp.ClientTimeout(total=s.request_timeout or None, sock_connect=s.connect_timeout or None)
    connector = aiohttp.TCPConnector(limit=s.publishers)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        publisher = _Publisher(s, session)

        async def handle(msg) -> bool | None:
            if s.sample < 1.0 and rng.random() > s.sample:
                return True  # not sampled: FIN without a request, as Go
            if not await slots.acquire():
                msg.requeue(0, backoff=False)  # stopping: hand it back for another consumer
                return None
            try:
                error = await publisher.publish(msg.body)
            finally:
                slots.release()
            if error is not None:
                log.error("handler returned error (%s) for msg %s", error, msg.id.decode())
                return False
            return True

        consumer = Consumer(s.topic, s.channel, handle, s.addresses, identify=identify,
                            lookupd_http_addresses=s.lookupd, **kwargs)
        try:
            await consumer.start()
            await done.wait()
            log.info("stopping")
        finally:
            slots.close()
            grace = min(30.0, s.request_timeout + 1.0) if s.request_timeout else 30.0
            await consumer.close(timeout=grace)
    return 0
