"""Peeking at the next messages of a channel (or of a topic's own queue)
over nsqd's HTTP API, merged over the nsqds that have it, for ``nsq admin``.

``GET /channel/peek?topic=&channel=&n=K`` and ``GET /topic/peek?topic=&n=K``
are this project's nsqd only (Go nsqd's HTTP API,
https://nsq.io/components/nsqd.html#http-api, has no such endpoint and
answers 404 ``{"message":"NOT_FOUND"}``). They change nothing (depth,
counters, queue positions) and answer ``{"messages": [{"id": "<16 ascii
chars>", "timestamp": <ns since the Unix epoch>, "attempts": <int>,
"body": "<base64>"}]}``, memory first, then disk; K is 1..100.

Nothing here does I/O except :func:`peek_nsqds` (through an
:class:`~nsq.cluster.nsqd.NSQDHTTPClient`); :func:`merge_peeks`,
:func:`peek_targets` and :func:`body_text` are pure.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nsq.client.lookupd import HTTPAPIError

if TYPE_CHECKING:
    from nsq.cluster.model import ChannelStats, ClusterSnapshot, TopicStats
    from nsq.cluster.nsqd import NSQDHTTPClient

__all__ = ["PEEK_MAX", "Peek", "PeekTarget", "PeekedMessage", "body_text", "merge_peeks", "peek_nsqds",
           "peek_targets"]

#: the most messages one nsqd gives per peek (its ``n`` bound)
PEEK_MAX = 100


@dataclass(frozen=True)
class PeekedMessage:
    """One queued message as an nsqd's peek shows it.

    Attributes:
        id: the message ID, 16 ASCII characters (hex).
        timestamp: when it was published, ns since the Unix epoch.
        attempts: deliveries so far (0: never delivered).
        body: the message body, raw bytes.
        node: the nsqd's HTTP address (``host:port``, as
            :class:`~nsq.cluster.model.ChannelStats` ``node``).
        hostname: the nsqd's hostname ("" if unknown).
    """

    id: str
    timestamp: int
    attempts: int
    body: bytes
    node: str = ""
    hostname: str = ""

    @classmethod
    def from_json(cls, obj: Any, node: str = "", hostname: str = "") -> PeekedMessage:
        """One entry of a peek's ``messages`` list.

        Raises:
            ValueError: not an object with an ``id``, an integer
                ``timestamp`` and ``attempts``, and a base64 ``body``.
        """
        if not isinstance(obj, dict):
            raise ValueError("a message is not an object")
        try:
            body = base64.b64decode(str(obj.get("body") or ""), validate=True)
            timestamp, attempts = int(obj["timestamp"]), int(obj.get("attempts") or 0)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"bad message: {exc}") from None
        return cls(id=str(obj.get("id") or ""), timestamp=timestamp, attempts=attempts, body=body, node=node,
                   hostname=hostname)

    def age(self, now: float) -> float:
        """Seconds between its publication and ``now`` (Unix seconds), never negative."""
        return max(0.0, now - self.timestamp / 1e9)

    @property
    def where(self) -> str:
        """The nsqd as the admin tables name it: ``hostname:port``, else its address."""
        if self.hostname and self.node:
            return f"{self.hostname}:{self.node.rsplit(':', 1)[-1]}"
        return self.node or self.hostname


@dataclass(frozen=True)
class PeekTarget:
    """An nsqd to peek at.

    Attributes:
        address: where its HTTP API answers (``NodeInfo.api_address``:
            ``host:port`` or ``http(s)://host:port``).
        node: its HTTP address (``broadcast_address:http_port``), put in each
            :class:`PeekedMessage`.
        hostname: its hostname ("" if unknown).
    """

    address: str
    node: str
    hostname: str = ""


@dataclass
class Peek:
    """The next messages of a channel (or topic) over the cluster.

    Attributes:
        topic, channel: what was peeked at (``channel`` "": the topic's own queue).
        taken_at: Unix seconds of the peek (ages are measured against it).
        messages: the merged messages, oldest ``timestamp`` first.
        notes: one line per nsqd that could not be peeked at, and why.
        asked: how many nsqds were asked.
    """

    topic: str
    channel: str = ""
    taken_at: float = 0.0
    messages: list[PeekedMessage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    asked: int = 0


def merge_peeks(answers: Iterable[Sequence[PeekedMessage]]) -> list[PeekedMessage]:
    """Merge the lists of several nsqds into one, oldest ``timestamp``
    first; ties keep the order given (the nsqds' order, then each one's own
    delivery order)."""
    merged = [m for answer in answers for m in answer]
    merged.sort(key=lambda m: m.timestamp)
    return merged


def peek_targets(snapshot: ClusterSnapshot, topic: str, channel: str = "") -> list[PeekTarget]:
    """The nsqds of ``snapshot`` that have ``channel`` of ``topic`` (no
    ``channel``: the topic), to peek at; [] when the snapshot has none."""
    t = snapshot.topic(topic)
    if t is None:
        return []
    rows: Sequence[TopicStats | ChannelStats] = t.nodes
    if channel:
        ch = t.channel(channel)
        rows = ch.nodes if ch is not None else []
    out = []
    for row in rows:
        info = snapshot.node(row.node)
        out.append(PeekTarget(info.api_address if info is not None else row.node, row.node,
                              row.hostname or (info.hostname if info is not None else "")))
    return out


def _why(error: HTTPAPIError, target: PeekTarget, channel: str) -> str:
    name = f"nsqd {target.hostname + ' ' if target.hostname else ''}({target.node})"
    if error.status == 404:
        if "CHANNEL_NOT_FOUND" in error.reason or "TOPIC_NOT_FOUND" in error.reason:
            return f"{name}: no longer has this {'channel' if channel else 'topic'}"
        return f"{name}: no peek endpoint (Go nsqd has none)"
    return f"{name}: {error.reason}"


async def peek_nsqds(client: NSQDHTTPClient, targets: Sequence[PeekTarget], topic: str, channel: str = "",
                     n: int = 20) -> Peek:
    """Ask each of ``targets`` for its next ``n`` messages of ``topic``/``channel``
    (no ``channel``: the topic's own queue), concurrently, and merge them.

    An nsqd that fails (unreachable, no peek endpoint, the channel gone)
    becomes a line in ``notes``; this never raises for it.
    """
    taken_at = time.time()
    answers = await asyncio.gather(*(client.peek(t.address, topic, channel or None, n, node=t.node,
                                                 hostname=t.hostname) for t in targets),
                                   return_exceptions=True)
    lists: list[list[PeekedMessage]] = []
    notes = []
    for target, answer in zip(targets, answers):
        if isinstance(answer, HTTPAPIError):
            notes.append(_why(answer, target, channel))
        elif isinstance(answer, BaseException):
            raise answer
        else:
            lists.append(answer)
    return Peek(topic=topic, channel=channel, taken_at=taken_at, messages=merge_peeks(lists), notes=notes,
                asked=len(targets))


_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(c: str) -> str:
    code = ord(c)
    if code in _ESCAPES:
        return _ESCAPES[code]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def body_text(body: bytes) -> tuple[str, bool]:
    """A body on one line: ``(text, True)`` when it is UTF-8 (tabs, line
    breaks and other unprintable characters escaped as ``\\n``, ``\\x1b``,
    ``\\u2028``), else ``(its bytes in hex separated by spaces, False)``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return body.hex(" "), False
    if text.isprintable():
        return text, True
    return "".join(c if c.isprintable() else _escape(c) for c in text), True
