"""Admin actions of ``nsq admin``, done as Go nsqadmin does them (nsqio/nsq
``nsqadmin/http.go`` handlers over ``internal/clusterinfo/data.go``:
``CreateTopicChannel``, ``DeleteTopic``, ``DeleteChannel``, ``PauseTopic``,
``EmptyChannel``, ``TombstoneNodeForTopic`` ...), each followed by
nsqadmin's notification (``nsqadmin/notify.go``, ``AdminAction``).

==================== ========================================================
action               HTTP calls
==================== ========================================================
create_topic         lookupds ``POST /topic/create`` (no lookupd: every nsqd)
create_channel       lookupds ``POST /channel/create``, then ``POST
                     /channel/create`` on each nsqd that has the topic
delete_topic         lookupds ``POST /topic/delete``, then each producer nsqd
delete_channel       lookupds ``POST /channel/delete``, then each producer
(un)pause, empty     ``POST /topic|channel/pause|unpause|empty`` on each nsqd
                     that has the topic
tombstone_topic_     lookupds ``POST /topic/tombstone?topic=&node=``, then
producer             ``POST /topic/delete`` on that nsqd (as nsqadmin)
promote_node         ``POST /replica/promote`` on one replica (beyond nsqadmin)
drain_node           ``POST /drain`` on one nsqd (beyond nsqadmin: this
                     project's nsqd drains, then exits; Go nsqd answers 404)
rewind_channel       ``POST /channel/rewind?topic=&channel=&since=`` on each
                     nsqd of the channel (beyond nsqadmin: this project's
                     ``--storage=wal`` nsqd; :mod:`nsq.cluster.rewind`)
==================== ========================================================

A 404 from a delete (already gone: this project's lookupd carries deletes
to the nsqds itself) or from a channel action on an nsqd that lacks the
channel is not an error. Failures are collected in the
:class:`ActionResult`, never raised.

The notification, POSTed as JSON to ``--notification-http-endpoint``, has
Go's ``AdminAction`` fields: ``action``, ``topic``, ``channel`` and ``node``
(left out when empty), ``timestamp`` (Unix seconds), ``user`` (left out
when empty), ``remote_ip``, ``user_agent``, ``url``, ``via`` (this host's
name); ``drain_node`` has ``node`` and an empty ``topic``;
``rewind_channel`` adds ``since`` as the user gave it (and ``"clamp": true``
when it rewound to the oldest retained message instead). Where nsqadmin
puts the browser's request, :class:`Actor` gives the acting user
(``NSQ_ADMIN_USER``, default the login name), where they are
(``NSQ_ADMIN_REMOTE_IP``, else the SSH client, else 127.0.0.1), their agent
(``NSQ_ADMIN_USER_AGENT``) and nsqadmin's API URL for the same action under
``NSQ_ADMIN_URL`` (default ``nsq-admin://<hostname>``).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp

from nsq.client.lookupd import HTTPAPIError
from nsq.cluster.poller import USER_AGENT, Cluster
from nsq.cluster.rewind import OFFSET_NOT_RETAINED, error_code, parse_since
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["ActionResult", "Actor", "Admin", "RewindResult", "Rewound"]

log = logging.getLogger("nsq.admin")


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "unknown"


@dataclass(frozen=True)
class Actor:
    """Who acts, for notifications and logs (see the module doc)."""

    user: str
    remote_ip: str = "127.0.0.1"
    user_agent: str = USER_AGENT
    via: str = ""
    url_base: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Actor:
        """From ``NSQ_ADMIN_USER``, ``NSQ_ADMIN_REMOTE_IP`` (else ``SSH_CLIENT``),
        ``NSQ_ADMIN_USER_AGENT``, ``NSQ_ADMIN_URL`` and the host name."""
        env = os.environ if environ is None else environ
        via = socket.gethostname()
        ssh = (env.get("SSH_CLIENT") or "").split()
        remote = env.get("NSQ_ADMIN_REMOTE_IP") or (f"{ssh[0]}:{ssh[1]}" if len(ssh) >= 2 else "127.0.0.1")
        return cls(user=env.get("NSQ_ADMIN_USER") or _login_name(), remote_ip=remote,
                   user_agent=env.get("NSQ_ADMIN_USER_AGENT") or USER_AGENT, via=via,
                   url_base=(env.get("NSQ_ADMIN_URL") or f"nsq-admin://{via}").rstrip("/"))


@dataclass
class ActionResult:
    """What an action did.

    Attributes:
        action: nsqadmin's action name (``pause_channel`` ...).
        done: upstream calls that succeeded.
        errors: one text per failed call (or a refusal such as an invalid name).
        notified: the notification endpoint accepted the notification.
        outcome: what :meth:`summary` says when nothing failed.
    """

    action: str
    topic: str
    channel: str = ""
    node: str = ""
    done: int = 0
    errors: list[str] = field(default_factory=list)
    notified: bool = False
    outcome: str = "done"

    @property
    def ok(self) -> bool:
        """Nothing failed."""
        return not self.errors

    @property
    def subject(self) -> str:
        """``topic``, ``topic/channel``, ``topic@node`` or ``node``."""
        if self.channel:
            return f"{self.topic}/{self.channel}"
        if self.node:
            return f"{self.topic}@{self.node}" if self.topic else self.node
        return self.topic

    def summary(self) -> str:
        """One line for the user."""
        what = self.action.replace("_", " ")
        if self.ok:
            return f"{what} {self.subject}: {self.outcome}"
        return f"{what} {self.subject}: " + "; ".join(self.errors)


@dataclass(frozen=True)
class Rewound:
    """One nsqd's answer to a rewind: the channel's new ``offset`` in the
    topic's log and how many messages that puts back (``count``)."""

    node: str
    offset: int
    count: int


@dataclass
class RewindResult(ActionResult):
    """What a ``rewind_channel`` did, per nsqd.

    Attributes:
        since: the time asked for, as the user gave it (``1h``, an RFC 3339 time).
        clamp: nsqds were asked to rewind to their oldest retained message
            when ``since`` is older.
        rewound: the nsqds that rewound, with their answers.
        not_retained: ``(node, address)`` of the nsqds that answered
            ``OFFSET_NOT_RETAINED`` (``since`` is before their oldest
            retained message): asked again with ``clamp`` they rewind to
            that one. Also among ``errors``.
        unavailable: the nsqds without a topic log (``NEEDS_STORAGE_WAL``,
            or a Go nsqd). Also among ``errors``.
    """

    since: str = ""
    clamp: bool = False
    rewound: list[Rewound] = field(default_factory=list)
    not_retained: list[tuple[str, str]] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: each nsqd's offset and count, then what failed."""
        what = f"rewind {self.subject} to {self.since}" + (" (or the oldest retained)" if self.clamp else "")
        parts = [f"{r.node} offset {r.offset:,}, {r.count:,} message{'' if r.count == 1 else 's'} again"
                 for r in self.rewound]
        return f"{what}: " + "; ".join(parts + self.errors) if parts or self.errors else f"{what}: nothing done"


_Result = TypeVar("_Result", bound=ActionResult)


class Admin:
    """Performs admin actions on the cluster a :class:`Cluster` reads.

    Args:
        cluster: its HTTP clients, addresses and timeouts are used.
        actor: who acts.
        notification_http_endpoint: URL to POST each action's JSON to ("": none).
        action_log: a path to append each action's JSON to, one per line ("": none).
    """

    def __init__(self, cluster: Cluster, actor: Actor, notification_http_endpoint: str = "",
                 action_log: str = "") -> None:
        self.cluster = cluster
        self.actor = actor
        self.endpoint = notification_http_endpoint
        self.action_log = action_log
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        """Close the notification session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- plumbing ----------------------------------------------------------------------

    async def _run(self, result: ActionResult, calls: list[Awaitable[bool]]) -> None:
        answers = await asyncio.gather(*calls, return_exceptions=True)
        for answer in answers:
            if isinstance(answer, HTTPAPIError):
                result.errors.append(str(answer))
            elif isinstance(answer, BaseException):
                raise answer
            else:
                result.done += 1

    def _lookupd_posts(self, path: str, **params: str) -> list[Awaitable[bool]]:
        return [self.cluster.lookupd.post(a, path, ok_404=path.endswith("/delete"), **params)
                for a in self.cluster.lookupd_addresses]

    def _nsqd_posts(self, addresses: list[str], path: str, ok_404: bool, **params: str) -> list[Awaitable[bool]]:
        return [self.cluster.nsqd.post(a, path, ok_404=ok_404, **params) for a in addresses]

    def notification(self, result: ActionResult) -> dict[str, Any]:
        """The notification JSON object of ``result`` (Go's ``AdminAction``)."""
        topic = quote(result.topic, safe="")
        if result.action == "create_topic" or result.action == "create_channel":
            path = "/api/topics"
        elif result.node:
            path = f"/api/nodes/{quote(result.node, safe='')}"
        elif result.channel:
            path = f"/api/topics/{topic}/{quote(result.channel, safe='')}"
        else:
            path = f"/api/topics/{topic}"
        out: dict[str, Any] = {"action": result.action, "topic": result.topic}
        if result.channel:
            out["channel"] = result.channel
        if result.node:
            out["node"] = result.node
        if isinstance(result, RewindResult):
            out["since"] = result.since
            if result.clamp:
                out["clamp"] = True
        out["timestamp"] = int(time.time())
        if self.actor.user:
            out["user"] = self.actor.user
        out.update(remote_ip=self.actor.remote_ip, user_agent=self.actor.user_agent,
                   url=self.actor.url_base + path, via=self.actor.via)
        return out

    async def _finish(self, result: _Result) -> _Result:
        """Log and notify an action that reached at least one daemon."""
        if result.done == 0:
            log.warning("ACTION FAILED: %s by %s - %s", result.action, self.actor.user, "; ".join(result.errors))
            return result
        payload = self.notification(result)
        text = json.dumps(payload, separators=(",", ":"))
        log.info("ACTION: %s", text)
        if self.action_log:
            try:
                with open(self.action_log, "a", encoding="utf-8") as fh:
                    fh.write(text + "\n")
            except OSError as exc:
                result.errors.append(f"action log {self.action_log}: {exc}")
        if self.endpoint:
            await self._notify(result, text)
        return result

    async def _notify(self, result: ActionResult, text: str) -> None:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.cluster.request_timeout,
                                            connect=self.cluster.connect_timeout)
            self._session = aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": USER_AGENT})
        try:
            async with self._session.post(self.endpoint, data=text,
                                          headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                if resp.status >= 300:
                    result.errors.append(f"notification endpoint answered {resp.status}")
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            result.errors.append(f"notification to {self.endpoint} failed: {exc or type(exc).__name__}")
            return
        result.notified = True

    async def _producers(self, result: ActionResult) -> list[str]:
        addresses, errors = await self.cluster.topic_producers(result.topic)
        result.errors.extend(errors)
        return addresses

    @staticmethod
    def _check(result: ActionResult) -> bool:
        if not is_valid_topic_name(result.topic):
            result.errors.append(f"invalid topic name {result.topic!r}")
        elif result.channel and not is_valid_channel_name(result.channel):
            result.errors.append(f"invalid channel name {result.channel!r}")
        return not result.errors

    # -- the actions -----------------------------------------------------------------

    async def create(self, topic: str, channel: str = "") -> list[ActionResult]:
        """Create ``topic`` (and ``channel`` when given) everywhere, as
        nsqadmin's Lookup page form.

        Returns:
            the ``create_topic`` result, then the ``create_channel`` one if a
            channel was asked for.
        """
        topic_result = ActionResult("create_topic", topic)
        results = [topic_result]
        if channel:
            results.append(ActionResult("create_channel", topic, channel))
        if not self._check(results[-1]):
            if channel:
                topic_result.errors = list(results[-1].errors)
            return results
        c = self.cluster
        if c.lookupd_addresses:
            await self._run(topic_result, self._lookupd_posts("/topic/create", topic=topic))
            if channel:
                ch = results[1]
                await self._run(ch, self._lookupd_posts("/channel/create", topic=topic, channel=channel))
                producers = await self._producers(ch)
                await self._run(ch, self._nsqd_posts(producers, "/channel/create", False, topic=topic,
                                                     channel=channel))
        else:
            await self._run(topic_result, self._nsqd_posts(c.nsqd_addresses, "/topic/create", False, topic=topic))
            if channel:
                await self._run(results[1], self._nsqd_posts(c.nsqd_addresses, "/channel/create", False,
                                                             topic=topic, channel=channel))
        for r in results:
            await self._finish(r)
        return results

    async def delete_topic(self, topic: str) -> ActionResult:
        """Delete ``topic`` from the lookupds and every nsqd that has it."""
        result = ActionResult("delete_topic", topic)
        if not self._check(result):
            return result
        producers = await self._producers(result)  # before the lookupds forget them
        await self._run(result, self._lookupd_posts("/topic/delete", topic=topic))
        await self._run(result, self._nsqd_posts(producers, "/topic/delete", True, topic=topic))
        return await self._finish(result)

    async def delete_channel(self, topic: str, channel: str) -> ActionResult:
        """Delete ``channel`` of ``topic`` from the lookupds and every nsqd."""
        result = ActionResult("delete_channel", topic, channel)
        if not self._check(result):
            return result
        producers = await self._producers(result)
        await self._run(result, self._lookupd_posts("/channel/delete", topic=topic, channel=channel))
        await self._run(result, self._nsqd_posts(producers, "/channel/delete", True, topic=topic, channel=channel))
        return await self._finish(result)

    async def _on_producers(self, action: str, topic: str, channel: str = "") -> ActionResult:
        result = ActionResult(action, topic, channel)
        if not self._check(result):
            return result
        producers = await self._producers(result)
        if not producers and not result.errors:
            result.errors.append(f"no nsqd has topic {topic}")
            return result
        verb = action.split("_", 1)[0]
        if channel:
            calls = self._nsqd_posts(producers, f"/channel/{verb}", True, topic=topic, channel=channel)
        else:
            calls = self._nsqd_posts(producers, f"/topic/{verb}", False, topic=topic)
        await self._run(result, calls)
        return await self._finish(result)

    async def pause_topic(self, topic: str) -> ActionResult:
        """Pause ``topic`` on every nsqd that has it."""
        return await self._on_producers("pause_topic", topic)

    async def unpause_topic(self, topic: str) -> ActionResult:
        """Unpause ``topic`` on every nsqd that has it."""
        return await self._on_producers("unpause_topic", topic)

    async def empty_topic(self, topic: str) -> ActionResult:
        """Empty ``topic``'s own queue on every nsqd that has it."""
        return await self._on_producers("empty_topic", topic)

    async def pause_channel(self, topic: str, channel: str) -> ActionResult:
        """Pause ``channel`` on every nsqd that has it."""
        return await self._on_producers("pause_channel", topic, channel)

    async def unpause_channel(self, topic: str, channel: str) -> ActionResult:
        """Unpause ``channel`` on every nsqd that has it."""
        return await self._on_producers("unpause_channel", topic, channel)

    async def empty_channel(self, topic: str, channel: str) -> ActionResult:
        """Empty ``channel`` (memory, disk, in flight, deferred) on every nsqd."""
        return await self._on_producers("empty_channel", topic, channel)

    async def tombstone(self, topic: str, node: str) -> ActionResult:
        """Tombstone ``node`` (``broadcast_address:http_port``) for ``topic``
        on the lookupds, then delete the topic on that nsqd (nsqadmin's ✘)."""
        result = ActionResult("tombstone_topic_producer", topic, node=node)
        if not self._check(result):
            return result
        if not self.cluster.lookupd_addresses:
            result.errors.append("tombstones need --lookupd-http-address")
            return result
        await self._run(result, [self.cluster.lookupd.post(a, "/topic/tombstone", topic=topic, node=node)
                                 for a in self.cluster.lookupd_addresses])
        await self._run(result, self._nsqd_posts([node], "/topic/delete", True, topic=topic))
        return await self._finish(result)

    async def drain_node(self, node: str, address: str = "") -> ActionResult:
        """Drain the nsqd ``node`` (``broadcast_address:http_port``): ``POST
        /drain`` makes it stop taking publishes and new deliveries, wait for
        the messages in flight (its ``--drain-timeout``), then exit. Go nsqd
        has no such endpoint: its 404 is reported as such.

        Args:
            node: names the nsqd in the result and the notification.
            address: where its HTTP API answers (``--nsqd-http-address``
                as given, ``https://`` ...); default ``node``.
        """
        result = ActionResult("drain_node", "", node=node,
                              outcome="draining (it exits once messages in flight are done)")
        try:
            await self.cluster.nsqd.post(address or node, "/drain")
        except HTTPAPIError as exc:
            if exc.status == 404:
                result.errors.append("this nsqd has no drain (Go nsqd)")
            else:
                result.errors.append(str(exc))
        else:
            result.done += 1
        return await self._finish(result)

    async def promote_node(self, node: str, address: str = "") -> ActionResult:
        """Promote the replica ``node`` to leader (``POST /replica/promote``;
        docs/operations/replication.md): a new epoch, publishes accepted,
        registered with its lookupds. A leader answers 400 ``NOT_A_REPLICA``,
        Go nsqd 404; both are reported.

        Args:
            node: names the nsqd in the result and the notification.
            address: where its HTTP API answers; default ``node``.
        """
        result = ActionResult("promote_node", "", node=node, outcome="promoted to leader")
        try:
            await self.cluster.nsqd.post(address or node, "/replica/promote")
        except HTTPAPIError as exc:
            result.errors.append("this nsqd has no replication (Go nsqd)" if exc.status == 404 else str(exc))
        else:
            result.done += 1
        return await self._finish(result)

    async def rewind_channel(self, topic: str, channel: str, since: str,
                             nodes: Sequence[tuple[str, str]] | None = None, *, clamp: bool = False) -> RewindResult:
        """Rewind ``channel`` of ``topic`` to ``since`` on each nsqd (``POST
        /channel/rewind``): it delivers again every message it retains that
        was published since then (:mod:`nsq.cluster.rewind`).

        Args:
            since: a Go duration meaning that long ago, or an RFC 3339 time
                (checked with :func:`nsq.cluster.rewind.parse_since`), sent
                as given: each nsqd takes a duration back from its own clock.
            nodes: ``(name, address)`` of the nsqds to ask (name: how the
                result names it; address: where its API answers); default
                every nsqd that has the topic, named by address.
            clamp: where ``since`` is before the oldest retained message,
                rewind to that one instead of refusing.

        Returns:
            per nsqd: its answer, or why not (``OFFSET_NOT_RETAINED``,
            ``NEEDS_STORAGE_WAL``, unreachable ...).
        """
        result = RewindResult("rewind_channel", topic, channel, since=since, clamp=clamp)
        if not self._check(result):
            return result
        try:
            parse_since(since)
        except ValueError as exc:
            result.errors.append(str(exc))
            return result
        if nodes is None:
            nodes = [(a, a) for a in await self._producers(result)]
        if not nodes:
            if not result.errors:
                result.errors.append(f"no nsqd has topic {topic}")
            return result
        answers = await asyncio.gather(*(self.cluster.nsqd.rewind(address, topic, channel, since, clamp)
                                         for _, address in nodes), return_exceptions=True)
        for (name, address), answer in zip(nodes, answers):
            if isinstance(answer, HTTPAPIError):
                code = error_code(answer)
                if code == OFFSET_NOT_RETAINED:
                    result.not_retained.append((name, address))
                    result.errors.append(f"{name}: {OFFSET_NOT_RETAINED} (its oldest retained message is younger)")
                elif code.startswith("NEEDS_STORAGE_WAL") or code == "NOT_FOUND":
                    result.unavailable.append(name)
                    # the server's own words (NEEDS_STORAGE_WAL: start nsqd with --storage=wal)
                    result.errors.append(f"{name}: {code}" if code != "NOT_FOUND" else f"{name}: no rewind (Go nsqd)")
                elif code in ("TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND"):
                    result.errors.append(f"{name}: {code}")
                else:
                    result.errors.append(str(answer))
            elif isinstance(answer, BaseException):
                raise answer
            else:
                offset, count = answer
                result.rewound.append(Rewound(name, offset, count))
                result.done += 1
        return await self._finish(result)
