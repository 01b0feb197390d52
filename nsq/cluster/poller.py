"""Polling a cluster for ``nsq admin``: lookupd ``/nodes``, ``/topics``,
``/info`` and each nsqd's ``/stats`` and ``/info`` over HTTP, aggregated by
:mod:`nsq.cluster.model` (rates by :mod:`nsq.cluster.rates`).

Like Go nsqadmin (nsqio/nsq ``nsqadmin/http.go`` over
``internal/clusterinfo``), the nsqds are those the lookupds list
(``/nodes``) or, without lookupds, the ``--nsqd-http-address`` list (each
asked ``/info``). A daemon that cannot be read becomes a
:class:`~nsq.cluster.model.NodeError` in the snapshot (and its node an
``error``); a poll never raises for it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Sequence
from typing import Any

from nsq import NSQ_VERSION, __version__
from nsq.client.lookupd import HTTPAPIError, LookupdHTTPClient, Producer
from nsq.cluster.lookupd import topic_nsqds
from nsq.cluster.model import (
    ChannelStats,
    ClusterSnapshot,
    LookupdInfo,
    NodeError,
    NodeInfo,
    aggregate,
    version_tuple,
)
from nsq.cluster.nsqd import NSQDHTTPClient, nsqd_topic_producers
from nsq.cluster.peek import Peek, peek_nsqds, peek_targets
from nsq.cluster.rates import History, apply_rates

__all__ = ["Cluster", "USER_AGENT"]

#: sent as User-Agent to lookupds and nsqds
USER_AGENT = f"nsq-admin/{__version__} (NSQ {NSQ_VERSION})"


def _strip_scheme(address: str) -> str:
    return address.split("://", 1)[-1].rstrip("/")


class Cluster:
    """Reads a cluster's state through lookupd and nsqd HTTP APIs.

    Args:
        lookupd_http_addresses: ``host:port`` (or ``http(s)://host:port``) of
            the lookupds; the nsqds are the ones they list.
        nsqd_http_addresses: used when no lookupd is given.
        connect_timeout, request_timeout: seconds, per HTTP request.
        ssl_context: for ``https://`` addresses (``--http-client-tls-*``).
        history: how many polls the sparkline series keep.
        auth_secret: sent to the nsqds as ``Authorization: Bearer <secret>``
            (nsqd's ``--http-auth-required``; :class:`~nsq.cluster.nsqd.NSQDHTTPClient`);
            "" sends none. Lookupds are asked without it.

    Raises:
        ValueError: neither or both address lists given (as nsqadmin).

    Use ``async with Cluster(...)`` or call :meth:`close`.
    """

    def __init__(self, lookupd_http_addresses: Sequence[str] = (), nsqd_http_addresses: Sequence[str] = (), *,
                 connect_timeout: float = 2.0, request_timeout: float = 5.0,
                 ssl_context: ssl.SSLContext | None = None, history: int = 120, auth_secret: str = "") -> None:
        self.lookupd_addresses = list(lookupd_http_addresses)
        self.nsqd_addresses = list(nsqd_http_addresses)
        if not self.lookupd_addresses and not self.nsqd_addresses:
            raise ValueError("--lookupd-http-address or --nsqd-http-address required")
        if self.lookupd_addresses and self.nsqd_addresses:
            raise ValueError("use --lookupd-http-address or --nsqd-http-address, not both")
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.lookupd = LookupdHTTPClient(connect_timeout, request_timeout, USER_AGENT, ssl_context)
        self.nsqd = NSQDHTTPClient(connect_timeout, request_timeout, USER_AGENT, ssl_context, auth_secret=auth_secret)
        self.history = History(history)

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP sessions."""
        await self.lookupd.close()
        await self.nsqd.close()

    @property
    def description(self) -> str:
        """Where the data comes from, for a title line."""
        if self.lookupd_addresses:
            return "lookupd " + ", ".join(_strip_scheme(a) for a in self.lookupd_addresses)
        return "nsqd " + ", ".join(_strip_scheme(a) for a in self.nsqd_addresses)

    # -- nodes ---------------------------------------------------------------------

    async def _lookupd_nodes(self, errors: list[NodeError]) -> tuple[list[LookupdInfo], list[NodeInfo], list[str]]:
        async def ask(address: str) -> tuple[Any, Any, Any]:
            answers: tuple[Any, Any, Any] = await asyncio.gather(
                self.lookupd.nodes(address), self.lookupd.topics(address), self.lookupd.info(address),
                return_exceptions=True)
            return answers

        answers = await asyncio.gather(*(ask(a) for a in self.lookupd_addresses))
        lookupds: list[LookupdInfo] = []
        nodes: dict[str, NodeInfo] = {}
        topics: set[str] = set()
        for address, (producers, names, info) in zip(self.lookupd_addresses, answers):
            failure = next((r for r in (producers, names, info) if isinstance(r, BaseException)), None)
            if failure is not None and not isinstance(failure, HTTPAPIError):
                raise failure
            lk = LookupdInfo(_strip_scheme(address))
            lookupds.append(lk)
            if failure is not None:
                lk.error = str(failure)
                errors.append(NodeError("lookupd", lk.address, str(failure)))
            if isinstance(info, dict):
                lk.version = str(info.get("version") or "")
            if isinstance(names, list):
                topics.update(str(n) for n in names)
            if not isinstance(producers, list):
                continue
            for obj in producers:
                if not isinstance(obj, dict):
                    continue
                p = Producer.from_json(obj)
                node = NodeInfo(hostname=p.hostname, broadcast_address=p.broadcast_address, tcp_port=p.tcp_port,
                                http_port=p.http_port, version=p.version)
                node.topics = sorted((t, p.tombstones[i] if i < len(p.tombstones) else False)
                                     for i, t in enumerate(p.topics))
                known = nodes.setdefault(node.tcp_address, node)
                known.remote_addresses.append(f"{lk.address}/{p.remote_address or 'N/A'}")
        return lookupds, list(nodes.values()), sorted(topics)

    async def _nsqd_nodes(self, errors: list[NodeError]) -> list[NodeInfo]:
        answers = await asyncio.gather(*(self.nsqd.info(a) for a in self.nsqd_addresses), return_exceptions=True)
        nodes = []
        for address, info in zip(self.nsqd_addresses, answers):
            plain = _strip_scheme(address)
            host, _, port = plain.rpartition(":")
            host = host.strip("[]")
            if isinstance(info, HTTPAPIError):
                node = NodeInfo(hostname=host, broadcast_address=host, tcp_port=0,
                                http_port=int(port) if port.isdigit() else 0, version="", error=str(info),
                                address=address.rstrip("/"))
                errors.append(NodeError("nsqd", plain, str(info)))
            elif isinstance(info, BaseException):
                raise info
            else:
                # as Go: the address given wins when /info lacks the broadcast address
                node = NodeInfo(hostname=str(info.get("hostname") or host),
                                broadcast_address=str(info.get("broadcast_address") or host),
                                tcp_port=int(info.get("tcp_port") or 0),
                                http_port=int(info.get("http_port") or (port if port.isdigit() else 0)),
                                version=str(info.get("version") or ""), address=address.rstrip("/"))
            nodes.append(node)
        return nodes

    async def _replicas(self, nodes: list[NodeInfo], errors: list[NodeError]) -> list[NodeInfo]:
        """The replicas the leaders among ``nodes`` name that are not listed
        yet (a replica registers with no lookupd), with their role."""
        known = {n.http_address for n in nodes} | {n.api_address for n in nodes}
        wanted = sorted({str(r.get("address")) for n in nodes if n.replication
                         for r in n.replication.get("replicas") or [] if r.get("address")} - known)
        found = []
        for address in wanted:
            host, _, port = address.rpartition(":")
            try:
                info = await self.nsqd.info(address)
                stats = await self.nsqd.stats(address)
            except HTTPAPIError as exc:
                errors.append(NodeError("nsqd", address, str(exc)))
                continue
            rep = stats.get("replication")
            found.append(NodeInfo(hostname=str(info.get("hostname") or host),
                                  broadcast_address=str(info.get("broadcast_address") or host),
                                  tcp_port=int(info.get("tcp_port") or 0), http_port=int(port) if port.isdigit() else 0,
                                  version=str(info.get("version") or ""), replication=rep if isinstance(rep, dict) else None,
                                  replica_only=True,
                                  topics=sorted((str(t.get("topic_name")), False) for t in stats.get("topics") or [])))
        return found

    # -- poll ----------------------------------------------------------------------

    #: topics whose lookupd channel lists are asked for at each poll
    LOOKUPD_CHANNEL_TOPICS = 500

    async def fetch(self) -> ClusterSnapshot:
        """Read the whole cluster once (no rates).

        Returns:
            a :class:`~nsq.cluster.model.ClusterSnapshot`; unreachable daemons
            are in its ``errors``.
        """
        taken_at = time.time()
        errors: list[NodeError] = []
        lookupds: list[LookupdInfo] = []
        known_topics: list[str] = []
        if self.lookupd_addresses:
            lookupds, nodes, known_topics = await self._lookupd_nodes(errors)
        else:
            nodes = await self._nsqd_nodes(errors)
        readable = [n for n in nodes if not n.error]
        answers = await asyncio.gather(
            *(self.nsqd.stats(n.api_address) for n in readable), return_exceptions=True)
        per_node: list[tuple[NodeInfo, dict]] = []
        for node, stats in zip(readable, answers):
            if isinstance(stats, HTTPAPIError):
                node.error = str(stats)
                errors.append(NodeError("nsqd", node.api_address, str(stats)))
                continue
            if isinstance(stats, BaseException):
                raise stats
            if not self.lookupd_addresses:
                node.topics = sorted((str(t.get("topic_name")), False) for t in stats.get("topics") or [])
            rep = stats.get("replication")
            node.replication = rep if isinstance(rep, dict) else None
            if node.replication is not None and node.replication.get("role") == "replica":
                node.replica_only = True  # a copy: its figures would count the leader's messages twice
                continue
            per_node.append((node, stats))
        nodes += await self._replicas(nodes, errors)
        newest = max((version_tuple(n.version) for n in nodes if n.version), default=(0,))
        for n in nodes:
            n.out_of_date = bool(n.version) and version_tuple(n.version) < newest
        nodes.sort(key=lambda n: (n.hostname, n.http_address))
        topics = aggregate(per_node, known_topics)
        if self.lookupd_addresses and topics:
            # channels lookupd knows that no nsqd has yet (created through
            # lookupd, nsqadmin's lookup page): every topic's, up to
            # LOOKUPD_CHANNEL_TOPICS topics (inactive ones first)
            asked = sorted(topics, key=lambda t: bool(t.nodes))[:self.LOOKUPD_CHANNEL_TOPICS]
            found = await asyncio.gather(*(self.lookupd.channels_all(self.lookupd_addresses, t.name)
                                           for t in asked))
            for topic, (names, _) in zip(asked, found):
                have = {c.name for c in topic.channels}
                extra = [ChannelStats(topic=topic.name, name=n) for n in sorted(names) if n not in have]
                if extra:
                    topic.channels = sorted(topic.channels + extra, key=lambda c: c.name)
        return ClusterSnapshot(taken_at=taken_at, lookupds=lookupds, nodes=nodes, topics=topics, errors=errors)

    async def poll(self) -> ClusterSnapshot:
        """:meth:`fetch`, then rates and histories from the previous polls."""
        return apply_rates(await self.fetch(), self.history)

    async def peek(self, snapshot: ClusterSnapshot, topic: str, channel: str = "", n: int = 20) -> Peek:
        """The next ``n`` messages of ``topic``/``channel`` (no ``channel``:
        the topic's own queue) on each nsqd ``snapshot`` has it on, merged,
        oldest first; changes nothing. nsqds that cannot be peeked at are
        ``notes`` of the :class:`~nsq.cluster.peek.Peek`."""
        return await peek_nsqds(self.nsqd, peek_targets(snapshot, topic, channel), topic, channel, n)

    # -- used by the actions -----------------------------------------------------------

    async def topic_producers(self, topic: str) -> tuple[list[str], list[str]]:
        """HTTP addresses of the nsqds that have ``topic``, asked now (the
        targets of nsqadmin's actions, Go's ``clusterinfo.GetTopicProducers``).

        With lookupds: :func:`~nsq.cluster.lookupd.topic_nsqds` (``/lookup``
        producers plus the ``/nodes`` entries listing the topic, tombstoned
        ones included); without: the ``--nsqd-http-address`` nsqds whose
        ``/stats`` has it.

        Returns:
            (addresses, error texts of the daemons that failed).
        """
        if self.lookupd_addresses:
            producers = await topic_nsqds(self.lookupd_addresses, topic, client=self.lookupd)
            return [p.http_address for p in producers], [str(e) for e in producers.errors]
        found, errors = await nsqd_topic_producers(self.nsqd_addresses, topic, self.nsqd)
        return found, [str(e) for e in errors]
