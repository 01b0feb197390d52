"""The sync policy the data path's files share (``--sync-every``,
``--sync-timeout``): a disk queue, a deferred log and a topic log each call
:func:`after_writes` when they have written and :func:`fsync_dup` to fsync
in the disk thread (Go: go-diskqueue's ``ioLoop``, which syncs after
``syncEvery`` writes and on ``syncTimeout``).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

__all__ = ["AppendFile", "SyncedFile", "after_writes", "fsync_dup"]

log = logging.getLogger("nsq.nsqd")


class SyncedFile(Protocol):
    """What :func:`after_writes` needs of a file."""

    sync_every: int
    strict_hook: Any

    def sync(self) -> None:
        """fsync now (raises OSError)."""

    def sync_in_background(self) -> Future[None] | None:
        """fsync in the disk thread; its future, or None."""


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
              failed: Callable[[OSError], None], broken: Callable[[], bool] = lambda: False) -> Future[None]:
    """fsync a dup of ``fd`` in the disk thread (``background``, an
    executor's ``submit``): the file may be closed meanwhile. ``failed``
    runs in that thread with the error before the future fails with it; if
    ``broken()`` says an earlier fsync of the file failed, it fails at once
    (``EIO``) without a new fsync, whose success would mean nothing.

    Raises:
        OSError: no fd for the dup.
        RuntimeError: the executor has shut down (nothing submitted).
    """
    dup = os.dup(fd)

    def work() -> None:
        try:
            if broken():
                raise OSError(errno.EIO, "an earlier fsync of this file failed")
            os.fsync(dup)
        except OSError as exc:
            failed(exc)
            raise
        finally:
            os.close(dup)

    try:
        return background(work)
    except BaseException:  # not submitted (the disk thread has stopped): the dup is not leaked
        os.close(dup)
        raise


class AppendFile:
    """What a file written by appends keeps for the sync policy, and its
    syncs: the deferred log and the topic log derive from it (the disk
    queue keeps its own, as it writes its meta file with each sync).

    Attributes:
        sync_every: fsync after this many records (``--sync-every``; 1 =
            durable before the publish is answered).
        background: runs a callable in the owner's disk thread
            (``executor.submit``); None syncs inline.
        strict_hook: with ``sync_every == 1``, called after each write
            instead of an inline fsync: the owner syncs before answering.
    """

    #: names the file in log lines (``TOPIC(t)``, ``DEFERRED(t:c)``)
    subject = ""

    def __init__(self, sync_every: int) -> None:
        self.sync_every = max(1, sync_every)
        self.background: Callable[[Callable[[], None]], Future[None]] | None = None
        self.strict_hook: Callable[[Any], None] | None = None
        self._dirty = False
        self._writes_since_sync = 0
        #: which file the fd is (a subclass adds 1 when it starts a new one);
        #: once an fsync of a file failed, no later fsync of it counts: the
        #: kernel may have dropped its dirty pages and reports that once
        #: (PostgreSQL's "fsyncgate"), so what was written there since the
        #: last good fsync is lost, and so is anything written after it
        self._file_gen = 0
        self._failed_gen = -1
        #: a previous file's last writes were never synced (its fsync at a
        #: roll failed): the next sync fails, so nothing spanning it is acknowledged
        self._lost = False
        #: a background fsync was started since the last inline one: it
        #: may not have finished, so an inline sync must not count on it
        self._unconfirmed = False
        #: disk-thread fsyncs of files closed by a roll (:meth:`_sync_rolled`)
        #: that no sync has covered yet: the next sync fails if one failed
        self._rolled: list[Future[None]] = []

    def _sync_fd(self) -> int | None:
        """The open fd to fsync, or None."""
        raise NotImplementedError

    def _sync_failed(self, exc: OSError) -> None:
        """An fsync failed (a subclass may react: the topic log rolls)."""

    def _synced(self) -> None:
        self._dirty = False
        self._writes_since_sync = 0

    def _wrote(self, records: int) -> None:
        """``records`` were appended: a sync is due after ``sync_every``.

        Raises:
            OSError: an inline sync failed (the records are written).
        """
        self._dirty = True
        self._writes_since_sync += records
        if self._writes_since_sync >= self.sync_every:
            after_writes(self)

    @property
    def needs_sync(self) -> bool:
        """True if appended to since the last fsync."""
        return self._dirty

    def sync(self) -> None:
        """fsync now: everything written is durable when it returns, also
        what a background sync still in the disk thread covers.

        Raises:
            OSError: the fsync failed.
        """
        fd = self._sync_fd()
        rolled, self._rolled = self._rolled, []
        if self._lost or any(map(_failed, rolled)):  # waits for a rolled file's fsync still running
            self._lost = False
            raise OSError(errno.EIO, "the writes before a roll were not synced")
        if fd is not None and (self._dirty or self._unconfirmed):
            if self._failed_gen == self._file_gen:
                raise OSError(errno.EIO, "an earlier fsync of this file failed")
            try:
                os.fsync(fd)
            except OSError as exc:
                self._failed_gen = self._file_gen
                self._sync_failed(exc)
                raise
        self._unconfirmed = False
        self._synced()

    def sync_in_background(self) -> Future[None] | None:
        """fsync a dup of the file in the disk thread (inline without one).

        Returns:
            The disk thread's future (it fails with the error of a failed
            fsync, which is logged and leaves the file owing a sync), or
            None (nothing to do, or done inline).
        """
        fd = self._sync_fd()
        if fd is None or not self._dirty:
            return None
        if self.background is None:
            self.sync()
            return None
        self._synced()
        self._unconfirmed = True
        gen = self._file_gen
        lost, self._lost = self._lost, False
        rolled, self._rolled = self._rolled, []  # done when this job runs: one disk thread, in order

        def failed(exc: OSError) -> None:
            self._dirty = True
            self._failed_gen = gen
            self._sync_failed(exc)
            log.error("%s: failed to sync - %s", self.subject, exc)

        return fsync_dup(fd, self.background, failed,
                         lambda: lost or self._failed_gen == gen or any(map(_failed, rolled)))

    def _sync_rolled(self, fd: int) -> Future[None]:
        """fsync ``fd``, the file a roll is closing, in the disk thread
        (inline without one), so the event loop does not wait for a whole
        file's writeback (up to ``--max-bytes-per-file``; Go's diskqueue
        syncs it in its own goroutine, ``ioLoop``). A failure is logged,
        and the next sync fails.

        Returns:
            Its future (``fd`` may be closed at once).
        """
        def failed(exc: OSError) -> None:
            log.error("%s: failed to sync a full segment - %s", self.subject, exc)

        if self.background is not None:
            try:
                fut = fsync_dup(fd, self.background, failed)
            except (OSError, RuntimeError):  # no fd for the dup, or the disk thread has stopped: inline
                pass
            else:
                self._rolled.append(fut)
                return fut
        fut = Future()
        try:
            os.fsync(fd)
        except OSError as exc:
            failed(exc)
            self._lost = True
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        return fut


def _failed(fut: Future[None]) -> bool:
    """True if a disk-thread fsync failed or never ran (waits for it)."""
    return fut.cancelled() or fut.exception() is not None
