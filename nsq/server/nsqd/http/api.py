"""nsqd's HTTP API on aiohttp (https://nsq.io/components/nsqd.html#http-api;
Go: nsqd/http.go).

Responses carry ``X-NSQ-Content-Type: nsq; version=1.0``; errors are
``{"message": "TEXT"}`` with the status code; plain successes are text and
data answers JSON objects.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from nsq import NSQ_VERSION
from nsq.protocol.names import is_valid_topic_name
from nsq.server.httpapi import (
    HTTPError,
    HTTPListener,
    json_response,
    read_json_object,
    read_limited,
    text_response,
    topic_channel_args,
)
from nsq.server.nsqd.http.replay import NEEDS_WAL, offset_arg, resolve_start
from nsq.server.nsqd.http.replay import add_routes as add_log_routes
from nsq.server.nsqd.http.auth import AUTH_KEY, auth_middleware, filter_stats
from nsq.server.nsqd.stats.metrics import metrics_handler
from nsq.server.nsqd.options import SPEC_BY_CFG, describe
from nsq.server.nsqd.stats.collect import collect_stats, get_stats
from nsq.server.nsqd.stats.text import render_text
from nsq.server.nsqd.delivery.topic import TopicFull
from nsq.server.nsqd.storage.backend import NotReplicated

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.delivery.host import DaemonHost
    from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["NSQDHTTPServer"]

log = logging.getLogger("nsq.nsqd")

_BOOL = {"true": True, "1": True, "false": False, "0": False}
_LEN = struct.Struct(">i")

_json = json_response
_text = text_response
_read_limited = read_limited


class NSQDHTTPServer:
    """The HTTP API of one :class:`~nsq.server.nsqd.nsqd.NSQD`."""

    def __init__(self, nsqd: DaemonHost) -> None:
        self.nsqd = nsqd
        self._listener = HTTPListener(client_max_size=max(
            nsqd.options.max_body_size, nsqd.options.max_msg_size) + 1,
            middlewares=(self._tls_required, auth_middleware(nsqd)))
        r = self._listener.router
        r.add_get("/ping", self.ping, allow_head=False)
        r.add_get("/info", self.info, allow_head=False)
        r.add_post("/pub", self.pub)
        r.add_post("/mpub", self.mpub)
        r.add_get("/stats", self.stats, allow_head=False)
        r.add_post("/topic/create", self.topic_create)
        r.add_post("/topic/delete", self.topic_delete)
        r.add_post("/topic/empty", self.topic_empty)
        r.add_post("/topic/pause", self.topic_pause)
        r.add_post("/topic/unpause", self.topic_pause)
        r.add_post("/channel/create", self.channel_create)
        r.add_post("/channel/delete", self.channel_delete)
        r.add_post("/channel/empty", self.channel_empty)
        r.add_post("/channel/pause", self.channel_pause)
        r.add_post("/channel/unpause", self.channel_pause)
        r.add_get("/config/{opt}", self.config, allow_head=False)
        # beyond Go nsqd: channel settings (max attempts) and peeking
        r.add_get("/channel/config", self.channel_config, allow_head=False)
        r.add_post("/channel/config", self.channel_config)
        r.add_get("/channel/peek", self.channel_peek, allow_head=False)
        r.add_get("/topic/peek", self.topic_peek, allow_head=False)
        r.add_post("/drain", self.drain)
        r.add_get("/metrics", metrics_handler(nsqd), allow_head=False)
        # beyond Go nsqd: retention, replay and reading by offset (--storage=wal)
        add_log_routes(r, nsqd)
        r.add_put("/config/{opt}", self.config)
        self.app = self._listener.app

    async def start(self, address: str, ssl_context: Any = None) -> tuple[str, int]:
        """Listen on ``host:port`` (HTTPS with ``ssl_context``); returns the bound (host, port)."""
        return await self._listener.start(address, ssl_context)

    async def bind(self, address: str, ssl_context: Any = None) -> tuple[str, int]:
        """Bind ``host:port`` without answering until :meth:`serve`
        (:meth:`HTTPListener.bind <nsq.server.httpapi.HTTPListener.bind>`)."""
        return await self._listener.bind(address, ssl_context)

    async def serve(self) -> None:
        """Answer requests on every bound address."""
        await self._listener.serve()

    @web.middleware
    async def _tls_required(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # Go: with --tls-required=true the plain HTTP listener answers every
        # request 403 and points at the HTTPS port
        nsqd = self.nsqd
        if nsqd.tls_required == "true" and not request.secure:
            return json_response({"message": "TLS_REQUIRED", "https_port": nsqd.https_port}, 403)
        return await handler(request)

    async def stop(self) -> None:
        """Close the listener and every HTTP connection."""
        await self._listener.stop()

    # -- helpers -----------------------------------------------------------------

    @staticmethod
    def _topic_arg(request: web.Request) -> str:
        if "topic" not in request.query:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        return request.query["topic"]

    def _topic_from_query(self, request: web.Request) -> Topic:
        """Go's getTopicFromQuery: creates the topic."""
        name = self._topic_arg(request)
        if not is_valid_topic_name(name):
            raise HTTPError(400, "INVALID_TOPIC")
        return self.nsqd.get_topic(name)

    def _existing_topic_channel(self, request: web.Request) -> tuple[Topic, str]:
        """Go's getExistingTopicFromQuery: (topic, channel name)."""
        topic_name, channel = topic_channel_args(request)
        topic = self.nsqd.get_existing_topic(topic_name)
        if topic is None:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        return topic, channel

    def _check_exiting(self) -> None:
        if self.nsqd.exiting:
            raise HTTPError(503, "EXITING")
        if self.nsqd.draining:
            raise HTTPError(503, "DRAINING")

    # -- handlers ----------------------------------------------------------------

    async def ping(self, request: web.Request) -> web.Response:
        """GET /ping: ``OK``, 503 ``DRAINING`` while draining (so load
        balancers take this nsqd out), or 500 ``NOK - <reason>`` when unhealthy."""
        if self.nsqd.draining and not self.nsqd.exiting:
            return _text("DRAINING", 503)
        health = self.nsqd.health
        if health != "OK":
            return _text(f"NOK - {health}", 500)
        return _text("OK")

    async def info(self, request: web.Request) -> web.Response:
        """GET /info: ``{version, broadcast_address, hostname, http_port, tcp_port, start_time}``."""
        return _json({
            "version": NSQ_VERSION,
            "broadcast_address": self.nsqd.options.broadcast_address,
            "hostname": self.nsqd.hostname(),
            "http_port": self.nsqd.http_port,
            "tcp_port": self.nsqd.tcp_port,
            "start_time": self.nsqd.start_time,
        })

    async def pub(self, request: web.Request) -> web.Response:
        """POST /pub?topic=&defer=ms: body is one message; ``OK``."""
        max_msg = self.nsqd.options.max_msg_size
        body = await _read_limited(request, max_msg)
        if body is None:
            raise HTTPError(413, "MSG_TOO_BIG")
        if not body:
            raise HTTPError(400, "MSG_EMPTY")
        topic = self._topic_from_query(request)
        defer_ms = 0
        if "defer" in request.query:
            try:
                defer_ms = int(request.query["defer"])
            except ValueError:
                raise HTTPError(400, "INVALID_DEFER") from None
            if not 0 <= defer_ms <= self.nsqd.options.max_req_timeout * 1000:
                raise HTTPError(400, "INVALID_DEFER")
        self._check_exiting()
        try:
            topic.publish([body], defer_ms)
        except TopicFull:
            raise HTTPError(503, _refusal(self.nsqd, topic, "PUB_FAILED")) from None
        await self._durable()
        return _text("OK")

    async def _durable(self) -> None:
        """With --sync-every=1, answer only once the write is fsynced."""
        barrier = self.nsqd.durability_barrier()
        if barrier is not None:
            try:
                # shielded: a client that goes away must not cancel the sync others may share (nor a
                # queued disk job, whose dup'ed fd only the job closes)
                await asyncio.shield(barrier)
            except NotReplicated as exc:
                raise HTTPError(503, f"PUB_FAILED: {exc}") from None
            except OSError:
                raise HTTPError(500, "INTERNAL_ERROR") from None

    async def mpub(self, request: web.Request) -> web.Response:
        """POST /mpub?topic=&binary=: newline-separated bodies, or ``[count]([size][body])*``; ``OK``."""
        opts = self.nsqd.options
        if request.content_length is not None and request.content_length > opts.max_body_size:
            raise HTTPError(413, "BODY_TOO_BIG")
        topic = self._topic_from_query(request)
        binary = False
        if "binary" in request.query:
            binary = _BOOL.get(request.query["binary"], True)
        body = await _read_limited(request, opts.max_body_size)
        if body is None:
            raise HTTPError(413, "BODY_TOO_BIG")
        if binary:
            bodies = _parse_binary_mpub(body, opts.max_msg_size, opts.max_body_size)
        else:
            bodies = [line for line in body.split(b"\n") if line]
            for line in bodies:
                if len(line) > opts.max_msg_size:
                    raise HTTPError(413, "MSG_TOO_BIG")
        self._check_exiting()
        if bodies:
            try:
                topic.publish(bodies)
            except TopicFull:
                raise HTTPError(503, _refusal(self.nsqd, topic, "MPUB_FAILED")) from None
            await self._durable()
        return _text("OK")

    async def stats(self, request: web.Request) -> web.Response:
        """GET /stats?format=json&topic=&channel=&include_clients=&include_mem=: text or JSON."""
        q = request.query
        include_clients = _BOOL.get(q.get("include_clients", ""), True)
        include_mem = _BOOL.get(q.get("include_mem", ""), True)
        topic, channel, state = q.get("topic", ""), q.get("channel", ""), request.get(AUTH_KEY)
        if q.get("format") == "json" and state is None:
            return _json(get_stats(self.nsqd, topic, channel, include_clients, include_mem))
        stats = collect_stats(self.nsqd, topic, channel, include_clients, include_mem)
        # --http-auth-required: only what the request's identity may subscribe to
        stats = filter_stats(stats, state, topic, channel)
        if q.get("format") == "json":
            return _json(stats.to_json())
        return _text(render_text(stats))

    async def topic_create(self, request: web.Request) -> web.Response:
        """POST /topic/create?topic=: 200, empty body."""
        self._topic_from_query(request)
        return _text("")

    async def topic_delete(self, request: web.Request) -> web.Response:
        """POST /topic/delete?topic=: 200, or 404 TOPIC_NOT_FOUND."""
        name = self._topic_arg(request)
        if not self.nsqd.delete_topic(name):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        return _text("")

    async def topic_empty(self, request: web.Request) -> web.Response:
        """POST /topic/empty?topic=: drop the topic's held messages (memory and disk)."""
        name = self._topic_arg(request)
        if not is_valid_topic_name(name):
            raise HTTPError(400, "INVALID_TOPIC")
        topic = self.nsqd.get_existing_topic(name)
        if topic is None:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        topic.empty()
        return _text("")

    async def topic_pause(self, request: web.Request) -> web.Response:
        """POST /topic/pause and /topic/unpause?topic=."""
        name = self._topic_arg(request)
        topic = self.nsqd.get_existing_topic(name)
        if topic is None:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        if request.path.endswith("unpause"):
            topic.unpause()
        else:
            topic.pause()
        return _text("")

    async def channel_create(self, request: web.Request) -> web.Response:
        """POST /channel/create?topic=&channel= (the topic must exist);
        ``&start=earliest|latest|S`` (``--storage=wal``): where a new
        channel begins in the topic log (default latest, as Go)."""
        topic, channel = self._existing_topic_channel(request)
        start = None
        if "start" in request.query or "offset" in request.query:
            if topic.log is None:
                raise HTTPError(400, NEEDS_WAL)
            if "offset" in request.query:  # as /channel/rewind's offset= (and clamp=)
                start = offset_arg(request, topic)
            else:
                start = resolve_start(topic, request.query["start"])
        topic.get_channel(channel, start)
        return _text("")

    async def channel_delete(self, request: web.Request) -> web.Response:
        """POST /channel/delete?topic=&channel=: closes its clients, removes its files."""
        topic, channel = self._existing_topic_channel(request)
        if not topic.delete_channel(channel):
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        return _text("")

    async def channel_empty(self, request: web.Request) -> web.Response:
        """POST /channel/empty?topic=&channel=: drop queued, in-flight and deferred messages."""
        topic, name = self._existing_topic_channel(request)
        channel = topic.channels.get(name)
        if channel is None:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        channel.empty()
        return _text("")

    async def channel_pause(self, request: web.Request) -> web.Response:
        """POST /channel/pause and /channel/unpause?topic=&channel=."""
        topic, name = self._existing_topic_channel(request)
        channel = topic.channels.get(name)
        if channel is None:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        if request.path.endswith("unpause"):
            channel.unpause()
        else:
            channel.pause()
        return _text("")

    def _existing_channel(self, request: web.Request) -> Channel:
        topic, name = self._existing_topic_channel(request)
        channel = topic.channels.get(name)
        if channel is None:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        return channel

    async def channel_config(self, request: web.Request) -> web.Response:
        """GET /channel/config?topic=&channel=: ``{"max_attempts": N,
        "dead_letter_topic": "t.c.dead", "dead_letter_count": N}``; POST with
        a JSON body ``{"max_attempts": N}`` (0..65535, 0 = off) sets this
        channel's own value, kept across restarts, and answers the same."""
        channel = self._existing_channel(request)
        if request.method == "POST":
            settings = await read_json_object(request, {"max_attempts"})
            value = settings.get("max_attempts", channel.max_attempts)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
                raise HTTPError(400, "INVALID_MAX_ATTEMPTS")
            try:  # persisted first: a failed write changes nothing
                self.nsqd.settings.set(channel.topic.name, channel.name, max_attempts=value)
            except OSError as exc:
                log.error("failed to persist channel settings - %s", exc)
                raise HTTPError(500, "INTERNAL_ERROR") from None
            channel.max_attempts = value
        return _json({"max_attempts": channel.max_attempts, "dead_letter_topic": channel.dead_letter_topic or "",
                      "dead_letter_count": channel.dead_letter_count})

    @staticmethod
    def _peek_count(request: web.Request) -> int:
        try:
            n = int(request.query.get("n", "1"))
        except ValueError:
            raise HTTPError(400, "INVALID_N") from None
        if not 1 <= n <= 100:
            raise HTTPError(400, "INVALID_N")
        return n

    async def channel_peek(self, request: web.Request) -> web.Response:
        """GET /channel/peek?topic=&channel=&n=K (1..100, default 1): the next
        K messages the channel would deliver, changing nothing:
        ``{"messages": [{"id", "timestamp" (ns), "attempts", "body" (base64)}]}``."""
        channel = self._existing_channel(request)
        return _json({"messages": [_peeked(e) for e in channel.peek(self._peek_count(request))]})

    async def topic_peek(self, request: web.Request) -> web.Response:
        """GET /topic/peek?topic=&n=K: as /channel/peek for the messages a
        topic holds itself (no channel yet, or paused)."""
        name = self._topic_arg(request)
        topic = self.nsqd.get_existing_topic(name)
        if topic is None:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        return _json({"messages": [_peeked(e) for e in topic.peek(self._peek_count(request))]})

    async def drain(self, request: web.Request) -> web.Response:
        """POST /drain: drain (``--drain-timeout``) and shut down, as SIGTERM
        does; answers ``OK`` at once (``/ping`` says ``DRAINING`` meanwhile)."""
        self.nsqd.request_drain()
        return _text("OK")

    async def config(self, request: web.Request) -> web.Response:
        """GET/PUT /config/<option>: read an option as JSON; PUT nsqlookupd_tcp_addresses or log_level."""
        opt = request.match_info["opt"]
        opts = self.nsqd.options
        if request.method == "PUT":
            body = await _read_limited(request, opts.max_msg_size)
            if not body:
                raise HTTPError(413, "INVALID_VALUE")
            if opt == "nsqlookupd_tcp_addresses":
                try:
                    value = json.loads(body)
                except ValueError:
                    raise HTTPError(400, "INVALID_VALUE") from None
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise HTTPError(400, "INVALID_VALUE")
                self.nsqd.set_lookupd_addresses(value)
            elif opt == "log_level":
                level = body.decode(errors="replace").strip().lower()
                if level not in ("debug", "info", "warn", "error", "fatal"):
                    raise HTTPError(400, "INVALID_VALUE")
                opts.log_level = level
                from nsq._internal.logs import set_level

                set_level(level)
            else:
                raise HTTPError(400, "INVALID_OPTION")
        if opt not in SPEC_BY_CFG:
            raise HTTPError(400, "INVALID_OPTION")
        return _json(describe(opts, opt))


def _parse_binary_mpub(body: bytes, max_msg: int, max_body: int) -> list[bytes]:
    """``[count]([size][body])*`` with Go's checks; errors are 413 as Go's."""
    if len(body) < 4:
        raise HTTPError(413, "BAD_BODY")
    count = _LEN.unpack_from(body, 0)[0]
    if count <= 0 or count > (max_body - 4) // 5:
        raise HTTPError(413, "BAD_BODY")
    pos = 4
    out = []
    for _ in range(count):
        if len(body) - pos < 4:
            raise HTTPError(413, "BAD_MESSAGE")
        size = _LEN.unpack_from(body, pos)[0]
        pos += 4
        if size <= 0 or size > max_msg or len(body) - pos < size:
            raise HTTPError(413, "BAD_MESSAGE")
        out.append(body[pos:pos + size])
        pos += size
    return out


def _peeked(e: tuple) -> dict[str, Any]:
    """A queue entry as /channel/peek shows it."""
    return {"id": e[0].decode("latin-1"), "timestamp": e[2], "attempts": e[3],
            "body": base64.b64encode(e[1]).decode("ascii")}


def _refusal(nsqd: DaemonHost, topic: Topic, failed: str) -> str:
    """The HTTP message of a refused publish."""
    if nsqd.exiting or topic.deleted:
        return "EXITING"
    return "DRAINING" if nsqd.draining else failed
