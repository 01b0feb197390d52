"""Disk faults: a full disk refuses publishes, keeps nsqd up within its memory
bound, loses nothing acknowledged (also after kill -9 and a clean stop on a
full disk) and works again once space is back.

Two layers of faults:
- a real one: a small tmpfs mounted for the test (needs root; skipped with
  the reason otherwise), with ``nsq nsqd`` as a subprocess;
- an injected one that runs everywhere: ``os.pwrite``/``os.write``/``os.open``
  made to fail with ENOSPC for some paths, with nsqd in process.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import urllib.error
import urllib.request

import pytest

from nsq.server.nsqd.storage.deferredlog import DeferredLog
from nsq.server.nsqd.storage.diskqueue import DiskQueue

from ..server.helpers import Conn, error_json, wait_for
from .daemons import MiB, NSQDDaemon, scale
from .v2sock import FRAME_ERROR, FRAME_RESPONSE, V2Socket


# -- a real full disk ------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs (``size`` set by :func:`remount`) at ``tmp_path/mnt``."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()}); "
                    "the injected-fault tests below cover the same paths")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def remount(mnt, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)


def ping(d: NSQDDaemon) -> tuple[int, bytes]:
    try:
        return 200, d.get("/ping")
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def body(i: int, size: int = 4096) -> bytes:
    return b"%08d" % i + b"x" * (size - 8)


def publish_until_refused(d: NSQDDaemon, start: int, refusals: int) -> tuple[list[int], list[bytes]]:
    """PUB 4 KB messages until ``refusals`` were refused (a refusal closes the
    connection, as in Go); returns the acknowledged numbers and the errors."""
    acked: list[int] = []
    errors: list[bytes] = []
    conn = V2Socket(d.tcp_port)
    i = start
    while len(errors) < refusals:
        ftype, data = conn.pub("t", body(i))
        if (ftype, data) == (FRAME_RESPONSE, b"OK"):
            acked.append(i)
        else:
            assert ftype == FRAME_ERROR, data
            errors.append(data)
            conn.close()
            conn = V2Socket(d.tcp_port)
        i += 1
        assert i - start < 100_000, "the disk never filled"
    conn.close()
    return acked, errors


def drain(d: NSQDDaemon, channel: str = "c", quiet: float = 2.0) -> dict[int, int]:
    """Consume and FIN everything: {message number: times received}."""
    got: dict[int, int] = {}
    conn = V2Socket(d.tcp_port, timeout=quiet)
    conn.sub("t", channel, 500)
    try:
        while True:
            msg_id, _attempts, data = conn.read_message()
            n = int(data[:8])
            got[n] = got.get(n, 0) + 1
            conn.fin(msg_id)
    except (TimeoutError, OSError):
        pass
    conn.close()
    return got


@pytest.mark.parametrize("storage", ["diskqueue", "wal"])
def test_full_disk_refuses_stays_bounded_recovers_and_survives_kill9(tmpfs, storage):
    data = tmpfs / "data"
    data.mkdir()
    flags = (f"--data-path={data}", "--mem-queue-size=0", "--sync-every=1", f"--storage={storage}")
    d = NSQDDaemon(*flags)
    try:
        d.post("/topic/create?topic=t")
        d.post("/channel/create?topic=t&channel=c")
        rss_before = d.rss()
        acked, errors = publish_until_refused(d, 0, refusals=scale(50))
        assert len(acked) > 1000  # 8 MB of 4 KB messages, less the exit reserve
        assert all(e.startswith(b"E_PUB_FAILED PUB failed write ") and e.endswith(b"no space left on device")
                   for e in errors), errors[:3]
        # every refusal after the first too: nothing is acknowledged from memory
        code, text = ping(d)
        assert code == 500 and text.startswith(b"NOK - ") and b"no space left on device" in text
        with pytest.raises(urllib.error.HTTPError) as http_err:
            d.post("/pub?topic=t", body(10**7))
        assert http_err.value.code == 503
        assert d.alive()
        assert d.peak_rss() - rss_before < 64 * MiB

        # space comes back: publishing works again without a restart
        remount(tmpfs, "32m")
        more = []
        conn = V2Socket(d.tcp_port)
        for i in range(200_000, 200_050):
            assert conn.pub("t", body(i)) == (FRAME_RESPONSE, b"OK")
            more.append(i)
        conn.close()
        assert ping(d) == (200, b"OK")
        acked += more

        d.proc.kill()  # kill -9
        d.proc.wait(10)
        d2 = NSQDDaemon(*flags)
        try:
            got = drain(d2)
            assert not set(acked) - set(got), f"lost {len(set(acked) - set(got))} of {len(acked)} acknowledged"
        finally:
            d2.stop()
    finally:
        d.stop()


def fill(path, chunk: int = 1 << 16) -> None:
    """Write ``path`` until the file system is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(chunk))
        except OSError as e:
            assert e.errno == errno.ENOSPC
    # top up with small writes (the last big one may have left room)
    with open(str(path) + ".2", "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(512))
        except OSError:
            pass


def test_clean_stop_on_full_disk_keeps_in_flight_and_requeued(tmpfs):
    """SIGTERM with the disk full: messages in flight (and ones requeued with a
    delay the deferred log could not record) are written through the exit
    reserve; after a restart all are delivered."""
    data = tmpfs / "data"
    data.mkdir()
    flags = (f"--data-path={data}", "--mem-queue-size=0", "--sync-every=1")
    d = NSQDDaemon(*flags)
    try:
        conn = V2Socket(d.tcp_port)
        n = 300
        for i in range(n):
            assert conn.pub("t", body(i, 1024)) == (FRAME_RESPONSE, b"OK")
        conn.close()
        consumer = V2Socket(d.tcp_port)
        consumer.sub("t", "c", 60)
        in_flight = [consumer.read_message() for _ in range(60)]
        for msg_id, _, _ in in_flight[:20]:
            consumer.fin(msg_id)
        fill(tmpfs / "filler")
        for msg_id, _, _ in in_flight[20:30]:  # REQ with a delay: the deferred log is full
            consumer.sock.sendall(b"REQ " + msg_id + b" 60000\n")
        wait_for_log(d, "failed to write deferred message")
        d.proc.terminate()
        assert d.proc.wait(20) == 0  # a clean exit on a full disk
        assert d.log_count("nsqd.reserve to write what is in memory") == 1, d.log_tail()
        assert d.log_count("could not be written at exit") == 0, d.log_tail()
        consumer.close()
    finally:
        if d.alive():
            d.stop()
    os.remove(tmpfs / "filler")
    d2 = NSQDDaemon(*flags)
    try:
        got = drain(d2)
        finished = {int(b[:8]) for _, _, b in in_flight[:20]}
        missing = set(range(n)) - finished - set(got)
        assert not missing, f"lost {len(missing)}: {sorted(missing)[:10]}"
    finally:
        d2.stop()


def wait_for_log(d: NSQDDaemon, text: str, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while d.log_count(text) == 0:
        assert time.monotonic() < deadline, f"{text!r} not logged: {d.log_tail()}"
        time.sleep(0.05)


# -- injected faults (every machine) -------------------------------------------------------


class DiskFull:
    """Make writes to paths containing ``match`` fail with ENOSPC while on
    (a plain ``write`` tears: half of it lands first). With ``writes=False``
    only new temp files fail: a disk with no free block, where a file that
    exists can still be overwritten in place."""

    def __init__(self, monkeypatch, match: str = "", writes: bool = True) -> None:
        self.on = False
        self.match = match
        real_open, real_pwrite, real_write = os.open, os.pwrite, os.write

        def hit(fd: int) -> bool:
            if not (self.on and writes):
                return False
            try:
                return self.match in os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return False

        def fake_open(path, flags, *args, **kw):
            if self.on and self.match in str(path) and flags & os.O_CREAT and str(path).endswith(".tmp"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_open(path, flags, *args, **kw)

        def fake_pwrite(fd, data, offset):
            if hit(fd):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_pwrite(fd, data, offset)

        def fake_write(fd, data):
            if len(data) > 1 and hit(fd):
                real_write(fd, bytes(memoryview(data)[:len(data) // 2]))  # a torn write first
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "pwrite", fake_pwrite)
        monkeypatch.setattr(os, "write", fake_write)


async def test_injected_full_disk_refuses_pub_mpub_dpub_and_http(make_nsqd, tmp_path, monkeypatch):
    import aiohttp

    disk = DiskFull(monkeypatch, match=str(tmp_path))
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=0, sync_every=1)
    channel = d.get_topic("t").get_channel("c")
    conn = await Conn.open(d.tcp_port)
    await conn.publish("t", b"before")
    disk.on = True
    for _ in range(20):
        conn = await Conn.open(d.tcp_port)
        await conn.send(b"PUB t\n", (6).to_bytes(4, "big"), b"during")
        err = await conn.expect_error()
        assert err.startswith(b"E_PUB_FAILED PUB failed write ") and err.endswith(b"no space left on device")
    conn = await Conn.open(d.tcp_port)
    await conn.send(b"MPUB t\n", (4 + 2 * 5).to_bytes(4, "big"), (2).to_bytes(4, "big"),
                    (1).to_bytes(4, "big"), b"a", (1).to_bytes(4, "big"), b"b")
    assert (await conn.expect_error()).startswith(b"E_MPUB_FAILED MPUB failed write ")
    conn = await Conn.open(d.tcp_port)
    await conn.send(b"DPUB t 5000\n", (1).to_bytes(4, "big"), b"d")
    assert (await conn.expect_error()).startswith(b"E_DPUB_FAILED DPUB failed failed to write deferred")
    # nothing refused is held: the memory queue keeps its bound (0) and
    # nothing was re-encoded per publish
    assert len(channel.queue) == 0 and channel.backend.depth == 1 and not channel.deferred
    assert channel.message_count == 1
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{d.http_port}/ping") as r:
            assert r.status == 500 and (await r.text()).startswith("NOK - failed to write")
        async with s.post(f"http://127.0.0.1:{d.http_port}/pub?topic=t", data=b"x") as r:
            assert r.status == 503 and await r.read() == error_json("PUB_FAILED")
        disk.on = False
        async with s.post(f"http://127.0.0.1:{d.http_port}/pub?topic=t", data=b"after") as r:
            assert r.status == 200
        async with s.get(f"http://127.0.0.1:{d.http_port}/ping") as r:
            assert r.status == 200 and await r.text() == "OK"
    assert channel.backend.depth == 2


async def test_injected_one_channel_failing_refuses_without_growing(make_nsqd, tmp_path, monkeypatch):
    """Two channels, one on a failing disk: the publish is refused, the healthy
    channel keeps its copy, the failing one holds nothing past its bound."""
    disk = DiskFull(monkeypatch, match="t:bad.diskqueue")
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=2, sync_every=1)
    topic = d.get_topic("t")
    good, bad = topic.get_channel("good"), topic.get_channel("bad")
    disk.on = True
    for i in range(50):
        conn = await Conn.open(d.tcp_port)
        await conn.send(b"PUB t\n", (1).to_bytes(4, "big"), b"%d" % (i % 10))
        if i < 2:
            await conn.expect_ok()  # memory still has room
        else:
            assert (await conn.expect_error()).startswith(b"E_PUB_FAILED")
    assert len(bad.queue) == 2 and bad.backend.depth == 0
    assert good.depth == 50  # a refused publish may still reach a healthy channel
    disk.on = False
    conn = await Conn.open(d.tcp_port)
    await conn.publish("t", b"ok")
    assert bad.depth == 3


async def test_injected_requeue_on_failing_disk_stays_in_memory_until_it_works(make_nsqd, tmp_path, monkeypatch):
    """An acknowledged message requeued while the disk fails is kept in memory
    (past the bound) and delivered; it is not lost and not refused."""
    disk = DiskFull(monkeypatch, match=str(tmp_path))
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=0, sync_every=1)
    prod = await Conn.open(d.tcp_port)
    for i in range(5):
        await prod.publish("t", b"m%d" % i)
    conn = await Conn.open(d.tcp_port)
    await conn.subscribe("t", "c", rdy=5)
    msgs = [await conn.read_message() for _ in range(5)]
    disk.on = True
    await conn.send(b"RDY 0\n")
    for m in msgs:
        await conn.send(b"REQ " + m.id + b" 0\n")
    channel = d.get_topic("t").get_channel("c")
    async def requeued() -> bool:
        return len(channel.queue) == 5

    await wait_for(requeued)
    await conn.send(b"RDY 5\n")
    again = sorted([(await conn.read_message()).body for _ in range(5)])
    assert again == [b"m%d" % i for i in range(5)]


def test_meta_written_in_place_when_no_temp_file_fits(tmp_path, monkeypatch):
    dq = DiskQueue("t", str(tmp_path), 1 << 20, 1, 1 << 10, 1, 2.0)
    for i in range(3):
        dq.put(b"record-%d" % i)
    dq.sync()
    disk = DiskFull(monkeypatch, match="diskqueue.meta.dat", writes=False)
    disk.on = True  # the temp file cannot be created: the meta goes in place
    assert dq.read() == b"record-0"
    dq.sync()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    disk.on = False
    dq.close()
    again = DiskQueue("t", str(tmp_path), 1 << 20, 1, 1 << 10, 1, 2.0)
    assert again.depth == 2 and again.read() == b"record-1"
    again.close()


def test_missing_meta_file_with_data_files_is_rebuilt_not_truncated(tmp_path):
    dq = DiskQueue("t", str(tmp_path), 1 << 20, 1, 1 << 10, 1, 2.0)
    for i in range(3):
        dq.put(b"record-%d" % i)
    dq.close()
    os.remove(tmp_path / "t.diskqueue.meta.dat")  # never written (a full disk)
    again = DiskQueue("t", str(tmp_path), 1 << 20, 1, 1 << 10, 1, 2.0)
    assert [again.read() for _ in range(3)] == [b"record-0", b"record-1", b"record-2"]
    again.close()


def test_deferred_log_torn_append_is_cut_back(tmp_path, monkeypatch):
    log = DeferredLog("t:c", str(tmp_path), 1)
    assert not os.path.exists(log.path)  # no file (no fd) until something is deferred
    log.add(1, 2, 1, b"a" * 16, b"first")
    log.add(1, 2, 1, b"x" * 16, b"stays")
    size = os.path.getsize(log.path)
    disk = DiskFull(monkeypatch, match="deferred.dat")
    disk.on = True
    with pytest.raises(OSError):
        log.add(1, 2, 1, b"b" * 16, b"second")
    assert os.path.getsize(log.path) == size and b"b" * 16 not in log.pending
    log.remove(b"a" * 16)  # a REMOVE that cannot be written only logs
    disk.on = False
    log.add(1, 2, 1, b"c" * 16, b"third")
    log.close()
    again = DeferredLog("t:c", str(tmp_path), 1)
    assert set(again.pending) == {b"a" * 16, b"x" * 16, b"c" * 16}  # "a" may come again: never lost
    for msg_id in list(again.pending):
        again.remove(msg_id)
    assert not os.path.exists(again.path)  # the last release removes the file
    again.close()


async def test_queue_missing_from_nsqd_dat_is_restored(make_nsqd, tmp_path):
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=0)
    d.get_topic("t").get_channel("c")
    d.get_topic("t").publish([b"kept"])
    await d.stop()
    with open(tmp_path / "nsqd.dat", "w") as f:  # as if nsqd.dat could not be rewritten
        json.dump({"topics": [], "version": "1.2.1"}, f)
    d = await make_nsqd(data_path=str(tmp_path))
    channel = d.get_existing_topic("t").channels["c"]
    assert channel.depth == 1
    async def persisted() -> bool:
        with open(tmp_path / "nsqd.dat") as f:
            return [t["name"] for t in json.load(f)["topics"]] == ["t"]

    await wait_for(persisted, timeout=3)


async def test_injected_ping_recovers_without_a_publish(make_nsqd, tmp_path, monkeypatch):
    """With room in memory no publish writes to disk; /ping must still come
    back to OK once the data path takes writes (the scan probes it)."""
    disk = DiskFull(monkeypatch, match=str(tmp_path))
    d = await make_nsqd(data_path=str(tmp_path), mem_queue_size=1, sync_timeout=0.2)
    d.get_topic("t").get_channel("c")
    conn = await Conn.open(d.tcp_port)
    await conn.publish("t", b"in memory")
    disk.on = True
    conn = await Conn.open(d.tcp_port)
    await conn.send(b"PUB t\n", (1).to_bytes(4, "big"), b"x")
    assert (await conn.expect_error()).startswith(b"E_PUB_FAILED")
    await asyncio.sleep(0.5)
    assert d.health.startswith("failed to write message to backend")  # the probe fails too
    disk.on = False

    async def healthy() -> bool:
        return d.health == "OK"

    await wait_for(healthy, timeout=2)
    assert os.path.exists(tmp_path / "nsqd.reserve") and not os.path.exists(tmp_path / "nsqd.probe")


async def test_channels_hold_no_files_until_they_defer(make_nsqd, tmp_path):
    """A client can create channels at will (SUB): an idle durable channel
    must cost no file descriptor."""
    d = await make_nsqd(data_path=str(tmp_path))
    before = len(os.listdir("/proc/self/fd"))
    topic = d.get_topic("t")
    for i in range(200):
        topic.get_channel(f"c{i}")
    assert len(os.listdir("/proc/self/fd")) - before < 10
    topic.publish([b"later"], defer_ms=60_000)
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".deferred.dat")]) == 200
