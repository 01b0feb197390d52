"""The sync policy the data path's files share (``--sync-every``,
``--sync-timeout``): a disk queue, a deferred log and a topic log each call
:func:`after_writes` when they have written and :func:`fsync_dup` to fsync
in the disk thread (Go: go-diskqueue's ``ioLoop``, which syncs after
``syncEvery`` writes and on ``syncTimeout``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

__all__ = ["SyncedFile", "after_writes", "fsync_dup"]


class SyncedFile(Protocol):
    """What :func:`after_writes` needs of a file."""

    sync_every: int
    strict_hook: Any

    def sync(self) -> None: ...

    def sync_in_background(self) -> Future[None] | None: ...


def after_writes(f: SyncedFile) -> None:
    """A sync is due (``--sync-every`` writes since the last one): in the
    disk thread when ``sync_every > 1``; with ``--sync-every=1`` through
    the owner's ``strict_hook`` (it syncs in the disk thread and holds the
    publisher's OK until then), or inline without an owner.

    Raises:
        OSError: an inline sync failed.
    """
    if f.sync_every > 1:
        f.sync_in_background()
    elif f.strict_hook is not None:
        f.strict_hook(f)
    else:
        f.sync()


def fsync_dup(fd: int, background: Callable[[Callable[[], None]], Future[None]],
              failed: Callable[[OSError], None]) -> Future[None]:
    """fsync a dup of ``fd`` in the disk thread (``background``, an
    executor's ``submit``): the file may be closed meanwhile. ``failed``
    runs in that thread with the error before the future fails with it."""
    dup = os.dup(fd)

    def work() -> None:
        try:
            os.fsync(dup)
        except OSError as exc:
            failed(exc)
            raise
        finally:
            os.close(dup)

    return background(work)
