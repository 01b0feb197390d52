"""``nsq to-nsq``: consume topics and republish them to other nsqds (nsq_to_nsq).

Go NSQ v1.2's ``apps/nsq_to_nsq`` (seed 000 "nsq_to_nsq"): one consumer per
``--topic`` on ``--channel`` (default ``nsq_to_nsq``); every message is
published over TCP to one ``--destination-nsqd-tcp-address`` picked by
``--mode`` (round-robin | hostpool (default) | epsilon-greedy, see
:mod:`nsq.client.hostpool`) to ``--destination-topic`` (default: the topic
it was consumed from). The source message is FINed only once the
destination answered ``OK``; a failed publish REQs it with the default
delay and backoff (Go's ``msg.Requeue(-1)``). Publishes are pipelined: up
to ``--max-in-flight`` are awaiting their ``OK`` at once.

JSON filtering, as Go v1.2 (``json.Unmarshal`` into a
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

``--status-every N`` (default 250; 0 disables) logs
``[aggregate]: finished N - 99th: ..ms - 95th: ..ms - avg: ..ms`` every N
publish results (and the same per destination, prefixed ``[host:port]:``,
when there are several). SIGINT/SIGTERM stop consuming, wait (bounded) for
the publishes in flight, close consumers and producers, and exit 0.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import math
import re
import sys
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import click

from nsq.commands._consumer import check_sources, consumer_flags, consumer_settings, producer_settings, stop_event
from nsq.commands._go import GoCommand, fail, run_async

__all__ = ["to_nsq", "JSONFilter", "TimerMetrics", "go_json_encode", "PASS", "DROP", "BACKOFF", "DRAIN_TIMEOUT"]

log = logging.getLogger("nsq.to_nsq")

#: seconds to wait at shutdown for publishes in flight (then nsqd requeues the rest)
DRAIN_TIMEOUT = 5.0

#: :meth:`JSONFilter.apply` verdicts: forward, FIN without forwarding, REQ with backoff
PASS, DROP, BACKOFF = "pass", "drop", "backoff"


# -- JSON, the way Go's encoding/json sees it -------------------------------------------


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    # Go decodes each byte of an invalid UTF-8 sequence to one U+FFFD
    return "\ufffd", exc.start + 1  # type: ignore[attr-defined]


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


# -- status lines -------------------------------------------------------------------------


class TimerMetrics:
    """bitly/timer_metrics as Go v1.2 uses it: every ``every`` durations,
    log ``<prefix> finished <n> - 99th: ..ms - 95th: ..ms - avg: ..ms`` and
    start over. ``every`` <= 0 disables it.

    Args:
        every: how many durations per line.
        prefix: ``[aggregate]:`` or ``[host:port]:``.
        emit: called with each line (default: logged at INFO).
    """

    def __init__(self, every: int, prefix: str, emit: Callable[[str], None] | None = None) -> None:
        self.every = every
        self.prefix = prefix
        self.emit = emit or (lambda line: log.info("%s", line))
        self._timings: list[float] = []

    def status(self, seconds: float) -> None:
        """Record one duration (seconds)."""
        if self.every <= 0:
            return
        self._timings.append(seconds)
        if len(self._timings) < self.every:
            return
        timings = sorted(self._timings)
        self._timings.clear()
        n = len(timings)
        avg_ms = sum(timings) * 1000 / n

        def pct(p: float) -> float:
            i = math.ceil(p / 100 * n + 0.5)
            return timings[min(i, n - 1)] * 1000

        self.emit(f"{self.prefix} finished {n} - 99th: {pct(99):.2f}ms - 95th: {pct(95):.2f}ms - avg: {avg_ms:.2f}ms")


# -- the command --------------------------------------------------------------------------


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_to_nsq", "nsq_to_nsq")
@click.option("--destination-nsqd-tcp-address", "destinations", multiple=True,
              help="destination nsqd TCP address (may be given multiple times)")
@click.option("--destination-topic", default="",
              help="use this destination topic for all consumed topics (default is consumed topic name)")
@click.option("--producer-opt", "producer_opts", multiple=True,
              help="option to passthrough to the Producer, go-nsq Config names as key,value "
                   "(may be given multiple times)")
@click.option("--mode", default="hostpool",
              help="the upstream request mode options: round-robin, hostpool (default), epsilon-greedy")
@click.option("--require-json-field", default="",
              help="for JSON messages: only pass messages that contain this field")
@click.option("--require-json-value", default="",
              help="for JSON messages: only pass messages in which the required field has this value")
@click.option("--whitelist-json-field", "whitelist", multiple=True,
              help="for JSON messages: pass this field (may be given multiple times)")
@click.option("--status-every", type=int, default=250,
              help="the # of requests between logging status (per destination), 0 disables (default 250)")
def to_nsq(topics: tuple[str, ...], channel: str, addresses: tuple[str, ...], lookupd: tuple[str, ...],
           max_in_flight: int, consumer_opts: tuple[str, ...], http_connect_timeout: float,
           http_request_timeout: float, destinations: tuple[str, ...], destination_topic: str,
           producer_opts: tuple[str, ...], mode: str, require_json_field: str, require_json_value: str,
           whitelist: tuple[str, ...], status_every: int) -> None:
    """Consume TOPIC(s) on CHANNEL and republish every message to destination nsqds.

    Checks and messages are Go v1.2's (exit 1 with one line on stderr).
    """
    from nsq.client.hostpool import MODES
    from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

    if not topics or not channel:
        fail("--topic and --channel are required")
    for t in topics:
        if not is_valid_topic_name(t):
            fail("--topic is invalid")
    if destination_topic and not is_valid_topic_name(destination_topic):
        fail("--destination-topic is invalid")
    if not is_valid_channel_name(channel):
        fail("--channel is invalid")
    check_sources(topics, channel, addresses, lookupd)
    if not destinations:
        fail("--destination-nsqd-tcp-address required")
    if mode not in MODES:
        # Go falls back to round-robin silently; an unknown mode is a typo
        fail(f"invalid --mode {mode!r} (round-robin, hostpool, epsilon-greedy)")
    if require_json_value and not require_json_field:
        # Go ignores the value then; say so instead
        fail("--require-json-value requires --require-json-field")
    c_identify, c_kwargs = consumer_settings("nsq_to_nsq", consumer_opts, max_in_flight)
    p_identify, p_kwargs = producer_settings("nsq_to_nsq", producer_opts)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s: %(message)s",
                        datefmt="%Y/%m/%d %H:%M:%S", stream=sys.stderr)
    relay = _Relay(list(dict.fromkeys(destinations)), mode, destination_topic,
                   JSONFilter(require_json_field, require_json_value, whitelist), status_every,
                   p_identify, p_kwargs)
    try:
        code = run_async(relay.run(list(dict.fromkeys(topics)), channel, list(addresses), list(lookupd),
                                   c_identify, c_kwargs, http_connect_timeout, http_request_timeout))
    except (OSError, asyncio.TimeoutError) as exc:
        fail(f"cannot connect to nsqd: {exc}")
    except Exception as exc:
        fail(str(exc))
    sys.exit(code)


class _Relay:
    """The consumers' handler: filter, pick a destination, publish, answer."""

    def __init__(self, destinations: list[str], mode: str, destination_topic: str, jfilter: JSONFilter,
                 status_every: int, identify: dict[str, Any], producer_kwargs: dict[str, Any]) -> None:
        from nsq.client.hostpool import make_chooser

        self.destinations = destinations
        self.chooser = make_chooser(mode, destinations)
        self.destination_topic = destination_topic
        self.jfilter = jfilter
        self.identify = identify
        self.producer_kwargs = producer_kwargs
        self.producers: dict[str, Any] = {}
        self.aggregate = TimerMetrics(status_every, "[aggregate]:")
        # Go: per-destination lines only when there is more than one
        per = status_every if len(destinations) > 1 else 0
        self.per_address = {a: TimerMetrics(per, f"[{a}]:") for a in destinations}

    def handler(self, topic: str):
        """The Consumer handler for messages of ``topic``."""
        dest_topic = self.destination_topic or topic
        jfilter = self.jfilter if self.jfilter.active else None

        async def handle(msg) -> bool:
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
                log.error("publish to %s (%s) failed: %s", address, dest_topic, str(exc) or type(exc).__name__)
                ok = False
            elapsed = time.monotonic() - start
            self.chooser.mark(address, ok, elapsed)
            self.per_address[address].status(elapsed)
            self.aggregate.status(elapsed)
            return ok  # True: FIN now that the destination said OK; False: REQ

        return handle

    async def run(self, topics: list[str], channel: str, addresses: list[str], lookupd: list[str],
                  identify: dict[str, Any], kwargs: dict[str, Any], http_connect_timeout: float,
                  http_request_timeout: float) -> int:
        from nsq.client import Consumer, Producer

        done = stop_event()
        # producers connect on the first publish (a destination may be down at start)
        self.producers = {a: Producer(a, self.identify, **self.producer_kwargs) for a in self.destinations}
        lookupd_client = None
        if lookupd:
            from nsq.client.lookupd import LookupdHTTPClient

            lookupd_client = LookupdHTTPClient(http_connect_timeout, http_request_timeout,
                                               user_agent=identify.get("user_agent"))
            kwargs = {**kwargs, "lookupd_client": lookupd_client}
        consumers = [Consumer(t, channel, self.handler(t), addresses, identify=identify,
                              lookupd_http_addresses=lookupd, **kwargs) for t in topics]
        try:
            await asyncio.gather(*(c.start() for c in consumers))
            await done.wait()
            log.info("stopping: waiting for publishes in flight")
        finally:
            # CLS, then wait (bounded) for the handlers, i.e. the publishes in
            # flight, so their FIN/REQ reach the source nsqd
            await asyncio.gather(*(c.close(timeout=DRAIN_TIMEOUT) for c in consumers), return_exceptions=True)
            await asyncio.gather(*(p.close() for p in self.producers.values()), return_exceptions=True)
            if lookupd_client is not None:
                await lookupd_client.close()
        return 0
