"""Our nsqd against the official Python client, pynsq (Writer and Reader).

pynsq runs in its own virtualenv, in a subprocess (see ``conftest.py``); our
nsqd runs in-process on the test's event loop. Counters are read back from
our ``/stats?format=json`` and compared with what Go nsqd v1.2.1 reports.
"""

from __future__ import annotations

import collections

import pytest

from . import pynsq_env
from .helpers import wait_stats

pytestmark = [
    pytest.mark.slow,
    # the first test may build the virtualenv (pip install) during setup
    pytest.mark.timeout(600),
]

N = 100


async def test_pynsq_version_and_identify(nsqd, pynsq, http_get_json):
    """pynsq negotiates features; the JSON IDENTIFY answer has what it reads."""
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", "identify", "--count", "1")
    assert await w.finish() == 0, w.describe()
    start = w.of("start")[0]
    assert f"pynsq=={start['pynsq']}" in pynsq_env.PINS
    assert f"tornado=={start['tornado']}" in pynsq_env.PINS
    assert "site-packages" in start["nsq_file"], start
    ident = w.of("identify")
    assert len(ident) == 1, w.describe()
    data = ident[0]["data"]
    assert data["version"] == "1.2.1"
    assert data["max_rdy_count"] == 2500
    assert data["msg_timeout"] == 60000
    assert data["max_msg_timeout"] == 900000
    assert data["auth_required"] is False
    # pynsq echoes its own output buffer settings back from the server
    assert data["output_buffer_size"] == 16384
    assert data["output_buffer_timeout"] == 250


async def test_writer_pub_and_mpub(nsqd, pynsq, http_get_json):
    """(a) nsq.Writer publishes 50 PUBs and 5 MPUBs of 10; every callback is OK."""
    topic = "pynsq_writer"
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", topic, "--count", str(N), "--mpub-batch", "10",
                    "--wait-stdin", "--timeout", "60")
    done = await w.wait_event("done", timeout=60)
    assert done["published"] == N

    # while the writer is still connected it is listed as a producer
    stats = await http_get_json("/stats", format="json", topic=topic)
    producers = stats["producers"] or []
    assert len(producers) == 1, stats
    prod = producers[0]
    assert prod["user_agent"] == f"pynsq/{pynsq_env.PINS[0].split('==')[1]}"
    assert prod["version"] == "V2"
    assert prod["pub_counts"] == [{"topic": topic, "count": N}]

    assert await w.finish() == 0, w.describe()

    stats = await http_get_json("/stats", format="json", topic=topic)
    [t] = stats["topics"]
    assert t["topic_name"] == topic
    assert t["message_count"] == N
    assert t["depth"] == N
    assert t["channels"] == []
    # bodies are "msg-0" .. "msg-99"
    assert t["message_bytes"] == sum(len(f"msg-{i}") for i in range(N))


async def test_writer_then_reader_roundtrip(nsqd, pynsq):
    """pynsq Writer -> our nsqd -> pynsq Reader: the same 100 bodies come back."""
    topic, addr = "pynsq_roundtrip", f"127.0.0.1:{nsqd.tcp_port}"
    w = await pynsq("writer", "--nsqd-tcp", addr, "--topic", topic, "--count", str(N))
    assert await w.finish(timeout=60) == 0, w.describe()
    r = await pynsq("reader", "--nsqd-tcp", addr, "--topic", topic, "--channel", "ch",
                    "--count", str(N), "--max-in-flight", "50", "--timeout", "60")
    assert await r.finish(timeout=60) == 0, r.describe()
    bodies = sorted(m["body"] for m in r.of("message"))
    assert bodies == sorted(f"msg-{i}" for i in range(N))


@pytest.mark.parametrize("deflate", [False, True], ids=["plain", "deflate-requested"])
async def test_reader_receives_http_published(nsqd, pynsq, http_post, http_get_json, deflate):
    """(b) 100 messages via HTTP /mpub and /pub; nsq.Reader gets each exactly once.

    With ``deflate`` the client asks for deflate in IDENTIFY: whatever the
    server answers, delivery must work (pynsq upgrades only if it says yes).
    """
    topic, channel = "pynsq_reader", "ch"
    bodies = [f"body-{i:03d}-{'x' * (i % 7)}" for i in range(N)]
    # create the channel first so nothing depends on when the reader subscribes
    # (as in Go, /channel/create needs an existing topic)
    await http_post("/topic/create", topic=topic)
    await http_post("/channel/create", topic=topic, channel=channel)
    await http_post("/mpub", "\n".join(bodies[:60]).encode(), topic=topic)
    for b in bodies[60:]:
        assert await http_post("/pub", b.encode(), topic=topic) == "OK"

    args = ["--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}", "--topic", topic,
            "--channel", channel, "--count", str(N), "--max-in-flight", "25",
            "--wait-stdin", "--timeout", "60"]
    if deflate:
        args.append("--deflate")
    r = await pynsq("reader", *args)
    done = await r.wait_event("done", timeout=60)
    assert done["distinct"] == N and done["deliveries"] == N, r.describe()

    msgs = r.of("message")
    assert sorted(m["body"] for m in msgs) == sorted(bodies)
    assert all(m["attempts"] == 1 for m in msgs)
    assert len({m["id"] for m in msgs}) == N
    assert all(len(m["id"]) == 16 for m in msgs)

    # the reader is still connected: its FINs show in the client's counters
    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == N and c["in_flight_count"] == 0,
    )
    assert c["channel_name"] == channel
    assert c["in_flight_count"] == 0, c
    assert c["depth"] == 0
    assert c["deferred_count"] == 0
    assert c["message_count"] == N
    assert c["requeue_count"] == 0
    assert c["timeout_count"] == 0
    assert c["client_count"] == 1
    [client] = c["clients"]
    assert client["finish_count"] == N, client
    assert client["message_count"] == N
    assert client["requeue_count"] == 0
    assert client["in_flight_count"] == 0
    assert client["ready_count"] == 25
    assert client["user_agent"].startswith("pynsq/")
    assert t["message_count"] == N

    assert await r.finish() == 0, r.describe()
    ident = r.of("identify")[0]["data"]
    if deflate and ident.get("deflate"):
        assert ident["deflate_level"] >= 1

    stats, t, c = await wait_stats(http_get_json, topic, channel, lambda t, c: c["client_count"] == 0)
    assert c["client_count"] == 0
    assert c["in_flight_count"] == 0
    assert c["depth"] == 0


async def test_reader_requeue_then_finish(nsqd, pynsq, http_post, http_get_json):
    """(c) The handler answers False on attempt 1 (REQ), True on attempt 2 (FIN).

    pynsq requeues with a delay of ``requeue_delay * attempts`` seconds
    (here 1 s), so the message comes back from the deferred queue with the
    same id and ``attempts`` 2.
    """
    topic, channel, count = "pynsq_requeue", "ch", 10
    bodies = [f"again-{i}" for i in range(count)]
    await http_post("/mpub", "\n".join(bodies).encode(), topic=topic)

    r = await pynsq("reader", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", topic, "--channel", channel, "--count", str(count),
                    "--max-in-flight", "5", "--requeue-first", "--requeue-delay", "1",
                    "--wait-stdin", "--timeout", "60")
    done = await r.wait_event("done", timeout=60)
    assert done["distinct"] == count, r.describe()

    by_body = collections.defaultdict(list)
    for m in r.of("message"):
        by_body[m["body"]].append(m)
    assert sorted(by_body) == sorted(bodies)
    for body, deliveries in by_body.items():
        assert [d["attempts"] for d in deliveries] == [1, 2], (body, deliveries)
        first, second = deliveries
        assert first["id"] == second["id"]
        assert first["ts"] == second["ts"]  # the original publish timestamp
        # REQ with a 1000 ms timeout: it must not come back immediately
        assert second["t"] - first["t"] >= 0.5, (body, deliveries)

    stats, t, c = await wait_stats(
        http_get_json, topic, channel,
        lambda t, c: c["clients"] and c["clients"][0]["finish_count"] == count,
    )
    assert c["in_flight_count"] == 0, c
    assert c["deferred_count"] == 0
    assert c["depth"] == 0
    assert c["message_count"] == count
    assert c["requeue_count"] == count
    assert c["timeout_count"] == 0
    [client] = c["clients"]
    assert client["finish_count"] == count
    assert client["requeue_count"] == count
    assert client["message_count"] == 2 * count
    assert await r.finish() == 0, r.describe()


async def test_heartbeats_keep_idle_connection(nsqd, pynsq, http_get_json):
    """heartbeat_interval=1 s: pynsq answers our heartbeats with NOP, stays connected."""
    topic = "pynsq_heartbeat"
    w = await pynsq("writer", "--nsqd-tcp", f"127.0.0.1:{nsqd.tcp_port}",
                    "--topic", topic, "--count", "4", "--heartbeat-interval", "1",
                    "--idle", "3.2", "--timeout", "30")
    assert await w.finish(timeout=30) == 0, w.describe()
    assert len(w.of("heartbeat")) >= 2, w.describe()
    assert len(w.of("identify")) == 1, "the connection was re-established:\n" + w.describe()
    stats = await http_get_json("/stats", format="json", topic=topic)
    assert stats["topics"][0]["message_count"] == 4


async def test_reader_discovers_nsqds_through_our_lookupd(cluster, pynsq, http):
    """pynsq's Reader with lookupd_http_addresses only: it finds both of our
    nsqds through our nsqlookupd and gets the messages published on each."""
    from .conftest import wait_lookup

    lookupd, nsqds = cluster
    topic = "pynsq_lookupd"
    for i, d in enumerate(nsqds):
        d.get_topic(topic).publish([f"nsqd{i}-{j}".encode() for j in range(N // 2)])
    data = await wait_lookup(http, lookupd, topic, 2)
    assert {p["tcp_port"] for p in data["producers"]} == {d.tcp_port for d in nsqds}

    r = await pynsq("reader", "--lookupd-http", f"127.0.0.1:{lookupd.http_port}",
                    "--topic", topic, "--channel", "ch", "--count", str(N),
                    "--max-in-flight", "10", "--timeout", "60")
    assert await r.finish(timeout=60) == 0, r.describe()
    bodies = sorted(m["body"] for m in r.of("message"))
    assert bodies == sorted(f"nsqd{i}-{j}" for i in range(2) for j in range(N // 2))
    for d in nsqds:
        assert d.topics[topic].channels["ch"].message_count == N // 2
