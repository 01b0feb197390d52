"""The replica's side of replication (docs/operations/replication.md).

:class:`Follower` keeps a WebSocket to the leader's ``GET /replica/stream``
open (reconnecting with a backoff after any failure), says hello with this
node's epoch and, per topic, its head, epoch history and log id, drops
the copies of topics the leader deleted meanwhile, cuts what the leader
says diverged, then writes every page of records it is sent into
the topic's copy (:meth:`ReplicaTopicStore.copy`, checked record by record
first) and acknowledges its head: after the fsync with ``--sync-every=1``,
after the write otherwise (the replica's own sync policy); following a
leader with ``--replica-acks`` >= 1, it polls for the next page for
:data:`ACKED_SPIN` after each before it sleeps (a wake-up less on the
publish's round trip). State messages
create and delete topics and channels, and copy pause, retention, epoch
history and each channel's checkpoint. Garbage, a truncated page or a
leader that goes away mid-page cost a log line and a reconnect, never a
corrupt log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from nsq.server.nsqd.replication.wire import VERSION, WireError, decode_records, encode_ack
from nsq.server.nsqd.storage.backend import BackendFull
from nsq.server.nsqd.storage.replicalog import ReplicaLog
from nsq.server.spin import Spinner

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.replicastore import ReplicaTopicStore
    from nsq.server.nsqd.replication.host import ReplicationHost
    from nsq.server.nsqd.replication.node import Replication

__all__ = ["Follower"]

log = logging.getLogger("nsq.nsqd")

#: following a leader whose publishes wait for replicas (``--replica-acks`` >= 1) and
#: without ``--spin-before-sleep``: how long (s) the loop polls for the next page after
#: each one before it sleeps, while a core is idle (:class:`~nsq.server.spin.Spinner`)
ACKED_SPIN = 0.0005


class ReplicationError(Exception):
    """The leader sent something this copy cannot take (reconnect)."""


class Follower:
    """Copies the leader at ``leader`` (``host:port``, HTTP)."""

    def __init__(self, nsqd: ReplicationHost, repl: Replication, leader: str) -> None:
        self.nsqd = nsqd
        self.repl = repl
        self.leader = leader
        self.connected = False
        #: when the stream was last opened (ns since the epoch)
        self.connected_at = time.time_ns()
        self.leader_epoch = 0
        #: per topic, the leader's head as last heard of (a records frame; a
        #: state message for a topic no frame has come for yet)
        self.leader_heads: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        #: the stream's own poller while following a leader with --replica-acks >= 1 (:data:`ACKED_SPIN`)
        self.spinner: Spinner | None = None

    def start(self) -> None:
        """Start following (a task on the running loop; reconnects until :meth:`stop`)."""
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop following and close the connection."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self.connected = False

    def _copy(self, name: str) -> ReplicaLog | None:
        """The topic's copy of the leader's log, if the topic exists."""
        topic = self.nsqd.topics.get(name)
        tlog = getattr(topic.store, "log", None) if topic is not None else None
        return tlog if isinstance(tlog, ReplicaLog) else None

    def topic_lag(self, now_ns: int) -> dict[str, dict[str, Any]]:
        """This copy's lag at ``now_ns`` (ns since the epoch), for ``/stats``
        (docs/operations/replication.md): ``{topic: {"offset", "leader_head",
        "lag_messages", "lag_seconds"}}``, ``offset`` this copy's head,
        ``leader_head`` the leader's as last heard of, ``lag_seconds`` while behind the
        age (s) of the newest message copied, at most the age of the first
        one missing and, at a steady rate, within one message of it; 0.0
        while the copy has the leader's head."""
        out = {}
        for name, head in self.leader_heads.items():
            copy = self._copy(name)
            have = copy.head if copy is not None else 0
            seconds = 0.0
            if head > have:
                ts = copy.timestamp_at(have - 1) if copy is not None and have > copy.first else None
                # nothing copied yet: at least as long as this connection (the messages were there)
                seconds = max(0.0, (now_ns - (ts if ts is not None else self.connected_at)) / 1e9)
            out[name] = {"offset": have, "leader_head": head, "lag_messages": max(0, head - have),
                         "lag_seconds": round(seconds, 3)}
        return out

    # -- the connection ----------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 0.1
        url = f"http://{self.leader}/replica/stream"
        self._session = aiohttp.ClientSession()
        while True:
            try:
                async with self._session.ws_connect(url, max_msg_size=0, heartbeat=10.0, compress=0,
                                                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0)) as ws:
                    await self._follow(ws)
                    backoff = 0.1
            except asyncio.CancelledError:
                raise
            except aiohttp.WSServerHandshakeError as exc:
                why = ("it does not replicate: the leader needs --storage=wal" if exc.status == 404
                       else f"HTTP {exc.status} {exc.message}")
                log.error("REPLICA: cannot follow %s - %s; again in %.1fs", self.leader, why, backoff)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ReplicationError, WireError,
                    ValueError) as exc:
                log.error("REPLICA: following %s - %s; again in %.1fs", self.leader, exc, backoff)
            except Exception:
                log.exception("REPLICA: following %s failed; again in %.1fs", self.leader, backoff)
            self.connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def _hello(self) -> dict[str, Any]:
        topics = {}
        for name, topic in self.nsqd.topics.items():
            tlog = getattr(topic.store, "log", None)
            if tlog is not None and not topic.ephemeral:
                topics[name] = {"head": tlog.head, "epochs": self.repl.epochs_of(tlog), "id": self.repl.log_id(tlog)}
        return {"type": "hello", "version": VERSION, "epoch": self.repl.epoch,
                "cluster": self.repl.cluster if self.repl.holds_data() else "",
                "node_id": self.nsqd.options.node_id,
                "address": self.repl.address(), "topics": topics}

    async def _follow(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        await ws.send_json(self._hello())
        reply = await ws.receive(timeout=10)
        if reply.type != aiohttp.WSMsgType.TEXT:
            raise ReplicationError(f"no hello from the leader ({reply.type.name})")
        hello = json.loads(reply.data)
        if hello.get("type") == "refused":
            raise ReplicationError(f"refused: {hello.get('message')}")
        version = hello.get("version", 1)
        if version != VERSION:
            raise ReplicationError(f"the leader speaks replication stream version {version}, this replica "
                                   f"{VERSION}: run the same nsq release on both")
        epoch = int(hello.get("epoch", 0))
        why = self.repl.join(str(hello.get("cluster", "")))
        if why:
            raise ReplicationError(why)
        if epoch < self.repl.epoch:
            raise ReplicationError(f"the leader's epoch {epoch} is older than this node's {self.repl.epoch}")
        self.leader_epoch = epoch
        self.leader_heads = {}
        self.connected_at = time.time_ns()
        for name in hello.get("drop") or []:
            if self.nsqd.topics.get(name) is not None:
                log.warning("REPLICA: topic %s was deleted on the leader while this replica was away: "
                            "deleting its copy", name)
                self.nsqd.delete_topic(name)
        for name, offset in (hello.get("cut") or {}).items():
            copy = self._copy(name)
            if copy is not None:
                copy.truncate_to(int(offset))
        self.connected = True
        log.info("REPLICA: following %s (epoch %d)", self.leader, epoch)
        loop = asyncio.get_running_loop()
        own = None
        if int(hello.get("acks") or 0) >= 1 and self.nsqd.spinner is None:
            # the leader's publishers wait for this node's acks: poll for the next page a moment
            # before sleeping, where a core is idle (nsq.server.spin)
            own = self.spinner = Spinner(loop, ACKED_SPIN)
        spinner = self.nsqd.spinner or own
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    if spinner is not None:  # a page is a read (the next comes sooner)
                        spinner.touch(loop.time())
                    name, head = self._records(msg.data)
                    await self._ack(ws, name, head)
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    self._state(json.loads(msg.data))
                elif msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSE):
                    raise ReplicationError(f"the leader closed the stream ({msg.type.name})")
        finally:
            if own is not None:
                own.close()
                self.spinner = None

    # -- records -----------------------------------------------------------------------

    def _topic(self, name: str) -> Any:
        topic = self.nsqd.topics.get(name)
        if topic is None:
            if not is_valid_topic_name(name) or name.endswith("#ephemeral"):
                raise ReplicationError(f"records of an invalid topic {name!r}")
            topic = self.nsqd.get_topic(name)
        return topic

    def _records(self, frame: bytes) -> tuple[str, int]:
        name, first, base, count, leader_head, data = decode_records(frame)
        if not count or len(data) < 8 * count:  # each record has an 8-byte frame (size, crc)
            raise ReplicationError(f"TOPIC({name}): a page of {len(data)} bytes for {count} records at offset {first}")
        topic = self._topic(name)
        store: ReplicaTopicStore = topic.store
        try:
            store.copy(topic, first, base, count, data)
        except BackendFull as exc:
            raise ReplicationError(f"TOPIC({name}): failed to write the copy - {exc}") from None
        head = store.log.head
        self.leader_heads[name] = max(leader_head, head)
        return name, head

    async def _ack(self, ws: aiohttp.ClientWebSocketResponse, name: str, head: int) -> None:
        tlog = self._copy(name)
        if tlog is not None and tlog.sync_every == 1:
            fut = tlog.sync_in_background()
            if fut is not None:
                await asyncio.wrap_future(fut)
        await ws.send_bytes(encode_ack(name, head))

    # -- state -------------------------------------------------------------------------

    def _state(self, state: dict[str, Any]) -> None:
        if state.get("type") != "state":
            return
        nsqd = self.nsqd
        topics: dict[str, Any] = state.get("topics") or {}
        for name in state.get("deleted_topics") or []:
            self.leader_heads.pop(name, None)
            if nsqd.topics.get(name) is not None:
                log.info("REPLICA: topic %s deleted on the leader", name)
                nsqd.delete_topic(name)
        gone = state.get("deleted_channels") or {}
        for name, cnames in gone.items():
            topic = nsqd.topics.get(name)
            if topic is not None:
                for cname in cnames:
                    topic.delete_channel(cname)
        for name, info in topics.items():
            if is_valid_topic_name(name) and not name.endswith("#ephemeral"):
                self._apply_topic(name, info)
        # the records frames that follow a state message say the head of each topic they copy (a state
        # head ahead of them would show a lag for the moment in between); a new topic's head is known here
        heads = self.leader_heads
        self.leader_heads = {n: heads.get(n, int(t.get("head", 0))) for n, t in topics.items()}

    def _apply_topic(self, name: str, info: dict[str, Any]) -> None:
        topic = self._topic(name)
        store: ReplicaTopicStore = topic.store
        channels: dict[str, Any] = info.get("channels") or {}
        for cname, cinfo in channels.items():
            if not is_valid_channel_name(cname) or cname.endswith("#ephemeral"):
                continue
            channel = topic.get_channel(cname)
            if bool(cinfo.get("paused")) != channel.paused:
                channel.pause() if cinfo.get("paused") else channel.unpause()
            cursor = channel.store.cursor
            if cursor is not None:
                cursor.adopt(int(cinfo.get("low", 0)), [[int(s), int(e)] for s, e in cinfo.get("finished", [])])
        if bool(info.get("paused")) != topic.paused:
            topic.pause() if info.get("paused") else topic.unpause()
        retention = info.get("retention")
        if retention and (store.retention_time, store.retention_bytes) != (float(retention[0]), int(retention[1])):
            try:
                store.set_retention(topic, float(retention[0]), int(retention[1]))
            except OSError as exc:
                log.error("TOPIC(%s): failed to copy its retention - %s", name, exc)
        epochs = info.get("epochs")
        if isinstance(epochs, list):
            try:
                log_id = info.get("id")
                self.repl.set_epochs(store.log, [[int(e), int(o)] for e, o in epochs],
                                     str(log_id) if log_id else None)
            except OSError as exc:
                log.error("TOPIC(%s): failed to copy its epochs - %s", name, exc)
        store.follow(topic, int(info.get("visible", 0)), int(info.get("first", 0)))
