"""nsqd's HTTP API for the topic log (``--storage=wal``): retention, replay
and reading by offset. Beyond Go nsqd (nsqio/nsq #1093 asked for replay).

- ``GET|POST /topic/config?topic=T``: the topic's retention, JSON
  ``{"retention_time": "24h", "retention_bytes": 1073741824}`` (POST sets
  either or both; kept in the topic's ``topic.json``).
- ``POST /channel/rewind?topic=T&channel=C&since=S`` or ``&offset=N``
  (``&clamp=true``): the channel delivers again every retained message
  from there on; answers ``{"offset": N, "count": M}``.
- ``POST /channel/create?...&start=earliest|latest|S``: (in :mod:`http`)
  a new channel may begin at the oldest retained message or a time.
- ``GET /topic/read?topic=T&offset=N&limit=K&max_bytes=B``: up to K
  messages from offset N, binary (see :func:`encode_read`), changing
  nothing; for readers that keep their own position (the Spark source).
  ``X-NSQ-Synced-Offset`` says below which offset every message is
  fsynced; ``&synced=true`` reads only those.
- ``POST /channel/commit?topic=T&channel=C&offset=N``: every message below
  N is finished for that channel (such a reader's progress: its lag shows
  in ``/stats`` and retention keeps what it has not read).

On an nsqd with ``--storage=diskqueue`` every one answers 400
``NEEDS_STORAGE_WAL`` (naming the flag).

``S`` is an RFC 3339 time (``2026-11-25T10:00:00Z``), a Unix time in ns,
or a Go duration meaning that long ago (``90m``).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nsq._internal.durations import format_duration, parse_duration
from nsq.protocol.logpage import PAGE_HEADER, encode_page
from nsq.server.httpapi import HTTPError, json_response, read_json_object
from nsq.server.nsqd.delivery.logstore import LogChannelStore, LogTopicStore

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.delivery.host import DaemonHost
    from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["add_routes", "parse_since", "resolve_start", "offset_arg", "encode_read", "READ_HEADER"]

NEEDS_WAL = "NEEDS_STORAGE_WAL: start nsqd with --storage=wal"
#: one message's header of a /topic/read answer (nsq.protocol.logpage)
READ_HEADER = PAGE_HEADER
#: most messages per /topic/read
MAX_READ = 10_000
#: most bytes of bodies per /topic/read (default 4 MiB)
MAX_READ_BYTES = 64 << 20


def parse_since(text: str, now_ns: int | None = None) -> int:
    """A point in time as ns since the epoch: an RFC 3339 time, a Unix time
    in ns (digits), or a Go duration meaning that long before ``now_ns``.

    Raises:
        ValueError: none of these.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    text = text.strip()
    if text.isdigit():
        return int(text)
    if "T" in text or (len(text) >= 10 and text[4:5] == "-"):
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        if when.tzinfo is None:
            raise ValueError(f"{text!r} has no time zone")
        return int(when.timestamp() * 1_000_000_000)
    return now_ns - int(parse_duration(text) * 1_000_000_000)


def resolve_start(topic: Topic, text: str) -> int:
    """The offset ``text`` names in ``topic``'s log: ``earliest`` (the oldest
    retained), ``latest`` (the head) or a time for :func:`parse_since`.

    Raises:
        HTTPError: 400 ``INVALID_START``.
    """
    assert topic.log is not None
    if text == "earliest":
        return topic.log.first
    if text == "latest":
        return topic.log.head
    try:
        return topic.log.offset_for_time(parse_since(text))
    except ValueError:
        raise HTTPError(400, "INVALID_START") from None


def encode_read(records: list[Any]) -> bytes:
    """The body of a ``/topic/read`` answer for topic-log records
    (:data:`nsq.server.nsqd.storage.topiclog.LogRecord`), in the format of
    :mod:`nsq.protocol.logpage`."""
    return encode_page((r[0], r[1], r[2], r[3], r[4]) for r in records)


def _wal_topic(nsqd: DaemonHost, request: web.Request) -> Topic:
    if not nsqd.disk.wal:
        raise HTTPError(400, NEEDS_WAL)
    name = request.query.get("topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    topic = nsqd.get_existing_topic(name)
    if topic is None:
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    if topic.log is None:
        raise HTTPError(400, "EPHEMERAL_TOPIC_HAS_NO_LOG")
    return topic


def _wal_channel(nsqd: DaemonHost, request: web.Request) -> tuple[Topic, Channel, LogChannelStore]:
    topic = _wal_topic(nsqd, request)
    name = request.query.get("channel")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    channel = topic.channels.get(name)
    if channel is None:
        raise HTTPError(404, "CHANNEL_NOT_FOUND")
    store = channel.store
    assert isinstance(store, LogChannelStore)  # every channel of a topic log
    return topic, channel, store


def offset_arg(request: web.Request, topic: Topic) -> int:
    """``offset=N`` or ``since=S`` of the request, checked against what is retained."""
    assert topic.log is not None
    if "offset" in request.query:
        try:
            offset = int(request.query["offset"])
        except ValueError:
            raise HTTPError(400, "INVALID_OFFSET") from None
    elif "since" in request.query:
        try:
            since = parse_since(request.query["since"])
        except ValueError:
            raise HTTPError(400, "INVALID_SINCE") from None
        offset = topic.log.offset_for_time(since)
        if topic.log.first > 0 and offset == topic.log.first:
            # a time before the oldest retained message names messages that are gone
            oldest = topic.log.timestamp_at(topic.log.first)
            if oldest is not None and since < oldest:
                offset = topic.log.first - 1
    else:
        raise HTTPError(400, "MISSING_ARG_OFFSET")
    if offset < 0 or offset > topic.log.head:
        raise HTTPError(400, "INVALID_OFFSET")
    if offset < topic.log.first:
        if request.query.get("clamp", "false").lower() not in ("true", "1"):
            raise HTTPError(400, "OFFSET_NOT_RETAINED")
        offset = topic.log.first
    return offset


def add_routes(router: web.UrlDispatcher, nsqd: DaemonHost) -> None:
    """Register the topic-log endpoints on nsqd's HTTP router."""

    async def topic_config(request: web.Request) -> web.Response:
        topic = _wal_topic(nsqd, request)
        if request.method == "POST":
            doc = await read_json_object(request, {"retention_time", "retention_bytes"})
            rt = rb = None
            if "retention_time" in doc:
                try:
                    rt = parse_duration(doc["retention_time"])
                except (ValueError, TypeError):
                    raise HTTPError(400, "INVALID_RETENTION_TIME") from None
                if rt < 0:
                    raise HTTPError(400, "INVALID_RETENTION_TIME")
            if "retention_bytes" in doc:
                rb = doc["retention_bytes"]
                if not isinstance(rb, int) or isinstance(rb, bool) or rb < 0:
                    raise HTTPError(400, "INVALID_RETENTION_BYTES")
        store = topic.store
        assert isinstance(store, LogTopicStore)
        if request.method == "POST":
            try:
                store.set_retention(topic, rt, rb)
            except OSError:
                raise HTTPError(500, "INTERNAL_ERROR") from None
        return json_response({"retention_time": format_duration(store.retention_time),
                              "retention_bytes": store.retention_bytes})

    async def channel_rewind(request: web.Request) -> web.Response:
        topic, channel, store = _wal_channel(nsqd, request)
        offset = offset_arg(request, topic)
        count = store.rewind(channel, offset)
        return json_response({"offset": offset, "count": count})

    async def channel_commit(request: web.Request) -> web.Response:
        topic, channel, store = _wal_channel(nsqd, request)
        offset = offset_arg(request, topic)
        store.commit(channel, offset)
        return json_response({"offset": store.position(channel), "depth": channel.depth})

    async def topic_read(request: web.Request) -> web.Response:
        topic = _wal_topic(nsqd, request)
        assert topic.log is not None
        offset = offset_arg(request, topic)
        try:
            limit = int(request.query.get("limit", "1000"))
            max_bytes = int(request.query.get("max_bytes", str(4 << 20)))
        except ValueError:
            raise HTTPError(400, "INVALID_LIMIT") from None
        if not 1 <= limit <= MAX_READ or not 1 <= max_bytes <= MAX_READ_BYTES:
            raise HTTPError(400, "INVALID_LIMIT")
        records: list[Any] = []
        nbytes = 0
        synced_only = request.query.get("synced", "") in ("1", "true")
        end = min(topic.log.synced if synced_only else topic.log.head, offset + limit)
        nxt = offset
        while nxt < end and nbytes < max_bytes:
            got, after = topic.log.read(nxt, end - nxt, max_bytes=min(max_bytes - nbytes + 4096, 4 << 20))
            if after <= nxt:
                break
            records += got
            nbytes += sum(len(r[2]) for r in got)
            nxt = after
        headers = {"X-NSQ-Next-Offset": str(nxt), "X-NSQ-Head-Offset": str(topic.log.head),
                   "X-NSQ-First-Offset": str(topic.log.first), "X-NSQ-Synced-Offset": str(topic.log.synced),
                   "X-NSQ-Content-Type": "nsq; version=1.0"}
        return web.Response(body=encode_read(records), headers=headers, content_type="application/octet-stream")

    router.add_get("/topic/config", topic_config, allow_head=False)
    router.add_post("/topic/config", topic_config)
    router.add_post("/channel/rewind", channel_rewind)
    router.add_post("/channel/commit", channel_commit)
    router.add_get("/topic/read", topic_read, allow_head=False)
