"""DiskQueue: the go-diskqueue file format, rolls, restarts and corruption.

Pure tests: real files in tmp_path, no daemon.
"""

from __future__ import annotations

import logging
import os
import struct

import pytest

from nsq.server.nsqd.storage.backend import BackendFull, BackendQueue
from nsq.server.nsqd.storage.diskqueue import DiskQueue
from nsq.server.nsqd.storage.diskqueue_meta import SLOT, parse_meta, read_slots

MIN = 26  # nsqd: 8 ts + 2 attempts + 16 id
MAX = 1024 + 26


def msg(i: int, body_len: int = 4) -> bytes:
    """An encoded nsqd message: int64 ns timestamp, uint16 attempts, 16-byte id, body."""
    body = (b"%d:" % i).ljust(body_len, b"x")
    return struct.pack(">qH16s", 1_600_000_000_000_000_000 + i, 1, b"%016x" % i) + body


def rec(payload: bytes) -> bytes:
    """One record exactly as go-diskqueue writes it."""
    return struct.pack(">i", len(payload)) + payload


def new(tmp_path, name="t", max_bytes=1024 * 1024, sync_every=2500, min_size=MIN, max_size=MAX):
    return DiskQueue(name, str(tmp_path), max_bytes, min_size, max_size, sync_every, 2.0)


def data_file(tmp_path, num: int, name="t") -> str:
    return str(tmp_path / f"{name}.diskqueue.{num:06d}.dat")


def meta_file(tmp_path, name="t") -> str:
    return str(tmp_path / f"{name}.diskqueue.meta.dat")


def read_meta(tmp_path, name="t") -> str:
    with open(meta_file(tmp_path, name)) as f:
        return f.read()


def listing(tmp_path) -> list[str]:
    return sorted(os.listdir(tmp_path))


def test_is_a_backend(tmp_path):
    dq = new(tmp_path)
    assert isinstance(dq, BackendQueue)
    assert dq.accepts_overflow is True
    assert dq.sync_timeout == 2.0
    assert dq.depth == 0 and dq.read() is None and dq.read_many(5) == []
    assert not dq.needs_sync
    dq.close()


def test_missing_meta_is_empty_queue_at_file_zero(tmp_path):
    dq = new(tmp_path)
    assert (dq.depth, dq.read_file_num, dq.read_pos, dq.write_file_num, dq.write_pos) == (0, 0, 0, 0, 0)
    assert listing(tmp_path) == []  # nothing is created until a write or sync
    dq.put(msg(0))
    assert os.path.exists(data_file(tmp_path, 0))
    dq.close()


def test_record_and_meta_bytes_exact(tmp_path):
    dq = new(tmp_path)
    payloads = [msg(i, 4) for i in range(3)]  # 30 bytes each -> 34-byte records
    for p in payloads:
        dq.put(p)
    assert dq.read() == payloads[0]
    assert dq.needs_sync
    dq.sync()
    assert not dq.needs_sync
    assert read_meta(tmp_path) == "2\n0,34\n0,102\n"
    with open(data_file(tmp_path, 0), "rb") as f:
        assert f.read() == b"".join(rec(p) for p in payloads)
    assert [n for n in listing(tmp_path) if n.endswith(".tmp")] == []
    dq.close()
    assert read_meta(tmp_path) == "2\n0,34\n0,102\n"


def test_roll_rule_v110_and_file_bytes(tmp_path):
    """Roll *before* a record that would pass max_bytes_per_file (go-diskqueue v1.1.0)."""
    dq = new(tmp_path, max_bytes=100)
    payloads = [msg(i, 4) for i in range(5)]  # 34-byte records: 2 fit in 100 bytes
    for p in payloads:
        dq.put(p)
    assert (dq.write_file_num, dq.write_pos, dq.depth) == (2, 34, 5)
    # each roll synced the meta file
    assert read_meta(tmp_path) == "4\n0,0\n2,0\n"
    for num, chunk in [(0, payloads[0:2]), (1, payloads[2:4]), (2, payloads[4:5])]:
        with open(data_file(tmp_path, num), "rb") as f:
            assert f.read() == b"".join(rec(p) for p in chunk)
    dq.sync()
    assert read_meta(tmp_path) == "5\n0,0\n2,34\n"
    dq.close()


def test_exact_fill_rolls_on_next_write(tmp_path):
    dq = new(tmp_path, max_bytes=68)
    dq.put(msg(0))
    dq.put(msg(1))
    assert (dq.write_file_num, dq.write_pos) == (0, 68)  # exactly full: no roll yet (v1.1.0)
    dq.put(msg(2))
    assert (dq.write_file_num, dq.write_pos) == (1, 34)
    assert dq.read_many(3) == [msg(0), msg(1), msg(2)]
    dq.close()


def test_oversized_single_record_gets_its_own_file(tmp_path):
    dq = new(tmp_path, max_bytes=50)
    big = msg(1, 200)
    dq.put(msg(0))
    dq.put(big)
    dq.put(msg(2))
    assert os.path.getsize(data_file(tmp_path, 1)) == 4 + len(big)
    assert dq.read_many(10) == [msg(0), big, msg(2)]
    dq.close()


def test_round_trip_many_records_across_rolls_and_reopen(tmp_path):
    dq = new(tmp_path, max_bytes=1000)
    expected = [msg(i, 4 + (i * 7) % 60) for i in range(600)]
    out: list[bytes] = []
    for i, p in enumerate(expected[:400]):
        dq.put(p)
        if i % 3 == 0:
            out.append(dq.read())
    assert dq.write_file_num >= 10
    assert dq.depth == 400 - len(out)
    depth_before = dq.depth
    dq.close()

    dq = new(tmp_path, max_bytes=1000)
    assert dq.depth == depth_before
    for p in expected[400:]:
        dq.put(p)
    out.extend(dq.read_many(50))
    dq.close()

    dq = new(tmp_path, max_bytes=1000)
    assert dq.depth == 600 - len(out)
    out.extend(dq.read_many(10_000))
    assert out == expected
    assert dq.depth == 0 and dq.read() is None
    dq.close()
    # fully read files are gone; the meta file and at most the write file remain
    left = [n for n in listing(tmp_path) if n.endswith(".dat") and "meta" not in n]
    assert left in ([], [f"t.diskqueue.{dq.write_file_num:06d}.dat"])
    assert not [n for n in listing(tmp_path) if n.endswith(".bad")]


@pytest.mark.parametrize("batch", [1, 2, 7, 64, 10_000])
def test_read_many_matches_read_one_by_one(tmp_path, caplog, batch):
    # read_many takes the records already in its read-ahead buffer in one loop: the same records,
    # positions, depths, deleted files and corruption reports as read() one at a time
    caplog.set_level(logging.INFO, logger="nsq.nsqd")
    queues = []
    for name in ("a", "b"):
        dq = new(tmp_path, name=name, max_bytes=700)
        for i in range(300):
            dq.put(msg(i, 4 + (i * 13) % 90))
        dq.sync()
        with open(data_file(tmp_path, 3, name), "r+b") as f:  # a garbage size: file 3's third record
            for _ in range(2):
                f.seek(struct.unpack(">I", f.read(4))[0], os.SEEK_CUR)
            f.write(struct.pack(">I", 3))  # below the 26 bytes of a message: inside the file
        queues.append(dq)
    one, many = queues
    while True:
        got = many.read_many(batch)
        want = [r for r in (one.read() for _ in range(len(got) or 1)) if r is not None]
        assert got == want
        assert (many.read_file_num, many.read_pos, many.depth) == (one.read_file_num, one.read_pos, one.depth)
        if not got:
            break
    assert one.depth == many.depth == 0
    assert caplog.text.count("invalid message read size") == 2  # once per queue
    assert sorted(n.replace("b.", "a.") for n in listing(tmp_path) if n.startswith("b.")) == \
        sorted(n for n in listing(tmp_path) if n.startswith("a."))
    one.close()
    many.close()


def test_fully_read_files_are_deleted(tmp_path):
    dq = new(tmp_path, max_bytes=100)
    for i in range(7):  # files 0,1,2 with two records, file 3 with one
        dq.put(msg(i))
    assert os.path.exists(data_file(tmp_path, 0))
    assert dq.read() == msg(0)
    assert os.path.exists(data_file(tmp_path, 0))
    assert dq.read() == msg(1)
    assert not os.path.exists(data_file(tmp_path, 0))
    assert (dq.read_file_num, dq.read_pos) == (1, 0)
    assert dq.read_many(4) == [msg(i) for i in range(2, 6)]
    assert not os.path.exists(data_file(tmp_path, 1))
    assert not os.path.exists(data_file(tmp_path, 2))
    assert dq.read() == msg(6)
    assert os.path.exists(data_file(tmp_path, 3))  # still the write file
    dq.close()
    assert read_meta(tmp_path) == "0\n3,34\n3,34\n"


def test_reader_caught_up_follows_writer_roll(tmp_path, caplog):
    """Alternating put/read across rolls (https://github.com/nsqio/go-diskqueue/issues/42) leaves no .bad files."""
    dq = new(tmp_path, max_bytes=100)
    for i in range(20):
        dq.put(msg(i))
        assert dq.read() == msg(i)
        assert dq.depth == 0
    assert not [n for n in listing(tmp_path) if n.endswith(".bad")]
    assert listing(tmp_path) == ["t.diskqueue.000009.dat", "t.diskqueue.meta.dat"]  # just the write file
    assert "bad" not in caplog.text
    dq.close()


def _write_go_fixture(tmp_path, files: dict[int, list[bytes]], meta: str, name="t") -> None:
    for num, payloads in files.items():
        with open(data_file(tmp_path, num, name), "wb") as f:
            for p in payloads:
                f.write(struct.pack(">i", len(p)))
                f.write(p)
    with open(meta_file(tmp_path, name), "wb") as f:
        f.write(meta.encode())


def test_reads_go_v100_files(tmp_path):
    """go-diskqueue v1.0.0 rolled *after* the write reaching the limit: file 0 is 102 > 100 bytes."""
    p = [msg(i, 4) for i in range(5)]
    _write_go_fixture(tmp_path, {0: p[:3], 1: p[3:]}, "5\n0,0\n1,68\n", name="topic:ch")
    dq = new(tmp_path, name="topic:ch", max_bytes=100)
    assert dq.depth == 5
    assert dq.read_many(3) == p[:3]
    assert not os.path.exists(data_file(tmp_path, 0, "topic:ch"))
    assert dq.read_many(3) == p[3:]
    assert dq.depth == 0
    dq.put(msg(9))  # 68 + 34 > 100: rolls to file 2
    assert (dq.write_file_num, dq.write_pos) == (2, 34)
    assert dq.read() == msg(9)
    dq.close()
    assert not [n for n in listing(tmp_path) if n.endswith(".bad")]
    assert read_meta(tmp_path, "topic:ch") == "0\n2,34\n2,34\n"


def test_reads_go_v110_files_mid_file(tmp_path):
    """v1.1.0 layout (2 records per 100-byte file), reader left mid-file by Go."""
    p = [msg(i, 4) for i in range(6)]
    _write_go_fixture(tmp_path, {0: p[0:2], 1: p[2:4], 2: p[4:6]}, "5\n0,34\n2,68\n")
    dq = new(tmp_path, max_bytes=100)
    assert dq.depth == 5
    assert dq.read() == p[1]
    assert not os.path.exists(data_file(tmp_path, 0))
    dq.put(msg(6))  # appended after Go's records in a new file
    assert dq.read_many(10) == p[2:] + [msg(6)]
    assert dq.depth == 0
    dq.close()
    assert read_meta(tmp_path) == "0\n3,34\n3,34\n"


def test_torn_last_record_renamed_bad_and_skipped(tmp_path, caplog):
    dq = new(tmp_path, max_bytes=100)
    for i in range(5):  # files 0:[0,1] 1:[2,3] 2:[4]
        dq.put(msg(i))
    dq.close()
    with open(data_file(tmp_path, 1), "r+b") as f:
        f.truncate(34 + 10)  # record 3 torn mid-payload

    dq = new(tmp_path, max_bytes=100)
    caplog.set_level(logging.INFO, logger="nsq.nsqd")
    got = dq.read_many(10)
    assert got == [msg(0), msg(1), msg(2), msg(4)]
    bad = data_file(tmp_path, 1) + ".bad"
    assert os.path.exists(bad) and not os.path.exists(data_file(tmp_path, 1))
    assert data_file(tmp_path, 1) in caplog.text
    assert any(r.name == "nsq.nsqd" and r.levelno >= logging.WARNING for r in caplog.records)
    # depth counted the lost record until the tail, then was corrected
    assert dq.depth == 0
    dq.put(msg(7))
    assert dq.depth == 1 and dq.read() == msg(7)
    dq.close()


def test_torn_record_in_write_file_moves_writer_on(tmp_path, caplog):
    dq = new(tmp_path)
    for i in range(3):
        dq.put(msg(i))
    dq.close()
    with open(data_file(tmp_path, 0), "r+b") as f:
        f.truncate(34 * 2 + 2)  # torn inside the size field of record 2

    dq = new(tmp_path)
    caplog.set_level(logging.INFO, logger="nsq.nsqd")
    assert dq.read_many(10) == [msg(0), msg(1)]
    assert os.path.exists(data_file(tmp_path, 0) + ".bad")
    assert data_file(tmp_path, 0) in caplog.text
    assert (dq.read_file_num, dq.read_pos, dq.write_file_num, dq.write_pos) == (1, 0, 1, 0)
    assert dq.depth == 0
    dq.put(msg(5))
    assert dq.read() == msg(5)
    dq.close()
    assert read_meta(tmp_path) == "0\n1,34\n1,34\n"


@pytest.mark.parametrize("bad_size", [0xFFFFFFFF, 0x7FFFFFFF, 5, 0])
def test_garbage_size_renamed_bad(tmp_path, caplog, bad_size):
    dq = new(tmp_path, max_bytes=100)
    for i in range(5):  # files 0:[0,1] 1:[2,3] 2:[4]
        dq.put(msg(i))
    dq.sync()
    with open(data_file(tmp_path, 0), "r+b") as f:  # size field of record 1
        f.seek(34)
        f.write(struct.pack(">I", bad_size))
    caplog.set_level(logging.INFO, logger="nsq.nsqd")
    assert dq.read() == msg(0)
    assert dq.read() == msg(2)  # record 1 lost with its file
    assert os.path.exists(data_file(tmp_path, 0) + ".bad")
    assert "invalid message read size" in caplog.text and data_file(tmp_path, 0) in caplog.text
    assert dq.depth == 3  # like Go: still counts the lost record ...
    assert dq.read_many(5) == [msg(3), msg(4)]
    assert dq.depth == 0  # ... until the tail
    dq.put(msg(8))
    assert dq.read() == msg(8)
    dq.close()


def test_missing_read_file_is_skipped(tmp_path, caplog):
    p = [msg(i) for i in range(4)]
    _write_go_fixture(tmp_path, {1: p[2:4]}, "4\n0,0\n1,68\n")  # file 0 missing
    dq = new(tmp_path, max_bytes=100)
    caplog.set_level(logging.INFO, logger="nsq.nsqd")
    assert dq.read_many(10) == p[2:4]
    assert data_file(tmp_path, 0) in caplog.text
    assert dq.depth == 0
    dq.close()


def test_read_sees_records_written_after_it_caught_up(tmp_path):
    dq = new(tmp_path)
    dq.put(msg(0))
    assert dq.read() == msg(0)
    assert dq.read() is None
    dq.put(msg(1))
    dq.put(msg(2))
    assert dq.read_many(5) == [msg(1), msg(2)]
    dq.close()


def test_large_read_ahead(tmp_path):
    dq = new(tmp_path, max_bytes=10 * 1024 * 1024, max_size=300_000)
    payloads = [msg(i, (i * 37_000) % 250_000 + 1) for i in range(40)]  # > 1 MiB read chunks
    for p in payloads:
        dq.put(p)
    assert dq.read_many(100) == payloads
    dq.close()


def test_put_size_limits(tmp_path):
    dq = new(tmp_path)
    with pytest.raises(ValueError):
        dq.put(b"x" * (MIN - 1))
    with pytest.raises(ValueError):
        dq.put(b"x" * (MAX + 1))
    assert dq.depth == 0 and dq.write_pos == 0
    dq.put(b"x" * MIN)
    dq.put(b"y" * MAX)
    assert dq.read_many(3) == [b"x" * MIN, b"y" * MAX]
    dq.close()


def test_sync_every_one_writes_meta_after_each_put(tmp_path):
    dq = new(tmp_path, sync_every=1)
    for i in range(1, 4):
        dq.put(msg(i))
        assert newest_meta(tmp_path) == (i, 0, 0, 0, 34 * i)
        assert not dq.needs_sync
    assert dq.read() == msg(1)
    assert dq.needs_sync  # reads do not sync by themselves
    assert newest_meta(tmp_path) == (3, 0, 0, 0, 102)
    dq.close()
    assert read_meta(tmp_path) == "2\n0,34\n0,102\n"  # Go's file again


def newest_meta(tmp_path, name="t") -> tuple[int, int, int, int, int]:
    with open(meta_file(tmp_path, name), "rb") as f:
        found = read_slots(f.read())
    assert found is not None
    return found[0]


def test_sync_every_one_meta_slots_alternate_in_place(tmp_path):
    """With --sync-every=1 the meta file holds two sealed 512-byte slots,
    written in turn in place (no temp file, no rename); Go's Fscanf reads
    the first slot's text."""
    dq = new(tmp_path, sync_every=1)
    dq.put(msg(1))  # the first write after start replaces the file: both slots
    ino = os.stat(meta_file(tmp_path)).st_ino
    raw = open(meta_file(tmp_path), "rb").read()
    assert len(raw) == 2 * SLOT and raw[:SLOT] == raw[SLOT:]
    assert raw.startswith(b"1\n0,0\n0,34\nnsq 1 ")
    dq.put(msg(2))
    dq.put(msg(3))
    raw = open(meta_file(tmp_path), "rb").read()
    assert os.stat(meta_file(tmp_path)).st_ino == ino  # written in place
    assert raw.startswith(b"2\n0,0\n0,68\nnsq 2 ")
    assert raw[SLOT:].startswith(b"3\n0,0\n0,102\nnsq 3 ")
    assert parse_meta(raw) == (2, 0, 0, 0, 68)  # what Go would read now (after a crash)
    assert newest_meta(tmp_path) == (3, 0, 0, 0, 102)
    dq.close()


def test_torn_meta_slot_falls_back_to_the_other(tmp_path):
    """A slot whose CRC fails (a torn write) is ignored: the other slot holds
    the state of the sync before, whose records are all on disk."""
    dq = new(tmp_path, sync_every=1)
    for i in range(1, 4):
        dq.put(msg(i))
    raw = bytearray(open(meta_file(tmp_path), "rb").read())
    dq._closed = True  # a crash: no close, no settle
    dq._close_write_file()
    raw[SLOT + 10] ^= 1  # slot 1 (seq 3) damaged
    open(meta_file(tmp_path), "wb").write(bytes(raw))
    dq = new(tmp_path, sync_every=1)
    assert (dq.depth, dq.write_pos) == (2, 68)
    assert dq.read_many(3) == [msg(1), msg(2)]
    dq.put(msg(4))  # after a damaged slot the file is replaced whole again
    raw = open(meta_file(tmp_path), "rb").read()
    assert raw[:SLOT] == raw[SLOT:]
    dq.close()


def test_go_meta_file_then_slots_then_go_again(tmp_path):
    """A meta file Go wrote (no seal) is read; the first --sync-every=1 sync
    replaces it with two slots; close leaves Go's text again."""
    dq = new(tmp_path)
    dq.put(msg(1))
    dq.close()
    assert read_meta(tmp_path) == "1\n0,0\n0,34\n"
    dq = new(tmp_path, sync_every=1)
    assert (dq.depth, dq.write_pos) == (1, 34)
    dq.put(msg(2))
    assert len(open(meta_file(tmp_path), "rb").read()) == 2 * SLOT
    dq.close()
    assert read_meta(tmp_path) == "2\n0,0\n0,68\n"


def test_sync_every_one_new_data_file_syncs_the_directory(tmp_path, monkeypatch):
    """A meta slot written in place does not make a new data file's name
    durable: the directory is fsynced first, once per file created."""
    import nsq.server.nsqd.storage.diskqueue as dqmod
    dirs: list[str] = []
    real = dqmod.fsync_dir
    monkeypatch.setattr(dqmod, "fsync_dir", lambda p: (dirs.append(p), real(p)))
    dq = new(tmp_path, sync_every=1, max_bytes=100)  # 34-byte records: 2 per file
    dq.put(msg(1))  # file 0 created; the meta replaced (its own directory fsync)
    dq.put(msg(2))
    assert dirs == []
    dq.put(msg(3))  # rolls: file 1 created
    assert dirs == [str(tmp_path)]
    dq.put(msg(4))
    assert dirs == [str(tmp_path)]
    dq.close()


def test_sync_every_counts_writes(tmp_path):
    dq = new(tmp_path, sync_every=3)
    dq.put(msg(0))
    dq.put(msg(1))
    assert not os.path.exists(meta_file(tmp_path)) and dq.needs_sync
    dq.put(msg(2))
    assert read_meta(tmp_path) == "3\n0,0\n0,102\n"
    dq.close()


def test_unsynced_writes_survive_a_crash(tmp_path, caplog):
    """A killed nsqd's writes are in the file (the kernel keeps them) but
    not in the meta file, which is only as new as the last sync: the
    whole records past its write position are taken back at start (Go's
    diskqueue drops them: its next write overwrites them)."""
    dq = new(tmp_path)
    dq.put(msg(0))
    dq.sync()
    dq.put(msg(1))  # in the file, not in the meta file
    dq.put(msg(2))
    os.close(dq._wfd)  # simulate a crash: no close(), no sync()
    dq._wfd = None
    with open(data_file(tmp_path, 0), "ab") as f:
        f.write(b"\x00\x00\x00\x40torn")  # a record cut short: not taken

    dq = new(tmp_path)
    assert dq.depth == 3
    assert "2 records after the meta data's write position" in caplog.text
    dq.put(msg(3))  # after the records taken back, over the torn one
    assert dq.read_many(5) == [msg(0), msg(1), msg(2), msg(3)]
    dq.close()
    assert os.path.getsize(data_file(tmp_path, 0)) == 4 * 34


def test_unacknowledged_tail_cut_before_a_roll(tmp_path, caplog):
    """With --sync-every=1 a record past the meta file's write position was
    never acknowledged (a power cut may also have zeroed its end): it is
    not taken back, and must not be read either once the writer rolls to a
    new file before writing over it (the reader reads an old file to its
    end). Found by tests/crash: a damaged body delivered."""
    dq = new(tmp_path, max_bytes=200, sync_every=1)
    dq.put(msg(0))  # synced, meta written
    os.close(dq._wfd)  # a crash: no close()
    dq._wfd = None
    with open(data_file(tmp_path, 0), "ab") as f:
        f.write(rec(msg(1, 40)[:-20] + bytes(20)))  # written, not synced: its end zeroed by the power cut
    caplog.set_level(logging.WARNING)
    dq = new(tmp_path, max_bytes=200, sync_every=1)
    assert dq.depth == 1
    dq.put(msg(2, 200))  # past max_bytes: the writer rolls to file 1 before writing over the tail
    dq.put(msg(3))
    assert dq.read_many(5) == [msg(0), msg(2, 200), msg(3)]
    assert "after the meta data's write position" in caplog.text
    dq.close()


def test_empty(tmp_path):
    dq = new(tmp_path, max_bytes=100)
    for i in range(5):
        dq.put(msg(i))
    dq.read()
    dq.empty()
    assert dq.depth == 0 and dq.read() is None
    assert not [n for n in listing(tmp_path) if n.endswith(".dat") and "meta" not in n]
    assert read_meta(tmp_path) == "0\n3,0\n3,0\n"  # like Go: next file number
    dq.put(msg(9))
    assert dq.read() == msg(9)
    dq.close()


def test_delete_removes_everything(tmp_path):
    other = new(tmp_path, name="t:c")  # a channel of the same topic must survive
    other.put(msg(0))
    other.close()
    dq = new(tmp_path, max_bytes=100)
    for i in range(5):
        dq.put(msg(i))
    dq.sync()
    dq.delete()
    assert listing(tmp_path) == ["t:c.diskqueue.000000.dat", "t:c.diskqueue.meta.dat"]
    dq.sync()  # no-op after delete: the meta file is not recreated
    assert dq.read() is None
    with pytest.raises(BackendFull):
        dq.put(msg(1))
    assert listing(tmp_path) == ["t:c.diskqueue.000000.dat", "t:c.diskqueue.meta.dat"]


def test_close_is_idempotent_and_refuses_puts(tmp_path):
    dq = new(tmp_path)
    dq.put(msg(0))
    dq.close()
    dq.close()
    with pytest.raises(BackendFull):
        dq.put(msg(1))
    assert read_meta(tmp_path) == "1\n0,0\n0,34\n"


@pytest.mark.parametrize("meta", ["", "2\n0,34\n0,1", "garbage", "2\n0,-5\n0,102\n", "\x00\x00\x00"])
def test_invalid_meta_recovers_from_data_files(tmp_path, caplog, meta):
    p = [msg(i) for i in range(5)]
    # files 0:[0,1] 1:[2,3] 2:[4] plus a torn tail on the write file
    _write_go_fixture(tmp_path, {0: p[0:2], 1: p[2:4], 2: p[4:5]}, meta)
    with open(data_file(tmp_path, 2), "ab") as f:
        f.write(b"\x00\x00")
    caplog.set_level(logging.INFO, logger="nsq.nsqd")
    dq = new(tmp_path, max_bytes=100)
    assert "meta" in caplog.text
    assert dq.depth == 5
    assert (dq.write_file_num, dq.write_pos) == (2, 34)
    dq.put(msg(5))  # 34 + 34 <= 100: appended to file 2 after the last good record
    assert dq.read_many(10) == p + [msg(5)]
    assert not [n for n in listing(tmp_path) if n.endswith(".bad")]
    dq.close()


def test_invalid_meta_without_data_files_is_empty(tmp_path):
    with open(meta_file(tmp_path), "w") as f:
        f.write("nonsense")
    dq = new(tmp_path)
    assert dq.depth == 0 and dq.read() is None
    dq.put(msg(0))
    assert dq.read() == msg(0)
    dq.close()


def test_meta_depth_inconsistent_at_tail_is_corrected(tmp_path):
    with open(meta_file(tmp_path), "w") as f:
        f.write("7\n3,0\n3,0\n")
    dq = new(tmp_path)
    assert dq.depth == 0
    dq.close()
    assert read_meta(tmp_path) == "0\n3,0\n3,0\n"


def test_meta_read_beyond_write_is_reset(tmp_path):
    with open(meta_file(tmp_path), "w") as f:
        f.write("1\n4,0\n2,10\n")
    dq = new(tmp_path)
    assert dq.depth == 0 and dq.read() is None
    assert dq.read_file_num == dq.write_file_num and dq.read_pos == dq.write_pos == 0
    dq.put(msg(0))
    assert dq.read() == msg(0)
    dq.close()


# -- put_many: the batched write path (one pwrite per data file) ---------------

@pytest.mark.parametrize("max_bytes", [68, 100, 50, 1000])
def test_put_many_writes_the_same_bytes_as_put(tmp_path, max_bytes):
    """Same files, roll points and positions as one put per record."""
    payloads = [msg(i, 4 + (i * 13) % 80) for i in range(40)] + [msg(99, 200)]
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    one = new(tmp_path / "one", max_bytes=max_bytes)
    for p in payloads:
        one.put(p)
    many = new(tmp_path / "many", max_bytes=max_bytes)
    many.put_many(payloads[:7])
    many.put_many(payloads[7:])
    assert (many.write_file_num, many.write_pos, many.depth) == (one.write_file_num, one.write_pos, one.depth)
    for num in range(one.write_file_num + 1):
        with open(data_file(tmp_path / "one", num), "rb") as a, open(data_file(tmp_path / "many", num), "rb") as b:
            assert a.read() == b.read()
    assert many.read_many(100) == payloads
    one.close()
    many.close()


def test_put_many_size_check_writes_nothing(tmp_path):
    dq = new(tmp_path)
    with pytest.raises(ValueError):
        dq.put_many([msg(0), b"x" * (MAX + 1)])
    assert dq.depth == 0 and dq.write_pos == 0


def test_put_many_counts_records_for_sync_every(tmp_path):
    dq = new(tmp_path, sync_every=3)
    dq.put_many([msg(0), msg(1)])
    assert not os.path.exists(meta_file(tmp_path)) and dq.needs_sync
    dq.put_many([msg(2)])
    assert read_meta(tmp_path) == "3\n0,0\n0,102\n"
    dq.close()


def test_put_many_failure_reports_how_many_were_stored(tmp_path):
    """A write that fails after a roll keeps the records of the earlier file."""
    dq = new(tmp_path, max_bytes=68)
    real_open = dq._open_write_file
    calls = []

    def failing_second_file():
        calls.append(dq.write_file_num)
        if dq.write_file_num == 1:
            raise OSError(28, "No space left on device")
        return real_open()

    dq._open_write_file = failing_second_file
    with pytest.raises(BackendFull) as info:
        dq.put_many([msg(i) for i in range(5)])
    assert info.value.stored == 2
    assert dq.depth == 2
    dq._open_write_file = real_open
    assert dq.read_many(10) == [msg(0), msg(1)]
    dq.close()


@pytest.mark.parametrize("n", [1, 3])
def test_held_reads_one_at_a_time_match_batched_reads_across_files_and_the_tail(tmp_path, n):
    """A RDY 1 worker's reads (``read_held(1)``, served from the read-ahead
    buffer) and batched ones return the same records in order, across file
    rolls and while the reader catches up with the writer; once each is
    released the files read are removed and the depth is 0."""
    dq = new(tmp_path, max_bytes=300)  # a few records per file
    sent = [msg(i, body_len=4 + (i * 37) % 90) for i in range(120)]
    got = []
    for chunk in range(0, len(sent), 20):
        dq.put_many(sent[chunk:chunk + 20])
        while True:  # read up to the writer: the last records of the write file come from its tail
            records, token = dq.read_held(n)
            if not records:
                break
            got += records
            assert dq.depth == min(chunk + 20, len(sent)) - len(got)
            for _ in records:
                dq.release(token)
    assert [bytes(r) for r in got] == sent
    assert dq.depth == 0
    dq.sync()
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".dat") and "meta" not in p.name)
    assert left == [os.path.basename(data_file(tmp_path, dq.write_file_num))]
    dq.close()
