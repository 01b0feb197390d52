"""What must survive a crash (from the log's markers), and the check of a recovered nsqd."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .workloads import HELD, _opts, parse_body, quiet_nsq

__all__ = ["Expectations", "Recovered", "Failure", "recover", "evaluate", "materialize"]


class Expectations:
    """The markers of a log prefix, folded: what a recovered nsqd must hold.

    Attributes:
        need: ``(topic, channel)`` -> keys acknowledged and not finished
            there (channel :data:`HELD`: published while the topic had no
            channel; it may be in any channel of the topic, or the topic).
        sent: every key whose publish was sent.
        delivered: ``(topic, channel)`` -> keys a consumer received.
        acked_at: key -> the log index of its ``ack``.
    """

    def __init__(self) -> None:
        self.need: dict[tuple[str, str], set[str]] = {}
        self.sent: set[str] = set()
        self.delivered: dict[tuple[str, str], set[str]] = {}
        self.acked_at: dict[str, int] = {}
        #: (topic, channel) -> [start, end or None] of the log spans a consumer's RDY was above 0
        self.ready: dict[tuple[str, str], list[list[Any]]] = {}
        self.label = "start"
        #: every label so far
        self.labels: set[str] = {"start"}

    def maybe_delivered(self, key: str, topic: str, channel: str) -> bool:
        """A consumer received ``key`` there, or nsqd may have put it in
        flight (a RDY above 0 after it was acknowledged)."""
        if key in self.delivered.get((topic, channel), ()):
            return True
        acked = self.acked_at.get(key, -1)
        return any(end is None or end > acked for _start, end in self.ready.get((topic, channel), ()))

    def feed(self, op: tuple, index: int) -> None:
        if op[0] != "mark":
            return
        kind = op[1]
        if kind == "send":
            self.sent.add(op[2])
        elif kind == "ack":
            _, _, key, topic, channels = op
            self.acked_at[key] = index
            for ch in channels or (HELD,):
                self.need.setdefault((topic, ch), set()).add(key)
        elif kind == "fin":
            _, _, key, topic, channel = op
            for ch in (channel, HELD):
                keys = self.need.get((topic, ch))
                if keys is not None:
                    keys.discard(key)
        elif kind == "deliver":
            _, _, key, topic, channel, _attempts = op
            self.delivered.setdefault((topic, channel), set()).add(key)
        elif kind == "rdy":
            _, _, topic, channel, n = op
            windows = self.ready.setdefault((topic, channel), [])
            if n > 0 and (not windows or windows[-1][1] is not None):
                windows.append([index, None])
            elif n <= 0 and windows and windows[-1][1] is None:
                windows[-1][1] = index
        elif kind == "chdel":
            self.need.pop((op[2], op[3]), None)
            # what the topic held went to its channels when the first one came: deleted with them
            self.need.pop((op[2], HELD), None)
        elif kind == "chempty":  # everything queued in the channel may go (what the topic held too, as chdel)
            self.need.pop((op[2], op[3]), None)
            self.need.pop((op[2], HELD), None)
        elif kind == "tdel":
            for k in [k for k in self.need if k[0] == op[2]]:
                del self.need[k]
        elif kind == "label":
            self.label = op[2]
            self.labels.add(op[2])

    def copy(self) -> Expectations:
        new = Expectations()
        new.need = {k: set(v) for k, v in self.need.items()}
        new.sent = set(self.sent)
        new.delivered = {k: set(v) for k, v in self.delivered.items()}
        new.acked_at = dict(self.acked_at)
        new.ready = {k: [list(w) for w in v] for k, v in self.ready.items()}
        new.label = self.label
        new.labels = set(self.labels)
        return new

    @property
    def acked(self) -> int:
        return len(self.acked_at)


@dataclass
class Recovered:
    """What an nsqd started on a crash state holds."""

    #: why it did not start (None: it started)
    error: str | None = None
    #: (topic, channel or HELD) -> keys found there (with multiplicity)
    found: dict[tuple[str, str], Counter] = field(default_factory=dict)
    #: bodies that are not a workload's (no key) or whose checksum fails
    damaged: list[str] = field(default_factory=list)
    #: its warnings and errors while starting and reading
    log: list[str] = field(default_factory=list)


@dataclass
class Failure:
    """One broken promise in one crash state."""

    kind: str  # "start", "lost", "damaged", "unknown"
    detail: str
    key: str | None = None
    topic: str | None = None
    channel: str | None = None
    #: for "lost": the message had been delivered (or may have been in flight:
    #: a consumer was ready) and not finished before the crash
    delivered: bool = False


def materialize(tree: dict[str, bytes | None], path: str) -> None:
    """Write ``tree`` (see :func:`~.states.build`) under ``path`` (exists, empty)."""
    for rel in sorted(tree, key=lambda p: p.count("/")):
        data = tree[rel]
        full = os.path.join(path, rel)
        if data is None:
            os.makedirs(full, exist_ok=True)
        else:
            with open(full, "wb") as fh:
                fh.write(data)


BIG = 1 << 20


def _note(rec: Recovered, where: tuple[str, str], bodies: list[bytes]) -> None:
    """Count each body's key found at ``where`` (topic, channel); a damaged one is recorded too."""
    counter = rec.found.setdefault(where, Counter())
    for body in bodies:
        key, intact = parse_body(body)
        if key is None or not intact:
            rec.damaged.append(f"{where[0]}/{where[1]}: {body[:40]!r}... ({len(body)} bytes)")
            if key is None:
                continue
        counter[key] += 1


def _collect(d: Any, rec: Recovered) -> None:
    from nsq.server.nsqd.storage.message import decode_entries

    def note(where: tuple[str, str], bodies: list[bytes]) -> None:
        _note(rec, where, bodies)

    for tname, topic in list(d.topics.items()):
        held: list[bytes] = [e[1] for e in topic.queue]
        store = topic.store
        if getattr(store, "log", None) is None and getattr(store.backend, "read_many", None) is not None:
            held += [e[1] for e in decode_entries(store.backend.read_many(BIG))]
        else:
            held += [e[1] for e in topic.peek(BIG)]
        note((tname, HELD), held)
        for cname, ch in list(topic.channels.items()):
            bodies = [e[1] for e in ch.queue]
            for _ in range(1000):
                entries = ch.store.read(ch, 4096)
                if not entries:
                    break
                bodies += [e[1] for e in entries]
            bodies += [item[2][1] for item in ch.deferred.values()]
            bodies += [m[1] for m in ch.in_flight.values()] if ch.in_flight else []
            note((tname, cname), bodies)


async def _consume(d: Any, rec: Recovered, quiet: float = 0.05) -> None:
    """What each channel delivers to a V2 consumer (FINed as it comes, until
    ``quiet`` s pass without a message), and what it still defers."""
    from nsq.protocol.frames import FRAME_TYPE_MESSAGE
    from nsq.protocol.message import decode_message

    from ..server.helpers import Conn

    def note(where: tuple[str, str], bodies: list[bytes]) -> None:
        _note(rec, where, bodies)

    for tname, topic in list(d.topics.items()):
        if topic.paused:  # a paused topic or channel delivers nothing: what it holds is checked, not its pause
            topic.unpause()
        note((tname, HELD), [e[1] for e in topic.peek(BIG)])
        for cname, ch in list(topic.channels.items()):
            if ch.paused:
                ch.unpause()
            bodies = [item[2][1] for item in ch.deferred.values()]
            conn = await Conn.open(d.tcp_port)
            try:
                await conn.subscribe(tname, cname, rdy=2500)
                while True:
                    try:
                        ftype, data = await conn.read_frame(quiet)
                    except asyncio.TimeoutError:
                        break
                    if ftype == FRAME_TYPE_MESSAGE:
                        msg = decode_message(data)
                        bodies.append(msg.body)
                        await conn.send(b"FIN " + msg.id + b"\n")
            finally:
                await conn.aclose()
            # and what reading the store deferred meanwhile (a DPUB's record, a REQ delay restored)
            bodies += [item[2][1] for item in ch.deferred.values()]
            note((tname, cname), bodies)


async def recover(path: str, options: dict[str, Any], consume: bool = False) -> Recovered:
    """Start nsqd (in process) on ``path``, read every message it holds
    (through each channel's store, or with ``consume`` as a consumer gets
    them), stop it."""
    rec = Recovered()
    logged: list[str] = []
    try:
        with quiet_nsq(logged):
            await _recover(path, options, rec, consume)
    finally:
        rec.log = [x.replace(path + "/", "").replace(path, "<data>") for x in logged]
    return rec


async def _recover(path: str, options: dict[str, Any], rec: Recovered, consume: bool) -> None:
    from nsq.server.nsqd.nsqd import NSQD

    d = NSQD(_opts(path, options))
    try:
        await d.start()
    except Exception as exc:
        rec.error = f"nsqd did not start: {type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            await d.stop()
        return
    try:
        if consume:
            await _consume(d, rec)
        else:
            _collect(d, rec)
    except Exception as exc:
        rec.error = f"reading the recovered messages failed: {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            await d.stop()


def evaluate(exp: Expectations, rec: Recovered) -> list[Failure]:
    """The promises ``rec`` breaks."""
    if rec.error is not None:
        return [Failure("start", rec.error)]
    out: list[Failure] = []
    for text in rec.damaged:
        out.append(Failure("damaged", f"damaged body delivered: {text}"))
    for (topic, channel), keys in rec.found.items():
        for key in keys:
            if key not in exp.sent:
                out.append(Failure("unknown", f"{topic}/{channel}: message {key} was never published",
                                   key, topic, channel))
    for (topic, channel), keys in sorted(exp.need.items()):
        if not keys:
            continue
        held = rec.found.get((topic, HELD), Counter())
        if channel == HELD:
            anywhere: set[str] = set()
            for (t, _c), found in rec.found.items():
                if t == topic:
                    anywhere.update(found)
            missing = keys - anywhere
            where = f"topic {topic} (held: published when it had no channel)"
        elif (topic, channel) in rec.found:
            missing = keys - set(rec.found[(topic, channel)]) - set(held)
            where = f"channel {topic}/{channel}"
        else:
            missing = keys - set(held)
            where = f"channel {topic}/{channel} (the channel is gone after the crash)"
        for key in sorted(missing):
            was = channel != HELD and exp.maybe_delivered(key, topic, channel)
            state = "delivered or in flight, not finished" if was else "never delivered"
            out.append(Failure("lost", f"{where}: acknowledged message {key} ({state}) lost", key, topic, channel,
                               was))
    return out


async def check_tree(tree: dict[str, bytes | None], options: dict[str, Any], scratch: str,
                     consume: bool = False) -> Recovered:
    """Materialize ``tree`` under a fresh directory of ``scratch`` and recover it."""
    path = os.path.join(scratch, "state")
    if os.path.exists(path):
        shutil.rmtree(path)
    os.mkdir(path)
    try:
        materialize(tree, path)
        return await recover(path, options, consume)
    finally:
        shutil.rmtree(path, ignore_errors=True)
