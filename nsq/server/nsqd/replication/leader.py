"""The leader's side of replication: one session per replica (docs/operations/replication.md).

A replica connects to ``GET /replica/stream`` (a WebSocket) and says hello
with its epoch and, per topic, its head and epoch history. The leader
answers with its state, tells the replica where to cut a log that
diverged (the end of the replica's last epoch in the leader's history:
Kafka's leader-epoch truncation, KIP-101) and which copies to drop (of a
topic deleted since, by its tombstone, or deleted and created again, by
its log's id), then sends, per durable topic,
the records from the replica's head on as its log holds them, waking up on
each append, and its state again every ``--sync-timeout`` (topics,
channels, pause, retention, each channel's checkpoint). The replica
answers each page with an ack of its head; :class:`Acks` turns those into
the futures a publish with ``--replica-acks`` waits for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from nsq.server.nsqd.replication.wire import VERSION, WireError, decode_ack, records_frame
from nsq.server.nsqd.storage.backend import NotReplicated

if TYPE_CHECKING:
    from nsq.server.nsqd.replication.host import ReplicationHost
    from nsq.server.nsqd.replication.node import Replication
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["Session", "Acks", "stream_handler", "leader_state", "divergence", "lag_seconds"]

log = logging.getLogger("nsq.nsqd")

#: bytes of records per frame (at least one record)
PAGE = 1 << 20
#: with --replica-acks=0, how long (s) the sender waits after an append for more before sending
LINGER = 0.002
#: bytes of appends a session keeps in memory for the sender (past it, the sender reads the segment files)
TAIL = 4 << 20
#: bytes waiting in the stream's transport past which the sender waits for it to drain
HIGH_WATER = 4 << 20


class Session:
    """One connected replica.

    Attributes:
        address: where it says it serves HTTP (``host:port``).
        acked: per topic, the head it confirmed (records below it written).
        sent: per topic, the offset the next page starts at.
        dirty: the topics appended to since the sender last looked.
        changed: topics or channels changed since the last state message.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self.acked: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        #: per topic, the log :attr:`sent` counts in (a topic deleted and made again has a new one)
        self.logs: dict[str, TopicLog] = {}
        self.dirty: set[str] = set()
        self.changed = False
        self.waiter: asyncio.Future[None] | None = None
        #: per topic, its log and the appends not sent yet: (first offset, end offset, segment base, records)
        self._tails: dict[str, tuple[TopicLog, deque[tuple[int, int, int, bytes]]]] = {}
        self._tail_bytes = 0
        #: the stream's transport once the sender runs, for :meth:`appended`'s direct sends
        self.transport: Any = None
        #: send an append at once when the replica is level with it (``--replica-acks`` >= 1)
        self.direct = False

    def appended(self, tlog: TopicLog, data: bytes | memoryview, first: int, segment_base: int) -> None:
        """``tlog`` appended ``data`` (framed records, as written) from
        offset ``first`` (to its head) in its segment starting at
        ``segment_base``. With :attr:`direct` (publishes wait for the
        replicas), an append the replica is level with (the next thing it
        needs, nothing queued before it) goes onto the stream at once, as
        one frame: the replica starts on it while this loop turn goes on,
        instead of a turn later. Otherwise it is kept for the sender, which
        then sends it without reading it back (up to :data:`TAIL` bytes;
        past it, all are dropped and the sender reads the files)."""
        name = tlog.name
        raw = data if type(data) is bytes else bytes(data)  # a view's buffer may be reused after this call
        transport = self.transport
        if (self.direct and transport is not None and self.sent.get(name) == first and self.logs.get(name) is tlog
                and name not in self.dirty
                and not transport.is_closing() and transport.get_write_buffer_size() <= HIGH_WATER):
            head = tlog.head
            transport.writelines(records_frame(name, first, segment_base, head - first, head, [raw]))
            self.sent[name] = head
            return
        self.dirty.add(name)
        got = self._tails.get(name)
        if got is None or got[0] is not tlog:  # a topic deleted and made again: its own log
            got = self._tails[name] = (tlog, deque())
        got[1].append((first, tlog.head, segment_base, raw))
        self._tail_bytes += len(data)
        if self._tail_bytes > TAIL:
            self._tails.clear()
            self._tail_bytes = 0

    def page(self, tlog: TopicLog, offset: int) -> tuple[list[bytes], int, int]:
        """The records of ``tlog`` from ``offset``, in one segment, about
        :data:`PAGE` bytes (at least one record): ``(chunks of bytes, count,
        segment base)``, from the appends kept in memory when they start at
        ``offset``, else read from the segment files; no chunks at the head."""
        got = self._tails.get(tlog.name)
        if got is not None and got[0] is tlog:
            tail = got[1]
            while tail and tail[0][0] < offset:  # sent from the files, or a page ended inside it
                self._tail_bytes -= len(tail.popleft()[3])
            if tail and tail[0][0] == offset:
                first, end, base, data = tail.popleft()
                chunks, size = [data], len(data)
                while tail and tail[0][0] == end and tail[0][2] == base and size + len(tail[0][3]) <= PAGE:
                    _, end, _, data = tail.popleft()
                    chunks.append(data)
                    size += len(data)
                self._tail_bytes -= size
                return chunks, end - first, base
        data, count, base = tlog.read_raw(offset, PAGE)
        return [data] if count else [], count, base

    def wake(self) -> None:
        """Wake the sender (an append, a change, the state's time)."""
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)


class Acks:
    """The publishes waiting for ``--replica-acks`` replicas.

    :meth:`owe` notes each append of a topic log; :meth:`barrier` makes the
    future the next publish answer waits for (all owed heads acknowledged by
    ``n`` replicas, or :class:`NotReplicated` after ``timeout`` s).
    """

    def __init__(self, n: int, timeout: float) -> None:
        self.n = n
        self.timeout = timeout
        self.sessions: list[Session] = []
        self._owed: dict[str, int] = {}
        self._waiters: list[tuple[dict[str, int], asyncio.Future[None], asyncio.TimerHandle]] = []

    def owe(self, topic: str, head: int) -> None:
        """``topic``'s log was appended to up to ``head`` (exclusive): the
        next :meth:`barrier` waits for it."""
        self._owed[topic] = head

    def barrier(self) -> asyncio.Future[None] | None:
        """The future for what is owed (None: nothing)."""
        if not self._owed:
            return None
        need, self._owed = self._owed, {}
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self._count(need) >= self.n:
            fut.set_result(None)
            return fut
        handle = loop.call_later(self.timeout, self._expire, fut)
        self._waiters.append((need, fut, handle))
        return fut

    def _count(self, need: dict[str, int]) -> int:
        return sum(1 for s in self.sessions if all(s.acked.get(t, -1) >= h for t, h in need.items()))

    def _expire(self, fut: asyncio.Future[None]) -> None:
        self._waiters = [w for w in self._waiters if w[1] is not fut]
        if not fut.done():
            have = len(self.sessions)
            fut.set_exception(NotReplicated(
                f"not written by {self.n} replica(s) within {self.timeout:g}s ({have} connected)"))

    def acked(self) -> None:
        """A replica acknowledged: release the waiters now satisfied."""
        if not self._waiters:
            return
        keep = []
        for need, fut, handle in self._waiters:
            if fut.done():
                handle.cancel()
            elif self._count(need) >= self.n:
                handle.cancel()
                fut.set_result(None)
            else:
                keep.append((need, fut, handle))
        self._waiters = keep


def lag_seconds(tlog: TopicLog, have: int, now_ns: int) -> float:
    """How old (s) the first message of ``tlog`` below its head that a copy
    holding offsets below ``have`` lacks is: ``now_ns`` (ns since the epoch)
    less its publish timestamp, 0.0 when the copy has the whole head. The
    age of the oldest missing message, as Kafka's record-timestamp lag; a
    message older than the log's retention counts from the first retained
    one."""
    if have >= tlog.head:
        return 0.0
    ts = tlog.timestamp_at(max(have, tlog.first))
    return max(0.0, (now_ns - ts) / 1e9) if ts is not None else 0.0


def _wal_topics(nsqd: ReplicationHost) -> dict[str, Any]:
    """The durable topics with a topic log, by name."""
    return {name: t for name, t in nsqd.topics.items()
            if not t.ephemeral and not t.deleted and getattr(t.store, "log", None) is not None}


def leader_state(nsqd: ReplicationHost, repl: Replication) -> dict[str, Any]:
    """The state message: epoch, and per durable topic its log's first
    offset, head, visible offset, pause, own retention, epoch history and
    durable channels (pause, checkpoint)."""
    topics: dict[str, Any] = {}
    for name, topic in _wal_topics(nsqd).items():
        store = topic.store
        tlog: TopicLog = store.log
        channels = {}
        for cname, channel in topic.channels.items():
            cursor = channel.store.cursor
            if channel.ephemeral or cursor is None:
                continue
            cursor.fold()
            channels[cname] = {"paused": channel.paused, "low": cursor.finished.low,
                               "finished": cursor.finished.ranges()}
        topics[name] = {
            "first": tlog.first, "head": tlog.head, "visible": store.visible, "paused": topic.paused,
            "retention": [store.retention_time, store.retention_bytes] if store._own_retention else None,
            "epochs": repl.epochs_of(tlog), "id": repl.log_id(tlog), "channels": channels,
        }
    return {"type": "state", "epoch": repl.epoch, "node_id": nsqd.options.node_id, "topics": topics}


def divergence(leader_epochs: list[list[int]], leader_head: int, replica_epochs: list[list[int]],
               replica_head: int) -> int:
    """Where a replica's log must be cut to follow the leader: the end, in
    the leader's history, of the replica's last epoch (the start of the
    leader's next epoch, or its head), and never past the replica's head.
    An empty history on either side cuts nothing beyond the leader's head."""
    end = leader_head
    if replica_epochs and leader_epochs:
        last = replica_epochs[-1][0]
        later = [start for epoch, start in leader_epochs if epoch > last]
        if later:
            end = min(later)
    return min(end, replica_head)


async def stream_handler(request: web.Request, nsqd: ReplicationHost, repl: Replication) -> web.StreamResponse:
    """``GET /replica/stream``: one replica's session (see the module docstring)."""
    # no permessage-deflate: about 30 us a frame on each side, on the latency path of --replica-acks
    ws = web.WebSocketResponse(heartbeat=max(1.0, nsqd.options.sync_timeout * 5), max_msg_size=0, compress=False)
    await ws.prepare(request)
    try:
        hello = await ws.receive_json(timeout=10)
    except (ValueError, TypeError, asyncio.TimeoutError) as exc:
        log.error("REPLICA(%s): bad hello - %s", request.remote, exc)
        await ws.close()
        return ws
    try:
        if not isinstance(hello, dict) or not isinstance(hello.get("topics") or {}, dict):
            raise ValueError(f"not a hello: {str(hello)[:80]!r}")
        refusal = repl.refuse_replica(hello)
        wanted = {str(name): (int(have.get("head", 0)), [[int(e), int(o)] for e, o in have.get("epochs") or []],
                              str(have.get("id") or ""))
                  for name, have in (hello.get("topics") or {}).items()}
    except (ValueError, TypeError, AttributeError) as exc:
        log.error("REPLICA(%s): bad hello - %s", request.remote, exc)
        await ws.close()
        return ws
    if refusal:
        log.error("REPLICA(%s): refused - %s", request.remote, refusal)
        await ws.send_json({"type": "refused", "message": refusal})
        await ws.close()
        return ws
    sess = Session(str(hello.get("address", request.remote)))
    topics = _wal_topics(nsqd)
    cuts = {}
    drop = []  # copies of a topic deleted here (and maybe created again) while the replica was away
    for name, (head, epochs, log_id) in wanted.items():
        topic = topics.get(name)
        if topic is None:
            if name in repl.deleted:
                drop.append(name)
            else:  # a copy from before the tombstones, or of a topic this leader never had: kept, but said
                log.warning("REPLICA(%s): has topic %s, which this leader neither holds nor deleted: kept there",
                            request.remote, name)
            continue
        tlog = topic.store.log
        mine = repl.log_id(tlog)
        # another log (deleted, created again), or a copy from before log ids of a topic deleted since
        if mine and (log_id != mine if log_id else name in repl.deleted):
            drop.append(name)
            continue
        cut = divergence(repl.epochs_of(tlog), tlog.head, epochs, head)
        if cut < head:
            cuts[name] = cut
        sess.sent[name] = cut
        sess.logs[name] = tlog
    await ws.send_json({"type": "hello", "version": VERSION, "epoch": repl.epoch, "cluster": repl.cluster,
                        "node_id": nsqd.options.node_id, "cut": cuts, "drop": drop, "acks": repl.acks.n})
    await ws.send_json(leader_state(nsqd, repl))
    repl.sessions.append(sess)
    repl.watch()
    log.info("REPLICA(%s): following from %s (%d topics to cut back, %d to drop)", sess.address, request.remote,
             len(cuts), len(drop))
    transport = request.transport
    assert transport is not None
    sender = asyncio.ensure_future(_send(ws, transport, nsqd, repl, sess))
    spinner, loop = nsqd.spinner, asyncio.get_running_loop()
    try:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                if spinner is not None:  # --spin-before-sleep: an ack is a read
                    spinner.touch(loop.time())
                try:
                    name, head = decode_ack(msg.data)
                except WireError as exc:
                    log.error("REPLICA(%s): bad ack - %s", sess.address, exc)
                    break
                if head > sess.acked.get(name, -1):
                    sess.acked[name] = head
                repl.acks.acked()
            elif msg.type == WSMsgType.TEXT:
                log.error("REPLICA(%s): unexpected text %r", sess.address, msg.data[:80])
                break
            elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                break
    finally:
        sender.cancel()
        repl.sessions.remove(sess)
        repl.watch()
        log.info("REPLICA(%s): gone", sess.address)
    return ws


def _shape(topics: dict[str, Any]) -> dict[str, set[str]]:
    return {n: {c for c, ch in t.channels.items() if not ch.ephemeral} for n, t in topics.items()}


async def _send(ws: web.WebSocketResponse, transport: Any, nsqd: ReplicationHost,
                repl: Replication, sess: Session) -> None:
    """Pages of records as the logs grow; the state every --sync-timeout and
    at each change, with the topics and channels deleted since the last
    one (a topic missing from a state message is not deleted: a leader
    going down, or started on an empty data path, must not empty its
    replicas).

    A page goes onto the connection's ``transport`` as one WebSocket frame
    written by one ``writelines`` (one ``writev``; the records as appended
    or read, never joined), between whole frames of aiohttp's own writer.
    """
    interval = max(0.05, nsqd.options.sync_timeout)
    sess.transport, sess.direct = transport, bool(repl.acks.n)
    next_state = 0.0
    shape: dict[str, set[str]] | None = None
    loop = asyncio.get_running_loop()
    try:
        while not ws.closed and not nsqd.exiting:
            now = time.monotonic()
            if sess.changed or now >= next_state:  # every topic, and the state
                sess.changed = False
                topics = _wal_topics(nsqd)
                now_shape = _shape(topics)
                state = leader_state(nsqd, repl)
                # a topic deleted and made again since the replica's copy began: a new log, copied from
                # its start once the replica has dropped the old copy (this state message tells it to)
                remade = {n for n, t in topics.items() if sess.logs.get(n, t.store.log) is not t.store.log}
                for n in remade | (set(sess.logs) - set(topics)):
                    sess.sent.pop(n, None)
                    sess.logs.pop(n, None)
                before = shape or {}
                state["deleted_topics"] = sorted((set(before) - set(now_shape)) | remade)
                state["deleted_channels"] = {n: sorted(cs - now_shape[n]) for n, cs in before.items()
                                             if n in now_shape and n not in remade and cs - now_shape[n]}
                shape = now_shape
                next_state = now + interval
                await ws.send_str(json.dumps(state))
                names = list(topics)
            else:
                names = list(sess.dirty)
            sess.dirty.clear()
            for name in names:
                topic = nsqd.topics.get(name)
                tlog = getattr(topic.store, "log", None) if topic is not None and not topic.ephemeral else None
                if tlog is None or topic is None or topic.deleted:
                    continue
                if sess.logs.setdefault(name, tlog) is not tlog:  # made again: the state message first
                    sess.changed = True
                    continue
                off = max(sess.sent.get(name, tlog.first), tlog.first)
                while off < tlog.head and not ws.closed:
                    chunks, count, base = sess.page(tlog, off)
                    if not count:
                        break
                    transport.writelines(records_frame(name, off, base, count, tlog.head, chunks))
                    off += count
                    sess.sent[name] = off
                    while transport.get_write_buffer_size() > HIGH_WATER and not ws.closed:
                        await asyncio.sleep(0.01)  # a replica slower than the log grows
                    off = max(off, sess.sent[name])  # appends sent directly meanwhile
                sess.sent[name] = off
            if ws.closed or nsqd.exiting:
                break
            if sess.dirty or sess.changed:
                continue
            sess.waiter = fut = loop.create_future()
            timer = loop.call_later(max(0.0, next_state - time.monotonic()), sess.wake)
            try:
                await fut
            finally:
                timer.cancel()
                sess.waiter = None
            if sess.dirty and not sess.changed and not repl.acks.n:
                # asynchronous copies linger (Kafka's linger.ms): one frame for the appends of a few
                # ms, not one per MPUB; each frame costs both nodes tens of us whatever its size
                await asyncio.sleep(LINGER)
    except (ConnectionError, RuntimeError) as exc:
        log.info("REPLICA(%s): send failed - %s", sess.address, exc)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("REPLICA(%s): send failed", sess.address)
    await ws.close()
