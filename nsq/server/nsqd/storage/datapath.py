"""The data path of an nsqd: its lock, its disk queues and deferred logs,
the disk thread that fsyncs them, ``--sync-every=1``'s durability barrier
(a lone publisher's fsync on the loop, a group commit in the disk thread),
and what keeps a full disk from losing anything (the exit reserve, the
health probe).

Go keeps these in nsqd/nsqd.go (``New``'s dirlock, ``PersistMetadata``)
and in each go-diskqueue's own goroutine; here one object owns them and the
daemon (:class:`~nsq.server.nsqd.nsqd.NSQD`) delegates to it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, Union

from nsq._internal.dirlock import DirLock
from nsq.protocol.message import MIN_MESSAGE_LENGTH
from nsq.server.nsqd.storage.backend import BackendQueue, DiscardBackend, NoDiskBackend, put_overflow

if TYPE_CHECKING:
    from nsq.server.nsqd.storage.deferredlog import DeferredLog
    from nsq.server.nsqd.storage.diskqueue import DiskQueue
    from nsq.server.nsqd.options import NSQDOptions
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["DataPath", "Synced"]

log = logging.getLogger("nsq.nsqd")


class Synced(Protocol):
    """A file the data path fsyncs: a :class:`~nsq.server.nsqd.storage.diskqueue.DiskQueue`,
    a :class:`~nsq.server.nsqd.storage.deferredlog.DeferredLog` or a
    :class:`~nsq.server.nsqd.storage.topiclog.TopicLog`."""

    @property
    def needs_sync(self) -> bool:
        """Written since its last sync."""

    def sync_in_background(self) -> Future[None] | None:
        """fsync in the disk thread; its future, or None (nothing owed, or done inline)."""

    def sync(self) -> None:
        """fsync now, on the caller's thread (raises OSError)."""


#: what :attr:`DataPath.queues` holds
AnySynced = Union["DiskQueue", "DeferredLog", "TopicLog"]


class DataPath:
    """Everything nsqd keeps in ``--data-path`` ("" = memory only).

    Args:
        path: the directory ("" for an embedded memory-only nsqd).
        options: the daemon's :class:`~nsq.server.nsqd.options.NSQDOptions`.
        set_health: the daemon's ``set_health`` (error text, or None = OK).
        healthy: returns True while the daemon reports OK.

    Attributes:
        queues: open disk queues and deferred logs (synced every
            ``--sync-timeout``).
    """

    def __init__(self, path: str, options: NSQDOptions, set_health: Callable[[str | None], None],
                 healthy: Callable[[], bool]) -> None:
        self.path = path
        self.options = options
        self._set_health = set_health
        self._healthy = healthy
        self.queues: set[AnySynced] = set()
        #: queues written under --sync-every=1 and not synced yet: truthy
        #: while an fsync is owed (the same set for the daemon's life, so a
        #: connection may hold it and test it per command)
        self.owed: set[Synced] = set()
        #: group commit: the queues with a disk-thread sync running, and per queue the
        #: sync the publishes that wrote meanwhile wait for (started when the running one ends)
        self._syncing: set[Synced] = set()
        self._grouped: dict[Synced, asyncio.Future[None]] = {}
        #: the syncs owed in this loop turn while no disk-thread sync ran: they run at the turn's end
        #: (:meth:`_sync_turn`), the future their publishers wait for, and how many publishers wait
        self._turn: list[Synced] = []
        self._turn_done: asyncio.Future[None] | None = None
        self._turn_waiters = 0
        #: no sync on the loop before this time.monotonic() (one took longer than INLINE_SYNC_MAX)
        self._inline_after = 0.0
        self._thread: ThreadPoolExecutor | None = None
        self._lock: DirLock | None = None
        #: --storage=wal with a data path: durable topics keep a topic log
        self.wal = bool(path) and getattr(options, "storage", "diskqueue") == "wal"

    def open(self) -> None:
        """Lock the directory, make the exit reserve, start the disk thread.

        Raises:
            OSError: the directory is in use by another nsqd, or unusable.
        """
        if not self.path:
            return
        from nsq.server.nsqd.storage.walmigrate import check_data_path, mark_data_path

        self._lock = DirLock(self.path)
        self._lock.lock()
        try:
            check_data_path(self.path, self.wal)
        except ValueError:
            self.unlock()
            raise
        if self.wal:
            try:
                mark_data_path(self.path)
            except OSError as exc:  # a full disk: the topic logs still say it
                log.error("NSQ: failed to record --storage=wal in the data path - %s", exc)
        self.make_reserve()
        # one thread for every fsync, so the event loop never waits on the disk
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsqd-disk")

    def close(self) -> None:
        """Wait for the disk thread's work, release the lock (idempotent)."""
        self.queues.clear()
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        self.unlock()

    def unlock(self) -> None:
        """Release the directory lock (a failed start)."""
        if self._lock is not None:
            self._lock.unlock()
            self._lock = None

    # -- queues --------------------------------------------------------------------

    def make_backend(self, name: str, ephemeral: bool) -> BackendQueue:
        """The overflow backend for a topic (``name``) or channel (``topic:channel``).

        Ephemeral: discard. Durable with a ``data_path``: a go-diskqueue
        format :class:`~nsq.server.nsqd.storage.diskqueue.DiskQueue`. Durable without
        one (embedded, memory only): refuse overflow.
        """
        if ephemeral:
            return DiscardBackend(name, self.options.mem_queue_size)
        if not self.path:
            return NoDiskBackend()
        from nsq.server.nsqd.storage.diskqueue import DiskQueue

        opts = self.options
        dq = DiskQueue(
            name,
            self.path,
            max_bytes_per_file=opts.max_bytes_per_file,
            min_msg_size=MIN_MESSAGE_LENGTH,
            max_msg_size=opts.max_msg_size + MIN_MESSAGE_LENGTH,
            sync_every=opts.sync_every,
            sync_timeout=opts.sync_timeout,
        )
        if self._thread is not None:
            dq.background = self._thread.submit
            dq.strict_hook = self._strict_write
        self.queues.add(dq)
        return dq

    def make_topic_log(self, name: str, ephemeral: bool) -> TopicLog | None:
        """The :class:`~nsq.server.nsqd.storage.topiclog.TopicLog` of a durable
        topic with ``--storage=wal`` (``<data-path>/<topic>.wal/``), else None.

        Raises:
            OSError: the log directory cannot be created or read.
        """
        if ephemeral or not self.wal:
            return None
        from nsq.server.nsqd.storage.topiclog import TopicLog

        opts = self.options
        from nsq.server.nsqd.storage.walmigrate import take_over

        if opts.replica_of:  # a replica's copy (nsq/server/nsqd/storage/replicalog.py)
            from nsq.server.nsqd.storage.replicalog import ReplicaLog

            tlog: TopicLog = ReplicaLog(name, self.wal_dir(name), opts.max_bytes_per_file, opts.sync_every)
        else:
            tlog = TopicLog(name, self.wal_dir(name), opts.max_bytes_per_file, opts.sync_every)
        take_over(name, self.path, tlog, opts)  # messages queued in the disk-queue format, if any
        if self._thread is not None:
            tlog.background = self._thread.submit
            tlog.strict_hook = self._strict_write
        self.queues.add(tlog)
        return tlog

    def wal_dir(self, topic: str) -> str:
        """The directory of ``topic``'s log."""
        return os.path.join(self.path, f"{topic}.wal")

    def write_files(self, files: list[tuple[str, bytes]], done: Callable[[list[bool]], None]) -> None:
        """Write each ``(path, content)`` atomically in the disk thread (inline
        without one), then call ``done`` on the event loop with which
        succeeded (checkpoints of topic-log channels)."""
        from nsq.server.nsqd.storage.atomicfile import replace_atomically

        def work() -> list[bool]:
            ok = []
            for path, data in files:
                try:
                    replace_atomically(path, data)
                    ok.append(True)
                except OSError as exc:
                    log.error("failed to write %s - %s", path, exc)
                    ok.append(False)
            return ok

        if self._thread is None:
            done(work())
            return
        fut = asyncio.wrap_future(self._thread.submit(work))
        fut.add_done_callback(lambda f: None if f.cancelled() or f.exception() else done(f.result()))

    def make_deferred_log(self, name: str, ephemeral: bool) -> DeferredLog | None:
        """A :class:`~nsq.server.nsqd.storage.deferredlog.DeferredLog` for a durable
        channel ``topic:channel`` when there is a data path, else None."""
        if ephemeral or not self.path:
            return None
        from nsq.server.nsqd.storage.deferredlog import DeferredLog

        dlog = DeferredLog(name, self.path, self.options.sync_every)
        if self._thread is not None:
            dlog.background = self._thread.submit
            dlog.strict_hook = self._strict_write
        self.queues.add(dlog)
        return dlog

    # -- --sync-every=1: durable before OK -----------------------------------------

    def owe(self, queue: Synced) -> None:
        """``queue`` must be synced (or, for a leader's replication, copied)
        before the next publish is answered (:meth:`durability_barrier`)."""
        self._strict_write(queue)

    def _strict_write(self, queue: Synced) -> None:
        """A queue wrote under --sync-every=1 and must be synced before OK."""
        if not self.owed:
            asyncio.get_running_loop().call_soon(self._sync_strict_leftovers)
        self.owed.add(queue)

    def durability_barrier(self) -> asyncio.Future[Any] | None:
        """Start the syncs owed since the last call; None if none are owed.

        The caller (a PUB's connection, an HTTP /pub) answers only when the
        returned future is done; other clients go on meanwhile. The future
        fails with OSError if a sync failed.

        Group commit: while a queue's fsync runs in the disk thread, every
        publish that wrote to it meanwhile waits for one more sync, started
        when the running one ends, and covering all of them (one fsync for
        many publishers, as PostgreSQL's and Kafka's group commit). With
        none running, the syncs owed in this loop turn wait for its end
        (:meth:`_sync_turn`), and the publishers share them.
        """
        if not self.owed:
            return None
        futures: list[asyncio.Future[None]] = []
        for queue in self.owed:
            fut = self._sync_grouped(queue)
            if fut is not None and fut not in futures:
                futures.append(fut)
        self.owed.clear()
        if not futures:
            return None
        if self._turn_done is not None and self._turn_done in futures:
            self._turn_waiters += 1
        # one owed (the usual case): that future itself, without a gather's extra loop turn
        return futures[0] if len(futures) == 1 else asyncio.gather(*futures)

    def _sync_grouped(self, queue: Synced, turn: bool = True) -> asyncio.Future[Any] | None:
        if queue in self._syncing:
            shared = self._grouped.get(queue)
            if shared is None:
                shared = self._grouped[queue] = asyncio.get_running_loop().create_future()
            mine: asyncio.Future[Any] = shared.get_loop().create_future()  # a waiter's cancel stays its own
            shared.add_done_callback(lambda f: _copy_outcome(f, mine))
            return mine
        # a file the disk thread syncs (not a leader's replica acks, which have no ``background``)
        if turn and (self._turn_done is not None or not self._syncing) and getattr(queue, "background", None) is not None:
            if self._turn_done is None:
                self._turn_done = asyncio.get_running_loop().create_future()
                self._turn_done.get_loop().call_soon(self._sync_turn)
            if queue not in self._turn:
                self._turn.append(queue)
            return self._turn_done
        return self._thread_sync(queue)

    #: an fsync on the loop longer than this (s) sends the next ones to the
    #: disk thread for INLINE_SYNC_PAUSE (s)
    INLINE_SYNC_MAX = 0.002
    INLINE_SYNC_PAUSE = 10.0

    def _sync_turn(self) -> None:
        """The end of a loop turn that owed syncs while none ran in the disk thread.

        One publisher waits and the disk is fast: fsync here, on the loop,
        and spare it the disk thread's two hand-overs (85-130 us on a
        2-core VM, against 140-450 us for the fsync itself). Several
        publishers, or an fsync that took over :attr:`INLINE_SYNC_MAX`
        lately: the disk thread, as one group commit, while the loop reads
        and writes the next ones (Go syncs in each disk queue's goroutine,
        go-diskqueue ``ioLoop``).
        """
        queues, self._turn = self._turn, []
        done, self._turn_done = self._turn_done, None
        waiters, self._turn_waiters = self._turn_waiters, 0
        if done is None or done.done():
            return
        if waiters <= 1 and not self._syncing and time.monotonic() >= self._inline_after:
            failure: OSError | None = None
            started = time.monotonic()
            for queue in queues:
                try:
                    queue.sync()
                except OSError as exc:
                    log.error("%r: failed to sync - %s", queue, exc)
                    failure = failure or exc
            ended = time.monotonic()
            if ended - started > self.INLINE_SYNC_MAX:  # a slow disk: the loop must not wait for it
                self._inline_after = ended + self.INLINE_SYNC_PAUSE
            if failure is not None:
                done.set_exception(failure)
            else:
                done.set_result(None)
            return
        futures: list[asyncio.Future[Any]] = []
        try:
            for queue in queues:
                fut = self._sync_grouped(queue, turn=False)
                if fut is not None:
                    futures.append(fut)
        except (OSError, RuntimeError) as exc:
            done.set_exception(exc)
            return
        if not futures:
            done.set_result(None)
            return
        both = futures[0] if len(futures) == 1 else asyncio.gather(*futures)
        both.add_done_callback(lambda f: _copy_outcome(f, done))

    def _thread_sync(self, queue: Synced) -> asyncio.Future[Any] | None:
        """Start ``queue``'s sync in the disk thread (noted in the group commit's
        running set); its future, or None when nothing was owed."""
        fut = queue.sync_in_background()
        if fut is None:
            return None
        if not isinstance(fut, Future):  # not a disk-thread job (a leader's replica acks): not grouped
            return fut
        running = asyncio.wrap_future(fut)
        self._syncing.add(queue)
        running.add_done_callback(lambda _f: self._sync_done(queue))
        return running

    def _sync_done(self, queue: Synced) -> None:
        """A queue's disk-thread sync ended: start the one its later publishes wait for."""
        self._syncing.discard(queue)
        shared = self._grouped.pop(queue, None)
        if shared is None:
            return
        try:
            nxt = self._thread_sync(queue)
        except OSError as exc:
            shared.set_exception(exc)
            return
        if nxt is None:
            shared.set_result(None)
        else:
            nxt.add_done_callback(lambda f: _copy_outcome(f, shared))

    def _sync_strict_leftovers(self) -> None:
        """Writes no publisher waits for (timeouts, requeues): sync them too."""
        barrier = self.durability_barrier()
        if barrier is not None:
            barrier.add_done_callback(_log_sync_failure)

    def forget_backend(self, backend: Any) -> None:
        """Stop syncing a backend that was closed or deleted."""
        self.queues.discard(backend)

    # -- syncing -----------------------------------------------------------------

    def sync_queues(self) -> None:
        """fsync every disk queue written since its last sync (--sync-timeout)."""
        for dq in list(self.queues):
            if dq.needs_sync:
                try:
                    dq.sync_in_background()
                except OSError as exc:
                    self._set_health(f"failed to sync disk queue - {exc}")

    # -- the exit reserve and the health probe ------------------------------------

    #: bytes set aside in the data path (at most 1/8 of the free space) for
    #: what must be written at exit when the disk has filled up
    RESERVE_BYTES = 4 << 20
    RESERVE_FILE = "nsqd.reserve"

    def make_reserve(self) -> None:
        """Create ``nsqd.reserve`` (zeros, real blocks) unless it exists.

        At exit on a full disk it is deleted to make room for the messages
        held in memory (in flight, requeued) and for ``nsqd.dat``.
        """
        path = os.path.join(self.path, self.RESERVE_FILE)
        try:
            if os.path.exists(path):
                return
            st = os.statvfs(self.path)
            size = min(self.RESERVE_BYTES, st.f_bavail * st.f_frsize // 8)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                chunk = bytes(1 << 16)
                done = 0
                while done < size:
                    done += os.write(fd, chunk[:size - done])
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if self._healthy():
                log.warning("failed to create %s - %s", path, exc)
            try:
                os.remove(path)
            except OSError:
                pass

    #: bytes written (then deleted) to test whether the data path takes writes
    PROBE_BYTES = 64 << 10

    def probe(self) -> None:
        """While unhealthy: if the data path takes a write again, report OK
        (so /ping recovers even when no publish needs the disk; the queues
        retry their writes at the next one) and make the reserve whole."""
        path = os.path.join(self.path, "nsqd.probe")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                if os.write(fd, bytes(self.PROBE_BYTES)) < self.PROBE_BYTES:
                    return  # nearly full
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            return
        finally:
            try:
                os.remove(path)
            except OSError:
                pass
        self.make_reserve()
        for queue in list(self.queues):
            if hasattr(queue, "error") and queue.error is not None:  # a deferred log keeps no error
                queue.error = None
        log.info("NSQ: data path takes writes again")
        self._set_health(None)

    def release_reserve(self) -> bool:
        """Delete ``nsqd.reserve`` to make room on a full disk; True if it existed."""
        if not self.path:
            return False
        path = os.path.join(self.path, self.RESERVE_FILE)
        try:
            os.remove(path)
        except OSError:
            return False
        log.warning("disk full: released %s to write what is in memory", path)
        return True

    def write_at_exit(self, backend: BackendQueue, records: list[bytes], subject: str) -> int:
        """Write ``records`` (messages held in memory) to ``backend`` at exit.

        On a full disk the reserve is released and the write retried; what
        still cannot be written is logged with its count. Never raises.

        Returns:
            How many of ``records`` (the first ones) were written.
        """
        stored = put_overflow(backend, records, self._set_health)
        if stored < len(records) and self.release_reserve():
            stored += put_overflow(backend, records[stored:], self._set_health)
        if stored < len(records):
            log.error("%s: %d messages could not be written at exit - %s",
                      subject, len(records) - stored, backend.error or "write failed")
        return stored


def _log_sync_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("failed to sync - %s", fut.exception())


def _copy_outcome(src: asyncio.Future[Any], dst: asyncio.Future[Any]) -> None:
    """``dst`` ends as ``src`` did (unless it is done already)."""
    if dst.done():
        return
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())  # type: ignore[arg-type]
    else:
        dst.set_result(src.result())
