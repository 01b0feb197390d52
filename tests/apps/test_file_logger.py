"""FileLogger (nsq_to_file's file side) on real files, with a fake clock."""

from __future__ import annotations

import gzip
import os

import pytest

from nsq.apps.file_logger import FileLogger, FileLoggerOptions, compute_filename_format

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_filename_tokens():
    opts = FileLoggerOptions(filename_format="<TOPIC>/<HOST>.<PID><REV>.<DATETIME>.log", gzip=True)
    assert compute_filename_format(opts, "t", hostname="box.example.com", pid=42) == "t/box.42<REV>.<DATETIME>.log.gz"
    opts = FileLoggerOptions(host_identifier="<SHORT_HOST>-<HOSTNAME>")
    # no gzip / rotation / work dir: <REV> is dropped
    assert compute_filename_format(opts, "t", hostname="a.b") == "t.a-a.b.<DATETIME>.log"


def test_rev_required_when_rotating():
    for opts in (FileLoggerOptions(filename_format="<TOPIC>.log", gzip=True),
                 FileLoggerOptions(filename_format="<TOPIC>.log", rotate_size=10),
                 FileLoggerOptions(filename_format="<TOPIC>.log", rotate_interval=1),
                 FileLoggerOptions(filename_format="<TOPIC>.log", output_dir="/a", work_dir="/b")):
        with pytest.raises(ValueError, match="missing <REV>"):
            compute_filename_format(opts, "t")


def test_plain_file_appends(tmp_path):
    opts = FileLoggerOptions(output_dir=str(tmp_path), filename_format="<TOPIC>.log")
    for body in (b"one", b"two"):
        f = FileLogger(opts, "t", clock=Clock())
        assert f.needs_rotation()
        f.update_file()
        f.write(body)
        f.close()
    assert (tmp_path / "t.log").read_bytes() == b"one\ntwo\n"


def test_rotate_by_size_and_gzip_members(tmp_path):
    opts = FileLoggerOptions(output_dir=str(tmp_path), filename_format="<TOPIC><REV>.log", gzip=True, rotate_size=10)
    f = FileLogger(opts, "t", clock=Clock())
    written = []
    for i in range(10):
        if f.needs_rotation():
            f.update_file()
        body = b"message-%d" % i
        f.write(body)
        written.append(body)
        f.sync()  # a new gzip member after every sync
    f.close()
    names = sorted(os.listdir(tmp_path))
    # "message-N\n" is 10 bytes: a file rotates once it holds more than 10
    assert names[0] == "t-000000.log.gz" and len(names) == 5
    lines = []
    for name in names:
        with gzip.open(tmp_path / name) as g:
            lines += g.read().splitlines()
    assert lines == written


def test_rotate_by_interval_and_datetime(tmp_path):
    clock = Clock()
    opts = FileLoggerOptions(output_dir=str(tmp_path), filename_format="<TOPIC><REV>.<DATETIME>.log",
                             datetime_format="%Y%m%d%H%M", rotate_interval=60)
    f = FileLogger(opts, "t", clock=clock)
    f.update_file()
    f.write(b"a")
    clock.t += 30
    assert not f.needs_rotation()
    clock.t += 31
    assert f.needs_rotation()  # interval (and the minute changed: a new name)
    f.update_file()
    assert f.rev == 0  # a new <DATETIME> restarts revisions
    f.write(b"b")
    f.close()
    assert len(os.listdir(tmp_path)) == 2


def test_existing_files_bump_revision(tmp_path):
    opts = FileLoggerOptions(output_dir=str(tmp_path), filename_format="<TOPIC><REV>.log", gzip=True)
    (tmp_path / "t-000000.log.gz").write_bytes(b"keep")
    f = FileLogger(opts, "t", clock=Clock())
    f.update_file()
    f.write(b"x")
    f.close()
    assert (tmp_path / "t-000000.log.gz").read_bytes() == b"keep"
    assert gzip.decompress((tmp_path / "t-000001.log.gz").read_bytes()) == b"x\n"


def test_work_dir_moves_without_overwriting(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    opts = FileLoggerOptions(output_dir=str(out), work_dir=str(work), filename_format="<TOPIC>/x<REV>.log")
    f = FileLogger(opts, "t", clock=Clock())
    f.update_file()
    f.write(b"first")
    assert (work / "t" / "x-000000.log").exists()
    # a file with the same name appears in the output dir meanwhile
    (out / "t").mkdir(parents=True, exist_ok=True)
    (out / "t" / "x-000000.log").write_bytes(b"other\n")
    f.close()
    assert not os.listdir(work / "t")
    assert (out / "t" / "x-000000.log").read_bytes() == b"other\n"
    assert (out / "t" / "x-000001.log").read_bytes() == b"first\n"


def test_skip_empty_files_removes_empty(tmp_path):
    opts = FileLoggerOptions(output_dir=str(tmp_path), filename_format="<TOPIC>.log", skip_empty_files=True)
    f = FileLogger(opts, "t", clock=Clock())
    f.update_file()
    f.close()
    assert os.listdir(tmp_path) == []
