"""Record the file operations the storage code makes, and model what a power cut keeps.

:class:`Recorder` patches the ``os`` functions nsqd's storage calls
(``open``, ``write``, ``pwrite``, ``writev``, ``pwritev``, ``fsync``,
``fdatasync``, ``sync``, ``ftruncate``, ``truncate``, ``rename``,
``replace``, ``remove``, ``unlink``, ``mkdir`` (so ``makedirs``),
``rmdir``, ``dup``, ``close``), ``shutil.rmtree``, and ``builtins.open`` /
``io.open`` for files opened for writing (their raw file is a
:class:`RecFileIO`, whose ``write`` and ``truncate`` are recorded however
the buffered layer above calls them). Only paths under the recorded root
and file descriptors opened on them are recorded; everything else passes
through. Calls from every thread are recorded under one lock, so the order
of the log is the order the file system saw (nsqd's disk thread fsyncs and
writes meta files while the event loop writes records).

The log is a list of tuples (node ids are the model's, not inode numbers):

- ``("create", dir, name, file)``, ``("mkdir", dir, name, newdir)``
- ``("write", file, offset, bytes)``, ``("trunc", file, size)``
- ``("fsync", node)`` (a file or a directory), ``("fsyncfail", node, errno)``
- ``("rename", srcdir, srcname, dstdir, dstname)``, ``("unlink", dir, name)``
  (a file or an empty directory)
- ``("fault", call, path, errno)``: an injected failure that changed nothing
- ``("mark", kind, ...)``: the workload's markers (a publish acknowledged, a
  FIN sent ...), see :mod:`.workloads`.

:class:`Model` replays it. A file has its content as of its last fsync
(``synced``) and the operations since (``pending``, in order); a directory
its entries as of its last fsync and the entry changes since. A new file, a
rename, an unlink or a mkdir is durable only once its directory is fsynced
(POSIX's rule, stricter than ext4's ordered mode). An fsync that failed
drops the file's pending operations from what can reach the disk (Linux
marks the pages clean after a writeback error: "fsyncgate"), while reads
still see them (``live``).
"""

from __future__ import annotations

import builtins
import errno as errno_mod
import io
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Recorder", "Model", "RecFileIO", "apply_ops", "describe_op", "SECTOR"]

#: the unit a torn write is cut at
SECTOR = 512

_orig: dict[str, Any] = {}


def _o(name: str) -> Any:
    """The original (unpatched) ``os`` function ``name``."""
    return _orig.get(name) or getattr(os, name)


# -- the model ---------------------------------------------------------------------------


def _apply_file_op(buf: bytearray, op: tuple) -> None:
    if op[0] == "w":
        _, off, data = op
        if off > len(buf):
            buf.extend(bytes(off - len(buf)))
        buf[off:off + len(data)] = data
    else:
        size = op[1]
        if size < len(buf):
            del buf[size:]
        else:
            buf.extend(bytes(size - len(buf)))


def apply_ops(base: bytes, ops: Iterable[tuple]) -> bytes:
    """``base`` with the file operations ``ops`` (``("w", offset, bytes)``,
    ``("t", size)``) applied in order."""
    buf = bytearray(base)
    for op in ops:
        _apply_file_op(buf, op)
    return bytes(buf)


def _apply_dir_op(entries: dict[str, int], op: tuple) -> None:
    kind = op[0]
    if kind == "set":
        entries[op[1]] = op[2]
    elif kind == "del":
        entries.pop(op[1], None)
    else:  # "mv": a rename inside one directory, atomic
        node = entries.pop(op[1], None)
        if node is not None:
            entries[op[2]] = node


def apply_dir_ops(base: dict[str, int], ops: Iterable[tuple]) -> dict[str, int]:
    out = dict(base)
    for op in ops:
        _apply_dir_op(out, op)
    return out


class FileState:
    """One file (an inode): what its last fsync made durable and what came after."""

    __slots__ = ("synced", "pending", "live", "lost")

    def __init__(self, data: bytes = b"") -> None:
        self.synced = bytes(data)
        #: ("w", offset, bytes) / ("t", size) since the last fsync, in order
        self.pending: list[tuple] = []
        #: what a read sees now
        self.live = bytearray(data)
        #: operations an fsync failure dropped (never reach the disk)
        self.lost = 0


class DirState:
    """One directory: its entries as of its last fsync and the changes since."""

    __slots__ = ("synced", "pending", "live")

    def __init__(self, entries: dict[str, int] | None = None) -> None:
        self.synced: dict[str, int] = dict(entries or {})
        #: ("set", name, node) / ("del", name) / ("mv", old, new) since the last fsync
        self.pending: list[tuple] = []
        self.live: dict[str, int] = dict(entries or {})


ROOT = 0


class Model:
    """The file system under the recorded root, replayed from the log.

    Args:
        snapshot: ``{node: ("d", {name: node}) | ("f", bytes)}`` of the
            root (node 0) at the start, all of it durable.
    """

    def __init__(self, snapshot: dict[int, tuple]) -> None:
        self.files: dict[int, FileState] = {}
        self.dirs: dict[int, DirState] = {}
        for node, (kind, value) in snapshot.items():
            if kind == "d":
                self.dirs[node] = DirState(value)
            else:
                self.files[node] = FileState(value)
        if ROOT not in self.dirs:
            self.dirs[ROOT] = DirState()

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "write":
            _, fid, off, data = op
            f = self.files[fid]
            o = ("w", off, data)
            f.pending.append(o)
            _apply_file_op(f.live, o)
        elif kind == "trunc":
            _, fid, size = op
            f = self.files[fid]
            o = ("t", size)
            f.pending.append(o)
            _apply_file_op(f.live, o)
        elif kind == "fsync":
            node = op[1]
            if node in self.files:
                f = self.files[node]
                if f.pending:
                    f.synced = apply_ops(f.synced, f.pending)
                    f.pending = []
            else:
                d = self.dirs[node]
                if d.pending:
                    d.synced = apply_dir_ops(d.synced, d.pending)
                    d.pending = []
        elif kind == "fsyncfail":
            node = op[1]
            if node in self.files:
                f = self.files[node]
                f.lost += len(f.pending)
                f.pending = []
        elif kind == "create":
            _, did, name, fid = op
            self.files[fid] = FileState()
            self._dir_op(did, ("set", name, fid))
        elif kind == "mkdir":
            _, did, name, ndid = op
            self.dirs[ndid] = DirState()
            self._dir_op(did, ("set", name, ndid))
        elif kind == "rename":
            _, sdid, sname, ddid, dname = op
            if sdid == ddid:
                self._dir_op(sdid, ("mv", sname, dname))
            else:
                node = self.dirs[sdid].live[sname]
                self._dir_op(sdid, ("del", sname))
                self._dir_op(ddid, ("set", dname, node))
        elif kind == "unlink":
            _, did, name = op
            self._dir_op(did, ("del", name))
        elif kind == "syncall":
            for node in list(self.files) + list(self.dirs):
                self.apply(("fsync", node))
        # "mark", "fault": no change to the file system

    def _dir_op(self, did: int, op: tuple) -> None:
        d = self.dirs[did]
        d.pending.append(op)
        _apply_dir_op(d.live, op)

    # -- looking things up -----------------------------------------------------------

    def lookup(self, parts: list[str]) -> tuple[int | None, str, int | None]:
        """``(parent dir, name, node or None)`` of a path below the root
        (its components), in the live namespace; parent None if a directory
        on the way is missing. The root itself: ``(None, "", 0)``."""
        if not parts:
            return None, "", ROOT
        did = ROOT
        for part in parts[:-1]:
            nxt = self.dirs[did].live.get(part) if did in self.dirs else None
            if nxt is None or nxt not in self.dirs:
                return None, parts[-1], None
            did = nxt
        return did, parts[-1], self.dirs[did].live.get(parts[-1])

    def live_paths(self, node: int = ROOT, prefix: str = "") -> dict[str, int]:
        """Every path of the live namespace (relative, ``/``-joined) -> node."""
        out = {}
        for name, child in self.dirs[node].live.items():
            path = f"{prefix}{name}"
            out[path] = child
            if child in self.dirs:
                out.update(self.live_paths(child, path + "/"))
        return out

    def path_of(self, node: int) -> str:
        """A live path of ``node`` (or, once unlinked, ``#<node>``)."""
        for path, n in self.live_paths().items():
            if n == node:
                return path
        return "." if node == ROOT else f"#{node}"

    def snapshot(self) -> dict[int, tuple]:
        """The live state as a snapshot (for a model that starts from here)."""
        out: dict[int, tuple] = {}
        for did, d in self.dirs.items():
            out[did] = ("d", dict(d.live))
        for fid, f in self.files.items():
            out[fid] = ("f", bytes(f.live))
        return out


def describe_op(op: tuple, names: Callable[[int], str] | None = None) -> str:
    """One line for an operation of the log."""
    nm = names or (lambda n: f"#{n}")
    kind = op[0]
    if kind == "write":
        return f"write {nm(op[1])} [{op[2]}, {op[2] + len(op[3])}) ({len(op[3])} bytes)"
    if kind == "trunc":
        return f"truncate {nm(op[1])} to {op[2]}"
    if kind == "fsync":
        return f"fsync {nm(op[1])}"
    if kind == "fsyncfail":
        return f"fsync {nm(op[1])} FAILED ({errno_mod.errorcode.get(op[2], op[2])})"
    if kind == "create":
        return f"create {_join(nm(op[1]), op[2])}"
    if kind == "mkdir":
        return f"mkdir {_join(nm(op[1]), op[2])}"
    if kind == "rename":
        return f"rename {_join(nm(op[1]), op[2])} -> {_join(nm(op[3]), op[4])}"
    if kind == "unlink":
        return f"unlink {_join(nm(op[1]), op[2])}"
    if kind == "fault":
        return f"{op[1]} {op[2]} FAILED ({errno_mod.errorcode.get(op[3], op[3])})"
    if kind == "mark":
        return "mark " + " ".join(map(str, op[1:]))
    return repr(op)


def _join(d: str, name: str) -> str:
    return name if d in (".", "") else f"{d}/{name}"


# -- the recorder --------------------------------------------------------------------------


class RecFileIO(io.FileIO):
    """The raw file under a Python file object opened for writing below
    the root: its writes and truncations are recorded."""

    _rec: Recorder

    def write(self, b: Any) -> int:  # type: ignore[override]
        rec = self._rec
        fd = self.fileno()
        with rec.lock:
            n = rec.before_write(fd)
            if n is None:
                return super().write(b)
            pos = rec.position(fd)
            written = super().write(b)
            if written:
                rec.after_write(fd, pos, bytes(memoryview(b).cast("B")[:written]))
            return written

    def truncate(self, size: int | None = None) -> int:
        rec = self._rec
        fd = self.fileno()
        with rec.lock:
            if size is None:
                size = self.tell()
            rec.check_fault("trunc", fd)
            out = super().truncate(size)
            rec.after_trunc(fd, size)
            return out

    def close(self) -> None:
        if not self.closed:
            self._rec.forget_fd(self.fileno())
        super().close()


class Recorder:
    """Records the file operations under ``root`` while active (a context manager).

    Args:
        root: the directory (it exists; its content at the start is the
            model's initial, durable state).
        injector: optional ``(call, path) -> errno or None``: the call
            (``open``, ``write``, ``fsync``, ``rename``, ``trunc``,
            ``unlink``, ``mkdir``) fails with that errno, changing nothing.

    Attributes:
        ops: the log.
        initial: the snapshot the log starts from.
        errors: where the model and the real file system disagreed (a
            call the recorder does not know about): the log is unusable.
        calls: how many calls of each kind were recorded (``open``,
            ``write``, ``fsync``, ``rename`` ...), faulted ones included.
    """

    _active: Recorder | None = None

    def __init__(self, root: str, injector: Callable[[str, str], int | None] | None = None) -> None:
        self.root = os.path.realpath(root)
        self.injector = injector
        self.lock = threading.RLock()
        self.ops: list[tuple] = []
        self.errors: list[str] = []
        self.calls: dict[str, int] = {}
        self.faults: list[tuple[str, str, int]] = []
        self._fds: dict[int, tuple[int, bool]] = {}  # fd -> (node, O_APPEND)
        self._local = threading.local()
        self._saved: dict[tuple[Any, str], Any] = {}
        self.initial = self._scan()
        self.model = Model(self.initial)
        self._next_id = max(self.initial) + 1

    # -- the initial state ---------------------------------------------------------------

    def _scan(self) -> dict[int, tuple]:
        snap: dict[int, tuple] = {}
        counter = [0]

        def walk(path: str) -> int:
            node = counter[0]
            counter[0] += 1
            entries: dict[str, int] = {}
            snap[node] = ("d", entries)
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isdir(full) and not os.path.islink(full):
                    entries[name] = walk(full)
                else:
                    fid = counter[0]
                    counter[0] += 1
                    with builtins.open(full, "rb") as fh:
                        snap[fid] = ("f", fh.read())
                    entries[name] = fid
            return node

        walk(self.root)
        return snap

    # -- markers -------------------------------------------------------------------------

    def mark(self, kind: str, *args: Any) -> None:
        """Append a workload marker to the log."""
        with self.lock:
            self.ops.append(("mark", kind, *args))

    # -- helpers for the patched calls ------------------------------------------------------

    def _parts(self, path: Any) -> list[str] | None:
        """The components of ``path`` below the root, or None if it is not below it."""
        try:
            p = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        p = os.path.abspath(p)
        if p == self.root:
            return []
        if not p.startswith(self.root + os.sep):
            return None
        return p[len(self.root) + 1:].split(os.sep)

    def _suspended(self) -> bool:
        return getattr(self._local, "off", False)

    def _count(self, call: str) -> None:
        self.calls[call] = self.calls.get(call, 0) + 1

    def _fault(self, call: str, path: str) -> None:
        self._count(call)
        if self.injector is None:
            return
        err = self.injector(call, path)
        if err:
            self.faults.append((call, path, err))
            if call != "fsync":
                self.ops.append(("fault", call, path, err))
            raise OSError(err, os.strerror(err), path)

    def _log(self, op: tuple) -> None:
        self.ops.append(op)
        self.model.apply(op)

    def _new_id(self) -> int:
        n = self._next_id
        self._next_id += 1
        return n

    def _name(self, node: int) -> str:
        return self.model.path_of(node)

    def before_write(self, fd: int) -> int | None:
        """The node ``fd`` writes to (after the fault check), or None if it is not recorded."""
        entry = self._fds.get(fd)
        if entry is None or self._suspended():
            return None
        self._fault("write", self._name(entry[0]))
        return entry[0]

    def position(self, fd: int) -> int:
        node, append = self._fds[fd]
        if append:
            return len(self.model.files[node].live)
        return _o("lseek")(fd, 0, os.SEEK_CUR)

    def after_write(self, fd: int, pos: int, data: bytes) -> None:
        self._log(("write", self._fds[fd][0], pos, data))

    def check_fault(self, call: str, fd: int) -> None:
        entry = self._fds.get(fd)
        if entry is not None and not self._suspended():
            self._fault(call, self._name(entry[0]))

    def after_trunc(self, fd: int, size: int) -> None:
        entry = self._fds.get(fd)
        if entry is not None and not self._suspended():
            self._log(("trunc", entry[0], size))

    def forget_fd(self, fd: int) -> None:
        with self.lock:
            self._fds.pop(fd, None)

    def _verify_file(self, node: int, fd: int) -> None:
        """The model's content of ``node`` is what ``fd`` reads."""
        try:
            rfd = _o("open")(f"/proc/self/fd/{fd}", os.O_RDONLY)
        except OSError:
            return
        try:
            want = self.model.files[node].live
            got = os.pread(rfd, len(want) + 1, 0)
        finally:
            _o("close")(rfd)
        if got != want:
            self.errors.append(f"{self._name(node)}: the model has {len(want)} bytes, the file {len(got)} "
                               f"(first difference at {_first_diff(got, want)}): a write was not recorded")

    def verify_tree(self) -> None:
        """Compare the whole live model with the real directory tree."""
        with self.lock:
            real: dict[str, bytes | None] = {}
            for dirpath, dirnames, filenames in os.walk(self.root):
                rel = os.path.relpath(dirpath, self.root)
                pre = "" if rel == "." else rel + "/"
                for d in dirnames:
                    real[pre + d] = None
                for f in filenames:
                    with builtins.open(os.path.join(dirpath, f), "rb") as fh:
                        real[pre + f] = fh.read()
            model: dict[str, bytes | None] = {}
            for path, node in self.model.live_paths().items():
                model[path] = None if node in self.model.dirs else bytes(self.model.files[node].live)
            for path in sorted(set(real) | set(model)):
                if path not in model:
                    self.errors.append(f"{path}: on disk, not in the model (an unrecorded create)")
                elif path not in real:
                    self.errors.append(f"{path}: in the model, not on disk (an unrecorded remove)")
                elif real[path] != model[path]:
                    self.errors.append(f"{path}: content differs from the model (an unrecorded write)")

    # -- the patched calls ---------------------------------------------------------------

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        parts = None if dir_fd is not None or self._suspended() else self._parts(path)
        if parts is None:
            return _orig["open"](path, flags, mode, dir_fd=dir_fd)
        with self.lock:
            did, name, node = self.model.lookup(parts)
            creating = node is None and bool(flags & os.O_CREAT)
            if creating or flags & (os.O_TRUNC | os.O_WRONLY | os.O_RDWR):
                self._fault("open", "/".join(parts))
            fd = _orig["open"](path, flags, mode)
            if node is None:
                if not creating or did is None:  # the model lost track: open succeeded anyway
                    self.errors.append(f"{'/'.join(parts)}: opened, but not in the model")
                    return fd
                node = self._new_id()
                self._log(("create", did, name, node))
            if node in self.model.files and flags & os.O_TRUNC and self.model.files[node].live:
                self._log(("trunc", node, 0))
            self._fds[fd] = (node, bool(flags & os.O_APPEND))
            return fd

    def _close(self, fd: int) -> None:
        with self.lock:
            self._fds.pop(fd, None)
        _orig["close"](fd)

    def _dup(self, fd: int) -> int:
        with self.lock:
            new = _orig["dup"](fd)
            if fd in self._fds:
                self._fds[new] = self._fds[fd]
            return new

    def _write(self, fd: int, data: Any) -> int:
        if fd not in self._fds:
            return _orig["write"](fd, data)
        with self.lock:
            if self.before_write(fd) is None:
                return _orig["write"](fd, data)
            pos = self.position(fd)
            n = _orig["write"](fd, data)
            if n > 0:
                self.after_write(fd, pos, bytes(memoryview(data).cast("B")[:n]))
            return n

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        if fd not in self._fds:
            return _orig["pwrite"](fd, data, offset)
        with self.lock:
            if self.before_write(fd) is None:
                return _orig["pwrite"](fd, data, offset)
            n = _orig["pwrite"](fd, data, offset)
            if n > 0:
                self.after_write(fd, offset, bytes(memoryview(data).cast("B")[:n]))
            return n

    def _writev(self, fd: int, buffers: Any) -> int:
        if fd not in self._fds:
            return _orig["writev"](fd, buffers)
        return self._write(fd, b"".join(bytes(b) for b in buffers))

    def _pwritev(self, fd: int, buffers: Any, offset: int, *flags: int) -> int:
        if fd not in self._fds:
            return _orig["pwritev"](fd, buffers, offset, *flags)
        return self._pwrite(fd, b"".join(bytes(b) for b in buffers), offset)

    def _fsync_common(self, call: str, fd: Any) -> None:
        fdn = fd if isinstance(fd, int) else fd.fileno()
        if fdn not in self._fds or self._suspended():
            _orig[call](fd)
            return
        with self.lock:
            node = self._fds[fdn][0]
            try:
                self._fault("fsync", self._name(node))
            except OSError as exc:
                self._log(("fsyncfail", node, exc.errno))
                raise
            _orig[call](fd)
            if node in self.model.files:
                self._verify_file(node, fdn)
            self._log(("fsync", node))

    def _fsync(self, fd: Any) -> None:
        self._fsync_common("fsync", fd)

    def _fdatasync(self, fd: Any) -> None:
        self._fsync_common("fdatasync", fd)

    def _sync(self) -> None:
        with self.lock:
            _orig["sync"]()
            self._log(("syncall",))

    def _ftruncate(self, fd: int, length: int) -> None:
        if fd not in self._fds or self._suspended():
            return _orig["ftruncate"](fd, length)
        with self.lock:
            self.check_fault("trunc", fd)
            _orig["ftruncate"](fd, length)
            self.after_trunc(fd, length)

    def _truncate(self, path: Any, length: int) -> None:
        if isinstance(path, int):
            return self._ftruncate(path, length)
        parts = None if self._suspended() else self._parts(path)
        if parts is None:
            return _orig["truncate"](path, length)
        with self.lock:
            _, _, node = self.model.lookup(parts)
            self._fault("trunc", "/".join(parts))
            _orig["truncate"](path, length)
            if node is not None:
                self._log(("trunc", node, length))

    def _rename_common(self, call: str, src: Any, dst: Any, **kw: Any) -> None:
        sp = None if kw or self._suspended() else self._parts(src)
        dp = None if kw or self._suspended() else self._parts(dst)
        if sp is None and dp is None:
            return _orig[call](src, dst, **kw)
        if sp is None or dp is None:
            self.errors.append(f"rename across the root's boundary: {src} -> {dst}")
            return _orig[call](src, dst, **kw)
        with self.lock:
            sdid, sname, node = self.model.lookup(sp)
            ddid, dname, _ = self.model.lookup(dp)
            self._fault("rename", "/".join(sp))
            _orig[call](src, dst)
            if node is None or sdid is None or ddid is None:
                self.errors.append(f"rename {src} -> {dst}: not in the model")
                return
            self._log(("rename", sdid, sname, ddid, dname))

    def _rename(self, src: Any, dst: Any, **kw: Any) -> None:
        self._rename_common("rename", src, dst, **kw)

    def _replace(self, src: Any, dst: Any, **kw: Any) -> None:
        self._rename_common("replace", src, dst, **kw)

    def _unlink_common(self, call: str, path: Any, **kw: Any) -> None:
        parts = None if kw or self._suspended() else self._parts(path)
        if parts is None:
            return _orig[call](path, **kw)
        with self.lock:
            did, name, node = self.model.lookup(parts)
            self._fault("unlink", "/".join(parts))
            _orig[call](path)
            if node is None or did is None:
                self.errors.append(f"{call} {path}: not in the model")
                return
            self._log(("unlink", did, name))

    def _remove(self, path: Any, **kw: Any) -> None:
        self._unlink_common("remove", path, **kw)

    def _unlink(self, path: Any, **kw: Any) -> None:
        self._unlink_common("unlink", path, **kw)

    def _rmdir(self, path: Any, **kw: Any) -> None:
        self._unlink_common("rmdir", path, **kw)

    def _mkdir(self, path: Any, mode: int = 0o777, **kw: Any) -> None:
        parts = None if kw or self._suspended() else self._parts(path)
        if parts is None:
            return _orig["mkdir"](path, mode, **kw)
        with self.lock:
            did, name, node = self.model.lookup(parts)
            if node is None:
                self._fault("mkdir", "/".join(parts))
            _orig["mkdir"](path, mode)
            if did is None:
                self.errors.append(f"mkdir {path}: parent not in the model")
                return
            self._log(("mkdir", did, name, self._new_id()))

    def _rmtree(self, path: Any, *args: Any, **kw: Any) -> None:
        parts = None if self._suspended() else self._parts(path)
        if parts is None:
            return _orig["rmtree"](path, *args, **kw)
        with self.lock:
            did, name, node = self.model.lookup(parts)
            self._local.off = True
            try:
                _orig["rmtree"](path, *args, **kw)
            finally:
                self._local.off = False
            if node is None or did is None:
                return
            # what rmtree removed: every entry, deepest first (as it unlinks them)
            self._unlink_tree(node)
            if not os.path.lexists(os.fsdecode(os.fspath(path))):
                self._log(("unlink", did, name))

    def _unlink_tree(self, did: int) -> None:
        if did not in self.model.dirs:
            return
        base = self.model.path_of(did)
        for name, child in sorted(self.model.dirs[did].live.items()):
            if child in self.model.dirs:
                self._unlink_tree(child)
            if not os.path.lexists(os.path.join(self.root, base, name)):
                self._log(("unlink", did, name))

    def _builtin_open(self, file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
                      errors: str | None = None, newline: str | None = None, closefd: bool = True,
                      opener: Any = None) -> Any:
        writes = any(c in mode for c in "wax+")
        parts = None if not writes or isinstance(file, int) or opener is not None or self._suspended() \
            else self._parts(file)
        if parts is None:
            return _orig["builtins.open"](file, mode, buffering, encoding, errors, newline, closefd, opener)
        raw_mode = "".join(c for c in mode if c in "rwax+")
        raw = RecFileIO.__new__(RecFileIO)
        raw._rec = self
        io.FileIO.__init__(raw, file, raw_mode, opener=lambda p, fl: self._open(p, fl, 0o666))
        if "a" in mode:
            with self.lock:
                entry = self._fds.get(raw.fileno())
                if entry is not None:
                    self._fds[raw.fileno()] = (entry[0], True)
            raw.seek(0, os.SEEK_END)
        binary = "b" in mode
        if buffering == 0 and binary:
            return raw
        size = io.DEFAULT_BUFFER_SIZE if buffering in (-1, 0, 1) else buffering
        if "+" in mode:
            buf: Any = io.BufferedRandom(raw, size)
        elif "r" in mode:
            buf = io.BufferedReader(raw, size)
        else:
            buf = io.BufferedWriter(raw, size)
        if binary:
            return buf
        text = io.TextIOWrapper(buf, encoding or "utf-8", errors, newline, line_buffering=buffering == 1)
        text.mode = mode  # type: ignore[misc]
        return text

    # -- activation --------------------------------------------------------------------

    _OS_CALLS = ("open", "close", "dup", "write", "pwrite", "writev", "pwritev", "fsync", "fdatasync", "sync",
                 "ftruncate", "truncate", "rename", "replace", "remove", "unlink", "rmdir", "mkdir")

    def __enter__(self) -> Recorder:
        if Recorder._active is not None:
            raise RuntimeError("another Recorder is active")
        for name in self._OS_CALLS:
            _orig.setdefault(name, getattr(os, name))
            setattr(os, name, getattr(self, f"_{name}"))
        _orig.setdefault("rmtree", shutil.rmtree)
        shutil.rmtree = self._rmtree  # type: ignore[assignment]
        _orig.setdefault("builtins.open", builtins.open)
        builtins.open = self._builtin_open  # type: ignore[assignment]
        io.open = self._builtin_open  # type: ignore[assignment]
        Recorder._active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in self._OS_CALLS:
            setattr(os, name, _orig[name])
        shutil.rmtree = _orig["rmtree"]
        builtins.open = _orig["builtins.open"]
        io.open = _orig["builtins.open"]
        Recorder._active = None

    def stop(self) -> None:
        """Deactivate (idempotent)."""
        if Recorder._active is self:
            self.__exit__()


def _first_diff(a: bytes | bytearray, b: bytes | bytearray) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))
