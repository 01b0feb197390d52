"""The topic log (``--storage=wal``): its files, its channels as cursors, and
what survives a restart (real files, an in-process nsqd, real TCP)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from nsq.protocol import commands as c
from nsq.server.nsqd.storage.cursor import RangeSet
from nsq.server.nsqd.storage.topiclog import TopicLog, encode_batch, encode_record

from .helpers import Conn


def _records(n: int, start: int = 0, body: bytes = b"x" * 40) -> list[bytes]:
    return [encode_record(b"%016x" % i, body + b"%d" % i, 1000 + i, 0, 0) for i in range(start, start + n)]


def _read_all(tlog: TopicLog, offset: int | None = None, n: int = 97) -> list[tuple]:
    out = []
    offset = tlog.first if offset is None else offset
    while offset < tlog.head:
        records, offset = tlog.read(offset, n, max_bytes=1500)
        out += records
    return out


async def wait_for(predicate, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


# -- the log's files -------------------------------------------------------------------


def test_records_come_back_in_order_across_segments(tmp_path):
    tlog = TopicLog("t", str(tmp_path / "t.wal"), max_bytes_per_file=4000, sync_every=100)
    recs = _records(1000)
    for i in range(0, 1000, 13):
        assert tlog.append(recs[i:i + 13]) == i
    assert tlog.head == 1000
    assert len(list(tlog.segments())) > 5
    got = _read_all(tlog)
    assert [r[0] for r in got] == list(range(1000))
    assert all(r[1] == b"%016x" % r[0] and r[2] == b"x" * 40 + b"%d" % r[0] and r[3] == 1000 + r[0] for r in got)
    # any offset can be read on its own (sparse index + a short walk)
    for offset in (0, 1, 255, 256, 257, 517, 999):
        records, nxt = tlog.read(offset, 2)
        assert records[0][0] == offset and nxt == offset + len(records)
    tlog.close()
    reopened = TopicLog("t", str(tmp_path / "t.wal"), max_bytes_per_file=4000, sync_every=100)
    assert reopened.head == 1000 and reopened.first == 0
    assert [r[0] for r in _read_all(reopened, 500)] == list(range(500, 1000))


@pytest.mark.parametrize("n", [1, 3, 50, 5000])
def test_small_reads_of_uneven_records_read_what_one_pass_reads(tmp_path, n):
    # a read sizes its pread by n (the segment's mean record) and starts where the last one ended: records
    # larger than the mean make it come back short, never wrong; every reader's own position is kept
    tlog = TopicLog("t", str(tmp_path / "t.wal"), max_bytes_per_file=20000, sync_every=100)
    recs = [encode_record(b"%016x" % i, b"y" * (10 + (i * 37) % 700), 1000 + i, 0, 0) for i in range(600)]
    for i in range(0, 600, 7):
        tlog.append(recs[i:i + 7])
    whole = [r[0] for r in _read_all(tlog, n=10_000)]
    assert whole == list(range(600))
    a, b = 0, 5  # two readers (two channels) reading in turn
    got_a, got_b = [], []
    while a < tlog.head or b < tlog.head:
        records, a = tlog.read(a, n)
        got_a += [r[0] for r in records]
        records, b = tlog.read(b, n)
        got_b += [r[0] for r in records]
    assert got_a == whole and got_b == whole[5:]
    for offset, rec in zip(range(600), recs):
        records, _ = tlog.read(offset, 1)
        assert encode_record(records[0][1], records[0][2], records[0][3], records[0][4], records[0][5]) == rec
    tlog.close()


def test_one_record_reads_between_appends_and_after_a_cut_read_what_is_on_disk(tmp_path):
    # a small read's bytes serve the next one-record reads: never past what was on disk then, and
    # never after a replica's copy was cut back and written again
    from nsq.server.nsqd.storage.replicalog import ReplicaLog

    tlog = ReplicaLog("t", str(tmp_path / "t.wal"), max_bytes_per_file=1 << 20, sync_every=100)
    tlog.append(_records(10))
    got = []
    for i in range(10):
        records, _ = tlog.read(i, 1)
        got.append(records[0][2])
        tlog.append(_records(1, start=10 + i))  # one more after each read
    assert got == [b"x" * 40 + b"%d" % i for i in range(10)]
    assert [r[2] for r in _read_all(tlog, 10, n=1)] == [b"x" * 40 + b"%d" % i for i in range(10, 20)]
    assert tlog.read(3, 1)[0][0][2] == b"x" * 40 + b"3"  # its bytes run past offset 5
    assert tlog.truncate_to(5) == 15
    tlog.append(_records(5, start=5, body=b"x" * 40 + b"new"))
    assert [tlog.read(i, 1)[0][0][2] for i in range(4, 10)] == [b"x" * 40 + b"4"] + [
        b"x" * 40 + b"new%d" % i for i in range(5, 10)]
    tlog.close()


def test_a_record_is_the_message_plus_twelve_bytes(tmp_path):
    tlog = TopicLog("t", str(tmp_path / "t.wal"), 1 << 20, 100)
    body = b"b" * 200
    tlog.append_joined(encode_batch([b"%016x" % i for i in range(10)], [body] * 10, 5, 0), 10)
    assert tlog.retained_bytes == 10 * (26 + 200 + 12)
    records, _ = tlog.read(0, 10)
    assert [r[5] for r in records] == [0] * 10 and records[3][3] == 5


def test_a_torn_tail_is_cut_back_to_the_last_whole_record(tmp_path, caplog):
    path = str(tmp_path / "t.wal")
    tlog = TopicLog("t", path, 1 << 20, 100)
    tlog.append(_records(50))
    tlog.close()
    seg = os.path.join(path, sorted(os.listdir(path))[-1])
    whole = os.path.getsize(seg)
    with open(seg, "ab") as fh:
        fh.write(_records(1, 50)[0][:30])  # a crash mid-write
    tlog = TopicLog("t", path, 1 << 20, 100)
    assert tlog.head == 50
    assert os.path.getsize(seg) == whole
    assert "torn or damaged tail" in caplog.text
    assert tlog.append(_records(1, 50)) == 50  # appends go on after the last whole record
    assert [r[0] for r in _read_all(tlog)] == list(range(51))


def test_garbage_in_the_newest_segment_keeps_everything_before_it(tmp_path):
    path = str(tmp_path / "t.wal")
    tlog = TopicLog("t", path, 1 << 20, 100)
    recs = _records(20)
    tlog.append(recs)
    tlog.close()
    seg = os.path.join(path, sorted(os.listdir(path))[-1])
    cut = sum(map(len, recs[:12])) + 9
    with open(seg, "r+b") as fh:
        fh.seek(cut)
        fh.write(b"\xff\xfe")  # inside record 12's payload: its checksum fails
    tlog = TopicLog("t", path, 1 << 20, 100)
    assert tlog.head == 12
    assert [r[0] for r in _read_all(tlog)] == list(range(12))


def _closed_log_of_300(path: str) -> list[int]:
    """300 records in segments of 3,000 bytes at ``path``, closed; the segments' bases."""
    tlog = TopicLog("t", path, 3000, 100)
    for i in range(0, 300, 10):
        tlog.append(_records(10, i))
    bases = [b for b, _ in tlog.segments()]
    tlog.close()
    return bases


def _damage(path: str, base: int, at: int) -> None:
    """Overwrite 4 bytes at byte ``at`` of the segment starting at offset ``base``."""
    with open(os.path.join(path, f"{base:020d}.log"), "r+b") as fh:
        fh.seek(at)
        fh.write(b"\x00\x01\x02\x03")


def test_a_damaged_older_segment_is_skipped_not_the_ones_after(tmp_path, caplog):
    path = str(tmp_path / "t.wal")
    bases = _closed_log_of_300(path)
    _damage(path, bases[1], 500)
    tlog = TopicLog("t", path, 3000, 100)
    got = [r[0] for r in _read_all(tlog)]
    assert got[:bases[1]] == list(range(bases[1]))  # before the damage
    assert got[-(300 - bases[2]):] == list(range(bases[2], 300))  # the next segments whole
    assert "damaged record" in caplog.text


def test_reading_on_into_sealed_segments_does_not_scan_them(tmp_path, caplog):
    # a reader at a sealed segment's first record (a drain after a restart, moving on from
    # segment to segment) starts at its byte 0: no scan of the whole segment for its index,
    # which would hold the event loop for as long as reading the segment takes
    path = str(tmp_path / "t.wal")
    _closed_log_of_300(path)
    tlog = TopicLog("t", path, 3000, 100)
    sealed = list(tlog._segments[:-1])
    assert len(sealed) >= 3 and all(s.index is None for s in sealed)
    assert [r[0] for r in _read_all(tlog, 0)] == list(range(300))
    assert all(s.index is None for s in sealed)
    # a read from the middle of a sealed segment still finds its record (the index, built then)
    mid = sealed[1].base + 3
    records, _ = tlog.read(mid, 1)
    assert records[0][0] == mid and sealed[1].index is not None
    tlog.close()
    # a sealed segment whose first record is damaged is skipped from its start, as before
    _damage(path, sealed[1].base, 10)
    tlog = TopicLog("t", path, 3000, 100)
    got = [r[0] for r in _read_all(tlog, 0)]
    assert got == list(range(sealed[1].base)) + list(range(sealed[2].base, 300))
    assert "damaged record" in caplog.text
    tlog.close()


def test_a_sealed_segments_saved_index_spares_its_scan(tmp_path, monkeypatch):
    # a roll saves the sealed segment's sparse index (<base>.index): after a restart a read
    # from its middle loads it instead of scanning the segment; a damaged, missing or
    # stale index file is refused and the segment is scanned as before
    from nsq.server.nsqd.storage.logsegment import Segment

    path = str(tmp_path / "t.wal")
    bases = _closed_log_of_300(path)
    assert sorted(int(f[:20]) for f in os.listdir(path) if f.endswith(".index")) == bases[:-1]
    scanned: list[int] = []
    real_scan = Segment.scan
    monkeypatch.setattr(Segment, "scan", lambda seg, *a, **k: (scanned.append(seg.base), real_scan(seg, *a, **k)))

    def read_middle() -> list[int]:
        scanned.clear()
        tlog = TopicLog("t", path, 3000, 100)
        try:
            for base, end in zip(bases, bases[1:]):
                mid = (base + end) // 2
                records, _ = tlog.read(mid, 2)
                assert [r[0] for r in records] == [mid, mid + 1]
                assert records[0][2] == b"x" * 40 + b"%d" % mid
            return [b for b in scanned if b != bases[-1]]  # the newest is always scanned at open
        finally:
            tlog.close()

    assert read_middle() == []
    index = os.path.join(path, f"{bases[1]:020d}.index")
    with open(index, "r+b") as fh:  # damaged
        fh.seek(30)
        fh.write(b"\xff")
    os.remove(os.path.join(path, f"{bases[2]:020d}.index"))  # missing
    with open(os.path.join(path, f"{bases[3]:020d}.log"), "ab") as fh:  # stale: the segment is not that size
        fh.write(b"\0" * 8)
    assert read_middle() == [bases[1], bases[2], bases[3]]


def test_segments_below_the_floor_are_deleted_never_the_newest(tmp_path):
    path = str(tmp_path / "t.wal")
    tlog = TopicLog("t", path, 2000, 100)
    for i in range(0, 200, 10):
        tlog.append(_records(10, i))
    bases = [b for b, _ in tlog.segments()]
    assert tlog.delete_before(bases[2]) == 2
    assert tlog.first == bases[2]
    logs = sorted(f for f in os.listdir(path) if f.endswith(".log"))
    assert [int(f[:20]) for f in logs] == bases[2:]
    # each sealed segment's saved index goes with it
    assert sorted(int(f[:20]) for f in os.listdir(path) if f.endswith(".index")) == bases[2:-1]
    assert tlog.delete_before(10**9) == len(bases) - 3  # the newest stays
    assert tlog.read(0, 5)[0][0][0] == tlog.first


def test_a_full_disk_refuses_the_append_and_keeps_the_log_whole(tmp_path, monkeypatch):
    from nsq.server.nsqd.storage import topiclog
    from nsq.server.nsqd.storage.backend import BackendFull

    tlog = TopicLog("t", str(tmp_path / "t.wal"), 1 << 20, 100)
    tlog.append(_records(5))

    def no_space(fd, data):
        os.write(fd, bytes(data)[:7])  # a partial write, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(topiclog, "write_all", no_space)
    with pytest.raises(BackendFull):
        tlog.append(_records(3, 5))
    assert tlog.error and tlog.error.endswith("no space left on device")
    monkeypatch.undo()
    assert tlog.head == 5
    assert tlog.append(_records(3, 5)) == 5
    assert tlog.error is None
    assert [r[0] for r in _read_all(tlog)] == list(range(8))


def test_a_roll_fsyncs_the_full_segment_in_the_disk_thread(tmp_path, monkeypatch):
    """A roll does not wait for the full segment's fsync (a whole file's
    writeback): the disk thread does it, ``synced`` moves once it is done,
    and when it fails the next sync fails, inline or in the disk thread."""
    import errno
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from nsq.server.nsqd.storage import syncpolicy

    disk = ThreadPoolExecutor(max_workers=1)
    gate = threading.Event()
    try:
        disk.submit(gate.wait)  # the disk thread is busy
        tlog = TopicLog("t", str(tmp_path / "t.wal"), max_bytes_per_file=4000, sync_every=10**6)
        tlog.background = disk.submit
        for rec in _records(60):
            tlog.append([rec])
        full = list(tlog.segments())[1][0]
        assert 0 < full < 60
        assert tlog.synced == 0  # the roll did not fsync inline
        gate.set()
        disk.submit(lambda: None).result()  # the disk thread's jobs run in order
        assert tlog.synced == full

        fsync = os.fsync
        fail = {"left": 0}

        def flaky_fsync(fd: int) -> None:
            # only the roll's fsync in the disk thread, never the directory's on this thread
            if fail["left"] and threading.current_thread() is not threading.main_thread():
                fail["left"] -= 1
                raise OSError(errno.EIO, "Input/output error")
            fsync(fd)

        monkeypatch.setattr(syncpolicy.os, "fsync", flaky_fsync)
        for kind in ("inline", "disk thread"):
            fail["left"] = 1  # the next roll's fsync fails
            before = len(list(tlog.segments()))
            while len(list(tlog.segments())) == before:
                tlog.append(_records(1, tlog.head))
            if kind == "inline":
                with pytest.raises(OSError):
                    tlog.sync()
                tlog.sync()  # once
            else:
                fut = tlog.sync_in_background()
                assert fut is not None
                with pytest.raises(OSError):
                    fut.result()
        tlog.close()
    finally:
        gate.set()
        disk.shutdown()


# -- the range set ----------------------------------------------------------------------


def test_range_set_folds_out_of_order_finishes_into_the_low_water_mark():
    rs = RangeSet(10)
    rs.add_many([12, 13, 15])
    assert rs.low == 10 and rs.ranges() == [[12, 14], [15, 16]]
    assert 12 in rs and 14 not in rs and 9 in rs and 10 not in rs
    assert rs.next_gap(12) == (14, 15) and rs.next_gap(10) == (10, 12)
    assert rs.count_from(13) == 2
    rs.add_many([11, 10, 14])
    assert rs.low == 16 and rs.ranges() == []
    rs.add_many(list(range(100, 20, -1)))
    assert rs.ranges() == [[21, 101]] and rs.low == 16


# -- nsqd with --storage=wal -------------------------------------------------------------


@pytest.fixture
async def wal_nsqd(make_nsqd, tmp_path):
    async def factory(**options):
        options.setdefault("data_path", str(tmp_path))
        options.setdefault("storage", "wal")
        return await make_nsqd(**options)

    return factory


async def _consume(port: int, topic: str, channel: str, count: int, rdy: int = 100, fin: bool = True,
                   timeout: float = 10.0) -> list[bytes]:
    conn = await Conn.open(port)
    await conn.subscribe(topic, channel, rdy=rdy)
    bodies = []
    try:
        while len(bodies) < count:
            msg = await conn.read_message(timeout)
            bodies.append(msg.body)
            if fin:
                await conn.send(c.fin(msg.id))
        await asyncio.sleep(0.05)
    finally:
        await conn.aclose()
    return bodies


async def test_a_topic_with_no_channel_keeps_everything_for_the_first_channel(wal_nsqd):
    nsqd = await wal_nsqd(mem_queue_size=100)
    topic = nsqd.get_topic("dur")
    topic.publish([b"%d" % i for i in range(5000)])
    # as the default engine: the first --mem-queue-size in memory too, the rest in the log only
    assert topic.depth == 5000 and len(topic.queue) == 100 and topic.backend.depth == 4900
    got = await _consume(nsqd.tcp_port, "dur", "c", 5000)
    assert got == [b"%d" % i for i in range(5000)]


async def test_an_ephemeral_channel_reads_the_log_and_drops_nothing(wal_nsqd):
    nsqd = await wal_nsqd(mem_queue_size=100)
    nsqd.get_topic("dur").publish([b"%d" % i for i in range(3000)])
    got = await _consume(nsqd.tcp_port, "dur", "tail#ephemeral", 3000, rdy=200)
    assert sorted(got, key=int) == [b"%d" % i for i in range(3000)]


async def test_four_channels_cost_one_write_per_message(wal_nsqd, tmp_path):
    nsqd = await wal_nsqd(mem_queue_size=10)
    topic = nsqd.get_topic("four")
    for name in "abcd":
        topic.get_channel(name)
    body = b"p" * 200
    for _ in range(10):
        topic.publish([body] * 100)
    on_disk = sum(os.path.getsize(tmp_path / "four.wal" / f) for f in os.listdir(tmp_path / "four.wal")
                  if f.endswith(".log"))
    assert on_disk == 1000 * (26 + 200 + 12)
    assert not [f for f in os.listdir(tmp_path) if "diskqueue" in f]
    for name in "abcd":
        ch = topic.channels[name]
        assert ch.depth == 1000 and len(ch.queue) <= 10
    for name in "ab":
        assert len(await _consume(nsqd.tcp_port, "four", name, 1000)) == 1000
    assert topic.channels["a"].depth == 0 and topic.channels["c"].depth == 1000


async def test_channel_state_survives_a_restart(wal_nsqd, tmp_path):
    nsqd = await wal_nsqd(mem_queue_size=50, max_bytes_per_file=4096)
    topic = nsqd.get_topic("dur")
    topic.get_channel("c")
    topic.publish([b"%d" % i for i in range(1000)])
    first = await _consume(nsqd.tcp_port, "dur", "c", 400)
    # 20 more delivered and left in flight: they come again after the restart
    await _consume(nsqd.tcp_port, "dur", "c", 20, rdy=20, fin=False)
    await nsqd.stop()
    again = await wal_nsqd(mem_queue_size=50, max_bytes_per_file=4096)
    channel = again.get_topic("dur").channels["c"]
    assert channel.depth == 600
    rest = await _consume(again.tcp_port, "dur", "c", 600)
    assert sorted(first + rest, key=int) == [b"%d" % i for i in range(1000)]
    # everything is finished: the segments before the newest go at the next checkpoint
    again.checkpoint_logs()
    await wait_for(lambda: len([f for f in os.listdir(tmp_path / "dur.wal") if f.endswith(".log")]) == 1, 2.0)


async def test_deleting_a_channel_releases_its_hold_and_empty_moves_it_to_the_head(wal_nsqd, tmp_path):
    nsqd = await wal_nsqd(mem_queue_size=10, max_bytes_per_file=2048)
    topic = nsqd.get_topic("t")
    topic.get_channel("slow")
    topic.get_channel("gone")
    topic.publish([b"x" * 100] * 300)
    segments = len(list(topic.log.segments()))
    nsqd.checkpoint_logs()
    await asyncio.sleep(0.1)
    assert len(list(topic.log.segments())) == segments  # both channels hold them
    topic.delete_channel("gone")
    assert not (tmp_path / "t.wal" / "gone.cursor").exists()
    topic.channels["slow"].empty()
    assert topic.channels["slow"].depth == 0
    nsqd.checkpoint_logs()
    await wait_for(lambda: len(list(topic.log.segments())) == 1, 2.0)


async def test_dpub_in_the_log_keeps_its_delay_across_a_restart(wal_nsqd):
    nsqd = await wal_nsqd(mem_queue_size=5)
    topic = nsqd.get_topic("d")
    topic.get_channel("c")
    topic.publish([b"now%d" % i for i in range(10)])  # past memory: the channel reads the log
    topic.publish([b"later"], defer_ms=1500)
    await nsqd.stop()
    again = await wal_nsqd(mem_queue_size=5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    got = await _consume(again.tcp_port, "d", "c", 11, timeout=5)
    assert got[-1] == b"later" and sorted(got[:10]) == sorted(b"now%d" % i for i in range(10))
    assert loop.time() - started > 0.8


async def test_req_with_a_delay_survives_a_restart(wal_nsqd):
    nsqd = await wal_nsqd()
    topic = nsqd.get_topic("r")
    topic.get_channel("c")
    topic.publish([b"a", b"b"])
    conn = await Conn.open(nsqd.tcp_port)
    await conn.subscribe("r", "c", rdy=2)
    m1 = await conn.read_message()
    m2 = await conn.read_message()
    await conn.send(c.fin(m1.id), c.req(m2.id, 1500))
    await asyncio.sleep(0.1)
    await conn.aclose()
    await nsqd.stop()
    again = await wal_nsqd()
    channel = again.get_topic("r").channels["c"]
    conn = await Conn.open(again.tcp_port)
    await conn.subscribe("r", "c", rdy=5)
    await conn.expect_nothing(0.5)
    msg = await conn.read_message(3.0)
    assert msg.body == m2.body and msg.id == m2.id and msg.attempts == 2
    assert channel.depth == 0
    await conn.aclose()


def test_a_crash_redelivers_what_was_not_finished_and_nothing_is_lost(tmp_path):
    """kill -9 under --storage=wal: every acknowledged message is delivered
    after the restart unless it was finished before the crash; what comes
    again is at most what was finished after the last checkpoint."""
    import signal
    import socket
    import time

    from tests.reliability.daemons import NSQDDaemon
    from tests.reliability.v2sock import V2Socket

    flags = (f"--data-path={tmp_path}", "--storage=wal", "--mem-queue-size=100", "--sync-timeout=100ms",
             "--max-bytes-per-file=65536")
    d = NSQDDaemon(*flags)
    try:
        pub = V2Socket(d.tcp_port)
        acked = []
        for i in range(0, 3000, 100):
            bodies = [b"%d" % j for j in range(i, i + 100)]
            assert pub.mpub("crash", bodies) == (0, b"OK")
            acked += bodies
        sub = V2Socket(d.tcp_port)
        sub.sub("crash", "c", rdy=50)
        finished = []
        for _ in range(1000):
            msg_id, _attempts, body = sub.read_message()
            sub.fin(msg_id)
            finished.append(body)
        time.sleep(0.5)  # a checkpoint or more
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(5)
    finally:
        d.stop()
    d = NSQDDaemon(*flags)
    try:
        sub = V2Socket(d.tcp_port, timeout=2.0)
        sub.sub("crash", "c", rdy=200)
        got = []
        try:
            while True:
                msg_id, _attempts, body = sub.read_message()
                sub.fin(msg_id)
                got.append(body)
        except (socket.timeout, TimeoutError):
            pass
        lost = set(acked) - set(finished) - set(got)
        assert not lost, f"{len(lost)} acknowledged messages lost"
        assert set(got) >= set(acked) - set(finished)
        assert len(got) < 2000 + 1000
    finally:
        d.stop()


def test_diskqueue_mode_refuses_a_wal_data_path(tmp_path):
    from nsq.server.nsqd.nsqd import NSQD
    from nsq.server.nsqd.options import NSQDOptions

    async def run(storage):
        n = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(tmp_path),
                             storage=storage))
        try:
            await n.start()
            if storage == "wal":
                n.get_topic("t").publish([b"x"])
        finally:
            await n.stop()

    asyncio.run(run("wal"))
    with pytest.raises(ValueError, match="--storage=wal"):
        asyncio.run(run("diskqueue"))



async def test_wal_takes_over_a_disk_queue_data_path_and_loses_nothing(make_nsqd, tmp_path):
    # written in the default format: a topic backlog (no channel yet for
    # "held"), two channels with their own backlogs, a deferred message
    nsqd = await make_nsqd(data_path=str(tmp_path), mem_queue_size=0)
    held = nsqd.get_topic("held")
    held.publish([b"h%d" % i for i in range(30)])
    topic = nsqd.get_topic("t")
    topic.get_channel("a")
    topic.get_channel("b")
    topic.publish([b"m%d" % i for i in range(100)])
    got_a = await _consume(nsqd.tcp_port, "t", "a", 40)  # a is 40 ahead of b
    topic.publish([b"late"], defer_ms=800)
    await nsqd.stop()
    assert [f for f in os.listdir(tmp_path) if "diskqueue" in f]

    wal = await make_nsqd(data_path=str(tmp_path), storage="wal", mem_queue_size=10)
    assert not [f for f in os.listdir(tmp_path) if "diskqueue" in f]
    state = (tmp_path / "nsqd.storage.json").read_text()
    assert '"storage": "wal"' in state and '"topic": "t"' in state
    t = wal.get_topic("t")
    # the deferred message is in each channel's part of the log, and
    # deferred at start, as the default engine restores it
    assert t.channels["a"].depth == 60 and t.channels["b"].depth == 100
    assert len(t.channels["a"].deferred) == len(t.channels["b"].deferred) == 1
    rest_a = await _consume(wal.tcp_port, "t", "a", 61, timeout=5)
    rest_b = await _consume(wal.tcp_port, "t", "b", 101, timeout=5)
    want = sorted([b"m%d" % i for i in range(100)] + [b"late"])
    assert sorted(got_a + rest_a) == want
    assert sorted(rest_b) == want
    assert sorted(await _consume(wal.tcp_port, "held", "first", 30)) == sorted(b"h%d" % i for i in range(30))


def test_nsq_tail_started_after_nsq_pub_gets_every_message(tmp_path):
    """`seq 1 50000 | nsq pub --topic dur`, then `nsq tail --topic dur -n
    50000`: with --storage=wal the tail's #ephemeral channel reads the log
    (with the disk-queue engine, as with Go, it drops what is past
    --mem-queue-size)."""
    import subprocess
    import sys

    from tests.reliability.daemons import NSQDDaemon

    d = NSQDDaemon(f"--data-path={tmp_path}", "--storage=wal")
    try:
        addr = f"127.0.0.1:{d.tcp_port}"
        lines = b"".join(b"%d\n" % i for i in range(1, 50001))
        subprocess.run([sys.executable, "-m", "nsq", "pub", "--topic", "dur", "--nsqd-tcp-address", addr],
                       input=lines, check=True, timeout=60, capture_output=True)
        out = subprocess.run([sys.executable, "-m", "nsq", "tail", "--topic", "dur", "--nsqd-tcp-address", addr,
                              "-n", "50000"], check=True, timeout=60, capture_output=True).stdout
        assert sorted(out.split(), key=int) == lines.split()
    finally:
        d.stop()


async def test_a_topic_log_missing_from_nsqd_dat_is_restored(wal_nsqd, tmp_path):
    nsqd = await wal_nsqd()
    topic = nsqd.get_topic("lost")
    topic.get_channel("c")
    topic.publish([b"m%d" % i for i in range(20)])
    nsqd.checkpoint_logs()
    await nsqd.stop()
    (tmp_path / "nsqd.dat").write_text('{"topics":[],"version":"1.2.1"}')  # as if it was never rewritten
    again = await wal_nsqd()
    assert "lost" in again.topics and again.topics["lost"].channels["c"].depth == 20


def test_diskqueue_mode_refuses_a_data_path_a_wal_nsqd_used_even_without_logs(tmp_path):
    from nsq.server.nsqd.nsqd import NSQD
    from nsq.server.nsqd.options import NSQDOptions

    async def run(storage):
        n = NSQD(NSQDOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(tmp_path),
                             storage=storage))
        try:
            await n.start()
        finally:
            await n.stop()

    asyncio.run(run("wal"))  # no topic: no *.wal directory
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".wal")]
    with pytest.raises(ValueError, match="nsqd.storage.json, which says written with --storage=wal"):
        asyncio.run(run("diskqueue"))
    os.remove(tmp_path / "nsqd.storage.json")  # the documented way back
    asyncio.run(run("diskqueue"))


def test_an_mpub_larger_than_a_segment_is_split_across_segments(tmp_path):
    from nsq.server.nsqd.storage.topiclog import TopicLog, encode_record

    tlog = TopicLog("t", str(tmp_path / "t.wal"), 16384, 0)
    body = b"x" * 1024
    records = [encode_record(b"%016d" % i, body, i, 0, 0) for i in range(100)]
    assert tlog.append(records) == 0 and tlog.head == 100
    one = len(records[0])
    sizes = [size for _, size in tlog.segments()]
    assert len(sizes) == 7 and sum(sizes) == 100 * one
    assert all(size <= 16384 + one for size in sizes), sizes
    got, _ = tlog.read(0, 100)
    offsets = []
    offset = 0
    while offset < 100:
        got, offset = tlog.read(offset, 100)
        offsets += [r[0] for r in got]
    assert offsets == list(range(100))
    tlog.close()


async def test_time_retention_reaches_a_quiet_topic(wal_nsqd):
    # the MPUB of 100 x 1 KiB of the retention case, retention 1s: the
    # segment being written rolls by age, then goes with the rest
    nsqd = await wal_nsqd(max_bytes_per_file=16384, retention_time=1.0, sync_timeout=0.1)
    topic = nsqd.get_topic("t")
    topic.get_channel("c")
    topic.publish([b"%04d" % i + b"x" * 1020 for i in range(100)])
    before = topic.log.retained_bytes
    assert before > 100 * 1024 and all(size <= 16384 + 1100 for _, size in topic.log.segments())
    got = await _consume(nsqd.tcp_port, "t", "c", 100)
    assert len(got) == 100
    finished = time.monotonic()

    await wait_for(lambda: topic.log.retained_bytes == 0, timeout=10)
    # the retention time + a check or two (the channel's FINs fold and
    # checkpoint every --sync-timeout too); slack for a loaded machine
    assert time.monotonic() - finished < 1.0 + 5.0
    assert (topic.log.first, topic.log.head, list(topic.log.segments())) == (100, 100, [(100, 0)])
