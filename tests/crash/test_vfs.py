"""The recorder and the model of what a power cut keeps (tests/crash/vfs.py, states.py)."""

from __future__ import annotations

import errno
import os
import random
import shutil

import pytest

from .states import build, variants
from .vfs import Model, Recorder


def _states(rec: Recorder) -> dict[str, dict[str, bytes | None]]:
    model = Model(rec.initial)
    for op in rec.ops:
        model.apply(op)
    return {c[0]: build(model, c) for c in variants(model, random.Random(0))}


def test_new_file_needs_its_directory_fsynced(tmp_path):
    with Recorder(str(tmp_path)) as rec:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"hello")
        os.fsync(fd)
        os.close(fd)
    states = _states(rec)
    assert states["synced"] == {}  # the entry is not durable, however synced the content
    assert states["kept"] == {"f": b"hello"}
    with Recorder(str(tmp_path)) as rec:
        dfd = os.open(tmp_path, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    assert _states(rec)["synced"] == {"f": b"hello"}


def test_unsynced_write_torn_at_a_sector(tmp_path):
    (tmp_path / "f").write_bytes(b"a" * 100)
    with Recorder(str(tmp_path)) as rec:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"b" * 1000)  # bytes 100 .. 1100: sectors cut at 512 and 1024
        os.close(fd)
    model = Model(rec.initial)
    for op in rec.ops:
        model.apply(op)
    got = {(c[0], tuple(c[1].values())[0] if c[1] else None): build(model, c)["f"] for c in variants(model, random.Random(0))}
    assert got[("synced", None)] == b"a" * 100
    assert got[("kept", None)] == b"a" * 100 + b"b" * 1000
    assert got[("torn", ("T", 0, 512))] == b"a" * 100 + b"b" * 412
    assert got[("zero tail", ("Z", 0, 1024))] == b"a" * 100 + b"b" * 924 + bytes(76)
    assert got[("sector head lost", ("H", 0, 512))] == b"a" * 100 + bytes(412) + b"b" * 588


def test_rename_over_a_file_is_atomic_and_needs_the_directory(tmp_path):
    (tmp_path / "meta").write_bytes(b"old")
    with Recorder(str(tmp_path)) as rec:
        with open(tmp_path / "meta.tmp", "wb") as fh:
            fh.write(b"new")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_path / "meta.tmp", tmp_path / "meta")
    states = _states(rec)
    assert states["synced"] == {"meta": b"old"}
    assert states["kept"] == {"meta": b"new"}
    assert {s.get("meta") for s in states.values()} == {b"old", b"new"}  # never empty, never missing


def test_fsync_failure_drops_the_pages(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    fail = {"n": 0}

    def injector(call: str, path: str) -> int | None:
        if call == "fsync" and fail["n"] == 0:
            fail["n"] += 1
            return errno.EIO
        return None

    with Recorder(str(tmp_path), injector) as rec:
        fd = os.open(tmp_path / "f", os.O_WRONLY)
        os.write(fd, b"lost")
        with pytest.raises(OSError):
            os.fsync(fd)
        os.write(fd, b"kept")
        os.fsync(fd)  # "succeeds": the first write's pages were dropped (fsyncgate)
        os.close(fd)
    assert _states(rec)["synced"] == {"f": bytes(4) + b"kept"}
    assert (tmp_path / "f").read_bytes() == b"lostkept"  # what reads see meanwhile


def test_rmtree_mkdir_truncate_and_file_objects_are_recorded(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"x" * 10)
    with Recorder(str(tmp_path)) as rec:
        os.makedirs(tmp_path / "n" / "m")
        with open(tmp_path / "n" / "m" / "f", "w") as fh:
            fh.write("text")
        with open(tmp_path / "d" / "x", "r+b") as fh:
            fh.truncate(4)
        shutil.rmtree(tmp_path / "d")
    rec.verify_tree()
    assert rec.errors == []
    assert _states(rec)["kept"] == {"n": None, "n/m": None, "n/m/f": b"text"}
    assert _states(rec)["synced"] == {"d": None, "d/x": b"x" * 10}


def test_an_unrecorded_write_is_caught(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with Recorder(str(tmp_path)) as rec:
        pass
    (tmp_path / "f").write_bytes(b"behind the recorder's back")
    rec.verify_tree()
    assert rec.errors and "content differs" in rec.errors[0]
