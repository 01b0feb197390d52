"""HTTP client for nsqlookupd's API (seed 000 "nsqlookupd / HTTP 接口").

Used by the Consumer's discovery, by nsqd (channels to pre-create for a
new topic), by the utilities and by ``nsq admin`` (which also reads nsqd's
``/stats`` and ``/info`` through :class:`NSQDHTTPClient`). Built on aiohttp.

Addresses are ``host:port`` or a URL (``http://host:port``, as go-nsq
accepts); requests carry ``Accept: application/vnd.nsq; version=1.0`` and
pre-1.0 wrapped answers (``{"status_code", "data"}``) are unwrapped.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlencode

import aiohttp

from nsq import NSQ_VERSION
from nsq.protocol.errors import NSQError

__all__ = ["LookupdError", "LookupdHTTPClient", "NSQDHTTPClient", "NSQDHTTPError", "producer_address"]


class LookupdError(NSQError):
    """A lookupd could not be reached or gave an unusable answer.

    Attributes:
        address: the lookupd asked.
        status: HTTP status, or None if there was no answer.
    """

    def __init__(self, address: str, message: str, status: int | None = None) -> None:
        super().__init__(f"lookupd {address}: {message}")
        self.address = address
        self.status = status


class NSQDHTTPError(LookupdError):
    """An nsqd could not be reached or gave an unusable answer (same
    attributes as :class:`LookupdError`, which it subclasses)."""

    def __init__(self, address: str, message: str, status: int | None = None) -> None:
        NSQError.__init__(self, f"nsqd {address}: {message}")
        self.address = address
        self.status = status


def _base_url(address: str) -> str:
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    # go-nsq accepts ".../lookup" as an address; keep only scheme://host:port
    scheme, _, rest = address.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def producer_address(producer: dict) -> str:
    """``broadcast_address:tcp_port`` of a ``/lookup`` producer (how clients connect)."""
    host = producer.get("broadcast_address") or producer.get("address") or ""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{producer.get('tcp_port')}"


class LookupdHTTPClient:
    """Asks nsqlookupds over HTTP.

    Args:
        connect_timeout, request_timeout: seconds (Go tools' defaults, 2 s / 5 s).
        user_agent: sent as ``User-Agent``.
        ssl_context: used for ``https://`` addresses (Go's
            ``--http-client-tls-*`` flags); None: the default context.

    Use as ``async with LookupdHTTPClient() as c`` or call :meth:`close`.
    """

    #: the error raised for this kind of daemon
    error_class: type[LookupdError] = LookupdError

    def __init__(self, connect_timeout: float = 2.0, request_timeout: float = 5.0,
                 user_agent: str | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, connect=connect_timeout)
        self._headers = {
            "Accept": "application/vnd.nsq; version=1.0",
            "User-Agent": user_agent or f"nsq-python/{NSQ_VERSION}",
        }
        self._session: aiohttp.ClientSession | None = None
        self._ssl_context = ssl_context

    async def __aenter__(self) -> LookupdHTTPClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, address: str, path: str, params: dict[str, str] | None = None,
                       ok_404: bool = False) -> Any:
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
            raise error(address, str(exc) or type(exc).__name__) from None
        if status == 404 and ok_404:
            return None
        if status != 200:
            raise error(address, f"{method} {path} answered {status} {body[:200].decode(errors='replace')}",
                        status)
        if method == "POST" or not body:
            return {}
        try:
            data = json.loads(body)
        except ValueError:
            raise error(address, f"{path}: invalid JSON", status) from None
        if not versioned and isinstance(data, dict) and "status_code" in data and "data" in data:
            data = data["data"]  # a pre-1.0 lookupd
        if not isinstance(data, dict):
            raise error(address, f"{path}: unexpected answer", status)
        return data

    async def lookup(self, address: str, topic: str) -> dict:
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
        return list((await self._request("GET", address, "/topics")).get("topics") or [])

    async def channels(self, address: str, topic: str) -> list[str]:
        """GET /channels?topic=: channel names. Raises LookupdError."""
        return list((await self._request("GET", address, "/channels", {"topic": topic})).get("channels") or [])

    async def nodes(self, address: str) -> list[dict]:
        """GET /nodes: nsqd producers with ``topics`` and ``tombstones``. Raises LookupdError."""
        return list((await self._request("GET", address, "/nodes")).get("producers") or [])

    async def post(self, address: str, path: str, *, ok_404: bool = False, **params: str) -> bool:
        """POST an admin endpoint (``/topic/delete``, ``/topic/tombstone`` ...).

        Args:
            ok_404: a 404 answer (``TOPIC_NOT_FOUND``, ``CHANNEL_NOT_FOUND``:
                already gone) is not an error.

        Returns:
            True when done, False on a 404 accepted by ``ok_404``.

        Raises:
            LookupdError: unreachable or an error answer.
        """
        return await self._request("POST", address, path, params, ok_404=ok_404) is not None

    async def info(self, address: str) -> dict:
        """GET /info: ``{"version", ...}`` (nsqd adds broadcast_address,
        hostname, http_port, tcp_port, start_time). Raises LookupdError."""
        return await self._request("GET", address, "/info")

    async def lookup_all(self, addresses: list[str], topic: str) -> tuple[list[dict], list[LookupdError]]:
        """``/lookup`` on every lookupd concurrently.

        Returns:
            (the producers, de-duplicated by ``broadcast_address:tcp_port``;
            the errors of the lookupds that failed).
        """
        results = await asyncio.gather(*(self.lookup(a, topic) for a in addresses), return_exceptions=True)
        producers: dict[str, dict] = {}
        errors: list[LookupdError] = []
        for result in results:
            if isinstance(result, LookupdError):
                errors.append(result)
                continue
            if isinstance(result, BaseException):
                raise result
            for p in result["producers"]:
                if isinstance(p, dict):
                    producers.setdefault(producer_address(p), p)
        return list(producers.values()), errors

    async def channels_all(self, addresses: list[str], topic: str) -> tuple[list[str], list[LookupdError]]:
        """``/channels`` on every lookupd concurrently: (union of names, errors)."""
        results = await asyncio.gather(*(self.channels(a, topic) for a in addresses), return_exceptions=True)
        names: dict[str, None] = {}
        errors: list[LookupdError] = []
        for result in results:
            if isinstance(result, LookupdError):
                errors.append(result)
            elif isinstance(result, BaseException):
                raise result
            else:
                names.update(dict.fromkeys(result))
        return list(names), errors


class NSQDHTTPClient(LookupdHTTPClient):
    """Asks nsqds over HTTP (``/stats``, ``/info``, admin POSTs): the same
    session, headers and timeouts as :class:`LookupdHTTPClient`, errors
    raised as :class:`NSQDHTTPError`."""

    error_class = NSQDHTTPError

    async def stats(self, address: str, topic: str = "", channel: str = "", include_clients: bool = True) -> dict:
        """GET /stats?format=json: ``{"version", "health", "start_time",
        "topics": [...] | None, "producers": ...}`` (topic and channel
        filters as nsqd's). Raises NSQDHTTPError."""
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
        if channel:
            params["channel"] = channel
        if not include_clients:
            params["include_clients"] = "false"
        return await self._request("GET", address, "/stats", params)
