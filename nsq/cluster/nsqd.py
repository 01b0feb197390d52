"""nsqd's HTTP API as the tools read it: ``/stats``, ``/info`` and the
admin POSTs (https://nsq.io/components/nsqd.html#http-api), this project's
``/channel/peek`` and ``/topic/peek`` (:mod:`nsq.cluster.peek`) and
``/channel/rewind`` (:mod:`nsq.cluster.rewind`), and the nsqds of
a topic when no lookupd is given (nsqio/nsq ``internal/clusterinfo/data.go``,
``GetNSQDTopicProducers``).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

from nsq.client.lookupd import HTTPAPIClient, HTTPAPIError, ask_each
from nsq.cluster.peek import PEEK_MAX, PeekedMessage

__all__ = ["NSQDHTTPClient", "NSQDHTTPError", "nsqd_topic_producers"]


class NSQDHTTPError(HTTPAPIError):
    """An nsqd could not be reached or gave an unusable answer (``address``,
    ``status``, ``reason`` as :class:`~nsq.client.lookupd.HTTPAPIError`)."""

    kind = "nsqd"


class NSQDHTTPClient(HTTPAPIClient):
    """Asks nsqds over HTTP: the session, headers and timeouts of
    :class:`~nsq.client.lookupd.HTTPAPIClient`, errors raised as
    :class:`NSQDHTTPError`.

    Args:
        connect_timeout, request_timeout, user_agent, ssl_context: as
            :class:`~nsq.client.lookupd.HTTPAPIClient`.
        auth_secret: sent as ``Authorization: Bearer <secret>`` on every
            request, for an nsqd started with ``--http-auth-required`` (this
            project's; nsqd asks its ``--auth-http-address`` servers about it
            as for the V2 ``AUTH`` command,
            https://nsq.io/components/nsqd.html#auth); "" sends none. Such an
            nsqd answers 401 ``AUTH_REQUIRED`` / ``AUTH_FAILED`` and 403
            ``UNAUTHORIZED`` (raised as :class:`NSQDHTTPError` with that
            ``status``) and lists in ``/stats`` only what the secret may
            subscribe to.
    """

    error_class = NSQDHTTPError

    def __init__(self, connect_timeout: float = 2.0, request_timeout: float = 5.0, user_agent: str | None = None,
                 ssl_context: ssl.SSLContext | None = None, auth_secret: str = "") -> None:
        super().__init__(connect_timeout, request_timeout, user_agent, ssl_context)
        if auth_secret:
            self._headers["Authorization"] = f"Bearer {auth_secret}"

    async def stats(self, address: str, topic: str = "", channel: str = "", include_clients: bool = True) -> dict:
        """GET /stats?format=json: ``{"version", "health", "start_time",
        "topics": [...] | None, "producers": ...}`` (topic and channel
        filters as nsqd's; counts in messages, ``e2e_processing_latency``
        values in ns). Raises NSQDHTTPError."""
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
        if channel:
            params["channel"] = channel
        if not include_clients:
            params["include_clients"] = "false"
        stats: dict[str, Any] = await self._request("GET", address, "/stats", params)
        return stats

    async def peek(self, address: str, topic: str, channel: str | None = None, n: int = 20, *, node: str = "",
                   hostname: str = "") -> list[PeekedMessage]:
        """GET /channel/peek?topic=&channel=&n= (no ``channel``: GET
        /topic/peek?topic=&n=): the next ``n`` messages (clamped to
        1..100) the channel would deliver, or the topic holds itself, in
        that nsqd's order, changing nothing (beyond Go nsqd: see
        :mod:`nsq.cluster.peek`).

        Args:
            node, hostname: put in each message (``node`` default: ``address``).

        Raises:
            NSQDHTTPError: unreachable, or an error answer: ``status`` 404
                with ``TOPIC_NOT_FOUND`` / ``CHANNEL_NOT_FOUND`` in its
                ``reason`` when the topic or channel is not there, 404
                ``NOT_FOUND`` from an nsqd without the endpoint (Go's);
                or an unusable answer.
        """
        params = {"topic": topic, "n": str(max(1, min(PEEK_MAX, n)))}
        if channel is not None:
            params["channel"] = channel
        answer = await self._request("GET", address, "/channel/peek" if channel is not None else "/topic/peek",
                                     params)
        node = node or address.split("://", 1)[-1].rstrip("/")
        messages = answer.get("messages") or []
        if not isinstance(messages, list):
            raise NSQDHTTPError(address, "peek: unexpected answer")
        try:
            return [PeekedMessage.from_json(m, node, hostname) for m in messages]
        except ValueError as exc:
            raise NSQDHTTPError(address, f"peek: {exc}") from None

    async def rewind(self, address: str, topic: str, channel: str, since: str,
                     clamp: bool = False) -> tuple[int, int]:
        """POST /channel/rewind?topic=&channel=&since= (``&clamp=true``):
        the channel delivers again every retained message published since
        ``since`` (see :mod:`nsq.cluster.rewind`; this project's
        ``--storage=wal`` nsqd only).

        Returns:
            (the channel's new offset in the topic's log, how many messages
            that puts back), nsqd's ``{"offset": N, "count": M}``.

        Raises:
            NSQDHTTPError: unreachable, or an error answer, its code by
                :func:`nsq.cluster.rewind.error_code`: 400
                ``OFFSET_NOT_RETAINED`` (before the oldest retained message;
                ``clamp`` rewinds to that one instead), 400
                ``NEEDS_STORAGE_WAL: ...`` (no topic log), 404
                ``TOPIC_NOT_FOUND`` / ``CHANNEL_NOT_FOUND``, 404 ``NOT_FOUND``
                (Go nsqd: no such endpoint); or an unusable answer.
        """
        params = {"topic": topic, "channel": channel, "since": since}
        if clamp:
            params["clamp"] = "true"
        answer = await self._request("POST", address, "/channel/rewind", params, answer=True)
        try:
            return int(answer["offset"]), int(answer["count"])
        except (KeyError, TypeError, ValueError):
            raise NSQDHTTPError(address, "rewind: unexpected answer") from None


async def nsqd_topic_producers(nsqd_http_addresses: Iterable[str], topic: str, client: NSQDHTTPClient
                               ) -> tuple[list[str], list[HTTPAPIError]]:
    """The given nsqds whose ``/stats`` has ``topic``, asked concurrently.

    Returns:
        (their addresses as given, without a trailing ``/``; the errors of
        the nsqds that failed).
    """
    answers, errors = await ask_each(nsqd_http_addresses,
                                     lambda a: client.stats(a, topic=topic, include_clients=False))
    found = [address.rstrip("/") for address, stats in answers
             if any(t.get("topic_name") == topic for t in stats.get("topics") or [])]
    return list(dict.fromkeys(found)), errors
