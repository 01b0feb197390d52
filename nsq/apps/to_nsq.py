"""Republish topics to other nsqds: what ``nsq to-nsq`` runs (Go nsq_to_nsq v1.2).

Go NSQ v1.2's ``apps/nsq_to_nsq/nsq_to_nsq.go`` (https://nsq.io/components/utilities.html), as
:class:`NSQForwarder` does it: one consumer per topic on the channel (the
CLI's default ``nsq_to_nsq``); every message is published over TCP to one
destination nsqd picked by ``mode`` (round-robin | hostpool (default) |
epsilon-greedy, see :mod:`nsq.client.hostpool`) to the destination topic
(default: the topic it was consumed from). The source message is FINed
only once the destination answered ``OK``; a failed publish REQs it with
the default delay and backoff (Go's ``msg.Requeue(-1)``). Publishes are
pipelined: up to the consumer's ``max_in_flight`` are awaiting their ``OK``
at once. Destination producers connect on the first publish (a destination
may be down at start).

JSON filtering (:class:`JSONFilter`), as Go v1.2 (``json.Unmarshal`` into a
``map[string]interface{}``), applies when ``--require-json-field`` or
``--whitelist-json-field`` is given:

- a body that is not a JSON object is logged (``Unable to decode json``) and
  FINed, never forwarded; the literal ``null`` counts as an empty object;
- ``--require-json-field F``: an object without ``F`` is FINed, not
  forwarded; but with ``--require-json-value`` too, a missing ``F`` is an
  error (``missing field to check required value``) and the message is
  REQueued with backoff, until the consumer gives up after ``max_attempts``;
- ``--require-json-value V``: a string field must equal ``V``; a number
  field must equal ``V`` parsed as a float64 (so ``1``, ``1.0`` and ``1e0``
  match the JSON number 1); any other field type never matches;
- ``--whitelist-json-field`` (repeatable): the object is re-encoded as Go's
  ``json.Marshal`` does with only those fields: keys sorted, compact,
  ``<``/``>``/``&`` escaped as ``\\u003c``..., top-level integral numbers
  below 2**63 written as integers, other numbers in Go's float64 format.

``status_every`` N (default 250; 0 disables) logs
``[aggregate]: finished N - 99th: ..ms - 95th: ..ms - avg: ..ms`` every N
publish results (and the same per destination, prefixed ``[host:port]:``,
when there are several; :mod:`nsq.apps.status`). Stopping stops consuming,
waits (bounded) for the publishes in flight, closes consumers and producers.

Importing this module does not import :mod:`nsq.client` (that happens when
a forwarder starts).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from nsq.apps.status import TimerMetrics

if TYPE_CHECKING:
    from nsq.client.message import Message

__all__ = ["NSQForwarder", "JSONFilter", "go_json_decode", "go_json_encode", "go_parse_float", "PASS", "DROP",
           "BACKOFF", "DRAIN_TIMEOUT"]

log = logging.getLogger("nsq.to_nsq")

#: seconds to wait at shutdown for publishes in flight (then nsqd requeues the rest)
DRAIN_TIMEOUT = 5.0

#: :meth:`JSONFilter.apply` verdicts: forward, FIN without forwarding, REQ with backoff
PASS, DROP, BACKOFF = "pass", "drop", "backoff"


# -- JSON, the way Go's encoding/json sees it -------------------------------------------


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    # Go decodes each byte of an invalid UTF-8 sequence to one U+FFFD;
    # registered for decoding only, so ``exc`` is a UnicodeDecodeError
    assert isinstance(exc, UnicodeDecodeError)
    return "\ufffd", exc.start + 1


codecs.register_error("nsq-go-replace", _go_replace)


def _go_number(text: str) -> float:
    # every JSON number is a float64 in a map[string]interface{}; Go refuses
    # one out of float64's range
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON literal {name}")


def go_json_decode(body: bytes) -> Any:
    """Decode ``body`` as Go's ``json.Unmarshal`` would: invalid UTF-8 bytes
    become U+FFFD, numbers are floats, NaN/Infinity and out-of-range numbers
    are errors.

    Raises:
        ValueError: not valid JSON (``json.JSONDecodeError`` is one).
        RecursionError: nesting too deep.
    """
    text = body.decode("utf-8", "nsq-go-replace")
    return json.loads(text, parse_float=_go_number, parse_int=_go_number, parse_constant=_no_constant)


_SURROGATE = re.compile("[\ud800-\udfff]")
# what Go's encodeState.string (escapeHTML=true) does not write as is
_ESCAPE = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029\ud800-\udfff]')
_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _go_text(s: str) -> str:
    """A lone surrogate (``"\\ud800"`` in the JSON) is U+FFFD in Go."""
    return _SURROGATE.sub("\ufffd", s)


def _escape(m: re.Match) -> str:
    ch = m.group()
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return f"\\u{code:04x}"


def _go_string(s: str) -> str:
    return '"' + _ESCAPE.sub(_escape, s) + '"'


def _go_float(f: float) -> str:
    """Go's ``encoding/json`` float64: shortest digits, exponent form only
    below 1e-6 or from 1e21 (``1e-7``, ``1e+21``), else positional (``100``)."""
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        s = repr(f)  # Python's repr is exponent form in these ranges, as Go's 'e'
        m = re.search(r"e-0(\d)$", s)
        if m:
            s = s[: m.start()] + "e-" + m.group(1)
        return s
    s = format(Decimal(repr(f)), "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, list):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted((_go_text(k), v) for k, v in value.items())
        return "{" + ",".join(_go_string(k) + ":" + _encode(v) for k, v in items) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


def go_json_encode(value: Any) -> bytes:
    """``json.Marshal`` of a decoded ``map[string]interface{}`` as Go does it:
    object keys sorted, no spaces, HTML characters and U+2028/U+2029 escaped,
    other non-ASCII as UTF-8, floats in Go's shortest format."""
    return _encode(value).encode()


_GO_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


def go_parse_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)`` without its error: None when Go
    would fail (no spaces or underscores allowed)."""
    if not _GO_FLOAT.fullmatch(text):
        return None
    value = float(text)
    if math.isinf(value) and "inf" not in text.lower():
        return None  # out of range: ParseFloat returns ErrRange
    return value


class JSONFilter:
    """Go v1.2 nsq_to_nsq's ``--require-json-field``/``--require-json-value``/
    ``--whitelist-json-field`` logic (sans-IO).

    Args:
        field: the field a message must have ("" for none).
        value: the value the field must have ("" for any).
        whitelist: the fields to keep (empty: forward the body unchanged).
    """

    def __init__(self, field: str = "", value: str = "", whitelist: Iterable[str] = ()) -> None:
        self.field = field
        self.value = value
        self.whitelist = list(whitelist)
        self._number = go_parse_float(value) if value else None

    @property
    def active(self) -> bool:
        """False when no option asks for JSON (bodies are forwarded as is)."""
        return bool(self.field or self.whitelist)

    def apply(self, body: bytes) -> tuple[str, bytes]:
        """(verdict, body to publish): :data:`PASS` with the body (re-encoded
        if whitelisting), :data:`DROP` (FIN, not forwarded), or
        :data:`BACKOFF` (REQ with backoff: the required field is missing and
        a value was required)."""
        if not self.active:
            return PASS, body
        try:
            obj = go_json_decode(body)
        except (ValueError, RecursionError):
            obj = False  # not JSON: treated as a non-object below
        if obj is None:
            obj = {}  # json.Unmarshal of null leaves the map nil: no error
        if not isinstance(obj, dict):
            # invalid JSON, or JSON that is not an object (Go: cannot unmarshal into a map)
            log.error("Unable to decode json: %s", body.decode("utf-8", "replace"))
            return DROP, body
        if self.field:
            if self.field not in obj:
                if self.value:
                    log.error("missing field to check required value")
                    return BACKOFF, body
                return DROP, body
            if self.value and not self._matches(obj[self.field]):
                return DROP, body
        if self.whitelist:
            kept: dict[str, Any] = {}
            for key in self.whitelist:
                if key in obj:
                    v = obj[key]
                    # Go: "avoid printing int as float", through int64
                    if isinstance(v, float) and v.is_integer() and -(2**63) <= v < 2**63:
                        v = int(v)
                    kept[key] = v
            body = go_json_encode(kept)
        return PASS, body

    def _matches(self, v: Any) -> bool:
        if isinstance(v, str):
            return _go_text(v) == self.value
        if self._number is not None:
            return isinstance(v, float) and v == self._number
        return False  # neither a string nor a number we can compare



# -- the forwarder ------------------------------------------------------------------------


class NSQForwarder:
    """Consume ``topics`` on ``channel`` and republish every message to the
    ``destinations``.

    Args:
        topics: topics to consume (one consumer each; duplicates ignored).
        channel: the channel to consume them on.
        destinations: destination nsqd ``host:port`` TCP addresses (at
            least one; duplicates ignored).
        nsqd_tcp_addresses: source nsqd ``host:port`` TCP addresses;
        lookupd_http_addresses: or lookupd HTTP addresses to find them (one
            of the two, as :class:`~nsq.client.Consumer` takes them).
        destination_topic: the topic to publish to; "" (default): the topic
            each message was consumed from.
        mode: how a destination is picked per message: ``"hostpool"``,
            ``"round-robin"`` or ``"epsilon-greedy"``.
        json_filter: a :class:`JSONFilter`; None or an inactive one:
            bodies are forwarded as they are.
        status_every: publish results per status line, logged at INFO on
            the ``nsq.to_nsq`` logger (<= 0 disables).
        identify, consumer_args: IDENTIFY fields and further
            :class:`~nsq.client.Consumer` keyword arguments
            (``max_in_flight`` ...) of the source connections.
        producer_identify, producer_args: IDENTIFY fields and
            :class:`~nsq.client.Producer` keyword arguments
            (``connect_timeout``, seconds) of the destination connections.
        http_connect_timeout, http_request_timeout: seconds, for the lookupd
            HTTP queries.
        drain_timeout: seconds :meth:`stop` waits for the publishes in
            flight (then nsqd requeues the rest).

    Raises:
        ValueError: an unknown ``mode`` or no destination.
    """

    def __init__(self, topics: Iterable[str], channel: str, destinations: Iterable[str], *,
                 nsqd_tcp_addresses: Iterable[str] = (), lookupd_http_addresses: Iterable[str] = (),
                 destination_topic: str = "", mode: str = "hostpool", json_filter: JSONFilter | None = None,
                 status_every: int = 250, identify: dict[str, Any] | None = None,
                 consumer_args: dict[str, Any] | None = None, producer_identify: dict[str, Any] | None = None,
                 producer_args: dict[str, Any] | None = None, http_connect_timeout: float = 2.0,
                 http_request_timeout: float = 5.0, drain_timeout: float = DRAIN_TIMEOUT) -> None:
        from nsq.client.hostpool import make_chooser

        self.topics = list(dict.fromkeys(topics))
        self.channel = channel
        self.destinations = list(dict.fromkeys(destinations))
        self.chooser = make_chooser(mode, self.destinations)
        self.nsqd_tcp_addresses = list(nsqd_tcp_addresses)
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.destination_topic = destination_topic
        self.json_filter = json_filter if json_filter is not None and json_filter.active else None
        self.identify = dict(identify or {})
        self.consumer_args = dict(consumer_args or {})
        self.producer_identify = producer_identify
        self.producer_args = dict(producer_args or {})
        self.http_connect_timeout = http_connect_timeout
        self.http_request_timeout = http_request_timeout
        self.drain_timeout = drain_timeout
        def emit(line: str) -> None:
            log.info("%s", line)

        self.aggregate = TimerMetrics(status_every, "[aggregate]:", emit)
        # Go: per-destination lines only when there is more than one
        per = status_every if len(self.destinations) > 1 else 0
        self.per_address = {a: TimerMetrics(per, f"[{a}]:", emit) for a in self.destinations}
        #: one Consumer per topic, and one Producer per destination, once started
        self.consumers: list[Any] = []
        self.producers: dict[str, Any] = {}
        self._lookupd_client: Any = None
        self._started = self._running = self._closed = False

    def _handler(self, topic: str) -> Callable[[Message], Awaitable[bool]]:
        """The Consumer handler for messages of ``topic``: filter, pick a
        destination, publish, answer."""
        dest_topic = self.destination_topic or topic
        jfilter = self.json_filter

        async def handle(msg: Message) -> bool:
            body = msg.body
            if jfilter is not None:
                verdict, body = jfilter.apply(body)
                if verdict == DROP:
                    return True  # FIN: filtered out
                if verdict == BACKOFF:
                    return False  # REQ with the default delay and backoff
            address = self.chooser.get()
            start = time.monotonic()
            try:
                await self.producers[address].publish(dest_topic, body)
                ok = True
            except Exception as exc:
                # a ConnectError's reason: its text would name the address twice
                log.error("publish to %s (%s) failed: %s", address, dest_topic,
                          getattr(exc, "reason", None) or str(exc) or type(exc).__name__)
                ok = False
            elapsed = time.monotonic() - start
            self.chooser.mark(address, ok, elapsed)
            self.per_address[address].status(elapsed)
            self.aggregate.status(elapsed)
            return ok  # True: FIN now that the destination said OK; False: REQ

        return handle

    async def start(self) -> None:
        """Make the producers (they connect on the first publish) and start
        the consumers.

        Raises:
            RuntimeError: started before.
            OSError, asyncio.TimeoutError: a source could not be reached
                (what :meth:`Consumer.start` raises); everything is closed again.
        """
        from nsq.client import Consumer, Producer

        if self._started:
            raise RuntimeError("NSQForwarder already started")
        self._started = True
        try:
            self.producers = {a: Producer(a, self.producer_identify, **self.producer_args) for a in self.destinations}
            kwargs = self.consumer_args
            if self.lookupd_http_addresses:
                from nsq.client.lookupd import LookupdHTTPClient

                self._lookupd_client = LookupdHTTPClient(self.http_connect_timeout, self.http_request_timeout,
                                                         user_agent=self.identify.get("user_agent"))
                kwargs = {**kwargs, "lookupd_client": self._lookupd_client}
            self.consumers = [Consumer(t, self.channel, self._handler(t), self.nsqd_tcp_addresses,
                                       identify=self.identify, lookupd_http_addresses=self.lookupd_http_addresses,
                                       **kwargs) for t in self.topics]
            await asyncio.gather(*(c.start() for c in self.consumers))
        except BaseException:
            await self._close()
            raise
        self._running = True

    async def stop(self) -> None:
        """Stop consuming (CLS), wait at most ``drain_timeout`` for the
        publishes in flight so their FIN/REQ reach the source nsqd, then
        close consumers, producers and the lookupd client. Safe to call more
        than once or after a failed :meth:`start`."""
        if self._running:
            self._running = False
            log.info("stopping: waiting for publishes in flight")
        await self._close()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(c.close(timeout=self.drain_timeout) for c in self.consumers), return_exceptions=True)
        await asyncio.gather(*(p.close() for p in self.producers.values()), return_exceptions=True)
        if self._lookupd_client is not None:
            await self._lookupd_client.close()
