"""Archive topics to files: what ``nsq to-file`` runs (Go nsq_to_file v1.2).

One :class:`TopicArchiver` per topic: a Consumer whose handler only queues
the message (auto response disabled), and a router task that writes queued
messages to the topic's :class:`~nsq.apps.file_logger.FileLogger`. Written
messages are FINed only after the file is synced: every
``sync_interval`` s, when ``max_in_flight`` messages wait, when the
consumer is starved (it would get nothing more before answering), at a
rotation, and at stop. fsync runs in a worker thread so other topics keep
flowing. Nothing is FINed that is not on disk.

:class:`ToFile` starts archivers for ``--topic`` names, or discovers topics
from lookupd (``/topics``, filtered by ``--topic-pattern``, a regular
expression searched in the name) at start and every ``--topic-refresh``.
Stopping (SIGTERM/SIGINT) stops the consumers (CLS), writes and syncs what
arrived, FINs it, closes every file and moves it to the output dir.
SIGHUP closes (and moves) the current files; the next message opens new ones.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from typing import Any

from nsq.apps.file_logger import FileLogger, FileLoggerOptions
from nsq.client import Consumer, Message

__all__ = ["TopicArchiver", "ToFile"]

log = logging.getLogger("nsq.to_file")


class TopicArchiver:
    """Consume ``topic``/``channel`` into files.

    Args:
        topic, channel: names.
        opts: file options.
        consumer_args: keyword arguments for :class:`~nsq.client.Consumer`
            (addresses, ``lookupd_http_addresses``, ``identify``,
            ``max_in_flight`` ...).

    Raises:
        ValueError: a filename format without ``<REV>`` where it is needed.
    """

    def __init__(self, topic: str, channel: str, opts: FileLoggerOptions, consumer_args: dict[str, Any]) -> None:
        self.topic = topic
        self.opts = opts
        self.file = FileLogger(opts, topic)
        self.consumer = Consumer(topic, channel, self._handle, **consumer_args)
        self._queue: collections.deque[Message] = collections.deque()
        self._wake = asyncio.Event()
        self._closing = False
        self._exit = False
        self._hup = False
        self._task: asyncio.Task | None = None
        self.error: BaseException | None = None
        #: called with the exception if the router stops on a file error
        self.on_error: Any = None
        #: messages written and FINed
        self.written = 0
        self.rotations = 0

    def _handle(self, msg: Message) -> None:
        msg.disable_auto_response()
        self._queue.append(msg)
        self._wake.set()

    async def start(self) -> None:
        """Start the router and connect the consumer (raises what
        :meth:`Consumer.start` raises)."""
        self._task = asyncio.get_running_loop().create_task(self._router())
        await self.consumer.start()

    def hup(self) -> None:
        """Close the current file at the next turn (SIGHUP)."""
        self._hup = True
        self._wake.set()

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop consuming; sync and FIN what arrived; close and move the file."""
        self._closing = True
        self._wake.set()
        await self.consumer.close(timeout=timeout)
        self._exit = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def wait(self) -> None:
        """Wait until the router ends (after :meth:`stop`, or a file error)."""
        if self._task is not None:
            await self._task

    async def _router(self) -> None:
        try:
            await self._route()
        except Exception as exc:  # a file error: stop, as Go exits
            log.error("[%s] %s", self.topic, exc)
            self.error = exc
            self._closing = True
            if self.on_error is not None:
                self.on_error(exc)
            await self.consumer.close(timeout=1.0)

    async def _route(self) -> None:
        loop = asyncio.get_running_loop()
        file = self.file
        pending: list[Message] = []
        interval = self.opts.sync_interval
        next_tick = time.monotonic() + interval
        while True:
            if not self._queue and not self._exit and not self._hup:
                timeout = next_tick - time.monotonic()
                if timeout > 0:
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout)
                    except asyncio.TimeoutError:
                        pass
                self._wake.clear()
            sync = self._closing
            close_file = False
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + interval
                if file.needs_rotation():
                    if self.opts.skip_empty_files:
                        close_file = True
                    else:
                        self.rotations += 1
                        await self._sync(loop, pending)
                        file.update_file()
                sync = True
            if self._hup:
                self._hup = False
                sync = close_file = True
            queue = self._queue
            while queue:
                msg = queue.popleft()
                if file.needs_rotation():
                    if file.is_open:
                        self.rotations += 1
                    # what was written to the old file is synced (and FINed)
                    # before it is closed and moved
                    await self._sync(loop, pending)
                    file.update_file()
                file.write(msg.body)
                pending.append(msg)
                if len(pending) >= self.opts.max_in_flight:
                    sync = True
            if sync or (pending and self.consumer.is_starved()):
                await self._sync(loop, pending)
            if close_file:
                file.close()
            if self._exit and not self._queue:
                await self._sync(loop, pending)
                file.close()
                return

    async def _sync(self, loop: asyncio.AbstractEventLoop, pending: list[Message]) -> None:
        if not pending:
            return
        fd = self.file.flush_for_sync()
        if fd is not None:
            await loop.run_in_executor(None, _fsync, fd)
        for msg in pending:
            msg.finish()
        self.written += len(pending)
        log.debug("[%s] synced %d records to disk", self.topic, len(pending))
        pending.clear()


def _fsync(fd: int) -> None:
    import os

    os.fsync(fd)


class ToFile:
    """Archive ``topics`` (or the lookupd topics matching ``topic_pattern``).

    Args:
        topics: topic names; empty means discover them from lookupd.
        channel: channel to consume (``nsq_to_file`` by default in the CLI).
        opts: file options.
        consumer_args: Consumer keyword arguments shared by every topic.
        lookupd_http_addresses: for topic discovery (and the consumers).
        topic_pattern: regular expression a topic must match ("" = all).
        topic_refresh: seconds between lookupd ``/topics`` queries.
        lookupd_client: a LookupdHTTPClient (its timeouts are the
            ``--http-client-*`` flags).
    """

    def __init__(self, topics: list[str], channel: str, opts: FileLoggerOptions, consumer_args: dict[str, Any],
                 lookupd_http_addresses: list[str] | None = None, topic_pattern: str = "",
                 topic_refresh: float = 60.0, lookupd_client: Any = None) -> None:
        self.topics = list(topics)
        self.channel = channel
        self.opts = opts
        self.consumer_args = dict(consumer_args)
        self.lookupd = list(lookupd_http_addresses or [])
        self.pattern = re.compile(topic_pattern) if topic_pattern else None
        self.topic_refresh = topic_refresh
        self.lookupd_client = lookupd_client
        self.archivers: dict[str, TopicArchiver] = {}
        self._poll: asyncio.Task | None = None
        #: set when an archiver stopped on a file error
        self.failed_event = asyncio.Event()

    def allowed(self, topic: str) -> bool:
        """True if ``topic`` matches the pattern (Go's regexp.MatchString: a search)."""
        return self.pattern is None or self.pattern.search(topic) is not None

    async def add_topics(self, topics: list[str]) -> None:
        """Start archiving each new topic that matches the pattern."""
        for topic in topics:
            if topic in self.archivers:
                continue
            if not self.allowed(topic):
                pattern = self.pattern.pattern if self.pattern is not None else ""
                log.warning("skipping topic %s (doesn't match pattern %s)", topic, pattern)
                continue
            archiver = TopicArchiver(topic, self.channel, self.opts, self.consumer_args)
            archiver.on_error = lambda exc: self.failed_event.set()
            self.archivers[topic] = archiver
            log.info("archiving topic %s", topic)
            await archiver.start()

    async def discover(self) -> None:
        """Ask every lookupd for its topics once and add the new ones."""
        from nsq.client.lookupd import LookupdError

        results = await asyncio.gather(*(self.lookupd_client.topics(a) for a in self.lookupd),
                                       return_exceptions=True)
        names: dict[str, None] = {}
        for result in results:
            if isinstance(result, LookupdError):
                log.error("could not retrieve topic list: %s", result)
            elif isinstance(result, BaseException):
                raise result
            else:
                names.update(dict.fromkeys(result))
        await self.add_topics(sorted(names))

    async def start(self) -> None:
        """Start the given topics, or discover (now and every topic_refresh)."""
        await self.add_topics(self.topics)
        if not self.topics:
            await self.discover()
            self._poll = asyncio.get_running_loop().create_task(self._poll_topics())

    async def _poll_topics(self) -> None:
        while True:
            await asyncio.sleep(self.topic_refresh)
            try:
                await self.discover()
            except Exception:
                log.exception("topic discovery failed")

    def hup(self) -> None:
        """Close every current file (SIGHUP)."""
        for archiver in self.archivers.values():
            archiver.hup()

    async def stop(self) -> None:
        """Stop every archiver (sync, FIN, close and move files)."""
        if self._poll is not None:
            self._poll.cancel()
        await asyncio.gather(*(a.stop() for a in self.archivers.values()))

    def failed(self) -> BaseException | None:
        """The first file error an archiver stopped on, if any."""
        for archiver in self.archivers.values():
            if archiver.error is not None:
                return archiver.error
        return None
