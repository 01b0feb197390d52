"""What rewinding a channel asks of and hears from an nsqd started with
``--storage=wal`` (this project's topic log, beyond Go nsqd): the point in
time the user gives, and the error codes of ``POST /channel/rewind``
(``nsq/server/nsqd/http/replay.py``; docs/reference/http.md, "Retention,
replay and reading by offset").

``POST /channel/rewind?topic=T&channel=C&since=S`` makes the channel
deliver again every retained message published since ``S`` and answers
``{"offset": N, "count": M}`` (its new offset in the topic's log, how many
messages that puts back). ``S`` here is what :func:`parse_since` accepts:
a Go duration meaning that long ago (``90m``), resolved by each nsqd
against its own clock, or an RFC 3339 time.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from nsq._internal.durations import parse_duration
from nsq.client.lookupd import HTTPAPIError

__all__ = ["NEEDS_STORAGE_WAL", "OFFSET_NOT_RETAINED", "error_code", "format_time", "is_time", "parse_since"]

#: nsqd's 400 answer to a rewind on an nsqd without a topic log
#: (``--storage=diskqueue``), as ``nsq/server/nsqd/http/replay.py`` words it
NEEDS_STORAGE_WAL = "NEEDS_STORAGE_WAL: start nsqd with --storage=wal"
#: nsqd's 400 answer when the time is before the oldest retained message
#: (the same request with ``clamp=true`` rewinds to the oldest instead)
OFFSET_NOT_RETAINED = "OFFSET_NOT_RETAINED"


def is_time(text: str) -> bool:
    """Whether ``text`` is meant as a date and time (RFC 3339), not a duration."""
    text = text.strip()
    return "T" in text or (len(text) >= 10 and text[4:5] == "-")


def parse_since(text: str, now_ns: int | None = None) -> int:
    """The point in time ``text`` names, Unix ns: a Go duration meaning
    that long before ``now_ns`` (default now: ``1h``, ``90m``, ``0`` for
    now) or an RFC 3339 time with its zone (``2026-11-25T10:00:00Z``,
    ``2026-11-25T11:00:00+01:00``).

    Raises:
        ValueError: neither, a negative duration, a time without a zone,
            or a time after ``now_ns``.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    text = text.strip()
    if not text:
        raise ValueError("give a duration (1h) or an RFC 3339 time")
    if is_time(text):
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"{text!r} is not an RFC 3339 time") from None
        if when.tzinfo is None:
            raise ValueError(f"{text!r} has no time zone (add Z or +01:00)")
        ns = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
    else:
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise ValueError(f"{text!r} is neither a duration (1h, 30m) nor an RFC 3339 time") from None
        if seconds < 0:
            raise ValueError(f"{text!r}: a duration means that long ago, give it without a sign")
        ns = now_ns - int(seconds * 1_000_000_000)
    if ns > now_ns:
        raise ValueError(f"{text!r} is in the future")
    return ns


def format_time(ns: int) -> str:
    """Unix ns as an RFC 3339 time in UTC to the second (``2026-11-25T10:00:00Z``),
    a form :func:`parse_since` reads back."""
    return datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def error_code(exc: HTTPAPIError) -> str:
    """The ``message`` of an nsqd's JSON error answer (``{"message":
    "OFFSET_NOT_RETAINED"}``), which the HTTP client keeps at the end of
    the error's ``reason`` (the body's first 200 bytes); "" when there is
    none (unreachable, or a body that is not such an object)."""
    start = exc.reason.find("{")
    if start < 0:
        return ""
    try:
        body = json.loads(exc.reason[start:])
    except ValueError:
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else ""
