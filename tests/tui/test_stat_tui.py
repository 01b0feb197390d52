"""Live ``nsq stat`` (nsq/tui/stat.py over nsq/cluster/stat.py) against a real nsqd, the plain
report it must leave unchanged, and a snapshot with fixed data."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import aiohttp
from textual.widgets import DataTable, Static

from nsq.cluster.stat import NodeReport, StatPoller, StatReport
from nsq.tui.stat import StatApp
from tests.cli.conftest import NSQ, run_nsq
from tests.tui.conftest import run_in_pty


async def post(addr: str, path: str, body: bytes = b"") -> None:
    async with aiohttp.ClientSession() as s, s.post(f"http://{addr}{path}", data=body) as r:
        assert r.status == 200, await r.text()


async def create(addr: str, topic: str, channel: str) -> None:
    await post(addr, f"/topic/create?topic={topic}")
    await post(addr, f"/channel/create?topic={topic}&channel={channel}")


async def wait_until(pilot, predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.05)


def row(table: DataTable, key: str) -> list[str]:
    return [str(c) for c in table.get_row(key)]


async def test_columns_show_depth_and_in_flight(make_nsqd):
    """5 published, a raw V2 subscriber with RDY 2 holds 2 in flight: the
    nsqd row and TOTAL show depth 3, in flight 2, 5 messages, 1 client."""
    d = await make_nsqd()
    await create(d.http_address, "t", "c")
    for i in range(5):
        await post(d.http_address, "/pub?topic=t", b"m%d" % i)
    host, port = d.tcp_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"  V2SUB t c\nRDY 2\n")
    await writer.drain()

    poller = StatPoller("t", "c", nsqd=[d.http_address], interval=0.1)
    app = StatApp(poller)
    try:
        async with app.run_test(size=(140, 30)) as pilot:
            nodes = app.query_one("#nodes", DataTable)

            def settled() -> bool:
                return (app.reports and app.reports[-1].totals is not None
                        and app.reports[-1].totals["in_flight_count"] == 2 and app.reports[-1].ingress is not None)

            await wait_until(pilot, settled)
            await pilot.pause(0.05)
            cols = ["ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients"]
            for key in (d.http_address, "TOTAL"):
                values = dict(zip(["nsqd"] + cols, row(nodes, key)))
                assert (values["total"], values["mem"], values["disk"], values["inflt"], values["msgs"],
                        values["clients"]) == ("3", "3", "0", "2", "5", "1"), values
            assert row(nodes, d.http_address)[-1] == "ok"
            history = app.query_one("#history", DataTable)
            assert history.row_count >= 2
            spark = app.query_one("#spark-depth")
            assert list(spark.values)[-1] == 3.0 and spark.border_title == f"depth 3 (max {max(spark.values):g})"
            await pilot.press("q")
    finally:
        writer.close()


async def test_count_ends_the_app(make_nsqd):
    d = await make_nsqd()
    await create(d.http_address, "t", "c")
    app = StatApp(StatPoller("t", "c", nsqd=[d.http_address], interval=0.05), count=3)
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.ended_by_count)
    assert app.return_code == 0
    # --count=3 is 3 reports with rates, as the plain output: 4 polls
    assert [r.number for r in app.reports] == [1, 2, 3, 4]
    assert [r.ingress is not None for r in app.reports] == [False, True, True, True]
    assert "report 4/4" in str(app.title_text())


async def test_unreachable_nsqd_shows_an_error_and_polling_goes_on(make_nsqd):
    """One nsqd up, one refusing connections: the dead one's row says why,
    the TOTAL sums the live one, reports keep coming."""
    d = await make_nsqd()
    await create(d.http_address, "t", "c")
    await post(d.http_address, "/pub?topic=t", b"x")
    dead = "127.0.0.1:1"
    app = StatApp(StatPoller("t", "c", nsqd=[d.http_address, dead], interval=0.05, connect_timeout=1))
    async with app.run_test(size=(160, 30)) as pilot:
        await wait_until(pilot, lambda: len(app.reports) >= 3)
        nodes = app.query_one("#nodes", DataTable)
        dead_row = row(nodes, dead)
        assert dead_row[-1] == "unreachable" and dead_row[3] == "-"
        assert row(nodes, "TOTAL")[3] == "1" and row(nodes, "TOTAL")[-1] == "1 of 2 down"
        status = str(app.query_one("#status", Static).render())
        assert status.startswith(dead + ":"), status
        await pilot.press("q")


async def test_channel_missing_everywhere_is_shown_in_the_status_line(make_nsqd):
    d = await make_nsqd()
    app = StatApp(StatPoller("t", "nope", nsqd=[d.http_address], interval=0.05))
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: len(app.reports) >= 2)
        status = str(app.query_one("#status", Static).render())
        assert "failed to find channel(nope) in stats metadata for topic(t)" in status
        await pilot.press("q")


# -- the plain report stays as it was ----------------------------------------------


def test_piped_and_plain_output_are_go_nsq_stat_lines(nsqd_proc):
    nsqd_proc.post("/topic/create?topic=st")
    nsqd_proc.post("/channel/create?topic=st&channel=c")
    for _ in range(4):
        nsqd_proc.post("/pub?topic=st", b"m")
    expected = ("------rate------+----------------depth----------------+--------------metadata---------------\n"
                "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n"
                "      0       0 |       4       4       0     0     0 |       0       0            4       0\n")
    args = ["stat", "--topic=st", "--channel=c", f"--nsqd-http-address={nsqd_proc.http}", "--count=1",
            "--interval=100ms"]
    piped = run_nsq(*args)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.decode() == expected
    plain = run_nsq(*args, "--plain")
    assert plain.returncode == 0 and plain.stdout.decode() == expected


def test_help_does_not_import_textual():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom nsq.cli import cli\n"
            "r = CliRunner().invoke(cli, ['stat', '--help'])\nassert r.exit_code == 0 and '--plain' in r.output\n"
            "assert 'textual' not in sys.modules, 'textual imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_in_a_terminal_it_runs_the_tui_and_count_ends_it(nsqd_proc):
    """Through a pseudo-terminal: the alternate screen opens, --count ends
    it, and the plain lines of the reports are left on the terminal."""
    nsqd_proc.post("/topic/create?topic=st")
    nsqd_proc.post("/channel/create?topic=st&channel=c")
    nsqd_proc.post("/pub?topic=st", b"m")
    code, out = run_in_pty(NSQ + ["stat", "--topic=st", "--channel=c", f"--nsqd-http-address={nsqd_proc.http}",
                                  "--count=3", "--interval=200ms"],
                           {"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "30"}, 30)
    assert code == 0, out[-2000:]
    assert b"\x1b[?1049h" in out  # Textual's alternate screen
    tail = out.rsplit(b"\x1b[?1049l", 1)[-1].decode(errors="replace").replace("\r\n", "\n")
    assert "ingress  egress |   total" in tail
    assert tail.strip().splitlines()[-1].split() == ["0", "0", "|", "1", "1", "0", "0", "0", "|", "0", "0", "1", "0"]


# -- snapshot ----------------------------------------------------------------------


class IdlePoller:
    """Never answers: the snapshot test puts fixed reports on screen itself."""

    topic, channel, interval = "orders", "archive", 2.0
    source = "nsqd 10.0.0.1:4151,10.0.0.2:4151"

    async def poll(self) -> StatReport:
        await asyncio.sleep(3600)
        raise AssertionError

    async def close(self) -> None:
        pass


def fixed_reports() -> list[StatReport]:
    base = 1714564800.0  # 2024-05-01 12:00:00 UTC
    reports = []
    msgs, depth = 1000, 40
    for n in range(1, 13):
        msgs += 200 + 37 * (n % 4)
        depth = max(0, depth + (25 if n % 3 else -45))
        a = {"depth": depth, "backend_depth": depth // 4, "in_flight_count": 12, "deferred_count": 1,
             "requeue_count": 3, "timeout_count": 0, "message_count": msgs, "client_count": 2}
        nodes = [NodeReport("10.0.0.1:4151", a, None if n == 1 else 100 + n, None if n == 1 else 90 + n),
                 NodeReport("10.0.0.2:4151", error="10.0.0.2:4151: Cannot connect to host (Connection refused)")]
        reports.append(StatReport(n, base + 2 * n, dict(a), None if n == 1 else 100 + n,
                                  None if n == 1 else 90 + n, nodes))
    return reports


def test_snapshot(snap_compare, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    app = StatApp(IdlePoller(), count=19)  # the title says "report 12/20"

    async def show(pilot) -> None:
        for report in fixed_reports():
            app.show(report)
        await pilot.pause(0.1)

    try:
        assert snap_compare(app, terminal_size=(100, 28), run_before=show)
    finally:
        monkeypatch.undo()
        time.tzset()


async def test_pause_and_poll_now(make_nsqd):
    d = await make_nsqd()
    await create(d.http_address, "t", "c")
    app = StatApp(StatPoller("t", "c", nsqd=[d.http_address], interval=0.05))
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: len(app.reports) >= 1)
        await pilot.press("p")
        assert "PAUSED" in str(app.title_text())
        await pilot.pause(0.1)
        held = len(app.reports)
        await pilot.pause(0.3)
        assert len(app.reports) == held
        await pilot.press("r")  # polls now and resumes
        await wait_until(pilot, lambda: len(app.reports) >= held + 2)
        assert "PAUSED" not in str(app.title_text())
        await pilot.press("q")


async def test_replication_lines_and_the_replica_row():
    """A leader and its replica polled together: the replica's row says
    ``replica`` (not in TOTAL) and both replication lines are under the table."""
    c = {"depth": 2, "backend_depth": 0, "in_flight_count": 0, "deferred_count": 0, "requeue_count": 0,
         "timeout_count": 0, "message_count": 2, "client_count": 0}
    leader = NodeReport("10.0.0.1:4151", dict(c), 0, 0, summed=True, replication={
        "role": "leader", "epoch": 1, "replica_acks": 1,
        "replicas": [{"address": "10.0.0.2:4151", "lag_messages": 0, "lag_seconds": 0.0, "topics": {}}]})
    replica = NodeReport("10.0.0.2:4151", dict(c), 0, 0, replication={
        "role": "replica", "leader": "10.0.0.1:4151", "epoch": 1, "connected": True,
        "lag_messages": 0, "lag_seconds": 0.0})
    app = StatApp(IdlePoller())
    async with app.run_test(size=(160, 30)) as pilot:
        app.show(StatReport(2, time.time(), dict(c), 0, 0, [leader, replica], topic="orders"))
        await pilot.pause(0.05)
        nodes = app.query_one("#nodes", DataTable)
        assert row(nodes, "10.0.0.1:4151")[-1] == "ok" and row(nodes, "10.0.0.2:4151")[-1] == "replica"
        status = str(app.query_one("#status", Static).render()).splitlines()
        assert status == ["2 nsqds with the topic",
                          "replication: 10.0.0.1:4151 leader epoch 1 acks 1, replica 10.0.0.2:4151 lag 0 msgs 0.00s",
                          "replication: 10.0.0.2:4151 replica of 10.0.0.1:4151 epoch 1 lag 0 msgs 0.00s"], status
        await pilot.press("q")
