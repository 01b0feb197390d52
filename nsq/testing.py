"""NSQ daemons inside a test or another program, on free loopback ports.

The daemons are libraries (:class:`~nsq.server.nsqd.NSQD`,
:class:`~nsq.server.lookupd.NSQLookupd`); this module starts them with the
settings a test wants and stops them again:

- :func:`start_nsqd`, :func:`start_lookupd`: one daemon in the running
  event loop, its TCP and HTTP listeners on ``127.0.0.1`` port 0 (the
  kernel picks a free one; read ``tcp_address``/``http_address`` or
  ``tcp_port``/``http_port`` after the start);
- :class:`LocalCluster`: a lookupd and N nsqds registered with it, in the
  running loop; ``await cluster.start()`` returns once the lookupd lists
  every nsqd, so a consumer given ``lookupd_http_addresses`` finds them all;
- :class:`ThreadedCluster`: the same in a background thread with its own
  event loop, for synchronous code (a pynsq or a blocking consumer under
  test, a script): ``with ThreadedCluster(nsqds=1) as c: ...``.

Defaults differ from the ``nsq nsqd`` command's in what a test needs:
listeners on ``127.0.0.1:0`` (HTTPS too, used only with a TLS cert),
``broadcast_address`` ``127.0.0.1`` (what the nsqds announce to lookupd,
so discovery works where the hostname does not resolve), and no data path
(queues in memory only: a durable topic refuses publishes beyond
``mem_queue_size`` messages instead of writing them to disk; pass
``data_path=`` a directory for disk queues). Any other
:class:`~nsq.server.nsqd.NSQDOptions` or
:class:`~nsq.server.lookupd.LookupdOptions` field can be given as a
keyword argument (``mem_queue_size=100``, ``msg_timeout=2.0``: durations
in seconds).

Example (in an ``async def`` test)::

    from nsq.client import Consumer, Producer
    from nsq.testing import LocalCluster

    async with LocalCluster(nsqds=2) as cluster:
        for address in cluster.nsqd_tcp_addresses:
            async with Producer(address) as p:
                await p.publish("events", b"hello")
        await cluster.wait_registered(topic="events")  # the nsqds told the lookupd
        consumer = Consumer("events", "test", handle, max_in_flight=10,
                            lookupd_http_addresses=cluster.lookupd_http_addresses)

The pytest fixtures built on these are in :mod:`nsq.pytest_plugin`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from nsq.server.lookupd import NSQLookupd
    from nsq.server.nsqd import NSQD

__all__ = ["LocalCluster", "ThreadedCluster", "start_lookupd", "start_nsqd"]

#: where the test daemons listen and what the nsqds announce to lookupd
LOOPBACK = "127.0.0.1"

T = TypeVar("T")


def nsqd_options(**options: Any) -> Any:
    """:class:`~nsq.server.nsqd.NSQDOptions` with this module's defaults
    (loopback port 0 for TCP, HTTP and HTTPS, ``broadcast_address``
    127.0.0.1) under ``options``."""
    from nsq.server.nsqd import NSQDOptions

    for key in ("tcp_address", "http_address", "https_address"):
        options.setdefault(key, f"{LOOPBACK}:0")
    options.setdefault("broadcast_address", LOOPBACK)
    return NSQDOptions(**options)


def lookupd_options(**options: Any) -> Any:
    """:class:`~nsq.server.lookupd.LookupdOptions` with this module's
    defaults (loopback port 0, ``broadcast_address`` 127.0.0.1) under
    ``options``."""
    from nsq.server.lookupd import LookupdOptions

    for key in ("tcp_address", "http_address"):
        options.setdefault(key, f"{LOOPBACK}:0")
    options.setdefault("broadcast_address", LOOPBACK)
    return LookupdOptions(**options)


async def start_nsqd(**options: Any) -> NSQD:
    """Start an nsqd in the running loop (:func:`nsqd_options`); stop it
    with ``await nsqd.stop()``.

    Raises:
        OSError: an address cannot be bound.
        ValueError: an option that cannot work (e.g. a bad TLS setting).
    """
    from nsq.server.nsqd import NSQD

    d = NSQD(nsqd_options(**options))
    try:
        await d.start()
    except BaseException:
        await d.stop()
        raise
    return d


async def start_lookupd(**options: Any) -> NSQLookupd:
    """Start an nsqlookupd in the running loop (:func:`lookupd_options`);
    stop it with ``await lookupd.stop()``.

    Raises:
        OSError: an address cannot be bound.
    """
    from nsq.server.lookupd import NSQLookupd

    lk = NSQLookupd(lookupd_options(**options))
    await lk.start()
    return lk


class LocalCluster:
    """A lookupd and ``nsqds`` nsqds registered with it, in the running loop.

    Args:
        nsqds: how many nsqds :meth:`start` starts (more with :meth:`add_nsqd`).
        lookupd: start a lookupd (False: nsqds alone, registered nowhere).
        data_path: a directory: nsqd ``i`` (from 1) keeps its queues in
            ``<data_path>/nsqd-<i>`` (created); "" keeps them in memory.
        lookupd_options: fields of :class:`~nsq.server.lookupd.LookupdOptions`.
        **nsqd_options: fields of :class:`~nsq.server.nsqd.NSQDOptions` for
            every nsqd.

    Attributes:
        lookupd: the :class:`~nsq.server.lookupd.NSQLookupd` (None without one).
        nsqds: the nsqds (:class:`~nsq.server.nsqd.NSQD`), in start order.
    """

    def __init__(self, nsqds: int = 2, *, lookupd: bool = True, data_path: str = "",
                 lookupd_options: dict[str, Any] | None = None, **nsqd_options: Any) -> None:
        self.count = nsqds
        self.with_lookupd = lookupd
        self.data_path = data_path
        self.lookupd_settings = dict(lookupd_options or {})
        self.nsqd_settings = nsqd_options
        self.lookupd: NSQLookupd | None = None
        self.nsqds: list[NSQD] = []

    # -- addresses ---------------------------------------------------------------

    @property
    def lookupd_tcp_addresses(self) -> list[str]:
        """What an nsqd is given (``nsqlookupd_tcp_addresses``)."""
        return [self.lookupd.tcp_address] if self.lookupd else []

    @property
    def lookupd_http_addresses(self) -> list[str]:
        """What a consumer is given (``lookupd_http_addresses``)."""
        return [self.lookupd.http_address] if self.lookupd else []

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """Where producers publish and consumers connect without lookupd."""
        return [d.tcp_address for d in self.nsqds]

    @property
    def nsqd_http_addresses(self) -> list[str]:
        """The nsqds' HTTP APIs (``/pub``, ``/stats``)."""
        return [d.http_address for d in self.nsqds]

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, timeout: float = 5.0) -> LocalCluster:
        """Start the lookupd and the nsqds; return once the lookupd lists
        every nsqd (at most ``timeout`` seconds). On an error what was
        started is stopped again.

        Raises:
            OSError, ValueError: a daemon could not start.
            TimeoutError: an nsqd did not register in time.
        """
        try:
            if self.with_lookupd and self.lookupd is None:
                self.lookupd = await start_lookupd(**self.lookupd_settings)
            for _ in range(self.count - len(self.nsqds)):
                await self.add_nsqd(wait=False)
            await self.wait_registered(timeout)
        except BaseException:
            await self.stop()
            raise
        return self

    async def add_nsqd(self, wait: bool = True, timeout: float = 5.0, **options: Any) -> NSQD:
        """Start one more nsqd (the cluster's nsqd options, then ``options``),
        registered with the lookupd; with ``wait``, return once the lookupd
        lists it."""
        settings = {**self.nsqd_settings, **options}
        if self.lookupd is not None:
            settings.setdefault("nsqlookupd_tcp_addresses", self.lookupd_tcp_addresses)
        if self.data_path and "data_path" not in settings:
            path = os.path.join(self.data_path, f"nsqd-{len(self.nsqds) + 1}")
            os.makedirs(path, exist_ok=True)
            settings["data_path"] = path
        d = await start_nsqd(**settings)
        self.nsqds.append(d)
        if wait:
            await self.wait_registered(timeout)
        return d

    def registered(self, topic: str = "") -> int:
        """How many of the nsqds the lookupd lists: all that identified, or
        with ``topic`` those it lists for ``/lookup?topic=``."""
        if self.lookupd is None:
            return 0
        category = ("topic", topic, "") if topic else ("client", "", "")
        ports = {p.info.tcp_port for p in self.lookupd.db.find_producers(*category)}
        return sum(1 for d in self.nsqds if d.tcp_port in ports)

    async def wait_registered(self, timeout: float = 5.0, topic: str = "") -> None:
        """Wait until the lookupd lists every nsqd; with ``topic``, every
        nsqd that has the topic (an nsqd registers a new topic with the
        lookupd a moment after the first publish creates it: wait before a
        consumer looks the topic up, or it may find only some of them).
        Nothing to wait for without a lookupd.

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """
        if self.lookupd is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            want = sum(1 for d in self.nsqds if topic in d.topics) if topic else len(self.nsqds)
            if self.registered(topic) >= want:
                return
            if loop.time() > deadline:
                what = f"with topic {topic!r} " if topic else ""
                raise TimeoutError(f"{self.registered(topic)} of {want} nsqds {what}registered with "
                                   f"the lookupd within {timeout:g} s")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop the nsqds (newest first), then the lookupd."""
        while self.nsqds:
            await self.nsqds.pop().stop()
        if self.lookupd is not None:
            lookupd, self.lookupd = self.lookupd, None
            await lookupd.stop()

    async def __aenter__(self) -> LocalCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class ThreadedCluster:
    """A :class:`LocalCluster` in a background thread with its own event
    loop, for synchronous code: ``start()`` returns once it is up,
    ``stop()`` stops it and joins the thread. The arguments are
    :class:`LocalCluster`'s (default here: one nsqd and a lookupd).

    The daemons belong to the background loop: read their addresses from
    any thread, and run anything that touches a daemon there with
    :meth:`call` (``cluster.call(lambda: cluster.nsqds[0].topics)``) or
    :meth:`run` (a coroutine).

    Example::

        with ThreadedCluster(nsqds=1) as cluster:
            urllib.request.urlopen(f"http://{cluster.nsqd_http_address}/pub?topic=jobs", data=b"job 1")
            run_worker(lookupd_http_addresses=cluster.lookupd_http_addresses)
    """

    def __init__(self, nsqds: int = 1, **kwargs: Any) -> None:
        self.cluster = LocalCluster(nsqds, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- addresses (read from any thread) ----------------------------------------

    @property
    def lookupd_tcp_addresses(self) -> list[str]:
        return self.cluster.lookupd_tcp_addresses

    @property
    def lookupd_http_addresses(self) -> list[str]:
        return self.cluster.lookupd_http_addresses

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        return self.cluster.nsqd_tcp_addresses

    @property
    def nsqd_http_addresses(self) -> list[str]:
        return self.cluster.nsqd_http_addresses

    @property
    def nsqd_tcp_address(self) -> str:
        """The first nsqd's TCP address."""
        return self.cluster.nsqd_tcp_addresses[0]

    @property
    def nsqd_http_address(self) -> str:
        """The first nsqd's HTTP address."""
        return self.cluster.nsqd_http_addresses[0]

    @property
    def lookupd(self) -> NSQLookupd | None:
        return self.cluster.lookupd

    @property
    def nsqds(self) -> list[NSQD]:
        return self.cluster.nsqds

    # -- lifecycle ---------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> ThreadedCluster:
        """Start the loop's thread and the daemons in it; return once every
        nsqd is registered (at most ``timeout`` seconds).

        Raises:
            What :meth:`LocalCluster.start` raises (the thread is ended).
        """
        if self._thread is not None:
            raise RuntimeError("already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._serve, name="nsq-testing-cluster", daemon=True)
        self._thread.start()
        try:
            self.run(self.cluster.start(), timeout)
        except BaseException:
            self._end(timeout)
            raise
        return self

    def _serve(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        loop = self._loop
        try:
            loop.run_forever()
            # whatever is left (a task a daemon did not wait for) ends here, not at garbage collection
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run ``coro`` on the daemons' loop; its result (or exception)."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the cluster is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn: Any, *args: Any, timeout: float | None = 30.0) -> Any:
        """Call ``fn(*args)`` on the daemons' loop (awaited when it returns
        an awaitable); its result."""
        async def call() -> Any:
            result = fn(*args)
            if isinstance(result, Awaitable):
                result = await result
            return result

        return self.run(call(), timeout)

    def wait_registered(self, timeout: float = 5.0, topic: str = "") -> None:
        """:meth:`LocalCluster.wait_registered` on the daemons' loop."""
        self.run(self.cluster.wait_registered(timeout, topic), timeout + 5)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the daemons, then the loop; join the thread."""
        if self._thread is None:
            return
        try:
            if self._thread.is_alive():
                self.run(self.cluster.stop(), timeout)
        finally:
            self._end(timeout)

    def _end(self, timeout: float) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        self._thread = None

    def __enter__(self) -> ThreadedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
