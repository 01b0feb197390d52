"""Disk queue integration: overflow and drain, metadata, clean restart, kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from nsq.client import Producer
from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.options import NSQDOptions
from nsq.server.nsqd.storage.diskqueue_meta import read_slots

from .helpers import Conn, wait_for

#: every test here runs with --storage=diskqueue and --storage=wal (tests/server/conftest.py)
pytestmark = pytest.mark.both_storages


T = TypeVar("T")


def opts(path, **kw) -> NSQDOptions:
    return NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(path), **kw)


async def start(path, **kw) -> NSQD:
    d = NSQD(opts(path, **kw))
    await d.start()
    return d


async def consume(d: NSQD, topic: str, channel: str, n: int, rdy: int = 2500) -> list[tuple[bytes, int]]:
    """Receive and FIN ``n`` messages: [(body, attempts)]."""
    conn = await Conn.open(d.tcp_port)
    try:
        await conn.subscribe(topic, channel, rdy=rdy)
        out = []
        for _ in range(n):
            m = await conn.read_message(timeout=5)
            out.append((m.body, m.attempts))
            await conn.send(b"FIN " + m.id + b"\n")
        await conn.expect_nothing(0.2)
        return out
    finally:
        await conn.aclose()


@pytest.mark.parametrize("mem", [0, 1, 10, 10000])
async def test_overflow_and_drain(tmp_path, mem):
    d = await start(tmp_path, mem_queue_size=mem, max_bytes_per_file=4096)
    try:
        async with Producer(d.tcp_address) as p:
            await p.multi_publish("t", [b"m%03d" % i for i in range(50)])
            d.topics["t"].get_channel("c")
            await p.multi_publish("t", [b"n%03d" % i for i in range(50)])
        ch = d.topics["t"].channels["c"]
        assert ch.depth == 100
        assert ch.backend.depth == max(0, 100 - mem)
        got = await consume(d, "t", "c", 100)
        assert sorted(b for b, _ in got) == sorted([b"m%03d" % i for i in range(50)] + [b"n%03d" % i for i in range(50)])
        assert ch.depth == 0 and ch.backend.depth == 0
    finally:
        await d.stop()


async def test_stats_show_backend_depth(tmp_path):
    d = await start(tmp_path, mem_queue_size=2)
    try:
        d.get_topic("t").get_channel("c")
        async with Producer(d.tcp_address) as p:
            await p.multi_publish("t", [b"x"] * 5)
        from nsq.server.nsqd.stats.collect import get_stats

        stats = get_stats(d)
        ch = stats["topics"][0]["channels"][0]
        assert (ch["depth"], ch["backend_depth"]) == (5, 3)
    finally:
        await d.stop()


async def test_clean_restart_keeps_memory_inflight_deferred_and_disk(tmp_path):
    d = await start(tmp_path, mem_queue_size=3)
    async with Producer(d.tcp_address) as p:
        await p.publish("held", b"no-channel-yet")  # topic queue (memory)
        d.get_topic("t").get_channel("c")
        await p.multi_publish("t", [b"q%d" % i for i in range(6)])  # 3 memory + 3 disk
        await p.deferred_publish("t", b"deferred", 1500)
    published_at = asyncio.get_running_loop().time()
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=2)
    inflight = [await conn.read_message(), await conn.read_message()]
    assert all(m.attempts == 1 for m in inflight)
    d.get_topic("t").pause()
    d.get_topic("t").get_channel("paused").pause()
    await d.stop()
    await conn.aclose()

    meta = json.loads((tmp_path / "nsqd.dat").read_bytes())
    names = {t["name"]: t for t in meta["topics"]}
    assert set(names) == {"held", "t"}
    assert names["t"]["paused"] is True

    d = await start(tmp_path, mem_queue_size=3)
    try:
        t = d.topics["t"]
        assert t.paused and t.channels["paused"].paused and not t.channels["c"].paused
        ch = t.channels["c"]
        assert ch.depth == 6  # 4 queued + 2 in flight
        assert len(ch.deferred) == 1  # still deferred, with its due time (deferred log)
        got = await consume(d, "t", "c", 6)
        bodies = dict(got)
        assert set(bodies) == {b"q%d" % i for i in range(6)}
        for m in inflight:
            assert bodies[m.body] == 2  # attempts kept across the restart
        assert d.topics["held"].depth == 1
        got = await consume(d, "t", "c", 1)
        assert got == [(b"deferred", 1)]
        assert asyncio.get_running_loop().time() - published_at >= 1.4
    finally:
        await d.stop()


async def test_ephemeral_not_persisted(tmp_path):
    d = await start(tmp_path)
    async with Producer(d.tcp_address) as p:
        await p.publish("e#ephemeral", b"x")
        await p.publish("t", b"x")
    d.get_topic("t").get_channel("c#ephemeral")
    await d.stop()
    meta = json.loads((tmp_path / "nsqd.dat").read_bytes())
    assert meta["topics"] == [{"channels": [], "name": "t", "paused": False}]
    assert not [f for f in os.listdir(tmp_path) if "ephemeral" in f]


async def test_empty_and_delete_remove_disk_files(tmp_path):
    d = await start(tmp_path, mem_queue_size=0)
    try:
        d.get_topic("t").get_channel("c")
        async with Producer(d.tcp_address) as p:
            await p.multi_publish("t", [b"x"] * 10)
        ch = d.topics["t"].channels["c"]
        assert ch.backend.depth == 10
        ch.empty()
        assert ch.depth == 0
        assert d.delete_topic("t")
        left = [f for f in os.listdir(tmp_path) if f.startswith("t")]
        assert left == []
    finally:
        await d.stop()


async def test_file_roll(tmp_path):
    d = await start(tmp_path, mem_queue_size=0, max_bytes_per_file=1024)
    try:
        async with Producer(d.tcp_address) as p:
            await p.multi_publish("roll", [b"y" * 100] * 40)  # 40 * (4 + 126) bytes
        files = sorted(f for f in os.listdir(tmp_path) if f.startswith("roll.diskqueue.") and f.endswith(".dat")
                       and "meta" not in f)
        assert len(files) >= 5
    finally:
        await d.stop()


async def test_data_path_locked(tmp_path):
    d = await start(tmp_path)
    try:
        with pytest.raises(OSError, match="in use"):
            await start(tmp_path)
    finally:
        await d.stop()


def _spawn(data, *extra) -> tuple[subprocess.Popen, str, str]:
    from tests.cli.conftest import NSQ, free_port

    tcp, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(NSQ + ["nsqd", f"--tcp-address={tcp}", f"--http-address={http}", f"--data-path={data}",
                                   *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, tcp, http


def _port(tcp: str) -> int:
    return int(tcp.rsplit(":", 1)[1])


async def _retry(connect: Callable[[], Awaitable[T]]) -> T | None:
    """``await connect()`` until it stops raising OSError (a spawned nsqd may still
    be starting): up to 200 tries 50 ms apart; None if none succeeds."""
    for _ in range(200):
        try:
            return await connect()
        except OSError:
            await asyncio.sleep(0.05)
    return None


async def _connect_producer(tcp: str) -> Producer:
    """A Producer for ``tcp``, connected if the nsqd came up in time."""
    p = Producer(tcp)
    await _retry(p.connect)
    return p


async def _open_conn(tcp: str) -> Conn:
    """A raw connection to ``tcp``, retried while the nsqd starts."""
    conn = await _retry(lambda: Conn.open(_port(tcp)))
    assert conn is not None, f"cannot connect to nsqd at {tcp}"
    return conn


@pytest.mark.slow
def test_kill9_loses_no_acknowledged_message(tmp_path):
    """Three kill -9 trials with --mem-queue-size=0 --sync-every=1: every OK'd PUB survives."""
    import time
    import urllib.request

    acked = 0
    for trial in range(3):
        proc, tcp, _ = _spawn(tmp_path, "--mem-queue-size=0", "--sync-every=1")
        try:
            acked += asyncio.run(_publish_until_killed(tcp, proc, trial))
        finally:
            proc.kill()
            proc.wait()
    assert acked > 0
    proc, _, http = _spawn(tmp_path)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                raw = urllib.request.urlopen(f"http://{http}/stats?format=json", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "nsqd did not restart"
                time.sleep(0.05)
        topics = {t["topic_name"]: t for t in json.loads(raw)["topics"] or []}
        assert topics["k"]["depth"] >= acked
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


async def _publish_until_killed(tcp: str, proc: subprocess.Popen, trial: int) -> int:
    from nsq.client.errors import ConnectionClosedError

    p = await _connect_producer(tcp)
    acked = 0
    loop = asyncio.get_running_loop()
    loop.call_later(0.5 + 0.2 * trial, proc.kill)
    try:
        while True:
            await p.publish("k", b"msg-%d" % acked)
            acked += 1
    except (ConnectionClosedError, OSError):
        pass
    return acked


def _go_record(ts: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """One go-diskqueue record of an nsqd message, packed by hand."""
    import struct

    payload = struct.pack(">qH", ts, attempts) + msg_id + body
    return struct.pack(">i", len(payload)) + payload


async def test_reads_a_go_written_data_dir(tmp_path):
    """nsqd.dat and diskqueue files laid out byte by byte as Go nsqd 1.2 writes them."""
    (tmp_path / "nsqd.dat").write_bytes(
        b'{"topics":[{"channels":[{"name":"c","paused":false}],"name":"t","paused":false},'
        b'{"channels":[],"name":"p","paused":true}],"version":"1.2.1"}'
    )
    ts = 1_700_000_000_000_000_000
    chan = b"".join(_go_record(ts, a, b"%016x" % i, b"chan-%d" % i) for i, a in ((1, 0), (2, 3), (3, 1)))
    (tmp_path / "t:c.diskqueue.000000.dat").write_bytes(chan)
    (tmp_path / "t:c.diskqueue.meta.dat").write_bytes(b"3\n0,0\n0,%d\n" % len(chan))
    topic = b"".join(_go_record(ts, 0, b"%016x" % i, b"topic-%d" % i) for i in (4, 5))
    (tmp_path / "t.diskqueue.000000.dat").write_bytes(topic)
    (tmp_path / "t.diskqueue.meta.dat").write_bytes(b"2\n0,0\n0,%d\n" % len(topic))

    d = await start(tmp_path)
    try:
        assert d.topics["p"].paused
        got = dict(await consume(d, "t", "c", 5))
        assert got == {b"chan-1": 1, b"chan-2": 4, b"chan-3": 2, b"topic-4": 1, b"topic-5": 1}
    finally:
        await d.stop()
    # what we leave behind is Go's format again
    assert (tmp_path / "nsqd.dat").read_bytes() == (
        b'{"topics":[{"channels":[{"name":"c","paused":false}],"name":"t","paused":false},'
        b'{"channels":[],"name":"p","paused":true}],"version":"1.2.1"}'
    )
    meta = (tmp_path / "t:c.diskqueue.meta.dat").read_bytes()
    depth, read, write = meta.split(b"\n")[:3]
    assert depth == b"0" and read.count(b",") == 1 and write.count(b",") == 1


async def test_deferred_log_requeue_delay_and_empty(tmp_path):
    d = await start(tmp_path)
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=1)
    async with Producer(d.tcp_address) as p:
        await p.publish("t", b"x")
    m = await conn.read_message()
    await conn.send(b"REQ " + m.id + b" 60000\n")
    async def deferred_one() -> bool:
        return len(d.topics["t"].channels["c"].deferred) == 1

    await wait_for(deferred_one)
    await conn.aclose()
    await d.stop()
    d = await start(tmp_path)
    try:
        ch = d.topics["t"].channels["c"]
        assert list(ch.deferred) == [m.id]
        assert ch.deferred[m.id][2][3] == 1  # (due, seq, entry): attempts kept
        ch.empty()
        assert not ch.deferred
    finally:
        await d.stop()
    d = await start(tmp_path)
    try:
        assert not d.topics["t"].channels["c"].deferred
    finally:
        await d.stop()


@pytest.mark.slow
def test_deferred_survives_kill9(tmp_path):
    """DPUB with --sync-every=1, kill -9, restart: delivered at its original due time."""
    import time

    proc, tcp, _ = _spawn(tmp_path, "--sync-every=1")
    try:
        async def publish() -> float:
            p = await _connect_producer(tcp)
            await p.publish("dt", b"warmup")
            conn = await Conn.open(_port(tcp))
            await conn.subscribe("dt", "c", rdy=0)  # create the channel
            await conn.aclose()
            await p.deferred_publish("dt", b"later", 2500)
            t = time.time()
            await p.close()
            return t
        published = asyncio.run(publish())
    finally:
        proc.kill()
        proc.wait()
    proc, tcp, _ = _spawn(tmp_path)
    try:
        async def receive() -> tuple[bytes, float]:
            conn = await _open_conn(tcp)
            await conn.subscribe("dt", "c", rdy=10)
            bodies = []
            while True:
                m = await conn.read_message(timeout=6)
                bodies.append(m.body)
                await conn.send(b"FIN " + m.id + b"\n")
                if m.body == b"later":
                    t = time.time()
                    await conn.aclose()
                    return bodies, t
        bodies, at = asyncio.run(receive())
        assert b"later" in bodies
        assert at - published >= 2.3  # not before its due time
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


async def test_sync_every_1_ok_means_on_disk(tmp_path):
    """With --sync-every=1 the meta file already counts a message when PUB/HTTP answer OK."""
    import aiohttp

    d = await start(tmp_path, mem_queue_size=0, sync_every=1)
    try:
        meta = tmp_path / "s.diskqueue.meta.dat"

        def depth() -> int:  # in the newer of the meta file's two slots
            state = read_slots(meta.read_bytes())
            assert state is not None
            return state[0][0]

        async with Producer(d.tcp_address) as p:
            for i in range(1, 4):
                await p.publish("s", b"x%d" % i)
                assert depth() == i
            await p.multi_publish("s", [b"a", b"b"])
            assert depth() == 5
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://{d.http_address}/pub?topic=s", data=b"h") as r:
                assert r.status == 200
            assert depth() == 6
            async with http.post(f"http://{d.http_address}/mpub?topic=s", data=b"h1\nh2") as r:
                assert r.status == 200
            assert depth() == 8
    finally:
        await d.stop()


async def test_corrupt_file_becomes_bad_and_daemon_serves(tmp_path, caplog):
    good = _go_record(1, 0, b"%016x" % 1, b"good")
    torn = _go_record(1, 0, b"%016x" % 2, b"torn-record")[:-5]
    (tmp_path / "nsqd.dat").write_bytes(
        b'{"topics":[{"channels":[{"name":"c","paused":false}],"name":"t","paused":false}],"version":"1.2.1"}')
    (tmp_path / "t:c.diskqueue.000000.dat").write_bytes(good + torn)
    (tmp_path / "t:c.diskqueue.meta.dat").write_bytes(b"2\n0,0\n0,%d\n" % len(good + torn))
    d = await start(tmp_path)
    try:
        got = await consume(d, "t", "c", 1)
        assert got == [(b"good", 1)]
        assert any(f.endswith(".bad") for f in os.listdir(tmp_path))
        assert any(".bad" in r.getMessage() or "corrupt" in r.getMessage().lower() for r in caplog.records)
        async with Producer(d.tcp_address) as p:
            await p.publish("t", b"after")
        assert await consume(d, "t", "c", 1) == [(b"after", 1)]
    finally:
        await d.stop()


async def test_failed_start_never_overwrites_another_nsqds_metadata(tmp_path):
    from nsq.server.nsqd import NSQD, NSQDOptions

    first = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(tmp_path)))
    await first.start()
    first.get_topic("keep").get_channel("c")
    first.persist_metadata()
    before = (tmp_path / "nsqd.dat").read_bytes()
    second = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(tmp_path)))
    with pytest.raises(Exception):
        await second.start()  # the data path is locked by the first
    await second.stop()
    assert (tmp_path / "nsqd.dat").read_bytes() == before
    await first.stop()


async def test_sync_every_1_pipelined_publishes_each_wait_their_fsync(tmp_path):
    """PUBs sent in one burst while the first waits for its fsync: each is
    answered OK in order, after its own sync (reading stops while one waits
    and more bytes come, then goes on)."""
    import struct

    d = await start(tmp_path, mem_queue_size=0, sync_every=1)
    try:
        host, port = d.tcp_address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        body = b"y" * 100
        pub = b"PUB p\n" + struct.pack(">i", len(body)) + body
        writer.write(b"  V2" + pub * 300)
        for _ in range(300):
            size, kind = struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), 10))
            assert (kind, await reader.readexactly(size - 4)) == (0, b"OK")
        state = read_slots((tmp_path / "p.diskqueue.meta.dat").read_bytes())
        assert state is not None and state[0][0] == 300  # depth, in the newer of its two slots
        writer.close()
    finally:
        await d.stop()


def _store(d: NSQD, topic: str, storage: str):
    """The file a topic's publishes are synced in: its topic log or its disk queue."""
    return d.topics[topic].log if storage == "wal" else d.topics[topic].backend


async def test_sync_every_1_group_commit(tmp_path, storage):
    """32 producers publishing at once with --sync-every=1: each OK follows
    an fsync that began after its write, and the publishes that wrote while
    one fsync ran share the next (far fewer syncs than publishes)."""
    d = await start(tmp_path, mem_queue_size=0, sync_every=1, storage=storage)
    try:
        async with Producer(d.tcp_address) as p:
            await p.publish("g", b"first")  # the topic and its disk queue exist
        dq = _store(d, "g", storage)
        syncs = 0
        real, real_inline = dq.sync_in_background, dq.sync

        def counted():
            nonlocal syncs
            syncs += 1
            return real()

        def counted_inline():
            nonlocal syncs
            syncs += 1
            return real_inline()

        dq.sync_in_background, dq.sync = counted, counted_inline
        producers = [Producer(d.tcp_address) for _ in range(32)]

        async def publish(p: Producer, i: int) -> None:
            for j in range(20):
                await p.publish("g", b"m-%d-%d" % (i, j))

        try:
            await asyncio.wait_for(asyncio.gather(*(publish(p, i) for i, p in enumerate(producers))), 60)
        finally:
            for p in producers:
                await p.close()
        assert d.topics["g"].depth == 641
        assert 0 < syncs < 320, f"{syncs} syncs for 640 publishes"
    finally:
        await d.stop()


async def test_sync_every_1_lone_publisher_syncs_on_the_loop_unless_the_disk_is_slow(tmp_path, storage):
    """One producer with --sync-every=1: its fsync runs on the event loop
    (no disk-thread hand-over) and its OK follows it. An fsync that takes
    longer than DataPath.INLINE_SYNC_MAX sends the next ones to the disk
    thread, so a slow disk never holds the loop again."""
    import threading

    d = await start(tmp_path, mem_queue_size=0, sync_every=1, storage=storage)
    try:
        async with Producer(d.tcp_address) as p:
            await p.publish("lone", b"first")  # the topic and its store exist
            q = _store(d, "lone", storage)
            real_bg, real_inline = q.sync_in_background, q.sync
            where: list[str] = []
            slow = False

            def inline():
                assert threading.current_thread() is threading.main_thread()
                if slow:
                    time.sleep(d.disk.INLINE_SYNC_MAX * 2)
                where.append("loop")
                real_inline()

            def background():
                where.append("thread")
                return real_bg()

            q.sync, q.sync_in_background = inline, background
            for i in range(3):
                await p.publish("lone", b"m%d" % i)
            assert where == ["loop"] * 3
            slow = True
            await p.publish("lone", b"slow")
            for i in range(3):
                await p.publish("lone", b"after%d" % i)
            assert where == ["loop"] * 4 + ["thread"] * 3
        assert d.topics["lone"].depth == 8
    finally:
        await d.stop()
