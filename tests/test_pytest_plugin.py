"""The package's pytest fixtures (nsq/pytest_plugin.py) over nsq/testing.py.

The fixtures are used here as a user's tests would use them: publish to
every nsqd of a cluster, read everything back through lookupd discovery,
from async tests and from sync ones (daemons in a background thread). The
plugin is also loaded by a separate pytest run (pytester) without
pytest-asyncio and with pytest-asyncio in its default strict mode, and
importing it must not load the daemons.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from nsq.client import Consumer, Producer
from nsq.testing import ThreadedCluster

pytest_plugins = ["pytester"]


async def consume(topic: str, count: int, **where: object) -> list[bytes]:
    """``count`` bodies of ``topic`` read by a Consumer given ``where``."""
    got: list[bytes] = []
    done = asyncio.Event()

    def handle(message) -> None:
        got.append(message.body)
        if len(got) >= count:
            done.set()

    c = Consumer(topic, "test", handle, max_in_flight=10, **where)
    await c.start()
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await c.close()
    return got


def refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


# -- async fixtures ----------------------------------------------------------------------


async def test_nsq_cluster_is_two_nsqds_found_through_its_lookupd(nsq_cluster):
    assert len(nsq_cluster.nsqds) == 2 and nsq_cluster.registered() == 2
    for i, address in enumerate(nsq_cluster.nsqd_tcp_addresses):
        async with Producer(address) as p:
            await p.publish("events", f"from nsqd {i}".encode())
    await nsq_cluster.wait_registered(topic="events")
    assert nsq_cluster.registered("events") == 2
    got = await consume("events", 2, lookupd_http_addresses=nsq_cluster.lookupd_http_addresses)
    assert sorted(got) == [b"from nsqd 0", b"from nsqd 1"]


async def test_make_nsqd_and_make_lookupd_take_option_fields(make_lookupd, make_nsqd, tmp_path):
    lookupd = await make_lookupd(tombstone_lifetime=0.5)
    nsqd = await make_nsqd(mem_queue_size=7, data_path=str(tmp_path),
                           nsqlookupd_tcp_addresses=[lookupd.tcp_address])
    assert lookupd.options.tombstone_lifetime == 0.5
    assert (nsqd.options.mem_queue_size, nsqd.data_path) == (7, str(tmp_path))
    assert nsqd.tcp_address.startswith("127.0.0.1:") and nsqd.http_address.startswith("127.0.0.1:")
    assert nsqd.options.broadcast_address == "127.0.0.1"
    nsqd.get_topic("t")
    assert (tmp_path / "nsqd.dat").parent.is_dir()


async def test_make_nsq_cluster_gives_each_nsqd_its_data_path_and_grows(make_nsq_cluster, tmp_path):
    cluster = await make_nsq_cluster(1, data_path=str(tmp_path), mem_queue_size=3)
    second = await cluster.add_nsqd()
    assert [d.data_path for d in cluster.nsqds] == [str(tmp_path / "nsqd-1"), str(tmp_path / "nsqd-2")]
    assert second.options.mem_queue_size == 3 and cluster.registered() == 2
    assert cluster.lookupd_tcp_addresses == [cluster.lookupd.tcp_address]
    assert second.options.nsqlookupd_tcp_addresses == cluster.lookupd_tcp_addresses


async def test_nsqd_and_lookupd_fixtures(nsqd, lookupd):
    assert nsqd.tcp_port and nsqd.http_port and lookupd.tcp_port and lookupd.http_port
    assert nsqd.options.nsqlookupd_tcp_addresses == []  # an nsqd alone


# -- sync fixtures -----------------------------------------------------------------------


def test_threaded_nsq_cluster_from_sync_code(threaded_nsq_cluster):
    cluster = threaded_nsq_cluster
    for i, http in enumerate(cluster.nsqd_http_addresses):
        req = urllib.request.Request(f"http://{http}/pub?topic=jobs", data=f"job {i}".encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.read() == b"OK"
    cluster.wait_registered(topic="jobs")
    # a consumer on this thread's own event loop, not the daemons'
    got = asyncio.run(consume("jobs", 2, lookupd_http_addresses=cluster.lookupd_http_addresses))
    assert sorted(got) == [b"job 0", b"job 1"]
    # the daemons' state is read on their loop
    assert cluster.call(lambda: sorted(cluster.nsqds[1].topics)) == ["jobs"]


def test_threaded_nsqd_is_one_nsqd_without_lookupd(threaded_nsqd):
    assert threaded_nsqd.lookupd is None and threaded_nsqd.lookupd_http_addresses == []
    with urllib.request.urlopen(f"http://{threaded_nsqd.nsqd_http_address}/ping", timeout=5) as r:
        assert r.read() == b"OK"
    assert threaded_nsqd.nsqd_tcp_address == threaded_nsqd.nsqd_tcp_addresses[0]


def test_threaded_cluster_stop_closes_every_listener_and_ends_its_thread():
    with ThreadedCluster(2) as cluster:
        addresses = [*cluster.nsqd_tcp_addresses, *cluster.nsqd_http_addresses, *cluster.lookupd_tcp_addresses,
                     *cluster.lookupd_http_addresses]
        thread = cluster._thread
        assert len(addresses) == 6 and not any(refused(a) for a in addresses)
    assert thread is not None and not thread.is_alive()
    assert all(refused(a) for a in addresses)
    with pytest.raises(RuntimeError, match="not running"):
        cluster.call(lambda: None)


def test_threaded_cluster_that_cannot_start_raises_and_ends_its_thread():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cluster = ThreadedCluster(1, lookupd=False, tcp_address=f"127.0.0.1:{taken.getsockname()[1]}")
        with pytest.raises(OSError):
            cluster.start()
    assert cluster._thread is None


# -- the plugin in other pytest runs --------------------------------------------------------


def test_importing_the_plugin_loads_no_daemon_code():
    code = ("import sys, nsq.pytest_plugin; print(sorted(m for m in sys.modules if m.startswith("
            "('nsq.server', 'nsq.testing', 'nsq.client', 'aiohttp', 'uvloop'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_sync_fixtures_work_without_pytest_asyncio(pytester, monkeypatch):
    # pytest_asyncio cannot be imported (as when it is not installed), its plugin is not loaded
    shadow = pytester.mkdir("shadow")
    (shadow / "pytest_asyncio.py").write_text("raise ImportError('not installed here')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    pytester.makepyfile(textwrap.dedent("""
        import urllib.request

        def test_sync(threaded_nsq_cluster):
            address = threaded_nsq_cluster.nsqd_http_addresses[1]
            with urllib.request.urlopen(f"http://{address}/ping", timeout=5) as r:
                assert r.read() == b"OK"

        def test_plugin_took_the_fallback():
            import nsq.pytest_plugin
            import pytest
            assert nsq.pytest_plugin._async_fixture is pytest.fixture
    """))
    result = pytester.runpytest_subprocess("-p", "no:asyncio", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_async_fixtures_work_in_pytest_asyncio_strict_mode(pytester):
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        from nsq.client import Producer

        @pytest.mark.asyncio
        async def test_async(nsq_cluster, make_nsqd):
            extra = await make_nsqd(mem_queue_size=1)
            async with Producer(nsq_cluster.nsqd_tcp_addresses[0]) as p:
                await p.publish("t", b"x")
            assert nsq_cluster.nsqds[0].topics["t"].depth == 1
            assert extra.options.mem_queue_size == 1
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "asyncio_mode=strict")
    result.assert_outcomes(passed=1)
