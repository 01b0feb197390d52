"""AUTH on nsqd's HTTP(S) API (beyond Go nsqd, whose HTTP API is open).

With ``--http-auth-required`` (and ``--auth-http-address``) every request
but ``/ping``, ``/info`` and ``/metrics`` must carry::

    Authorization: Bearer <secret>

nsqd asks an auth server about the secret exactly as for the V2 ``AUTH``
command (https://nsq.io/components/nsqd.html#auth; Go: nsqd/auth.go,
internal/auth/authorizations.go; here :mod:`nsq.server.nsqd.tcp.auth`)::

    GET http://<auth>/auth?common_name=<CN>&remote_ip=<ip>&secret=<s>&tls=true|false

``remote_ip`` is the HTTP connection's peer address, ``tls`` whether it is
an HTTPS connection and ``common_name`` the subject CN of the client
certificate, when the HTTPS listener asked for one (``--tls-client-auth-policy``;
"" otherwise). The answer is cached per (secret, remote_ip, tls,
common_name) until its ``ttl`` (seconds) lapses; the next request after that
asks again. Concurrent requests with the same key share one query.

What each endpoint needs (topic and channel from the query string; regexes
searched as Go's ``Authorization.IsAllowed``)::

    /ping /info /metrics                       open
    /pub /mpub                                 publish on topic
    /topic/create|delete|empty|pause|unpause   publish on topic
    /topic/peek                                subscribe on topic, any channel: an
                                               authorization with ``subscribe`` whose
                                               topic regex matches and that has at
                                               least one channel regex
    /channel/create|delete|empty|pause|unpause subscribe on topic and channel
    /channel/config /channel/peek              subscribe on topic and channel
    /stats                                     a valid identity; the answer lists only
                                               what it may subscribe to (:func:`filter_stats`)
    /config/* /debug/* /drain, anything else   a valid identity (unknown paths then
                                               answer 404 as usual)

A "valid identity" is an auth answer with at least one authorization; an
answer without any is refused on every endpoint, as V2's ``AUTH`` refuses it.
A request without its topic or channel argument (or with an empty one) is
passed on once the identity is valid, and the endpoint answers its usual 400
or 404.

Errors are the API's ``{"message": TEXT}``:

    ==== ================= ==================================================
    401  ``AUTH_REQUIRED`` no ``Authorization: Bearer`` header, or an empty secret
    401  ``AUTH_FAILED``   the auth servers refused the secret or failed
    403  ``UNAUTHORIZED``  the identity has no grant for this request
    ==== ================= ==================================================

401 answers carry ``WWW-Authenticate: Bearer realm="nsqd"`` (RFC 6750).
The authorization is attached to the request as ``request[AUTH_KEY]`` (an
:class:`~nsq.server.nsqd.tcp.auth.AuthState`) for the handlers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from nsq.server.httpapi import json_response
from nsq.server.nsqd.tcp.auth import AuthError, AuthState, query_any_authd
from nsq.server.tls import peer_common_name

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.host import DaemonHost
    from nsq.server.nsqd.stats.collect import NSQDStats, TopicStats

__all__ = ["AUTH_KEY", "OPEN_PATHS", "HTTPAuthCache", "AuthMiddleware", "auth_middleware", "bearer_secret", "connection_facts",
           "filter_stats", "may_subscribe_topic", "required_grant"]

log = logging.getLogger("nsq.nsqd")

#: where the middleware puts the request's :class:`AuthState` (``request.get(AUTH_KEY)``;
#: a ``web.RequestKey`` on aiohttp >= 3.12, the plain string before)
AUTH_KEY: Any = web.RequestKey("nsq_auth", AuthState) if hasattr(web, "RequestKey") else "nsq_auth"

#: paths answered without a secret (health checks, scrapers, discovery)
OPEN_PATHS = frozenset({"/ping", "/info", "/metrics"})

# what a request needs, by route (see the module docstring)
OPEN = "open"
PUBLISH = "publish"
SUBSCRIBE = "subscribe"
SUBSCRIBE_TOPIC = "subscribe-topic"
IDENTITY = "identity"

_RULES = {
    "/pub": PUBLISH,
    "/mpub": PUBLISH,
    "/topic/create": PUBLISH,
    "/topic/delete": PUBLISH,
    "/topic/empty": PUBLISH,
    "/topic/pause": PUBLISH,
    "/topic/unpause": PUBLISH,
    "/topic/peek": SUBSCRIBE_TOPIC,
    "/channel/create": SUBSCRIBE,
    "/channel/delete": SUBSCRIBE,
    "/channel/empty": SUBSCRIBE,
    "/channel/pause": SUBSCRIBE,
    "/channel/unpause": SUBSCRIBE,
    "/channel/config": SUBSCRIBE,
    "/channel/peek": SUBSCRIBE,
}

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="nsqd"'}


def required_grant(path: str) -> str:
    """What a request to ``path`` (a route's canonical path, e.g.
    ``/config/{opt}``, or the request path) needs: ``"open"``,
    ``"publish"`` (on the topic), ``"subscribe"`` (on the topic and
    channel), ``"subscribe-topic"`` (on the topic, any channel) or
    ``"identity"`` (any valid identity)."""
    if path in OPEN_PATHS:
        return OPEN
    return _RULES.get(path, IDENTITY)


def bearer_secret(header: str | None) -> str:
    """The secret of an ``Authorization: Bearer <secret>`` header value
    (scheme case-insensitive, RFC 7235); "" when there is none."""
    if not header:
        return ""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return value.strip()


def connection_facts(request: web.Request) -> tuple[str, bool, str]:
    """``(remote_ip, tls, common_name)`` of the request's connection, as the
    auth query sends them: the peer's IP (the socket's, not a forwarded
    header), True on HTTPS, the client certificate's subject CN ("" when
    the client sent none or the listener did not ask for one)."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, (tuple, list)) and peer:
        remote_ip = str(peer[0])
    else:
        remote_ip = request.remote or ""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    return remote_ip, ssl_object is not None, peer_common_name(ssl_object)


def may_subscribe_topic(state: AuthState, topic: str) -> bool:
    """True if some authorization grants ``subscribe`` on ``topic`` with at
    least one channel regex (the rule of ``/topic/peek`` and of a topic's
    place in ``/stats``)."""
    return any("subscribe" in a.permissions and a.channels and a.topic.search(topic)
               for a in state.authorizations)


def is_granted(state: AuthState, grant: str, query: Any) -> bool:
    """Whether ``state`` allows a request needing ``grant`` with the query
    string ``query`` (a mapping). A missing or empty topic or channel is
    let through to the endpoint, which refuses it (400/404)."""
    if not state.authorizations:
        return False
    if grant in (OPEN, IDENTITY):
        return True
    topic = query.get("topic") or ""
    if not topic:
        return True
    if grant == PUBLISH:
        return state.is_allowed(topic, "")
    if grant == SUBSCRIBE_TOPIC:
        return may_subscribe_topic(state, topic)
    channel = query.get("channel") or ""
    if not channel:
        return True
    return state.is_allowed(topic, channel)


class HTTPAuthCache:
    """Auth answers by (secret, remote_ip, tls, common_name), kept until
    their ttl lapses.

    Args:
        nsqd: gives ``options.auth_http_addresses`` and ``auth_session()``
            (the aiohttp session with ``--http-client-*-timeout``).
        max_entries: answers kept at most; the least recently used go first.

    Only answers are cached; a failed query is asked again by the next
    request.
    """

    def __init__(self, nsqd: Any, max_entries: int = 4096) -> None:
        self.nsqd = nsqd
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, bool, str], AuthState] = OrderedDict()
        self._pending: dict[tuple[str, str, bool, str], asyncio.Future] = {}
        #: auth server queries made (for tests and debugging)
        self.queries = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every cached answer (the next requests ask again)."""
        self._entries.clear()

    async def get(self, secret: str, remote_ip: str, tls: bool, common_name: str) -> AuthState:
        """The cached answer, or the auth servers' (then cached).

        Raises:
            AuthError: every auth server failed or refused the secret.
        """
        key = (secret, remote_ip, tls, common_name)
        state = self._entries.get(key)
        if state is not None:
            if not state.is_expired():
                self._entries.move_to_end(key)
                return state
            del self._entries[key]
        future = self._pending.get(key)
        if future is None:
            future = asyncio.ensure_future(self._query(key))
            self._pending[key] = future
            future.add_done_callback(functools.partial(self._done, key))
        # one waiter going away (a client that hangs up) does not cancel the others' query
        return await asyncio.shield(future)

    def _done(self, key: tuple[str, str, bool, str], future: asyncio.Future) -> None:
        self._pending.pop(key, None)
        if not future.cancelled():
            future.exception()  # retrieved: no "never retrieved" warning when every waiter left

    async def _query(self, key: tuple[str, str, bool, str]) -> AuthState:
        secret, remote_ip, tls, common_name = key
        addresses = self.nsqd.options.auth_http_addresses
        if not addresses:
            raise AuthError("no --auth-http-address")
        self.queries += 1
        state = await query_any_authd(self.nsqd.auth_session(), addresses, remote_ip, tls, common_name, secret)
        self._entries[key] = state
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return state


def _refuse(status: int, text: str) -> web.Response:
    response = json_response({"message": text}, status)
    if status == 401:
        response.headers.update(_CHALLENGE)
    return response


class AuthMiddleware:
    """The aiohttp middleware enforcing ``--http-auth-required`` (see
    :func:`auth_middleware`).

    Attributes:
        cache: its :class:`HTTPAuthCache`.
    """

    #: aiohttp: a new-style middleware, called as ``(request, handler)``
    __middleware_version__ = 1

    def __init__(self, nsqd: DaemonHost | Any, cache: HTTPAuthCache) -> None:
        self.nsqd = nsqd
        self.cache = cache

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.nsqd.options.http_auth_required:
            return await handler(request)
        resource = request.match_info.route.resource
        grant = required_grant(resource.canonical if resource is not None else request.path)
        if grant == OPEN:
            return await handler(request)
        secret = bearer_secret(request.headers.get("Authorization"))
        if not secret:
            return _refuse(401, "AUTH_REQUIRED")
        remote_ip, tls, common_name = connection_facts(request)
        try:
            state = await self.cache.get(secret, remote_ip, tls, common_name)
        except AuthError as exc:
            # the auth server's words stay in the log, as for V2 AUTH
            log.warning("HTTP: [%s] AUTH failed %s", remote_ip, exc)
            return _refuse(401, "AUTH_FAILED")
        if not is_granted(state, grant, request.query):
            return _refuse(403, "UNAUTHORIZED")
        request[AUTH_KEY] = state
        return await handler(request)


def auth_middleware(nsqd: DaemonHost | Any, cache: HTTPAuthCache | None = None) -> AuthMiddleware:
    """The aiohttp middleware enforcing ``--http-auth-required`` for ``nsqd``.

    A no-op while ``nsqd.options.http_auth_required`` is false (read on each
    request). It goes after the error and ``--tls-required`` middlewares.
    The middleware's ``cache`` attribute is its :class:`HTTPAuthCache`.

    Args:
        nsqd: an :class:`~nsq.server.nsqd.nsqd.NSQD` (or anything with
            ``options`` and ``auth_session()``).
        cache: share answers with another middleware (default: a new one).
    """
    return AuthMiddleware(nsqd, cache if cache is not None else HTTPAuthCache(nsqd))


def filter_stats(stats: NSQDStats, state: AuthState | None, topic: str = "", channel: str = "") -> NSQDStats:
    """``/stats`` as ``state`` may see it (``state`` None: unchanged).

    Args:
        stats: :func:`~nsq.server.nsqd.stats.collect.collect_stats`'s answer (not changed).
        state: the request's authorization (``request.get(AUTH_KEY)``).
        topic, channel: the request's ``topic`` / ``channel`` filters.

    Returns:
        a copy keeping the topics :func:`may_subscribe_topic` allows, each
        with only the channels ``state`` may subscribe to, and producers
        with only their ``pub_counts`` on kept topics (a producer without
        any is dropped; ``producers`` None when none is left). A hidden
        topic looks absent: ``topics`` None when the ``topic`` filter names
        it; dropped when the ``channel`` filter names a hidden channel.
        Topic-level figures (depth, message_count, e2e latency over all the
        topic's channels) are shown as they are.
    """
    if state is None:
        return stats
    topics = stats.topics
    kept_topics: list[TopicStats] | None = None
    if topics is not None:
        kept_topics = []
        for t in topics:
            name = t.topic_name
            if not may_subscribe_topic(state, name):
                continue
            if channel and not state.is_allowed(name, channel):
                continue
            kept_topics.append(replace(t, channels=[c for c in t.channels if state.is_allowed(name, c.channel_name)]))
        if topic and not may_subscribe_topic(state, topic):
            kept_topics = None
    producers = []
    for p in stats.producers or []:
        counts = [pc for pc in p.pub_counts if may_subscribe_topic(state, pc.topic)]
        if counts:
            producers.append(replace(p, pub_counts=counts))
    return replace(stats, topics=kept_topics, producers=producers or None)
