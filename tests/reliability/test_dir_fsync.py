"""A new file, directory or rename survives a power cut only once its
directory is fsynced: every one nsqd makes is, before anything that depends
on it is acknowledged (Go nsqd never fsyncs a directory)."""

from __future__ import annotations

import os
import socket

import pytest

from nsq.protocol import commands as c
from nsq.server.nsqd.storage.atomicfile import replace_atomically
from nsq.server.nsqd.storage.topiclog import TopicLog, encode_record


class Recorder:
    """Records, in order, the entries made in directories (mkdir, O_CREAT,
    rename) and the fsyncs of directories."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ops: list[tuple[str, str]] = []
        real_fsync, real_open, real_replace, real_mkdir = os.fsync, os.open, os.replace, os.mkdir

        def fsync(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            real_fsync(fd)
            if os.path.isdir(path):
                self.ops.append(("dirsync", path))

        def open_(path, flags, *args, **kw):
            new = bool(flags & os.O_CREAT) and not os.path.exists(path)
            fd = real_open(path, flags, *args, **kw)
            if new:
                self.ops.append(("create", os.path.abspath(path)))
            return fd

        def replace(src, dst, *args, **kw):
            real_replace(src, dst, *args, **kw)
            self.ops.append(("create", os.path.abspath(dst)))

        def mkdir(path, *args, **kw):
            real_mkdir(path, *args, **kw)
            self.ops.append(("create", os.path.abspath(path)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "mkdir", mkdir)

    def mark(self, what: str) -> None:
        self.ops.append(("mark", what))

    def undurable(self, until: str, under: str) -> list[str]:
        """Entries under ``under`` created before mark ``until`` with no
        fsync of their directory between their creation and the mark."""
        pending: dict[str, str] = {}
        for op, path in self.ops:
            if op == "mark" and path == until:
                break
            if op == "create" and path.startswith(under) and not path.endswith(".tmp"):
                pending[path] = os.path.dirname(path)
            elif op == "dirsync":
                pending = {p: d for p, d in pending.items() if d != path}
        return sorted(pending)


def test_replace_atomically_syncs_the_directory(tmp_path, monkeypatch):
    rec = Recorder(monkeypatch)
    replace_atomically(str(tmp_path / "nsqd.dat"), b"{}")
    rec.mark("written")
    assert rec.undurable("written", str(tmp_path)) == []


def test_a_new_topic_log_syncs_its_directories_before_the_first_append(tmp_path, monkeypatch):
    rec = Recorder(monkeypatch)
    tlog = TopicLog("t", str(tmp_path / "t.wal"), 1 << 20, 1)
    tlog.append([encode_record(b"0" * 16, b"body", 1, 0, 0)])
    tlog.sync()
    rec.mark("acknowledged")
    assert rec.undurable("acknowledged", str(tmp_path)) == []
    tlog.close()


@pytest.mark.parametrize("storage", ["wal", "diskqueue"])
async def test_a_publish_to_a_new_topic_is_answered_after_its_files_are_durable(tmp_path, monkeypatch, storage):
    from nsq.testing import start_nsqd

    rec = Recorder(monkeypatch)
    d = await start_nsqd(data_path=str(tmp_path), storage=storage, sync_every=1, mem_queue_size=0)
    try:
        import asyncio

        loop = asyncio.get_running_loop()

        def publish() -> bytes:
            with socket.create_connection(("127.0.0.1", d.tcp_port)) as s:
                s.sendall(b"  V2" + c.pub("fresh", b"hello"))
                return s.recv(64)

        d.get_topic("fresh").get_channel("ch")
        answer = await loop.run_in_executor(None, publish)
        rec.mark("OK")
        assert answer.endswith(b"OK")
        assert rec.undurable("OK", str(tmp_path)) == []
    finally:
        await d.stop()
