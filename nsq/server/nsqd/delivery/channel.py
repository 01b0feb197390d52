"""A channel: a topic's copy of the stream, shared by its consumers.

Delivery is a push (docs/architecture.md, "the hot path"): when a message arrives, or a client
raises RDY / finishes a message, :meth:`Channel.pump` hands queued messages
to ready clients synchronously. In-flight and deferred timeouts sit in heaps
scanned by the daemon's periodic loop and are removed lazily.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import operator
import random
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING

from nsq.protocol.errors import NSQError
from nsq.protocol.names import is_ephemeral
from nsq.server.nsqd.storage.backend import BackendFull
from nsq.server.nsqd.delivery.deadletter import dead_letter, dead_letter_topic
from nsq.server.nsqd.delivery.host import TURN_BYTES
from nsq.server.nsqd.storage.message import (ATTEMPTS, CLIENT, DEADLINE, DELIVERED, NO_OFFSET, OFFSET, TIMESTAMP, Entry,
                                             Message, entry)
from nsq.server.nsqd.delivery.quantile import WindowedQuantile

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.stores import ChannelStore
    from nsq.server.nsqd.delivery.host import Subscriber
    from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["Channel", "ChannelError"]

log = logging.getLogger("nsq.nsqd")
_seq = itertools.count()
_DEFER_MS = operator.itemgetter(4)
_ID_OF = operator.itemgetter(0)
_OFFSET_OF = operator.itemgetter(OFFSET)
#: FIN/REQ/TOUCH failures, Go's texts
_NOT_IN_FLIGHT = "ID not in flight"
_NOT_OWNED = "client does not own message"


class ChannelError(NSQError):
    """FIN/REQ/TOUCH of a message not in flight to this client (Go's texts:
    ``ID not in flight``, ``client does not own message``)."""


class Channel:
    """One channel of a topic.

    Attributes:
        name: channel name.
        topic: the owning :class:`~nsq.server.nsqd.delivery.topic.Topic`.
        ephemeral: name ends in ``#ephemeral``; deleted with its last client.
        queue: memory queue (deque of :data:`~nsq.server.nsqd.storage.message.Entry`
            tuples), at most ``mem_queue_size`` long.
        store: its storage engine's part (:class:`~nsq.server.nsqd.delivery.stores.ChannelStore`).
        backend: the store's queue (its depth: ``backend_depth``).
        clients: subscribed clients by client id.
        in_flight: messages sent and not yet finished, by id.
        deferred: messages held back by DPUB/REQ: id -> ``(due, seq,
            entry)``, due in monotonic s (the same tuple is the heap item).
        paused: no delivery while True.
        message_count, requeue_count, timeout_count: counters for /stats.
        e2e: :class:`~nsq.server.nsqd.delivery.quantile.WindowedQuantile` of FIN
            latencies, or None without ``--e2e-processing-latency-percentile``.
    """

    def __init__(self, topic: Topic, name: str, store: ChannelStore) -> None:
        self.topic = topic
        self.nsqd = topic.nsqd
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = topic.nsqd.options.mem_queue_size
        self.queue: deque[Entry] = deque()
        self.store = store
        self.backend = store.backend
        #: the store's (constant) ``tracks_offsets`` and ``keeps_order``, kept here for the hot path
        self._tracks, self._ordered = store.tracks_offsets, store.keeps_order
        self.clients: dict[int, Subscriber] = {}
        self._ready: dict[Subscriber, None] = {}
        self.in_flight: dict[bytes, Message] = {}
        #: ``(deadline, seq, [message id, ...])``: ids, so a message is freed at its FIN
        self._in_flight_pq: list[tuple[float, int, list[bytes]]] = []
        self._pq_refs = 0  # ids in _in_flight_pq (in flight or not)
        self._pq_limit = self.PQ_SLACK
        self.deferred: dict[bytes, tuple[float, int, Entry]] = {}
        self._deferred_pq: list[tuple[float, int, Entry]] = []
        #: ids of deferred messages the deferred log could not record
        self._unlogged: set[bytes] = set()
        self.paused = self.deleted = self._disk_turn = False
        self.armed = False  # the daemon's timeout scan watches this channel
        #: messages read from the store for one turn (fewer for large bodies); of the last read, still queued
        self._turn_reads, self._read_left = 64, 0
        #: durable deferred messages (None: ephemeral or memory-only nsqd)
        self.deferred_log = topic.nsqd.make_deferred_log(f"{topic.name}:{name}", self.ephemeral)
        store.open(self)  # deferred messages restored
        self.message_count = self.requeue_count = self.timeout_count = self.dead_letter_count = 0
        opts = topic.nsqd.options
        #: deliveries before a requeue or timeout moves the message to the
        #: dead-letter topic (0 = never); the daemon's or this channel's own
        self.max_attempts = topic.nsqd.channel_settings(topic.name, name).get("max_attempts", opts.max_attempts)
        self._dead_letter_warned = False
        #: FIN latencies (ns) when --e2e-processing-latency-percentile is set
        self.e2e = WindowedQuantile(opts.e2e_processing_latency_window_time, opts.e2e_processing_latency_percentiles) \
            if opts.e2e_processing_latency_percentiles else None

    def __repr__(self) -> str:
        return f"Channel({self.topic.name}:{self.name})"

    @property
    def depth(self) -> int:
        """Messages queued (memory + backend), not counting in-flight/deferred."""
        return len(self.queue) + self.backend.depth

    # -- putting -------------------------------------------------------------

    def put_messages(self, msgs: list[Entry], new: bool = True) -> None:
        """Queue new messages from the topic (entries shared by every
        channel): deferred ones (``defer_ms > 0``) to the deferred heap, the
        rest to ready clients at once where possible, and what is past
        ``mem_queue_size`` afterwards to the store (or, while the store has a
        backlog to read in order, all of them behind it).

        Args:
            msgs: the entries.
            new: True for a publish being answered now. False for messages
                acknowledged earlier (held by the topic): whatever the
                backend refuses then stays in memory, past the bound.

        Raises:
            BackendFull: (``new`` only) the store (a full or failing disk)
                or the deferred log refused some of ``msgs``: those are not
                kept (the publish is refused; memory stays within
                ``mem_queue_size``), the others stay.
        """
        store = self.store
        if self._ordered and self.backend.depth:
            # the store has a backlog: these come after it, read when their
            # turn comes; deferred ones (DPUB) are held back now, as in memory
            self.message_count += len(msgs)
            deferred = store.queue_behind(self, msgs)
            if deferred:
                now = time.monotonic()
                for e in deferred:
                    self._defer((e[0], e[1], e[2], e[3], 0, e[5]), now + e[4] / 1000.0, persist=False)
            if self._ready and not self.paused:
                self.pump()
            return
        q = self.queue
        fresh = len(msgs)  # of msgs, how many went to the memory queue
        if any(map(_DEFER_MS, msgs)):
            now = time.monotonic()
            fresh = 0
            for e in msgs:
                if e[4]:
                    # a store may keep the delay itself (a topic log's record)
                    self._defer((e[0], e[1], e[2], e[3], 0, e[5]), now + e[4] / 1000.0,
                                persist=store.persist_deferred, refuse=new)
                    self.message_count += 1
                else:
                    q.append(e)
                    fresh += 1
                    self.message_count += 1
        else:
            q.extend(msgs)
            self.message_count += fresh
        if self._ordered:
            store.took(msgs)
        if q:
            # with --mem-queue-size=0 the store keeps them before any is delivered
            deliver = self._ready and not self.paused
            if deliver and (self.mem_queue_size or self._ordered):
                self.pump()
                deliver = False
            excess = len(q) - self.mem_queue_size
            if excess > 0:
                store.overflow(self, excess, fresh, new)
            if deliver:
                self.pump()

    def capacity(self) -> int:
        """Messages it can take now without a backend: free memory-queue
        slots plus what ready clients can take at once."""
        cap = self.mem_queue_size - len(self.queue)
        if not self.paused and not self.queue:
            for client in self._ready:
                cap += client.ready_count - client.in_flight_count
        return cap

    def _enqueue(self, msg: Entry) -> None:
        """Put an entry (a requeued or timed-out message, a due deferred one) at the tail:
        past ``--mem-queue-size``, the store may take it; never lose an
        acknowledged message, so memory grows past its limit otherwise."""
        q = self.queue
        if len(q) < self.mem_queue_size or not self.store.spill(self, msg):
            q.append(msg)

    def _defer(self, e: Entry, due: float, persist: bool = True, refuse: bool = False) -> None:
        """Hold ``e`` until ``due`` (monotonic s), in the deferred log too.

        If the log cannot record it (a full disk): with ``refuse`` (a DPUB)
        raise :class:`BackendFull` and keep nothing; otherwise (a REQ with a
        delay: acknowledged already) keep it in memory only and write it to
        the channel's queue at exit.
        """
        if persist and self.deferred_log is not None:
            due_unix = time.time_ns() + int((due - time.monotonic()) * 1e9)
            try:
                self.deferred_log.add(due_unix, e[2], e[3], e[0], e[1])
            except OSError as exc:
                reason = f"failed to write deferred message - {exc}"
                self.nsqd.set_health(reason)
                if refuse:
                    raise BackendFull(reason) from None
                self._unlogged.add(e[0])
        # one tuple, untracked by the cycle collector, is both the heap item
        # and the dict value (the identity check makes removal lazy)
        item = (due, next(_seq), e)
        self.deferred[e[0]] = item
        heapq.heappush(self._deferred_pq, item)
        if not self.armed:
            self.nsqd.arm_timers(self)

    # -- delivery ------------------------------------------------------------

    def pump(self) -> None:
        """Hand queued messages to ready clients, round robin.

        Memory and the backend (disk) take turns when both hold messages, so
        neither starves (Go selects between them at random).
        """
        if self.paused or self.nsqd.draining:
            return
        ready = self._ready
        if not ready:
            return
        q = self.queue
        backend = self.backend
        if not q and not backend.depth:
            return
        now = time.monotonic()
        while ready:
            if backend.depth and (not q or (self._disk_turn and self._read_left <= 0)):  # no reordering
                self._disk_turn = False
                want = 0
                for client in ready:
                    want += client.ready_count - client.in_flight_count
                msgs = self._read_backend(min(max(want, 1), self._turn_reads))
                if msgs:
                    self._turn_reads = min(1024, len(ready) * -(-TURN_BYTES // (len(msgs[0][1]) + 30)))
                    self._read_left = len(msgs)
                    q.extendleft(reversed(msgs))
            elif backend.depth:
                self._disk_turn = True
            if not q:
                break
            share = -(-len(q) // len(ready))
            if share > 1 and share * (len(q[0][1]) + 30) > TURN_BYTES:  # as many as one turn's bytes (est.)
                share = -(-TURN_BYTES // (len(q[0][1]) + 30))
            for client in list(ready):
                cap = client.ready_count - client.in_flight_count
                n = cap if cap < share else share
                if n > len(q):
                    n = len(q)
                if n > 0:
                    self._read_left -= n
                    if n == len(q):  # the client takes all: no pop per message
                        batch = list(q)
                        q.clear()
                    else:
                        batch = [q.popleft() for _ in range(n)]
                    self._send(client, batch, now)
                if client.in_flight_count >= client.ready_count or client.closing or client.write_paused or client.out_full:
                    del ready[client]
                elif n > 0:  # rotate: the next pump starts with another client (one-at-a-time PUBs shared)
                    del ready[client]
                    ready[client] = None
                if not q:
                    break

    def _read_backend(self, n: int) -> list[Entry]:
        """Up to ``n`` messages taken from the store; the ones still
        deferred (a topic log's DPUB records) go to the deferred heap."""
        store = self.store
        while True:
            entries = store.read(self, n)
            if not any(map(_DEFER_MS, entries)):
                return entries
            now = time.monotonic()
            ready = []
            for e in entries:
                if e[4]:
                    self._defer((e[0], e[1], e[2], e[3], 0, e[5]), now + e[4] / 1000.0, persist=False)
                else:
                    ready.append(e)
            if ready or not store.backend.depth:
                return ready

    def _send(self, client: Subscriber, entries: list[Entry], now: float) -> None:
        settings = client.negotiated
        deadline = now + settings.msg_timeout
        in_flight = self.in_flight
        if settings.sample_rate:
            entries = self._sample(entries, settings.sample_rate)
            if not entries:
                return
        batch: list[Message] = []
        append = batch.append
        for msg_id, body, ts, attempts, _, offset in entries:
            msg = [msg_id, body, ts, attempts + 1, client, deadline, now, offset]  # a Message
            in_flight[msg_id] = msg
            append(msg)
        sent = client.send_messages(batch)
        if sent < len(batch):  # its output is full (large bodies): the rest go back to the front
            entries, rest = entries[:sent], entries[sent:]
            for e in rest:
                del in_flight[e[0]]
            self.queue.extendleft(reversed(rest))
            self._read_left = max(self._read_left, 0) + len(rest)
        heapq.heappush(self._in_flight_pq, (deadline, next(_seq), list(map(_ID_OF, entries))))
        self._pq_refs += len(entries)
        if self._pq_refs > self._pq_limit:
            self._compact_in_flight()
        if not self.armed:
            self.nsqd.arm_timers(self)

    def _sample(self, entries: list[Entry], rate: int) -> list[Entry]:
        """The ``rate`` % of ``entries`` a sampling client gets; the rest
        are gone for this channel, as in Go (finished, for the store)."""
        kept = [m for m in entries if random.randrange(100) <= rate]
        if self._tracks and len(kept) < len(entries):
            ids = {m[0] for m in kept}
            self.store.finish([m[5] for m in entries if m[0] not in ids and m[5] != NO_OFFSET])
        return kept

    #: the in-flight heap is rebuilt when it holds this many more message
    #: references than twice the messages in flight
    PQ_SLACK = 4096

    def _compact_in_flight(self) -> None:
        """Rebuild the in-flight heap from :attr:`in_flight` alone: FIN/REQ
        leave ids in the heap (lazy removal), which would otherwise stay
        until their deadline. Messages sent together keep sharing one entry;
        amortised O(1) per message (it runs once stale ids outnumber live ones)."""
        by_deadline: defaultdict[float, list[bytes]] = defaultdict(list)
        for msg_id, msg in self.in_flight.items():
            by_deadline[msg[DEADLINE]].append(msg_id)
        pq = [(deadline, next(_seq), batch) for deadline, batch in by_deadline.items()]
        heapq.heapify(pq)
        self._in_flight_pq = pq
        self._pq_refs = len(self.in_flight)
        self._pq_limit = 2 * self._pq_refs + self.PQ_SLACK

    def client_ready(self, client: Subscriber) -> None:
        """Called when a client's RDY allows more messages."""
        if (client.in_flight_count < client.ready_count and not client.closing and not client.write_paused
                and not client.out_full):
            q, depth = self.queue, self.backend.depth
            if (client.ready_count - client.in_flight_count == 1 and (not q) != (not depth) and not self._ready
                    and not self.paused and not self.nsqd.draining):
                # room for one, no other client waiting (a worker's FIN): pump's next message (both: pump's turns)
                self._read_left -= 1
                batch = [q.popleft()] if q else self._read_backend(1)
                if batch:
                    self._send(client, batch, time.monotonic())
                if client.in_flight_count >= client.ready_count:
                    return
            self._ready[client] = None
            if (self.queue or self.backend.depth) and not self.paused:
                self.pump()
        else:
            self._ready.pop(client, None)

    # -- client commands -----------------------------------------------------

    def _pop_in_flight(self, client: Subscriber, msg_id: bytes) -> Message:
        in_flight = self.in_flight
        msg = in_flight.get(msg_id)
        if msg is None or msg[CLIENT] is not client:
            raise ChannelError(_NOT_IN_FLIGHT if msg is None else _NOT_OWNED)
        del in_flight[msg_id]
        return msg

    def finish(self, client: Subscriber, msg_id: bytes) -> None:
        """FIN: the message is done; with e2e percentiles configured, its
        latency (now - publish timestamp, ns) is recorded (Go
        ``FinishMessage``). Raises :class:`ChannelError`."""
        msg = self._pop_in_flight(client, msg_id)
        if self._tracks and msg[OFFSET] != NO_OFFSET:
            self.store.finish((msg[OFFSET],))
        if self.e2e is not None:
            self.e2e.insert(msg[TIMESTAMP])

    def finish_many(self, client: Subscriber, msg_ids: list[bytes]) -> list[tuple[bytes, str]]:
        """:meth:`finish` of each id in order (a consumer's FINs read
        together). Returns ``(id, reason)`` for each one that failed,
        in order; the others are done."""
        pop = self.in_flight.pop
        e2e = self.e2e
        offsets = self._tracks
        track = e2e is not None or offsets
        failed = []
        done = []
        for msg_id in msg_ids:
            msg = pop(msg_id, None)
            if msg is None:
                failed.append((msg_id, _NOT_IN_FLIGHT))
            elif msg[CLIENT] is not client:
                self.in_flight[msg_id] = msg  # not this client's: put back
                failed.append((msg_id, _NOT_OWNED))
            elif track:
                done.append(msg)
        if offsets:
            self.store.finish(map(_OFFSET_OF, done))
        if e2e is not None:
            insert = e2e.insert
            for msg in done:
                insert(msg[TIMESTAMP])
        return failed

    def requeue(self, client: Subscriber, msg_id: bytes, timeout_ms: int) -> None:
        """REQ: back to the queue now (0) or after ``timeout_ms``."""
        msg = self._pop_in_flight(client, msg_id)
        self.requeue_count += 1
        if self.max_attempts and msg[ATTEMPTS] >= self.max_attempts and dead_letter(self, msg):
            return
        if timeout_ms > 0:
            self._defer(entry(msg), time.monotonic() + timeout_ms / 1000.0)
        else:
            self._enqueue(entry(msg))  # back at the tail

    def touch(self, client: Subscriber, msg_id: bytes) -> None:
        """TOUCH: reset the message's timeout to the client's negotiated
        ``msg_timeout`` from now, capped at ``--max-msg-timeout`` after delivery."""
        msg = self.in_flight.get(msg_id)
        if msg is None or msg[CLIENT] is not client:
            raise ChannelError(_NOT_IN_FLIGHT if msg is None else _NOT_OWNED)
        deadline = time.monotonic() + client.negotiated.msg_timeout
        cap = msg[DELIVERED] + self.nsqd.options.max_msg_timeout
        if deadline > cap:
            deadline = cap  # as Go: never past delivery + --max-msg-timeout
        msg[DEADLINE] = deadline
        heapq.heappush(self._in_flight_pq, (deadline, next(_seq), [msg_id]))
        self._pq_refs += 1
        if self._pq_refs > self._pq_limit:
            self._compact_in_flight()
        if not self.armed:
            self.nsqd.arm_timers(self)

    # -- dead letters and peek ---------------------------------------------------

    @property
    def dead_letter_topic(self) -> str | None:
        """Where this channel's dead letters go (None: no valid name)."""
        return dead_letter_topic(self.nsqd.options.dead_letter_topic, self.topic.name, self.name)

    def peek(self, n: int) -> list[Entry]:
        """The next ``n`` messages the channel would deliver, memory first,
        then its store, changing nothing (depth, counters, positions);
        deferred and in-flight messages are not included."""
        out = list(itertools.islice(self.queue, n))
        if len(out) < n:
            out += self.store.peek(n - len(out))
        return out

    # -- timers --------------------------------------------------------------

    def process_timeouts(self, now: float) -> None:
        """Requeue in-flight messages past their deadline; release due deferred."""
        pq = self._in_flight_pq
        changed = False
        in_flight = self.in_flight
        while pq and pq[0][0] <= now:
            _, _, batch = heapq.heappop(pq)
            self._pq_refs -= len(batch)
            for msg_id in batch:
                msg = in_flight.get(msg_id)
                # a stale id (finished, or delivered again since) finds no
                # message, or one whose own deadline is later
                if msg is not None and msg[DEADLINE] <= now:
                    del in_flight[msg_id]
                    self.timeout_count += 1
                    msg[CLIENT].timed_out_message()
                    if not (self.max_attempts and msg[ATTEMPTS] >= self.max_attempts and dead_letter(self, msg)):
                        self._enqueue(entry(msg))  # back at the tail
                    changed = True
        dpq = self._deferred_pq
        deferred = self.deferred
        while dpq and dpq[0][0] <= now:
            item = heapq.heappop(dpq)
            e = item[2]
            if deferred.get(e[0]) is item:
                del deferred[e[0]]
                self._enqueue(self.store.released(self, e))  # the store says when it leaves the deferred log
                changed = True
        if changed:
            self.pump()

    @property
    def has_timers(self) -> bool:
        """True if in-flight or deferred messages wait on a deadline."""
        return bool(self._in_flight_pq or self._deferred_pq)

    # -- clients -------------------------------------------------------------

    def add_client(self, client: Subscriber) -> bool:
        """Subscribe a client; False if ``--max-channel-consumers`` is reached."""
        limit = self.nsqd.options.max_channel_consumers
        if limit and client.id not in self.clients and len(self.clients) >= limit:
            return False
        self.clients[client.id] = client
        return True

    def remove_client(self, client: Subscriber) -> None:
        """Unsubscribe; an ephemeral channel goes with its last client."""
        self.clients.pop(client.id, None)
        self._ready.pop(client, None)
        if self.ephemeral and not self.clients and not self.deleted:
            log.info("CHANNEL(%s): ephemeral channel has no clients, deleting", self.name)
            self.topic.delete_channel(self.name)

    # -- admin and lifecycle (nsqio/nsq nsqd/channel.go Empty, flush, exit) ----

    def pause(self) -> None:
        """Stop delivering to clients (messages keep queueing); persisted."""
        self.paused = True
        self.nsqd.persist_metadata()

    def unpause(self) -> None:
        """Resume delivery; persisted."""
        self.paused = False
        self.nsqd.persist_metadata()
        self.pump()

    def empty(self) -> None:
        """Drop every queued, in-flight and deferred message (as Go's Empty):
        memory, store and deferred log; each client's in-flight count goes
        to 0 and its readiness is checked again."""
        self.store.empty()
        for client in self.clients.values():
            client.in_flight_count = 0
        self._forget()
        self._unlogged.clear()
        if self.deferred_log is not None:
            self.deferred_log.clear()
        for client in self.clients.values():
            self.client_ready(client)

    def flush(self) -> int:
        """At exit: the store keeps what is in memory, in flight and deferred
        (:meth:`ChannelStore.flush`); empty afterwards. Returns how many
        messages that was."""
        count = self.store.flush(self)
        self._forget()
        return count

    def _forget(self) -> None:  # what memory holds: queued, in flight, deferred
        self.queue.clear()
        self.in_flight.clear()
        self._in_flight_pq.clear()
        self._pq_refs = 0
        self.deferred.clear()
        self._deferred_pq.clear()

    def close(self, delete: bool) -> None:
        """Close every subscribed client and stop the channel (Go's ``exit``).

        With ``delete``, empty it and delete its store and deferred log;
        otherwise flush what it holds to the store and close both. The
        daemon forgets them either way.

        Raises:
            Whatever the flush raises, after the store and log are closed.
        """
        self.deleted = True
        self.nsqd.forget_backend(self.backend)
        for client in list(self.clients.values()):
            client.close()
        self.clients.clear()
        self._ready.clear()
        dlog = self.deferred_log
        if dlog is not None:
            self.nsqd.forget_backend(dlog)
        if delete:
            self.empty()
            self.store.delete()
            if dlog is not None:
                dlog.delete()
            return
        try:
            self.flush()
        finally:
            self.store.close()
            if dlog is not None:
                dlog.close()
