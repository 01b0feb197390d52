"""Workloads against an in-process nsqd, recorded (:class:`~.vfs.Recorder`).

The daemon is the real one (``NSQD`` with its disk thread, its scan loop
and its TCP and HTTP servers on 127.0.0.1); the driver talks V2 and HTTP to
it from the same event loop and writes markers into the operation log:

- ``("send", key)``: a publish of the message ``key`` is about to be sent;
- ``("ack", key, topic, channels)``: its ``OK`` was received: from here on
  it is acknowledged, and each of ``channels`` (the topic's durable
  channels when it was published; none: the topic holds it) must keep it
  until it is finished there (with ``--sync-every=1`` an ``OK`` comes only
  after the fsync of its record, so this is the precise ack point);
- ``("refused", key, error)``: the publish got an error instead;
- ``("deliver", key, topic, channel, attempts)``: a consumer received it;
- ``("rdy", topic, channel, n)``: a consumer's RDY is about to be sent (while
  it is above 0 nsqd may put any message of the channel in flight);
- ``("fin", key, topic, channel)``: a FIN for it is about to be sent (from
  here on the channel may forget it);
- ``("req", key, topic, channel, delay_ms)``: a REQ is about to be sent;
- ``("chcreate", topic, channel)``, ``("chdel", topic, channel)``,
  ``("chempty", topic, channel)``, ``("tdel", topic)``: a channel created
  (answered), a channel deleted or emptied or a topic deleted: the request
  is about to be sent (from there on its messages may go);
- ``("health", text)``: nsqd's health changed (``OK`` or the error);
- ``("label", text)``: the step the workload is at.

A message body is ``key|crc32|payload`` (crc32 of key and payload), so a
damaged or invented body is recognized.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from nsq.protocol import commands as c
from nsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from nsq.protocol.message import decode_message

from ..server.helpers import Closed, Conn
from .vfs import Recorder

__all__ = ["Recording", "Workload", "WORKLOADS", "record", "options_for", "make_body", "parse_body", "quiet_nsq",
           "fast_timers"]

#: a channel name for "held by the topic" (no channel when published)
HELD = "#held"


def make_body(key: str, rng: random.Random, size: int) -> bytes:
    payload = rng.randbytes(size)
    kb = key.encode()
    return b"%s|%08x|%s" % (kb, zlib.crc32(kb + payload), payload)


def parse_body(body: bytes) -> tuple[str | None, bool]:
    """``(key, intact)``: the key (None if there is none) and whether the
    checksum matches."""
    parts = body.split(b"|", 2)
    if len(parts) != 3 or len(parts[1]) != 8:
        return None, False
    try:
        key = parts[0].decode()
        crc = int(parts[1], 16)
    except (UnicodeDecodeError, ValueError):
        return None, False
    return key, zlib.crc32(parts[0] + parts[2]) == crc


def options_for(engine: str, **overrides: Any) -> dict[str, Any]:
    """The nsqd options of a workload (and of its recovery)."""
    opts: dict[str, Any] = {
        "storage": engine,
        # --mem-queue-size=0 --sync-every=1: everything acknowledged is on
        # disk (docs/operations/durability.md); the topic log keeps every
        # message on disk whatever the memory queue, so it gets a small one
        "mem_queue_size": 0 if engine == "diskqueue" else 3,
        "sync_every": 1,
        "sync_timeout": 0.02,
        "max_bytes_per_file": 1024,
        "msg_timeout": 60.0,
        "node_id": 7,
    }
    opts.update(overrides)
    return opts


@contextlib.contextmanager
def fast_timers() -> Iterator[None]:
    """The daemon's scan every 10 ms (so ``--sync-timeout`` syncs and
    checkpoints happen within a tick), nsqd.dat written 10 ms after a change,
    and a 4 KiB exit reserve instead of 4 MiB (its content is zeros nobody
    reads; the model would copy it into every state)."""
    from nsq.server.nsqd import metadata, nsqd
    from nsq.server.nsqd.storage.datapath import DataPath

    saved = (nsqd.SCAN_INTERVAL, metadata.METADATA_DELAY, DataPath.RESERVE_BYTES)
    nsqd.SCAN_INTERVAL, metadata.METADATA_DELAY, DataPath.RESERVE_BYTES = 0.01, 0.01, 4096
    try:
        yield
    finally:
        nsqd.SCAN_INTERVAL, metadata.METADATA_DELAY, DataPath.RESERVE_BYTES = saved


@contextlib.contextmanager
def quiet_nsq(records: list[str] | None = None) -> Iterator[None]:
    """nsq's log off (a crash state makes it log errors by design); with
    ``records``, its warnings and errors are collected there."""
    logger = logging.getLogger("nsq")
    saved = (logger.handlers[:], logger.propagate, logger.level)

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if records is not None:
                records.append(f"{record.levelname}: {record.getMessage()}")

    logger.handlers[:] = [Keep(logging.WARNING)]
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate, logger.level = saved


class Consumer:
    """One V2 consumer of ``topic``/``channel``."""

    def __init__(self, drv: Driver, conn: Conn, topic: str, channel: str) -> None:
        self.drv = drv
        self.conn = conn
        self.topic = topic
        self.channel = channel
        self.closed = False

    async def take(self, n: int, wait: float = 0.3) -> list[Any]:
        """RDY ``n``, read up to ``n`` messages (fewer if none comes within
        ``wait`` s), RDY 0."""
        out: list[Any] = []
        if self.closed or n <= 0:
            return out
        try:
            await self.rdy(n)
            while len(out) < n:
                try:
                    ftype, data = await self.conn.read_frame(wait)
                except asyncio.TimeoutError:
                    break
                if ftype == FRAME_TYPE_MESSAGE:
                    msg = decode_message(data)
                    key, _ = parse_body(msg.body)
                    self.drv.rec.mark("deliver", key, self.topic, self.channel, msg.attempts)
                    out.append(msg)
                elif ftype == FRAME_TYPE_RESPONSE and data == b"_heartbeat_":
                    await self.conn.send(c.nop())
            await self.rdy(0)
        except (Closed, ConnectionError):
            self.closed = True
        return out

    async def rdy(self, n: int) -> None:
        """RDY ``n`` (marked: from a RDY above 0 on, nsqd may deliver any message of the channel)."""
        self.drv.rec.mark("rdy", self.topic, self.channel, n)
        await self.conn.send(c.rdy(n))

    async def fin(self, msg: Any) -> None:
        key, _ = parse_body(msg.body)
        self.drv.rec.mark("fin", key, self.topic, self.channel)
        with contextlib.suppress(ConnectionError):
            await self.conn.send(c.fin(msg.id))

    async def req(self, msg: Any, delay_ms: int = 0) -> None:
        key, _ = parse_body(msg.body)
        self.drv.rec.mark("req", key, self.topic, self.channel, delay_ms)
        with contextlib.suppress(ConnectionError):
            await self.conn.send(c.req(msg.id, delay_ms))

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.conn.aclose()


class Driver:
    """Publishes, consumes and administers an in-process nsqd, writing
    markers into ``rec``'s log (see the module docstring)."""

    def __init__(self, rec: Recorder, nsqd: Any, rng: random.Random, tag: str) -> None:
        self.rec = rec
        self.d = nsqd
        self.rng = rng
        self.tag = tag
        self.seq = 0
        #: topic -> its durable channels, as the driver made them
        self.channels: dict[str, list[str]] = {}
        self.consumers: list[Consumer] = []
        self._pub: Conn | None = None
        self._http: aiohttp.ClientSession | None = None
        self.acked = 0
        self.refused = 0
        self.errors: list[bytes] = []

    # -- publishing ------------------------------------------------------------------

    def _size(self) -> int:
        r = self.rng.random()
        return self.rng.randint(1, 60) if r < 0.5 else self.rng.randint(100, 700) if r < 0.9 else \
            self.rng.randint(900, 1500)

    def _new(self) -> tuple[str, bytes]:
        self.seq += 1
        key = f"{self.tag}{self.seq:04d}"
        return key, make_body(key, self.rng, self._size())

    async def _conn(self) -> Conn:
        if self._pub is None:
            self._pub = await Conn.open(self.d.tcp_port)
        return self._pub

    async def _publish(self, topic: str, data: bytes, keys: list[str]) -> bool:
        for key in keys:
            self.rec.mark("send", key)
        chans = tuple(self.channels.get(topic, ()))
        try:
            conn = await self._conn()
            await conn.send(data)
            ftype, resp = await conn.read_frame(10)
        except (Closed, ConnectionError, asyncio.TimeoutError) as exc:
            ftype, resp = FRAME_TYPE_ERROR, repr(exc).encode()
        if ftype == FRAME_TYPE_RESPONSE and resp == b"OK":
            for key in keys:
                self.rec.mark("ack", key, topic, chans)
            self.acked += len(keys)
            return True
        for key in keys:
            self.rec.mark("refused", key, resp[:80].decode(errors="replace"))
        self.refused += len(keys)
        self.errors.append(resp)
        if self._pub is not None:  # nsqd closes a connection after E_PUB_FAILED (as Go)
            await self._pub.aclose()
            self._pub = None
        return False

    async def pub(self, topic: str, n: int = 1) -> int:
        ok = 0
        for _ in range(n):
            key, body = self._new()
            ok += await self._publish(topic, c.pub(topic, body), [key])
        return ok

    async def mpub(self, topic: str, n: int) -> bool:
        items = [self._new() for _ in range(n)]
        return await self._publish(topic, c.mpub(topic, [b for _, b in items]), [k for k, _ in items])

    async def dpub(self, topic: str, delay_ms: int) -> bool:
        key, body = self._new()
        return await self._publish(topic, c.dpub(topic, delay_ms, body), [key])

    # -- consuming ------------------------------------------------------------------

    async def consumer(self, topic: str, channel: str) -> Consumer:
        conn = await Conn.open(self.d.tcp_port)
        await conn.subscribe(topic, channel)
        if not channel.endswith("#ephemeral") and channel not in self.channels.setdefault(topic, []):
            self.channels[topic].append(channel)
            self.rec.mark("chcreate", topic, channel)
        cons = Consumer(self, conn, topic, channel)
        self.consumers.append(cons)
        return cons

    def depth(self, topic: str, channel: str) -> int:
        t = self.d.topics.get(topic)
        ch = t.channels.get(channel) if t is not None else None
        return ch.depth if ch is not None else 0

    # -- administration -------------------------------------------------------------------

    async def http(self, method: str, path: str, **params: str) -> int:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        url = f"http://127.0.0.1:{self.d.http_port}{path}"
        async with self._http.request(method, url, params=params) as resp:
            await resp.read()
            return resp.status

    async def create_channel(self, topic: str, channel: str) -> None:
        status = await self.http("POST", "/topic/create", topic=topic)
        assert status == 200, status
        status = await self.http("POST", "/channel/create", topic=topic, channel=channel)
        assert status == 200, status
        if channel not in self.channels.setdefault(topic, []):
            self.channels[topic].append(channel)
        self.rec.mark("chcreate", topic, channel)

    async def delete_channel(self, topic: str, channel: str) -> None:
        self.rec.mark("chdel", topic, channel)
        if channel in self.channels.get(topic, []):
            self.channels[topic].remove(channel)
        for cons in self.consumers:
            if (cons.topic, cons.channel) == (topic, channel):
                await cons.close()
        await self.http("POST", "/channel/delete", topic=topic, channel=channel)

    async def empty_channel(self, topic: str, channel: str) -> None:
        self.rec.mark("chempty", topic, channel)
        await self.http("POST", "/channel/empty", topic=topic, channel=channel)

    async def pause_channel(self, topic: str, channel: str, paused: bool) -> None:
        """Pause (nsqd.dat is rewritten) or unpause the channel."""
        await self.http("POST", "/channel/pause" if paused else "/channel/unpause", topic=topic, channel=channel)

    async def delete_topic(self, topic: str) -> None:
        self.rec.mark("tdel", topic)
        self.channels.pop(topic, None)
        for cons in self.consumers:
            if cons.topic == topic:
                await cons.close()
        await self.http("POST", "/topic/delete", topic=topic)

    async def restart(self) -> None:
        """Stop nsqd cleanly and start a new one on the same data path (its
        exit flush and its start are recorded like the rest)."""
        from nsq.server.nsqd.nsqd import NSQD

        self.label("restart: stop")
        await self.close()
        self.consumers = []
        options = self.d.options
        await self.d.stop()
        self.label("restart: start")
        self.d = NSQD(options)
        self.d.options.tcp_address = self.d.options.http_address = "127.0.0.1:0"
        await self.d.start()
        _mark_health(self.d, self.rec)
        self.label("restarted")

    async def tick(self, n: int = 1) -> None:
        """Let the daemon's scan run (syncs, checkpoints, timeouts, due deferred messages)."""
        self.rec.mark("label", "tick")
        await asyncio.sleep(0.035 * n)

    def label(self, text: str) -> None:
        self.rec.mark("label", text)

    async def close(self) -> None:
        for cons in self.consumers:
            await cons.close()
        if self._pub is not None:
            await self._pub.aclose()
            self._pub = None
        if self._http is not None:
            await self._http.close()
            self._http = None


# -- the workloads ---------------------------------------------------------------------------


async def wl_basic(drv: Driver, n: int) -> None:
    """One topic, a consumed channel and an idle one: PUB, MPUB, DPUB, FIN,
    REQ (now and delayed), messages left in flight, files rolled; at the end
    the idle channel drained (files and segments deleted)."""
    t = "orders"
    drv.label("create channels")
    await drv.create_channel(t, "audit")
    work = await drv.consumer(t, "work")
    drv.label("publish")
    await drv.pub(t, max(2, n // 4))
    await drv.mpub(t, 4)
    await drv.dpub(t, 40)
    await drv.dpub(t, 600_000)
    await drv.tick()
    drv.label("consume")
    msgs = await work.take(min(8, drv.depth(t, "work")))
    for i, m in enumerate(msgs):
        if i % 4 in (0, 1):
            await work.fin(m)
        elif i % 4 == 2:
            await work.req(m, 0 if i % 8 == 2 else 30)
        # else: left in flight
    drv.label("publish while a consumer is ready")
    await work.rdy(3)
    await drv.pub(t, max(2, n // 4))
    await drv.tick()
    drv.label("consume more")
    for m in await work.take(min(6, drv.depth(t, "work") + 3)):
        await work.fin(m)
    drv.label("more publishes, another channel")
    await drv.mpub(t, 3)
    await drv.create_channel(t, "late")
    await drv.pub(t, max(2, n // 4))
    await drv.tick()
    for m in await work.take(min(5, drv.depth(t, "work"))):
        if drv.rng.random() < 0.6:
            await work.fin(m)
    await drv.pub(t, max(1, n // 8))
    await drv.tick(2)
    drv.label("drain a channel")  # files and segments no channel needs any more are deleted
    audit = await drv.consumer(t, "audit")
    while True:
        got = await audit.take(min(10, drv.depth(t, "audit")))
        for m in got:
            await audit.fin(m)
        if not got:
            break
    await drv.tick(2)


async def wl_lifecycle(drv: Driver, n: int) -> None:
    """Topics and channels created and deleted: messages held by a topic
    without channels, handed to its first channel, a channel deleted with
    messages, a topic deleted and created again, a channel paused and
    emptied; in-flight timeouts."""
    t = "events"
    drv.label("held by the topic")
    await drv.pub(t, max(2, n // 5))
    await drv.tick()
    drv.label("first channel")
    first = await drv.consumer(t, "first")
    for m in await first.take(min(4, drv.depth(t, "first"))):
        await first.fin(m)
    await drv.pub(t, max(2, n // 5))
    drv.label("delete the channel")
    await drv.delete_channel(t, "first")
    await drv.pub(t, max(2, n // 6))
    drv.label("another topic, deleted, created again")
    tmp = "tmp"
    cons = await drv.consumer(tmp, "c")
    await drv.pub(tmp, max(2, n // 6))
    for m in await cons.take(2):
        await cons.fin(m)
    await drv.tick()
    await drv.delete_topic(tmp)
    await drv.pub(tmp, 2)
    await drv.create_channel(tmp, "c2")
    await drv.pub(tmp, 2)
    drv.label("second channel of events")
    second = await drv.consumer(t, "second")
    got = await second.take(min(5, drv.depth(t, "second")))
    for m in got[:2]:
        await second.fin(m)
    await drv.tick(2)
    await drv.mpub(t, 3)
    drv.label("pause, empty")
    await drv.pause_channel(tmp, "c2", True)
    await drv.pub(tmp, 2)
    await drv.empty_channel(tmp, "c2")
    await drv.pub(tmp, 1)
    await drv.pause_channel(tmp, "c2", False)
    await drv.tick()


async def wl_restart(drv: Driver, n: int) -> None:
    """Clean restarts in the middle: the exit flush (in-flight, requeued and
    deferred messages, checkpoints) and the start (repairs, compaction,
    restored deferrals) under crash too."""
    t = "jobs"
    cons = await drv.consumer(t, "w")
    await drv.pub(t, max(3, n // 4))
    await drv.dpub(t, 600_000)
    await drv.tick()
    got = await cons.take(4)
    for m in got[:1]:
        await cons.fin(m)
    for m in got[1:2]:
        await cons.req(m, 50_000)  # deferred at the restart
    # the rest in flight at the restart
    await drv.restart()
    cons = await drv.consumer(t, "w")
    await drv.pub(t, max(2, n // 4))
    for m in await cons.take(min(6, drv.depth(t, "w"))):
        await cons.fin(m)
    await drv.tick()
    await drv.restart()
    cons = await drv.consumer(t, "w")
    await drv.mpub(t, 3)
    await drv.tick()


async def mig_setup(drv: Driver, n: int) -> None:
    """The disk-queue data path a ``--storage=wal`` nsqd takes over: two
    channels with queued messages, one message in flight at the clean stop,
    a deferred one, a topic without channels holding messages."""
    t = "legacy"
    await drv.create_channel(t, "a")
    await drv.create_channel(t, "b")
    await drv.pub(t, max(3, n // 4))
    await drv.mpub(t, 3)
    await drv.dpub(t, 600_000)
    cons = await drv.consumer(t, "a")
    got = await cons.take(4)
    for m in got[:2]:
        await cons.fin(m)
    await drv.pub("held", 3)
    await drv.tick()


async def mig_run(drv: Driver, n: int) -> None:
    """After the take-over: publish, consume, checkpoints."""
    t = "legacy"
    drv.label("after the take-over")
    await drv.pub(t, max(2, n // 5))
    cons = await drv.consumer(t, "a")
    for m in await cons.take(min(4, drv.depth(t, "a"))):
        await cons.fin(m)
    await drv.tick()
    await drv.mpub(t, 3)
    await drv.tick()


@dataclass
class Workload:
    name: str
    run: Callable[[Driver, int], Awaitable[None]]
    #: the engines it is recorded with
    engines: tuple[str, ...] = ("diskqueue", "wal")
    #: an unrecorded first phase, with this engine (the migration's data path)
    setup: Callable[[Driver, int], Awaitable[None]] | None = None
    setup_engine: str = "diskqueue"
    options: dict[str, Any] = field(default_factory=dict)


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("basic", wl_basic),
    Workload("lifecycle", wl_lifecycle, options={"msg_timeout": 0.08}),
    Workload("migrate", mig_run, engines=("wal",), setup=mig_setup),
    Workload("restart", wl_restart),
)}


# -- recording -------------------------------------------------------------------------------------


@dataclass
class Recording:
    """A recorded workload: what the explorer replays."""

    workload: str
    engine: str
    size: int
    seed: int
    options: dict[str, Any]
    initial: dict[int, tuple]
    ops: list[tuple]
    errors: list[str]
    calls: dict[str, int]
    faults: list[tuple[str, str, int]]
    acked: int = 0
    refused: int = 0
    seconds: float = 0.0
    #: what the run saw that is not in the operation log (the I/O-error mode's checks)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def fs_ops(self) -> int:
        return sum(1 for op in self.ops if op[0] not in ("mark", "fault"))


def _opts(path: str, options: dict[str, Any]) -> Any:
    from nsq.server.nsqd.options import NSQDOptions

    return NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=path, **options)


def scratch_dir() -> str:
    """A parent for data paths: tmpfs when there is one (fsync costs nothing there)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    import tempfile

    return tempfile.mkdtemp(prefix="nsq-crash-", dir=base)


def _mark_health(d: Any, rec: Recorder) -> None:
    """Mark every health change of ``d`` in the log: ``("health", text)``."""
    real = d.set_health

    def set_health(error: str | None) -> None:
        before = d.health
        real(error)
        if d.health != before:
            rec.mark("health", d.health)

    d.set_health = set_health
    d.disk._set_health = set_health


def _setup_markers(rec: Recorder, ops: list[tuple]) -> None:
    """Markers that carry what the setup phase acknowledged into the recorded log."""
    from .check import Expectations

    exp = Expectations()
    for i, op in enumerate(ops):
        exp.feed(op, i)
    for key in sorted(exp.sent):
        rec.mark("send", key)
    for (topic, channel), keys in sorted(exp.need.items()):
        for key in sorted(keys):
            rec.mark("ack", key, topic, () if channel == HELD else (channel,))


async def record(workload: Workload, engine: str, size: int, seed: int, root: str,
                 injector: Any = None,
                 during: Callable[[Driver, Recorder], Awaitable[None]] | None = None) -> Recording:
    """Run ``workload`` on an in-process nsqd with data path ``root``
    (created empty by the caller), recording its file operations.

    ``injector`` (see :class:`~.vfs.Recorder`) makes calls fail; ``during``
    replaces the workload's run (the I/O-error mode drives its own).
    """
    import time

    from nsq.server.nsqd.nsqd import NSQD

    rng = random.Random(seed)
    opts = options_for(engine, **workload.options)
    started = time.perf_counter()
    with fast_timers():
        pre_ops: list[tuple] = []
        if workload.setup is not None:
            setup_opts = options_for(workload.setup_engine, **workload.options)
            with Recorder(root) as pre:
                d = NSQD(_opts(root, setup_opts))
                await d.start()
                drv = Driver(pre, d, rng, "s")
                try:
                    await workload.setup(drv, size)
                finally:
                    await drv.close()
                    await d.stop()
            pre_ops = pre.ops
        rec = Recorder(root, None)
        with rec:
            if pre_ops:
                _setup_markers(rec, pre_ops)
            rec.mark("label", "start")
            d = NSQD(_opts(root, opts))
            await d.start()
            _mark_health(d, rec)
            rec.injector = injector
            drv = Driver(rec, d, rng, "m")
            try:
                if during is not None:
                    await during(drv, rec)
                else:
                    await workload.run(drv, size)
            finally:
                rec.injector = None
                rec.mark("label", "stop")
                await drv.close()
                await drv.d.stop()  # the daemon of the last restart
                rec.mark("label", "stopped")
        rec.verify_tree()
    return Recording(workload.name, engine, size, seed, opts, rec.initial, rec.ops, rec.errors, dict(rec.calls),
                     list(rec.faults), drv.acked, drv.refused, time.perf_counter() - started)
