"""What the offsets source asks the cluster, from Spark's driver side.

Blocking calls for the stream and batch readers (which are synchronous),
each one an ``asyncio.run`` of the project's HTTP clients: lookupd
discovery (:func:`nsq.client.lookupd.topic_producers`, ``/nodes``) and
nsqd's HTTP API (:class:`nsq.cluster.nsqd.NSQDHTTPClient`), every nsqd
asked concurrently. The nsqd endpoints (``--storage=wal`` only; see
docs/reference/http.md "Retention, replay and reading by offset" and
nsq/server/nsqd/http/replay.py):

- ``GET /stats?format=json&topic=T``: per topic ``head_offset`` (the next
  message's offset) and ``first_offset`` (the oldest retained), per
  channel ``offset`` and ``depth``; the offset keys exist only on an nsqd
  in WAL mode, which is how :func:`nsq.spark.mode.choose_mode` tells the
  modes apart;
- ``POST /topic/create``, ``POST /channel/create?start=earliest``,
  ``POST /channel/commit?offset=N`` (everything below N is finished for
  the channel), ``POST /channel/rewind?offset=N&clamp=true``: the
  progress channel (:meth:`LogCluster.prepare_channels`,
  :meth:`LogCluster.commit`);
- ``GET /topic/read`` with an unknown topic: 404 ``TOPIC_NOT_FOUND`` on a
  WAL nsqd, 400 ``NEEDS_STORAGE_WAL`` on a ``--storage=diskqueue`` one,
  404 ``NOT_FOUND`` on Go nsqd (no such route): the mode of an nsqd that
  does not have the topic yet.

Addresses are nsqd HTTP addresses as :func:`nsq.spark.options.http_key`
writes them (the lookupds' ``broadcast_address:http_port``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from nsq.client.lookupd import HTTPAPIError, LookupdHTTPClient, ask_each, topic_producers, union_producers
from nsq.cluster.nsqd import NSQDHTTPClient
from nsq.spark.options import http_key

__all__ = ["LogCluster", "LogState"]

log = logging.getLogger("nsq.spark")

T = TypeVar("T")

#: seconds an HTTP request to a daemon may take (connect, answer)
CONNECT_TIMEOUT, REQUEST_TIMEOUT = 5.0, 30.0
#: seconds between two lookupd queries for the topic's nsqds
DISCOVERY_INTERVAL = 5.0


@dataclass(frozen=True)
class LogState:
    """One nsqd's log of the topic, from its ``/stats``.

    Attributes:
        address: the nsqd's HTTP address.
        exists: the nsqd has the topic.
        wal: the topic has a log there (``head_offset`` in ``/stats``);
            False for a ``--storage=diskqueue`` nsqd or an ephemeral topic.
        head: the next message's offset (0 without the topic).
        first: the oldest retained message's offset.
        channel_offset: where the progress channel stands: below it every
            message is finished (None: no such channel). That is ``head -
            depth``, not the channel's ``offset`` in ``/stats``: ``offset``
            is its read position, which runs ahead to the head as nsqd
            queues new messages for the channel in memory.
    """

    address: str
    exists: bool
    wal: bool
    head: int = 0
    first: int = 0
    channel_offset: int | None = None


def _state(address: str, stats: dict, topic: str, channel: str, synced_only: bool = False) -> LogState:
    for t in stats.get("topics") or []:
        if t.get("topic_name") != topic:
            continue
        if "head_offset" not in t:
            return LogState(address, exists=True, wal=False)
        head = int(t["head_offset"])
        if synced_only and "synced_offset" in t:
            head = min(head, int(t["synced_offset"]))
        position = None
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel and "offset" in c:
                position = max(0, head - int(c.get("depth") or 0))
        return LogState(address, True, True, head, int(t.get("first_offset") or 0), position)
    return LogState(address, exists=False, wal=False)


class LogCluster:
    """The topic's nsqds and their logs, for one reader.

    Args:
        topic, channel: the topic read and the progress channel.
        nsqd_http_addresses: nsqds given directly.
        lookupd_http_addresses: nsqlookupds to find the topic's nsqds with
            (``/lookup?topic=``, asked on every :meth:`states`).
        auth_secret: ``Authorization: Bearer`` for the nsqds ("" none).
        synced_only: a log's head is its ``synced_offset`` (only what nsqd
            has fsynced is read).
    """

    def __init__(self, topic: str, channel: str, nsqd_http_addresses: Iterable[str] = (),
                 lookupd_http_addresses: Iterable[str] = (), auth_secret: str = "",
                 synced_only: bool = False) -> None:
        self.topic = topic
        self.synced_only = synced_only
        self.channel = channel
        self.nsqd_http_addresses = tuple(nsqd_http_addresses)
        self.lookupd_http_addresses = tuple(lookupd_http_addresses)
        self.auth_secret = auth_secret
        #: nsqd -> offset last committed to its progress channel
        self.committed: dict[str, int] = {}
        self._listed: list[str] | None = None
        self._listed_at = 0.0

    @classmethod
    def from_settings(cls, settings: Any) -> LogCluster:
        """From :class:`~nsq.spark.options.OffsetSourceSettings`."""
        return cls(settings.topic, settings.channel, settings.nsqd_http_addresses,
                   settings.lookupd_http_addresses, settings.auth_secret, settings.synced_only)

    def _nsqd_client(self) -> NSQDHTTPClient:
        return NSQDHTTPClient(CONNECT_TIMEOUT, REQUEST_TIMEOUT, auth_secret=self.auth_secret)

    async def _discover(self, lookupd: LookupdHTTPClient) -> tuple[list[str], list[HTTPAPIError]]:
        """The nsqds given plus those the lookupds list for the topic (asked
        again once :data:`DISCOVERY_INTERVAL` has passed)."""
        found = list(self.nsqd_http_addresses)
        errors: list[HTTPAPIError] = []
        if self.lookupd_http_addresses:
            now = time.monotonic()
            if self._listed is None or now - self._listed_at >= DISCOVERY_INTERVAL:
                producers = await topic_producers(self.lookupd_http_addresses, self.topic, client=lookupd)
                self._listed = [http_key(p.http_address) for p in producers]
                self._listed_at = now
                errors += producers.errors
            found += self._listed
        return list(dict.fromkeys(found)), errors

    # -- questions -----------------------------------------------------------------------

    def states(self, also: Iterable[str] = ()) -> tuple[dict[str, LogState], list[HTTPAPIError]]:
        """Every known nsqd's log of the topic: those given, those the
        lookupds list now, and ``also`` (nsqds read before).

        Returns:
            ({nsqd: state} of those that answered, sorted by address; the
            errors of the daemons that did not).

        Raises:
            LookupdQueryError: every lookupd failed.
        """
        async def run() -> tuple[dict[str, LogState], list[HTTPAPIError]]:
            async with LookupdHTTPClient(CONNECT_TIMEOUT, REQUEST_TIMEOUT) as lookupd, self._nsqd_client() as nsqd:
                addresses, errors = await self._discover(lookupd)
                addresses = list(dict.fromkeys([*addresses, *also]))
                answers, failed = await ask_each(
                    addresses, lambda a: nsqd.stats(a, topic=self.topic, include_clients=False))
            states = {a: _state(a, stats, self.topic, self.channel, self.synced_only) for a, stats in answers}
            return dict(sorted(states.items())), errors + failed

        return asyncio.run(run())

    def storage_modes(self) -> tuple[dict[str, str], list[HTTPAPIError]]:
        """``{nsqd: "offsets" | "inflight"}`` for the topic's nsqds, or, when
        no nsqd has the topic yet, for every nsqd given or registered with
        the lookupds (``/nodes``): by ``/stats`` where the topic exists, by
        a ``/topic/read`` probe elsewhere (see the module docstring)."""
        states, errors = self.states()
        modes = {a: "offsets" if s.wal else "inflight" for a, s in states.items() if s.exists}
        if modes:
            return modes, errors

        async def probe(nsqd: NSQDHTTPClient, address: str) -> str:
            try:
                await nsqd.get(address, "/topic/read", {"topic": self.topic, "offset": "0", "limit": "1"})
            except HTTPAPIError as exc:
                text = str(exc)
                if "NEEDS_STORAGE_WAL" in text or "EPHEMERAL" in text:
                    return "inflight"
                if exc.status == 404 and "TOPIC_NOT_FOUND" not in text:
                    return "inflight"  # Go nsqd: no such route
                if exc.status not in (200, 400, 404):  # 200: it has the topic now (an answer, no JSON)
                    raise
            return "offsets"

        async def run() -> tuple[dict[str, str], list[HTTPAPIError]]:
            addresses = list(states)
            failed: list[HTTPAPIError] = []
            if self.lookupd_http_addresses:
                async def nodes(client: LookupdHTTPClient, address: str) -> list:
                    return await client.nodes(address)

                async with LookupdHTTPClient(CONNECT_TIMEOUT, REQUEST_TIMEOUT) as lookupd:
                    producers = await union_producers(self.lookupd_http_addresses, nodes, lookupd)
                addresses += [http_key(p.http_address) for p in producers]
            async with self._nsqd_client() as nsqd:
                answers, failed = await ask_each(dict.fromkeys(addresses), lambda a: probe(nsqd, a))
            return dict(answers), failed

        found, failed = asyncio.run(run())
        return found, errors + failed

    def tcp_addresses(self) -> list[str]:
        """The TCP addresses (``host:tcp_port`` from ``/info``) of the nsqds
        given by HTTP address, for the in-flight source.

        Raises:
            NSQDHTTPError: an nsqd did not answer.
        """
        async def run() -> list[str]:
            async with self._nsqd_client() as nsqd:
                infos = await asyncio.gather(*(nsqd.info(a) for a in self.nsqd_http_addresses))
            out = []
            for address, info in zip(self.nsqd_http_addresses, infos):
                host = address.split("://")[-1].rsplit(":", 1)[0]
                out.append(f"{host}:{int(info['tcp_port'])}")
            return out

        return asyncio.run(run())

    # -- the progress channel ----------------------------------------------------------

    def prepare_channels(self, offsets: Mapping[str, int], states: Mapping[str, LogState],
                         fresh: bool = False) -> None:
        """Make the progress channel exist on every nsqd in ``offsets``, at
        that offset: a missing one is created (the topic first, if the nsqd
        lacks it) at its offset, or the oldest retained message if that is
        gone, in one ``POST /channel/create?offset=``; ``/stats`` shows it
        there from the start and retention may delete below it. With ``fresh`` (a new query) an existing
        channel ahead of its offset is rewound to it. Failures are logged:
        the next call tries again."""
        todo = {a: o for a, o in offsets.items()
                if a in states and (fresh or states[a].channel_offset is None)}
        if not todo:
            return

        async def one(nsqd: NSQDHTTPClient, address: str) -> None:
            state, offset = states[address], todo[address]
            topic, channel = self.topic, self.channel
            if state.channel_offset is None:
                if not state.exists:
                    await nsqd.post(address, "/topic/create", topic=topic)
                # made at its offset in one request: /stats never shows it behind
                await nsqd.post(address, "/channel/create", topic=topic, channel=channel, offset=str(offset),
                                clamp="true")
                log.info("nsq offsets source: created channel %s/%s on %s at offset %d", topic, channel, address,
                         offset)
            else:
                if state.channel_offset > offset:
                    await nsqd.post(address, "/channel/rewind", topic=topic, channel=channel, offset=str(offset),
                                    clamp="true")
                if offset > 0:
                    await nsqd.post(address, "/channel/commit", topic=topic, channel=channel, offset=str(offset),
                                    clamp="true")
            self.committed[address] = offset

        self._each(todo, one, "prepare the progress channel")

    def commit(self, offsets: Mapping[str, int]) -> None:
        """Advance the progress channel to ``offsets`` where it is behind
        what this reader committed last (``POST /channel/commit``; a
        missing channel is created first). Failures are logged: the next
        commit catches up."""
        todo = {a: o for a, o in offsets.items() if o > self.committed.get(a, -1)}
        if not todo:
            return

        async def one(nsqd: NSQDHTTPClient, address: str) -> None:
            topic, channel, offset = self.topic, self.channel, str(todo[address])
            if not await nsqd.post(address, "/channel/commit", ok_404=True, topic=topic, channel=channel,
                                   offset=offset):
                await nsqd.post(address, "/channel/create", topic=topic, channel=channel, offset=offset,
                                clamp="true")
            self.committed[address] = todo[address]

        self._each(todo, one, "commit")

    def _each(self, addresses: Iterable[str], one: Callable[[NSQDHTTPClient, str], Awaitable[None]],
              what: str) -> None:
        async def run() -> list[HTTPAPIError]:
            async with self._nsqd_client() as nsqd:
                _, errors = await ask_each(addresses, lambda a: one(nsqd, a))
            return errors

        for error in asyncio.run(run()):
            log.warning("nsq offsets source: %s: %s", what, error)
