"""A node's replication role, epoch and HTTP endpoints (docs/operations/replication.md).

Every ``--storage=wal`` nsqd is a leader (the default) or, with
``--replica-of``, a replica of one leader for all its durable topics.

- ``nsqd.replication.json`` in the data path holds the node's leader
  epoch (0 until a first promotion), its cluster id and the tombstones of
  the durable topics deleted on it (name: when, ns), so a replica away
  while a topic was deleted drops its copy when it comes back; each topic
  log's ``epochs.json`` holds ``{"id": ..., "epochs": [[epoch, first
  offset], ...]}``: the log's id (made by the leader that created it,
  copied by its replicas: a topic deleted and created again has a new one)
  and from which offset on its records were written in which epoch
  (Kafka's leader-epoch checkpoint; a bare list is read as an old file
  with no id).
- ``GET /replica/stream``: a replica's session (:mod:`.leader`).
- ``POST /replica/promote``: a replica becomes the leader with a new epoch.
- ``GET /replica/status``: role, leader, epoch, replicas and lag (JSON).
- On a replica every change through HTTP (``/pub``, ``/mpub``, topic and
  channel create, delete, empty, pause, rewind, commit, config) is
  refused with 503 and a message naming the leader.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nsq.server.httpapi import HTTPError, json_response
from nsq.server.nsqd.delivery.replicastore import refusal
from nsq.server.nsqd.replication.leader import Acks, Session, lag_seconds, stream_handler
from nsq.server.nsqd.replication.wire import VERSION
from nsq.server.nsqd.storage.atomicfile import replace_atomically

if TYPE_CHECKING:
    from nsq.server.nsqd.replication.host import ReplicationHost
    from nsq.server.nsqd.replication.follower import Follower
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["Replication"]

log = logging.getLogger("nsq.nsqd")

STATE_FILE = "nsqd.replication.json"
EPOCHS_FILE = "epochs.json"
#: tombstones kept (the oldest go first)
TOMBSTONES = 10_000

#: HTTP paths a replica refuses (POST): they would change what the leader decides
_CHANGES = frozenset({"/pub", "/mpub", "/topic/create", "/topic/delete", "/topic/empty", "/topic/pause",
                      "/topic/unpause", "/channel/create", "/channel/delete", "/channel/empty", "/channel/pause",
                      "/channel/unpause", "/channel/rewind", "/channel/commit", "/topic/config", "/channel/config"})


class Replication:
    """The node's role (see the module docstring).

    Attributes:
        epoch: the leader epoch (persisted).
        sessions: the replicas following this node (a leader).
        acks: the publishes waiting for ``--replica-acks`` replicas.
        follower: the task copying the leader (a replica), or None.
    """

    def __init__(self, nsqd: ReplicationHost) -> None:
        self.nsqd = nsqd
        opts = nsqd.options
        self.enabled = opts.storage == "wal"
        self.epoch = 0
        #: the cluster id: made by a first leader, taken by its replicas; a
        #: leader with another one (a data path replaced) is not followed
        self.cluster = ""
        self.sessions: list[Session] = []
        self.acks = Acks(opts.replica_acks, opts.replica_timeout)
        self.acks.sessions = self.sessions
        self.follower: Follower | None = None
        #: durable topics deleted on this node: name -> when (ns since the epoch)
        self.deleted: dict[str, int] = {}
        #: per log path: its id and epoch history
        self._logs: dict[str, tuple[str, list[list[int]]]] = {}
        self._save_soon = False

    # -- start, stop -----------------------------------------------------------------

    def load(self) -> None:
        """Read the node's epoch (at start, after the data path is locked)."""
        if not self.enabled or not self.nsqd.data_path:
            return
        try:
            with open(os.path.join(self.nsqd.data_path, STATE_FILE), "rb") as fh:
                doc = json.loads(fh.read())
            self.epoch = int(doc["epoch"])
            self.cluster = str(doc.get("cluster", ""))
            self.deleted = {str(n): int(t) for n, t in (doc.get("deleted") or {}).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OSError(f"unreadable {STATE_FILE}: {exc}") from None
        if not self.cluster and not self.nsqd.replica_of:
            self.cluster = os.urandom(8).hex()
            self._save()

    def _save(self) -> None:
        if self.nsqd.data_path:
            doc = {"epoch": self.epoch, "cluster": self.cluster,
                   "role": "replica" if self.nsqd.replica_of else "leader", "leader": self.nsqd.replica_of,
                   "deleted": self.deleted}
            replace_atomically(os.path.join(self.nsqd.data_path, STATE_FILE), json.dumps(doc).encode())

    def add_routes(self, app: web.Application) -> None:
        """The ``/replica/*`` endpoints, and a replica's refusal of changes."""
        if not self.enabled:
            return
        app.router.add_get("/replica/stream", self._stream_handler)
        app.router.add_post("/replica/promote", self._promote_handler)
        app.router.add_get("/replica/status", self._status_handler, allow_head=False)
        app.middlewares.append(self._refuse_changes)

    async def _stream_handler(self, request: web.Request) -> web.StreamResponse:
        return await stream_handler(request, self.nsqd, self)

    @web.middleware
    async def _refuse_changes(self, request: web.Request, handler: Any) -> web.StreamResponse:
        leader = self.nsqd.replica_of
        if leader and request.method in ("POST", "PUT", "DELETE") and request.path in _CHANGES:
            raise HTTPError(503, f"PUB_FAILED: {refusal(leader)}" if request.path in ("/pub", "/mpub")
                            else f"NOT_LEADER: {refusal(leader)}")
        response: web.StreamResponse = await handler(request)
        return response

    def start(self) -> None:
        """A replica starts following its leader."""
        if self.nsqd.replica_of:
            from nsq.server.nsqd.replication.follower import Follower

            self.follower = Follower(self.nsqd, self, self.nsqd.replica_of)
            self.follower.start()

    async def stop(self) -> None:
        """Stop following the leader (at exit, or before a promotion)."""
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None

    # -- the leader's logs -----------------------------------------------------------

    def attach(self, tlog: TopicLog) -> None:
        """A durable topic's log was opened: note its epoch, and tell the
        replicas (and the acks) of each append."""
        if not self.nsqd.replica_of:
            self._mark_epoch(tlog)
        if self.sessions or self.acks.n:
            tlog.on_append = self._appended

    def watch(self) -> None:
        """Hook every topic log's appends while replicas follow or acks are
        asked for; unhook them otherwise (no cost on the publish path)."""
        hook = self._appended if self.sessions or self.acks.n else None
        for topic in self.nsqd.topics.values():
            tlog = getattr(topic.store, "log", None)
            if tlog is not None:
                tlog.on_append = hook

    def changed(self) -> None:
        """Topics or channels were made, deleted, paused or unpaused: the
        replicas get the state now (nsqd.dat is rewritten for the same)."""
        for sess in self.sessions:
            sess.changed = True
            sess.wake()

    def _appended(self, tlog: TopicLog, data: bytes | memoryview, first: int, segment_base: int) -> None:
        for sess in self.sessions:
            sess.appended(tlog, data, first, segment_base)
            sess.wake()
        if self.acks.n and not self.nsqd.replica_of:
            self.acks.owe(tlog.name, tlog.head)
            self.nsqd.disk.owe(self)  # type: ignore[arg-type]

    def sync_in_background(self) -> asyncio.Future[None] | None:
        """What :meth:`DataPath.durability_barrier` waits for on our behalf:
        the owed appends acknowledged by ``--replica-acks`` replicas."""
        return self.acks.barrier()

    def detach(self, tlog: TopicLog) -> None:
        """A durable topic's log is being deleted: keep its tombstone (a
        replica that was away drops its copy when it comes back)."""
        self._logs.pop(tlog.path, None)
        if not self.enabled:
            return
        self.deleted.pop(tlog.name, None)
        self.deleted[tlog.name] = time.time_ns()
        while len(self.deleted) > TOMBSTONES:
            del self.deleted[next(iter(self.deleted))]
        if not self._save_soon:  # one write for the deletions of a loop turn (a state message may bring many)
            self._save_soon = True
            try:
                asyncio.get_running_loop().call_soon(self._save_tombstones)
            except RuntimeError:  # no loop running (a caller outside the daemon's)
                self._save_tombstones()

    def _save_tombstones(self) -> None:
        self._save_soon = False
        try:
            self._save()
        except OSError as exc:
            log.error("REPLICA: failed to write the tombstones in %s - %s", STATE_FILE, exc)

    def _read_log(self, tlog: TopicLog) -> tuple[str, list[list[int]]]:
        got = self._logs.get(tlog.path)
        if got is None:
            try:
                with open(os.path.join(tlog.path, EPOCHS_FILE), "rb") as fh:
                    doc = json.loads(fh.read())
                if isinstance(doc, list):  # written before logs had an id
                    doc = {"id": "", "epochs": doc}
                got = (str(doc.get("id", "")), [[int(e), int(o)] for e, o in doc.get("epochs") or []])
            except FileNotFoundError:
                got = ("", [])
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                log.error("TOPIC(%s): unreadable %s (%s)", tlog.name, EPOCHS_FILE, exc)
                got = ("", [])
            self._logs[tlog.path] = got
        return got

    def epochs_of(self, tlog: TopicLog) -> list[list[int]]:
        """The log's ``[[epoch, first offset], ...]``."""
        return self._read_log(tlog)[1]

    def log_id(self, tlog: TopicLog) -> str:
        """The log's id ("" for a log from before ids, until its leader's is copied)."""
        return self._read_log(tlog)[0]

    def set_epochs(self, tlog: TopicLog, epochs: list[list[int]], log_id: str | None = None) -> None:
        """Write the log's epoch history, and its id (a replica copies its
        leader's; None keeps the one it has)."""
        have_id, have = self._read_log(tlog)
        new_id = have_id if log_id is None else log_id
        if (have_id, have) == (new_id, epochs):
            return
        doc = {"id": new_id, "epochs": epochs}
        replace_atomically(os.path.join(tlog.path, EPOCHS_FILE), json.dumps(doc).encode())
        self._logs[tlog.path] = (new_id, [list(e) for e in epochs])

    def _mark_epoch(self, tlog: TopicLog) -> None:
        log_id, epochs = self._read_log(tlog)
        if not epochs or epochs[-1][0] < self.epoch or not log_id:
            if not epochs or epochs[-1][0] < self.epoch:
                epochs = epochs + [[self.epoch, tlog.head]]
            try:
                self.set_epochs(tlog, epochs, log_id or os.urandom(8).hex())
            except OSError as exc:
                log.error("TOPIC(%s): failed to write %s - %s", tlog.name, EPOCHS_FILE, exc)

    def refuse_replica(self, hello: dict[str, Any]) -> str:
        """Why this node does not take a replica ("" if it does)."""
        if self.nsqd.replica_of:
            return f"this nsqd is itself a replica of {self.nsqd.replica_of}"
        version = hello.get("version", 1)
        if version != VERSION:
            return (f"the replica speaks replication stream version {version}, this leader {VERSION}: "
                    "run the same nsq release on both")
        if int(hello.get("node_id", -1)) == self.nsqd.options.node_id and \
                str(hello.get("address", "")) == self.address():
            return "a replica of itself"
        cluster = str(hello.get("cluster", ""))
        if cluster and cluster != self.cluster:
            return f"the replica belongs to another cluster ({cluster}, this leader's is {self.cluster})"
        if int(hello.get("epoch", 0)) > self.epoch:
            return f"the replica's epoch {hello.get('epoch')} is newer than this leader's {self.epoch}"
        return ""

    def address(self) -> str:
        """This node's HTTP address as its leader sees it: ``broadcast address:http port``."""
        opts = self.nsqd.options
        return f"{opts.broadcast_address}:{self.nsqd.http_port}"

    def holds_data(self) -> bool:
        """True once a topic log of this node holds a message."""
        return any(getattr(getattr(t.store, "log", None), "head", 0) for t in self.nsqd.topics.values())

    def join(self, cluster: str) -> str:
        """A replica's check of its leader's cluster id: "" if it may follow
        (a first leader's id is taken and saved, as by a node that holds no
        message yet), else why not."""
        if self.cluster and cluster != self.cluster and self.holds_data():
            return (f"the leader belongs to another cluster ({cluster}; this copy came from {self.cluster}): "
                    "its data path was replaced? promote this replica, or start it on an empty data path")
        if cluster != self.cluster:  # a first leader, or a node with no message yet: its cluster now
            self.cluster = cluster
            self._save()
        return ""

    # -- promotion -------------------------------------------------------------------

    async def promote(self, seen_epoch: int = 0) -> int:
        """Make this replica the leader with a new epoch; returns it.

        Raises:
            ValueError: this node is not a replica.
        """
        nsqd = self.nsqd
        if not nsqd.replica_of:
            raise ValueError("not a replica")
        await self.stop()
        old = nsqd.replica_of
        self.epoch = max(self.epoch, seen_epoch) + 1
        nsqd.replica_of = ""
        self._save()
        self.watch()
        for topic in nsqd.topics.values():
            tlog = getattr(topic.store, "log", None)
            if tlog is not None:
                self._mark_epoch(tlog)
        if nsqd.options.nsqlookupd_tcp_addresses:
            nsqd.lookupds.set_addresses(nsqd.options.nsqlookupd_tcp_addresses)
        log.warning("REPLICA: promoted to leader at epoch %d (was a replica of %s)", self.epoch, old)
        return self.epoch

    async def _promote_handler(self, request: web.Request) -> web.Response:
        if not self.nsqd.replica_of:
            raise HTTPError(400, "NOT_A_REPLICA")
        seen = self.follower.leader_epoch if self.follower is not None else 0
        epoch = await self.promote(seen)
        return json_response({"role": "leader", "epoch": epoch})

    # -- status ----------------------------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        """``/stats``' ``replication`` object (None without a topic log)."""
        if not self.enabled:
            return None
        nsqd = self.nsqd
        now_ns = time.time_ns()
        if nsqd.replica_of:
            f = self.follower
            topics = f.topic_lag(now_ns) if f else {}
            return {"role": "replica", "leader": nsqd.replica_of, "epoch": self.epoch,
                    "connected": bool(f and f.connected),
                    "lag_messages": sum(t["lag_messages"] for t in topics.values()),
                    "lag_seconds": max((t["lag_seconds"] for t in topics.values()), default=0.0),
                    "topics": topics}
        replicas = []
        for sess in self.sessions:
            topics = {}
            for name, topic in nsqd.topics.items():
                tlog = getattr(topic.store, "log", None)
                if tlog is None or topic.ephemeral:
                    continue
                acked = sess.acked.get(name, 0)
                topics[name] = {"offset": acked, "lag_messages": max(0, tlog.head - acked),
                                "lag_seconds": round(lag_seconds(tlog, acked, now_ns), 3)}
            replicas.append({"address": sess.address, "topics": topics,
                             "lag_messages": sum(t["lag_messages"] for t in topics.values()),
                             "lag_seconds": max((t["lag_seconds"] for t in topics.values()), default=0.0)})
        return {"role": "leader", "epoch": self.epoch, "replica_acks": self.acks.n, "replicas": replicas}

    async def _status_handler(self, request: web.Request) -> web.Response:
        return json_response(self.status() or {})
