"""nsqlookupd's HTTP API (https://nsq.io/components/nsqlookupd.html#http-interface;
Go: nsqlookupd/http.go).

Shapes and error texts are Go nsqlookupd v1.2's. One addition, as the
nsqlookupd page describes deletion (https://nsq.io/components/nsqlookupd.html,
"Deletion and Tombstones"): ``/topic/delete`` and ``/channel/delete`` also
delete the topic or channel on every nsqd registered for it, through that
nsqd's HTTP API, before answering (Go's nsqlookupd leaves that to nsqadmin).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp
from aiohttp import web

from nsq import NSQ_VERSION
from nsq.protocol.names import is_valid_topic_name
from nsq.server.httpapi import HTTPError, HTTPListener, json_response, text_response, topic_channel_args
from nsq.server.lookupd.registration_db import Producer, keys, subkeys
from nsq.server.lookupd.metrics import metrics_handler

if TYPE_CHECKING:
    from nsq.server.lookupd.lookupd import NSQLookupd

__all__ = ["LookupdHTTPServer"]

log = logging.getLogger("nsq.lookupd")


def _topic_arg(request: web.Request) -> str:
    if "topic" not in request.query:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    return request.query["topic"]


class LookupdHTTPServer:
    """The HTTP API of one :class:`~nsq.server.lookupd.lookupd.NSQLookupd`."""

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self._listener = HTTPListener()
        self._session: aiohttp.ClientSession | None = None
        r = self._listener.router
        r.add_get("/metrics", metrics_handler(lookupd), allow_head=False)
        r.add_get("/ping", self.ping, allow_head=False)
        r.add_get("/info", self.info, allow_head=False)
        r.add_get("/debug", self.debug, allow_head=False)
        r.add_get("/lookup", self.lookup, allow_head=False)
        r.add_get("/topics", self.topics, allow_head=False)
        r.add_get("/channels", self.channels, allow_head=False)
        r.add_get("/nodes", self.nodes, allow_head=False)
        r.add_post("/topic/create", self.topic_create)
        r.add_post("/topic/delete", self.topic_delete)
        r.add_post("/channel/create", self.channel_create)
        r.add_post("/channel/delete", self.channel_delete)
        r.add_post("/topic/tombstone", self.topic_tombstone)

    async def start(self, address: str) -> tuple[str, int]:
        """Listen on ``host:port``; returns the bound (host, port)."""
        return await self._listener.start(address)

    async def stop(self) -> None:
        """Close the listener and the client session."""
        await self._listener.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- reads -------------------------------------------------------------------

    async def ping(self, request: web.Request) -> web.Response:
        """GET /ping: ``OK``."""
        return text_response("OK")

    async def info(self, request: web.Request) -> web.Response:
        """GET /info: ``{"version"}``."""
        return json_response({"version": NSQ_VERSION})

    async def lookup(self, request: web.Request) -> web.Response:
        """GET /lookup?topic=: ``{"channels": [...], "producers": [peer info]}``.

        Producers not pinged within --inactive-producer-timeout and
        tombstoned ones are left out. 404 ``TOPIC_NOT_FOUND`` for an
        unknown topic.
        """
        topic = _topic_arg(request)
        db = self.lookupd.db
        if not db.find_registrations("topic", topic, ""):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        opts = self.lookupd.options
        now = time.monotonic()
        producers = [
            p.info.to_json()
            for p in db.find_producers("topic", topic, "")
            if p.is_active(opts.inactive_producer_timeout, opts.tombstone_lifetime, now)
        ]
        return json_response({
            "channels": subkeys(db.find_registrations("channel", topic, "*")),
            "producers": producers,
        })

    async def topics(self, request: web.Request) -> web.Response:
        """GET /topics: ``{"topics": [...]}``."""
        return json_response({"topics": keys(self.lookupd.db.find_registrations("topic", "*", ""))})

    async def channels(self, request: web.Request) -> web.Response:
        """GET /channels?topic=: ``{"channels": [...]}`` (empty for an unknown topic)."""
        topic = _topic_arg(request)
        return json_response({"channels": subkeys(self.lookupd.db.find_registrations("channel", topic, "*"))})

    async def nodes(self, request: web.Request) -> web.Response:
        """GET /nodes: ``{"producers": [peer info + "topics" + "tombstones"]}``.

        Every active nsqd (tombstoned or not), its topics, and for each
        topic whether its producer there is tombstoned.
        """
        db = self.lookupd.db
        opts = self.lookupd.options
        now = time.monotonic()
        out = []
        for p in db.find_producers("client", "", ""):
            if not p.is_active(opts.inactive_producer_timeout, 0.0, now):
                continue
            topics = keys([r for r in db.lookup_registrations(p.id) if r[0] == "topic"])
            tombstones = []
            for topic in topics:
                tombstoned = False
                for tp in db.find_producers("topic", topic, ""):
                    if tp.peer is p.peer:
                        tombstoned = tp.is_tombstoned(opts.tombstone_lifetime, now)
                tombstones.append(tombstoned)
            node = p.info.to_json()
            node["tombstones"] = tombstones
            node["topics"] = topics
            out.append(node)
        return json_response({"producers": out})

    async def debug(self, request: web.Request) -> web.Response:
        """GET /debug: every registration and its producers, as Go's."""
        data: dict[str, list] = {}
        wall = time.time() - time.monotonic()
        for reg, producers in self.lookupd.db.items():
            key = ":".join(reg)
            for p in producers.values():
                data.setdefault(key, []).append({
                    "id": p.id,
                    "hostname": p.info.hostname,
                    "broadcast_address": p.info.broadcast_address,
                    "tcp_port": p.info.tcp_port,
                    "http_port": p.info.http_port,
                    "version": p.info.version,
                    "last_update": int((p.peer.last_update + wall) * 1e9),
                    "tombstoned": p.tombstoned_at is not None,
                    "tombstoned_at": int((p.tombstoned_at + wall) * 1e9) if p.tombstoned_at is not None else 0,
                })
        return json_response(data)

    # -- writes ------------------------------------------------------------------

    async def topic_create(self, request: web.Request) -> web.Response:
        """POST /topic/create?topic=: make the topic known (no producer)."""
        topic = _topic_arg(request)
        if not is_valid_topic_name(topic):
            raise HTTPError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        self.lookupd.db.add_registration(("topic", topic, ""))
        return text_response("")

    async def topic_delete(self, request: web.Request) -> web.Response:
        """POST /topic/delete?topic=: forget the topic and its channels, and
        delete the topic on every nsqd registered for it."""
        topic = _topic_arg(request)
        db = self.lookupd.db
        producers = db.find_producers("topic", topic, "")
        for reg in db.find_registrations("channel", topic, "*"):
            log.info("DB: removing channel(%s) from topic(%s)", reg[2], topic)
            db.remove_registration(reg)
        for reg in db.find_registrations("topic", topic, ""):
            log.info("DB: removing topic(%s)", topic)
            db.remove_registration(reg)
        await self._on_nsqds(producers, f"/topic/delete?topic={quote(topic)}")
        return text_response("")

    async def channel_create(self, request: web.Request) -> web.Response:
        """POST /channel/create?topic=&channel=: make the channel (and its topic) known."""
        topic, channel = topic_channel_args(request)
        db = self.lookupd.db
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        db.add_registration(("channel", topic, channel))
        log.info("DB: adding topic(%s)", topic)
        db.add_registration(("topic", topic, ""))
        return text_response("")

    async def channel_delete(self, request: web.Request) -> web.Response:
        """POST /channel/delete?topic=&channel=: forget the channel and delete
        it on every nsqd registered for it; 404 ``CHANNEL_NOT_FOUND``."""
        topic, channel = topic_channel_args(request)
        db = self.lookupd.db
        regs = db.find_registrations("channel", topic, channel)
        if not regs:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        producers = db.find_producers("channel", topic, channel)
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        for reg in regs:
            db.remove_registration(reg)
        await self._on_nsqds(producers, f"/channel/delete?topic={quote(topic)}&channel={quote(channel)}")
        return text_response("")

    async def topic_tombstone(self, request: web.Request) -> web.Response:
        """POST /topic/tombstone?topic=&node=<broadcast_address>:<http_port>:
        hide that nsqd from ``/lookup`` of the topic for --tombstone-lifetime."""
        topic = _topic_arg(request)
        if "node" not in request.query:
            raise HTTPError(400, "MISSING_ARG_NODE")
        node = request.query["node"]
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        for p in self.lookupd.db.find_producers("topic", topic, ""):
            if f"{p.info.broadcast_address}:{p.info.http_port}" == node:
                p.tombstone()
        return text_response("")

    # -- nsqd calls --------------------------------------------------------------

    async def _on_nsqds(self, producers: list[Producer], path_qs: str) -> None:
        """POST ``path_qs`` to each producer's HTTP API, concurrently; log failures.

        A 404 (already gone there) is not a failure.
        """
        if not producers:
            return
        if self._session is None:
            opts = self.lookupd.options
            timeout = aiohttp.ClientTimeout(total=opts.http_client_request_timeout,
                                            connect=opts.http_client_connect_timeout)
            self._session = aiohttp.ClientSession(
                timeout=timeout, headers={"Accept": "application/vnd.nsq; version=1.0",
                                          "User-Agent": f"nsqlookupd/{NSQ_VERSION}"})
        session = self._session
        targets = list(dict.fromkeys(f"{p.info.broadcast_address}:{p.info.http_port}" for p in producers))

        async def call(addr: str) -> None:
            url = f"http://{addr}{path_qs}"
            try:
                async with session.post(url) as resp:
                    await resp.read()
                    if resp.status not in (200, 404):
                        log.error("nsqd %s answered %d to %s", addr, resp.status, path_qs)
                    else:
                        log.info("nsqd %s: %s (%d)", addr, path_qs, resp.status)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
                log.error("nsqd %s: %s failed - %s", addr, path_qs, exc or type(exc).__name__)

        await asyncio.gather(*(call(a) for a in targets))
