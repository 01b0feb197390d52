"""pytest fixtures: nsqd, nsqlookupd and small clusters on free loopback
ports, started for a test and stopped after it.

Installing the package registers this plugin (entry point ``pytest11``,
name ``nsq``), so every pytest run has the fixtures below; ``pytest -p
no:nsq`` turns them off. The daemons run in the test's process
(:mod:`nsq.testing`), listen on ``127.0.0.1`` with ports the kernel
picks, announce ``127.0.0.1`` to the lookupd, and keep their queues in
memory unless given ``data_path=``. Factories take any
:class:`~nsq.server.nsqd.NSQDOptions` / :class:`~nsq.server.lookupd.LookupdOptions`
field as a keyword (``mem_queue_size=100``, ``msg_timeout=2.0``: durations
in seconds).

Async fixtures (``async def`` tests with pytest-asyncio, auto or strict
mode; when it is not installed they are plain ``async`` fixtures, for
another async plugin to run); the daemons run in the test's event loop,
so a test can also look inside them (``nsqd.topics["t"].channels``):

| fixture | gives |
| --- | --- |
| ``nsqd`` | an :class:`~nsq.server.nsqd.NSQD` |
| ``lookupd`` | an :class:`~nsq.server.lookupd.NSQLookupd` |
| ``nsq_cluster`` | a :class:`~nsq.testing.LocalCluster`: a lookupd and two nsqds registered with it |
| ``make_nsqd`` | ``await make_nsqd(**options)`` -> NSQD |
| ``make_lookupd`` | ``await make_lookupd(**options)`` -> NSQLookupd |
| ``make_nsq_cluster`` | ``await make_nsq_cluster(nsqds=2, **kwargs)`` -> LocalCluster (its arguments) |

Sync fixtures (any test, no async plugin needed): the daemons run in a
background thread with their own event loop
(:class:`~nsq.testing.ThreadedCluster`), for code under test that is
synchronous or brings its own loop (a pynsq ``Reader`` on tornado's loop,
a blocking worker):

| fixture | gives (a :class:`~nsq.testing.ThreadedCluster`) |
| --- | --- |
| ``threaded_nsqd`` | one nsqd, no lookupd: ``.nsqd_tcp_address``, ``.nsqd_http_address`` |
| ``threaded_nsq_cluster`` | a lookupd and two nsqds: ``.lookupd_http_addresses``, ``.nsqd_tcp_addresses`` |
| ``make_threaded_nsq_cluster`` | ``make_threaded_nsq_cluster(nsqds=1, lookupd=True, **nsqd_options)`` |

Every address is a ``host:port`` string, ready for ``nsqd_tcp_addresses=``
/ ``lookupd_http_addresses=`` of a consumer (this package's
:class:`~nsq.client.Consumer`, pynsq's ``Reader``, go-nsq through a
subprocess) or for an HTTP ``/pub``.

Example::

    import urllib.request
    from nsq.client import Consumer, Producer

    async def test_consumer_reads_from_every_nsqd(nsq_cluster):
        for address in nsq_cluster.nsqd_tcp_addresses:
            async with Producer(address) as p:
                await p.publish("events", b"hello")
        # a new topic reaches the lookupd a moment after the publish
        await nsq_cluster.wait_registered(topic="events")
        got = []
        c = Consumer("events", "test", lambda m: got.append(m.body), max_in_flight=10,
                     lookupd_http_addresses=nsq_cluster.lookupd_http_addresses)
        await c.start()
        ...  # wait until len(got) == 2
        await c.close()

    def test_sync_worker(threaded_nsq_cluster):
        nsqd = threaded_nsq_cluster.nsqd_http_addresses[0]
        urllib.request.urlopen(f"http://{nsqd}/pub?topic=jobs", data=b"job 1")
        threaded_nsq_cluster.wait_registered(topic="jobs")
        run_my_worker(lookupd_http_addresses=threaded_nsq_cluster.lookupd_http_addresses)

A project's own fixture of the same name (in a ``conftest.py``) takes
precedence over these. Importing this module loads only pytest (and
pytest-asyncio when installed); the daemons load when a fixture runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

try:  # the async fixtures are pytest-asyncio's in strict mode as well as auto
    import pytest_asyncio

    _async_fixture: Callable[..., Any] = pytest_asyncio.fixture
except ImportError:  # plain fixtures: another async plugin runs them, or pytest says why it cannot
    _async_fixture = pytest.fixture

__all__ = ["lookupd", "make_lookupd", "make_nsq_cluster", "make_nsqd", "make_threaded_nsq_cluster", "nsq_cluster",
           "nsqd", "threaded_nsq_cluster", "threaded_nsqd"]


@_async_fixture
async def make_nsqd() -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``await make_nsqd(mem_queue_size=5)`` starts an nsqd
    (:func:`nsq.testing.start_nsqd`); every one is stopped after the test."""
    from nsq.testing import start_nsqd

    started: list[Any] = []

    async def factory(**options: Any) -> Any:
        d = await start_nsqd(**options)
        started.append(d)
        return d

    yield factory
    for d in reversed(started):
        await d.stop()


@_async_fixture
async def make_lookupd() -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``await make_lookupd(tombstone_lifetime=0.5)`` starts an
    nsqlookupd (:func:`nsq.testing.start_lookupd`); every one is stopped
    after the test."""
    from nsq.testing import start_lookupd

    started: list[Any] = []

    async def factory(**options: Any) -> Any:
        lk = await start_lookupd(**options)
        started.append(lk)
        return lk

    yield factory
    for lk in reversed(started):
        await lk.stop()


@_async_fixture
async def make_nsq_cluster() -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``await make_nsq_cluster(nsqds=3, mem_queue_size=100)``
    starts a :class:`nsq.testing.LocalCluster` and returns once the lookupd
    lists every nsqd; every one is stopped after the test."""
    from nsq.testing import LocalCluster

    started: list[Any] = []

    async def factory(nsqds: int = 2, **kwargs: Any) -> Any:
        cluster = LocalCluster(nsqds, **kwargs)
        started.append(cluster)
        return await cluster.start()

    yield factory
    for cluster in reversed(started):
        await cluster.stop()


@_async_fixture
async def nsqd(make_nsqd: Callable[..., Any]) -> Any:
    """An nsqd with the defaults of :mod:`nsq.testing`."""
    return await make_nsqd()


@_async_fixture
async def lookupd(make_lookupd: Callable[..., Any]) -> Any:
    """An nsqlookupd with the defaults of :mod:`nsq.testing`."""
    return await make_lookupd()


@_async_fixture
async def nsq_cluster(make_nsq_cluster: Callable[..., Any]) -> Any:
    """A lookupd and two nsqds registered with it (:class:`nsq.testing.LocalCluster`)."""
    return await make_nsq_cluster()


@pytest.fixture
def make_threaded_nsq_cluster() -> Iterator[Callable[..., Any]]:
    """Factory: ``make_threaded_nsq_cluster(nsqds=2, mem_queue_size=100)``
    starts a :class:`nsq.testing.ThreadedCluster` (default: one nsqd and a
    lookupd) in a background thread; every one is stopped after the test."""
    from nsq.testing import ThreadedCluster

    started: list[Any] = []

    def factory(nsqds: int = 1, **kwargs: Any) -> Any:
        cluster = ThreadedCluster(nsqds, **kwargs)
        started.append(cluster)
        return cluster.start()

    yield factory
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def threaded_nsqd(make_threaded_nsq_cluster: Callable[..., Any]) -> Any:
    """One nsqd, no lookupd, in a background thread
    (:class:`nsq.testing.ThreadedCluster`: ``.nsqd_tcp_address``,
    ``.nsqd_http_address``)."""
    return make_threaded_nsq_cluster(1, lookupd=False)


@pytest.fixture
def threaded_nsq_cluster(make_threaded_nsq_cluster: Callable[..., Any]) -> Any:
    """A lookupd and two nsqds registered with it, in a background thread
    (:class:`nsq.testing.ThreadedCluster`)."""
    return make_threaded_nsq_cluster(2)
