"""Whole-file writes that survive a crash and a full disk: the metadata
files nsqd rewrites (``nsqd.dat``, disk-queue meta files, the compacted
deferred log).

The new content goes to ``<path>.<random>.tmp`` in the same directory, is
fsynced and renamed over ``path`` (as Go nsqd's ``writeSyncFile`` +
``os.Rename`` in nsqd/nsqd.go ``PersistMetadata`` and go-diskqueue's
``persistMetaData``), and the directory is fsynced, so the new name
survives a power cut (Go never fsyncs the directory: after a power cut its
rename may be gone). If any step fails (``ENOSPC`` on a full disk, ``EIO``)
the temp file is removed and the old file is left whole.
"""

from __future__ import annotations

import errno
import os
import random

__all__ = ["write_all", "replace_atomically", "fsync_dir", "NO_SPACE"]

#: errnos of a disk with no room left (a new file cannot be written)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``write`` until all of ``data`` is written at the fd's position.

    Raises:
        OSError: the write failed (``ENOSPC``, ``EIO`` ...).
    """
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]


def fsync_dir(path: str) -> None:
    """fsync the directory ``path`` ("" is the current one): the entries
    created, renamed or removed in it so far survive a power cut.

    Raises:
        OSError: the directory could not be opened or synced.
    """
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: str, data: bytes) -> None:
    """Make ``path`` hold ``data`` (bytes), all or nothing, durably: the
    file and then its directory are fsynced.

    Raises:
        OSError: it could not be written, or the directory could not be
            synced (``path`` may then hold the new content, but it is not
            known to survive a power cut); on a failed write ``path`` is as
            it was and no temp file is left behind.
    """
    tmp = f"{path}.{random.getrandbits(62)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(path))
