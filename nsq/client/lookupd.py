"""nsqlookupd's HTTP API, and finding the nsqds that have a topic.

The one implementation of the lookupd queries: the Consumer's discovery
(here, in ``client/``, because a client finds its nsqds itself, as go-nsq's
``Consumer.queryLookupd`` does) and :mod:`nsq.cluster` (nsqd's channel
pre-creation, the utilities, ``nsq admin``, the Spark sink: Go's
``internal/clusterinfo``) build on it.

- :class:`HTTPAPIClient`: one aiohttp session, Go's ``http_api.Client``
  habits: ``Accept: application/vnd.nsq; version=1.0``, pre-1.0 answers
  wrapped as ``{"status_code", "status_txt", "data"}`` unwrapped, connect
  and request timeouts. Addresses are ``host:port`` or a URL
  (``http(s)://host:port``, as go-nsq accepts).
- :class:`LookupdHTTPClient`: nsqlookupd's endpoints
  (https://nsq.io/components/nsqlookupd.html#http-interface).
- :func:`topic_producers`: every lookupd's ``/lookup?topic=``, unioned, the
  failures collected (nsqio/nsq ``internal/clusterinfo/data.go``,
  ``GetLookupdTopicProducers``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self, TypeVar
from urllib.parse import urlencode

import aiohttp

from nsq import NSQ_VERSION
from nsq._internal.addresses import fmt_addr
from nsq.protocol.errors import NSQError

__all__ = ["HTTPAPIClient", "HTTPAPIError", "LookupdError", "LookupdHTTPClient", "LookupdQueryError", "Producer",
           "ProducerList", "ask_each", "topic_producers", "union_producers"]

T = TypeVar("T")


class HTTPAPIError(NSQError):
    """A daemon's HTTP API could not be reached or gave an unusable answer.

    Attributes:
        address: the daemon asked (as given).
        status: HTTP status, or None if there was no answer.
        reason: what went wrong, without the daemon's name.
    """

    #: names the daemon in the message
    kind = "daemon"

    def __init__(self, address: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{self.kind} {address}: {message}")
        self.address = address
        self.status = status
        self.reason = message


class LookupdError(HTTPAPIError):
    """An nsqlookupd could not be reached or gave an unusable answer."""

    kind = "lookupd"


class LookupdQueryError(LookupdError):
    """No lookupd answered (Go's ``Failed to query any nsqlookupd``).

    Attributes:
        errors: one :class:`LookupdError` per lookupd asked.
    """

    def __init__(self, errors: list[HTTPAPIError]) -> None:
        addresses = ",".join(e.address for e in errors)
        text = "; ".join(str(e) for e in errors) or "no lookupd address"
        NSQError.__init__(self, f"failed to query any nsqlookupd: {text}")
        self.address = addresses
        self.status = None
        self.reason = text
        self.errors = list(errors)


def _words(exc: BaseException) -> str:
    """What went wrong with a request, in words, without the address (the
    error names it): ``connection refused``, ``name or service not known``,
    ``timed out`` (aiohttp's own texts repeat the host and Python's tuple)."""
    from nsq._internal.neterrors import error_words

    cause = getattr(exc, "os_error", None)  # aiohttp.ClientConnectorError: the socket's error
    if isinstance(cause, OSError):
        return error_words(cause)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


def _base_url(address: str) -> str:
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    # go-nsq accepts ".../lookup" as an address; keep only scheme://host:port
    scheme, _, rest = address.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


class HTTPAPIClient:
    """JSON over HTTP to nsqd or nsqlookupd (Go's ``internal/http_api.Client``).

    Args:
        connect_timeout, request_timeout: seconds (the Go tools' defaults, 2 s / 5 s).
        user_agent: sent as ``User-Agent``.
        ssl_context: used for ``https://`` addresses (Go's
            ``--http-client-tls-*`` flags); None: the default context.

    Use as ``async with`` or call :meth:`close`. The session is opened by
    the first request, in the running loop.
    """

    #: the error raised for this kind of daemon
    error_class: type[HTTPAPIError] = HTTPAPIError

    def __init__(self, connect_timeout: float = 2.0, request_timeout: float = 5.0,
                 user_agent: str | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, connect=connect_timeout)
        self._headers = {
            "Accept": "application/vnd.nsq; version=1.0",
            "User-Agent": user_agent or f"nsq-python/{NSQ_VERSION}",
        }
        self._session: aiohttp.ClientSession | None = None
        self._ssl_context = ssl_context

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, address: str, path: str, params: dict[str, str] | None = None,
                       ok_404: bool = False, answer: bool = False) -> Any:
        """The JSON object a 200 answer carries (``{}`` for an empty body,
        and for a POST unless ``answer``); None for a 404 with ``ok_404``.
        Raises this client's ``error_class``."""
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl_context) if self._ssl_context is not None else None
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers, connector=connector)
        error = self.error_class
        url = _base_url(address) + path
        if params:
            url += "?" + urlencode(params)
        try:
            async with self._session.request(method, url) as resp:
                body = await resp.read()
                status = resp.status
                versioned = resp.headers.get("X-NSQ-Content-Type") == "nsq; version=1.0"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            raise error(address, _words(exc)) from None
        if status == 404 and ok_404:
            return None
        if status != 200:
            raise error(address, f"{method} {path} answered {status} {body[:200].decode(errors='replace')}",
                        status)
        if (method == "POST" and not answer) or not body:
            return {}
        try:
            data = json.loads(body)
        except ValueError:
            raise error(address, f"{path}: invalid JSON", status) from None
        if not versioned and isinstance(data, dict) and "status_code" in data and "data" in data:
            data = data["data"]  # a pre-1.0 daemon
        if not isinstance(data, dict):
            raise error(address, f"{path}: unexpected answer", status)
        return data

    async def get(self, address: str, path: str, params: dict[str, str] | None = None, *,
                  ok_404: bool = False) -> dict[str, Any] | None:
        """GET ``path`` (``/stats`` ...): the JSON object answered, None on a
        404 accepted by ``ok_404``.

        Raises:
            HTTPAPIError (this client's ``error_class``): unreachable, or an
                error or non-object answer.
        """
        data: dict[str, Any] | None = await self._request("GET", address, path, params, ok_404=ok_404)
        return data

    async def post(self, address: str, path: str, *, ok_404: bool = False, **params: str) -> bool:
        """POST an admin endpoint (``/topic/delete``, ``/channel/pause`` ...).

        Args:
            ok_404: a 404 answer (``TOPIC_NOT_FOUND``, ``CHANNEL_NOT_FOUND``:
                already gone) is not an error.

        Returns:
            True when done, False on a 404 accepted by ``ok_404``.

        Raises:
            HTTPAPIError (this client's ``error_class``): unreachable or an error answer.
        """
        return await self._request("POST", address, path, params, ok_404=ok_404) is not None

    async def info(self, address: str) -> dict[str, Any]:
        """GET /info: ``{"version", ...}`` (nsqd adds broadcast_address,
        hostname, http_port, tcp_port, start_time). Raises HTTPAPIError."""
        return await self._answer("GET", address, "/info")

    async def _answer(self, method: str, address: str, path: str, params: dict[str, str] | None = None
                      ) -> dict[str, Any]:
        """:meth:`_request` without ``ok_404``: a 404 raises, so there is always an object."""
        data: dict[str, Any] | None = await self._request(method, address, path, params)
        assert data is not None  # None only with ok_404
        return data


@dataclass(frozen=True)
class Producer:
    """An nsqd as a lookupd lists it (``/lookup`` and ``/nodes`` entries).

    Attributes:
        broadcast_address: the address clients use to reach it.
        tcp_port, http_port: its ports.
        hostname, version: as it registered.
        remote_address: its ``host:port`` as the lookupd saw the connection.
        topics, tombstones: ``/nodes`` only: its topics and, per topic,
            whether the lookupd tombstoned it.
    """

    broadcast_address: str
    tcp_port: int
    http_port: int
    hostname: str = ""
    version: str = ""
    remote_address: str = ""
    topics: tuple[str, ...] = ()
    tombstones: tuple[bool, ...] = ()

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Producer:
        """From one ``producers`` entry (``address`` stands in for a missing
        ``broadcast_address``, as lookupds before 0.2.x sent)."""

        def port(key: str) -> int:
            try:
                return int(obj.get(key) or 0)
            except (TypeError, ValueError):
                return 0

        return cls(broadcast_address=str(obj.get("broadcast_address") or obj.get("address") or ""),
                   tcp_port=port("tcp_port"), http_port=port("http_port"),
                   hostname=str(obj.get("hostname") or ""), version=str(obj.get("version") or ""),
                   remote_address=str(obj.get("remote_address") or ""),
                   topics=tuple(str(t) for t in obj.get("topics") or ()),
                   tombstones=tuple(bool(t) for t in obj.get("tombstones") or ()))

    @property
    def tcp_address(self) -> str:
        """``broadcast_address:tcp_port`` (what consumers and producers connect to)."""
        return fmt_addr(self.broadcast_address, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``broadcast_address:http_port`` (its HTTP API)."""
        return fmt_addr(self.broadcast_address, self.http_port)


class ProducerList(list[Producer]):
    """The producers found, and the lookupds that failed while others
    answered (Go returns both: the producers and an ``ErrList``).

    Attributes:
        errors: one :class:`HTTPAPIError` per daemon that failed.
    """

    def __init__(self, producers: Iterable[Producer] = (), errors: Iterable[HTTPAPIError] = ()) -> None:
        super().__init__(producers)
        self.errors: list[HTTPAPIError] = list(errors)


async def ask_each(addresses: Iterable[str], ask: Callable[[str], Awaitable[T]]
                   ) -> tuple[list[tuple[str, T]], list[HTTPAPIError]]:
    """``ask(address)`` for every address concurrently (Go's clusterinfo
    pattern: a goroutine per daemon, the errors collected).

    Returns:
        ((address, answer) of those that answered, in the given order;
        the :class:`HTTPAPIError` of those that failed).

    Raises:
        anything other than an HTTPAPIError that ``ask`` raises (a bug).
    """
    addresses = list(addresses)
    results = await asyncio.gather(*(ask(a) for a in addresses), return_exceptions=True)
    answers: list[tuple[str, T]] = []
    errors: list[HTTPAPIError] = []
    for address, result in zip(addresses, results):
        if isinstance(result, HTTPAPIError):
            errors.append(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            answers.append((address, result))
    return answers, errors


class LookupdHTTPClient(HTTPAPIClient):
    """Asks nsqlookupds over HTTP (https://nsq.io/components/nsqlookupd.html).

    Same arguments as :class:`HTTPAPIClient`; errors are :class:`LookupdError`.
    """

    error_class = LookupdError

    async def lookup(self, address: str, topic: str) -> dict[str, list[Any]]:
        """GET /lookup: ``{"channels": [...], "producers": [...]}``; both empty
        if the lookupd does not know the topic.

        Raises:
            LookupdError: unreachable, or an error answer other than 404.
        """
        data = await self._request("GET", address, "/lookup", {"topic": topic}, ok_404=True)
        if data is None:
            return {"channels": [], "producers": []}
        return {"channels": list(data.get("channels") or []), "producers": list(data.get("producers") or [])}

    async def topics(self, address: str) -> list[str]:
        """GET /topics: topic names. Raises LookupdError."""
        return list((await self._answer("GET", address, "/topics")).get("topics") or [])

    async def channels(self, address: str, topic: str) -> list[str]:
        """GET /channels?topic=: channel names. Raises LookupdError."""
        return list((await self._answer("GET", address, "/channels", {"topic": topic})).get("channels") or [])

    async def nodes(self, address: str) -> list[dict[str, Any]]:
        """GET /nodes: nsqd producers with ``topics`` and ``tombstones``. Raises LookupdError."""
        return list((await self._answer("GET", address, "/nodes")).get("producers") or [])

    async def channels_all(self, addresses: list[str], topic: str) -> tuple[list[str], list[HTTPAPIError]]:
        """``/channels`` on every lookupd concurrently (Go's
        ``clusterinfo.GetLookupdTopicChannels``, used by nsqd to pre-create
        a new topic's channels).

        Returns:
            (the union of the names, in order of appearance; the errors of
            the lookupds that failed).
        """
        answers, errors = await ask_each(addresses, lambda a: self.channels(a, topic))
        names: dict[str, None] = {}
        for _, found in answers:
            names.update(dict.fromkeys(found))
        return list(names), errors


async def topic_producers(lookupd_http_addresses: Iterable[str], topic: str, *,
                          client: LookupdHTTPClient | None = None) -> ProducerList:
    """The nsqds that have ``topic``, by every lookupd's ``/lookup?topic=``.

    Go's ``clusterinfo.GetLookupdTopicProducers`` (nsqio/nsq
    ``internal/clusterinfo/data.go``): every lookupd is asked concurrently,
    the producers are unioned and the failures collected; it fails only
    when no lookupd answered. The union is keyed by
    ``broadcast_address:tcp_port``, the address a client connects to (Go's
    tools key on ``broadcast_address:http_port``: an nsqd has one of each,
    so both pick out the same nsqds).

    Args:
        lookupd_http_addresses: ``host:port`` or ``http(s)://host:port``.
        topic: the topic name.
        client: the lookupd client to use (its timeouts, user agent, TLS);
            by default a new one, closed before returning.

    Returns:
        the producers in the order the lookupds listed them, first seen
        first, with ``errors`` listing the lookupds that failed; empty
        when no address is given.

    Raises:
        LookupdQueryError: every lookupd failed (``errors`` says why).
    """
    async def producers(lookupd: LookupdHTTPClient, address: str) -> list[dict[str, Any]]:
        return (await lookupd.lookup(address, topic))["producers"]

    return await union_producers(lookupd_http_addresses, producers, client)


async def union_producers(lookupd_http_addresses: Iterable[str],
                          ask: Callable[[LookupdHTTPClient, str], Awaitable[list[dict[str, Any]]]],
                          client: LookupdHTTPClient | None = None) -> ProducerList:
    """Ask every lookupd with ``ask(client, address)`` (its producer JSON
    objects) at once and unite the answers by TCP address, first seen first
    (Go: internal/clusterinfo/data.go, the lookupd queries).

    Returns:
        the producers and ``errors`` of the lookupds that failed; empty
        when no address is given.

    Raises:
        LookupdQueryError: every lookupd failed.
    """
    addresses = list(dict.fromkeys(lookupd_http_addresses))
    if not addresses:
        return ProducerList()
    own = client is None
    lookupd = client if client is not None else LookupdHTTPClient()
    try:
        answers, errors = await ask_each(addresses, lambda a: ask(lookupd, a))
    finally:
        if own:
            await lookupd.close()
    if not answers:
        raise LookupdQueryError(errors)
    found: dict[str, Producer] = {}
    for _, objs in answers:
        for obj in objs:
            if isinstance(obj, dict):
                p = Producer.from_json(obj)
                found.setdefault(p.tcp_address, p)
    return ProducerList(found.values(), errors)
