"""After a failed fsync the kernel may have dropped the file's dirty pages
and reports the error once (PostgreSQL's "fsyncgate", 2018): a later fsync
of the same file succeeds without making those pages durable. So once an
fsync of a file fails, no later fsync of it may acknowledge anything: its
syncs keep failing until writes move to a new file."""

from __future__ import annotations

import errno
import os

import pytest

from nsq.protocol.message import MIN_MESSAGE_LENGTH, encode_message
from nsq.server.nsqd.storage.diskqueue import DiskQueue
from nsq.server.nsqd.storage.topiclog import TopicLog, encode_record


class FailOnce:
    """``os.fsync`` that fails once with EIO for the fds ``target()`` names."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.failed = 0
        real = os.fsync

        def fsync(fd: int) -> None:
            if self.armed and not os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
                self.armed = False
                self.failed += 1
                raise OSError(errno.EIO, "injected")
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def test_a_topic_log_never_trusts_a_segment_whose_fsync_failed(tmp_path, monkeypatch):
    fail = FailOnce(monkeypatch)
    tlog = TopicLog("t", str(tmp_path / "t.wal"), 1 << 20, 1000)
    tlog.append([encode_record(b"%016d" % 0, b"acked", 1, 0, 0)])
    tlog.sync()
    tlog.append([encode_record(b"%016d" % 1, b"lost?", 2, 0, 0)])
    fail.armed = True
    with pytest.raises(OSError):
        tlog.sync()
    assert tlog.synced == 1
    with pytest.raises(OSError):  # the same segment: its pages may be gone
        tlog.sync()
    assert tlog.synced == 1
    tlog.append([encode_record(b"%016d" % 2, b"after", 3, 0, 0)])  # a new segment
    assert len(list(tlog.segments())) == 2
    tlog.sync()
    assert tlog.synced == 3 and fail.failed == 1
    tlog.close()


def test_a_disk_queue_never_trusts_a_file_whose_fsync_failed(tmp_path, monkeypatch):
    fail = FailOnce(monkeypatch)
    dq = DiskQueue("q", str(tmp_path), max_bytes_per_file=1 << 20, min_msg_size=MIN_MESSAGE_LENGTH,
                   max_msg_size=1 << 20, sync_every=1000, sync_timeout=2.0)
    dq.put(encode_message(1, 0, b"%016d" % 0, b"acked"))
    dq.sync()
    dq.put(encode_message(2, 0, b"%016d" % 1, b"lost?"))
    fail.armed = True
    with pytest.raises(OSError):
        dq.sync()
    with pytest.raises(OSError):  # the same file: its pages may be gone
        dq.sync()
    dq.put(encode_message(3, 0, b"%016d" % 2, b"after"))  # rolls to a new file
    dq.sync()
    assert dq.write_file_num == 1 and fail.failed == 1
    dq.close()


def test_a_deferred_log_moves_to_a_new_file_after_a_failed_fsync(tmp_path, monkeypatch):
    from nsq.server.nsqd.storage.deferredlog import DeferredLog

    fail = FailOnce(monkeypatch)
    dlog = DeferredLog("t:c", str(tmp_path), 1000)
    dlog.add(10**18, 1, 0, b"%016d" % 0, b"first")
    dlog.sync()
    dlog.add(10**18, 2, 0, b"%016d" % 1, b"second")
    fail.armed = True
    with pytest.raises(OSError):
        dlog.sync()
    with pytest.raises(OSError):
        dlog.sync()
    dlog.add(10**18, 3, 0, b"%016d" % 2, b"third")  # rewrites the pending set to a new file first
    dlog.sync()
    dlog.close()
    again = DeferredLog("t:c", str(tmp_path), 1000)
    assert sorted(p[3] for p in again.pending.values()) == [b"first", b"second", b"third"]
    again.close()
