"""Replication in ``nsq admin`` (docs/operations/replication.md): the Nodes
screen shows each nsqd's role and lag and lists the replicas a leader names
(they register with no lookupd); ``P`` promotes the selected replica behind
a confirmation. Textual's pilot against real in-process nsqds."""

from __future__ import annotations

from textual.widgets import DataTable

from nsq.tui.admin.dialogs import ConfirmScreen
from tests.tui.conftest import wait_until
from tests.tui.test_admin import has_row
from tests.tui.test_admin_drain import closers, nsqd_app, to_nodes  # noqa: F401 (closers: a fixture)


def cell_texts(table: DataTable, key: str) -> list[str]:
    return [str(c) for c in table.get_row(key)]


async def test_nodes_show_roles_and_promote_a_replica(make_nsqd, closers, tmp_path) -> None:  # noqa: F811
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    leader = await make_nsqd(data_path=str(tmp_path / "a"), storage="wal", broadcast_address="127.0.0.1")
    replica = await make_nsqd(data_path=str(tmp_path / "b"), storage="wal", broadcast_address="127.0.0.1",
                              replica_of=f"127.0.0.1:{leader.http_port}")
    leader_addr, replica_addr = f"127.0.0.1:{leader.http_port}", f"127.0.0.1:{replica.http_port}"
    leader.get_topic("orders").publish([b"a", b"b"])
    app = nsqd_app(closers, [leader_addr])  # only the leader given: the replica is found through it
    async with app.run_test(size=(160, 30)) as pilot:
        table = await to_nodes(pilot, app, leader_addr)
        await wait_until(pilot, lambda: has_row(table, replica_addr))
        await wait_until(pilot, lambda: "leader (epoch 0), 1 replica, lag 0" in cell_texts(table, leader_addr))
        assert f"replica of {leader_addr}, lag 0 (0.0s)" in cell_texts(table, replica_addr)
        # the replica's copy is not counted in the topic's figures
        snapshot = app.snapshot
        assert snapshot is not None and snapshot.topic("orders") is not None
        assert [n.node for n in snapshot.topic("orders").nodes] == [leader_addr]

        # P on the leader: not a replica, nothing asked
        table.move_cursor(row=table.get_row_index(leader_addr))
        await pilot.press("P")
        assert not isinstance(app.screen, ConfirmScreen)
        table.move_cursor(row=table.get_row_index(replica_addr))
        await pilot.press("P")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith(f"Promote replica {replica_addr} to leader?")
        assert app.screen.verb == "Promote" and app.screen.destructive
        await pilot.press("y")
        await wait_until(pilot, lambda: len(app.results) == 1)
        result = app.results[0]
        assert result.ok, result.errors
        assert result.summary() == f"promote node {replica_addr}: promoted to leader"
    assert not replica.replica_of and replica.replication.epoch == 1
