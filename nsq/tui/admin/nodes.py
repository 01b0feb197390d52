"""The Nodes screen: the nsqds (version, ports, lookupd connections,
topics and tombstones, and beyond nsqadmin their replication role and lag)
and the lookupds (nsqadmin's ``nsqadmin/static/html/nodes.hbs`` and
``lookup.hbs``); ``D`` drains the selected nsqd (``POST /drain``), ``P``
promotes the selected replica to leader (``POST /replica/promote``; both
beyond nsqadmin; docs/operations/replication.md)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label, Static

from nsq.cluster.model import ClusterSnapshot, NodeInfo
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.navigation import ShowNode
from nsq.tui.widgets import fill_table, num, set_columns

__all__ = ["NodesScreen"]


def role_text(rep: dict[str, Any] | None) -> str:
    """``leader (epoch 0), 1 replica, lag 0`` / ``replica of H:P, lag 3
    (0.2s)`` / ``-`` (no topic log, or Go nsqd) from ``/stats``'
    ``replication`` object (docs/operations/replication.md)."""
    if not rep:
        return "-"
    if rep.get("role") == "replica":
        state = "" if rep.get("connected") else ", not connected"
        return f"replica of {rep.get('leader')}{state}, lag {rep.get('lag_messages', 0)} " \
               f"({float(rep.get('lag_seconds', 0)):.1f}s)"
    replicas = rep.get("replicas") or []
    lag = max((r.get("lag_messages", 0) for r in replicas), default=0)
    return f"leader (epoch {rep.get('epoch', 0)}), {len(replicas)} replica{'' if len(replicas) == 1 else 's'}" \
        + (f", lag {lag}" if replicas else "")


class NodesScreen(AdminScreen):
    """The nsqds and the lookupds."""

    AUTO_FOCUS = "#nodes"
    BINDINGS: ClassVar = [
        Binding("l", "lookupd_addresses", "Lookupd addrs"),
        Binding("D", "drain", "Drain"),
        Binding("P", "promote", "Promote"),
        Binding("1", "app.mode('topics')", "Topics"),
    ]

    def __init__(self) -> None:
        super().__init__()
        #: show each nsqd's lookupd connections as addresses, not a count
        self.expand_lookupds = False

    def compose_body(self) -> ComposeResult:
        yield Static("", id="title")
        yield DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        yield Label("nsqlookupd", classes="section", id="lookupds-label")
        yield DataTable(id="lookupds", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self._columns()
        super().on_mount()

    def _columns(self) -> None:
        set_columns(self.query_one("#nodes", DataTable),
                     ["Hostname", "Broadcast Address", "TCP", "HTTP", "Version", "Lookupds", "Role", "Topics"])
        set_columns(self.query_one("#lookupds", DataTable), ["Address", "Version", "Status"])

    def show_body(self, snapshot: ClusterSnapshot) -> None:
        self._columns()  # a poll may answer before on_mount
        self.query_one("#title", Static).update(Text(f"NSQd Nodes ({len(snapshot.nodes)})", style="bold"))
        n_lookupds = len(snapshot.lookupds)
        rows = []
        for node in snapshot.nodes:
            rows.append((node.api_address, self._node_cells(node, n_lookupds, self.expand_lookupds)))
        fill_table(self.query_one("#nodes", DataTable), rows)
        lookupds = self.query_one("#lookupds", DataTable)
        fill_table(lookupds, [(lk.address, [Text(lk.address, style="bold"), lk.version or "-",
                                            Text(f"✘ {lk.error}", style="bold red") if lk.error
                                            else Text("OK", style="green")]) for lk in snapshot.lookupds])
        lookupds.display = bool(snapshot.lookupds)
        self.query_one("#lookupds-label").display = bool(snapshot.lookupds)

    @staticmethod
    def _node_cells(node: NodeInfo, n_lookupds: int, expand: bool = False) -> list[Any]:
        style = "yellow" if node.out_of_date else ""
        if node.error:
            version: Text = Text("✘ unreachable", style="bold red")
            topics = Text(node.error, style="red")
        else:
            version = Text(node.version + (" (old)" if node.out_of_date else ""), style=style)
            topics = Text(f"{len(node.topics)}: ", style="bold")
            for i, (name, tombstoned) in enumerate(node.topics):
                if i:
                    topics.append(" ")
                topics.append(name + (" (tombstoned)" if tombstoned else ""),
                              style="strike yellow" if tombstoned else "cyan")
        conns = num(len(node.remote_addresses) if n_lookupds else "-",
                    "bold yellow" if n_lookupds and len(node.remote_addresses) != n_lookupds else "")
        if expand and node.remote_addresses:
            conns = Text("\n".join(node.remote_addresses), style=conns.style)
        role = Text(role_text(node.replication), style="bold magenta" if node.replica_only else "")
        return [Text(node.hostname, style=style or "bold"), node.broadcast_address, num(node.tcp_port or "-"),
                num(node.http_port or "-"), version, conns, role, topics]

    def selected(self) -> NodeInfo | None:
        """The nsqd under the cursor."""
        table = self.query_one("#nodes", DataTable)
        snapshot = self.admin_app.snapshot
        if snapshot is None or not table.row_count:
            return None
        key = str(table.ordered_rows[table.cursor_row].key.value)
        return next((n for n in snapshot.nodes if n.api_address == key), None)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "nodes":
            node = self.selected()
            if node is not None:
                self.post_message(ShowNode(node.http_address))

    def action_lookupd_addresses(self) -> None:
        """Show (or hide) the lookupd connections' addresses (nsqadmin's
        "Lookupd Conns." button)."""
        self.expand_lookupds = not self.expand_lookupds
        self.query_one("#nodes", DataTable).clear(columns=True)
        self._columns()
        if self.admin_app.snapshot is not None:
            self.show_body(self.admin_app.snapshot)

    def action_promote(self) -> None:
        node = self.selected()
        if node is None:
            return
        name, address = node.http_address, node.api_address
        if not (node.replication and node.replication.get("role") == "replica"):
            self.notify(f"{name} is not a replica: only a replica can be promoted", severity="warning")
            return
        leader = node.replication.get("leader")
        self.confirm(f"Promote replica {name} to leader? It takes a new epoch, stops following {leader}, accepts "
                     "publishes and registers with its lookupds. Make sure the old leader is down: two leaders "
                     "would both accept publishes.", "Promote", lambda a: a.promote_node(name, address))

    def action_drain(self) -> None:
        node = self.selected()
        if node is None:
            return
        name, address = node.http_address, node.api_address
        where = f"{node.hostname} ({name})" if node.hostname else name
        self.confirm(f"Drain nsqd {where}? The nsqd stops taking publishes and new deliveries, waits for "
                     "messages in flight, then exits.", "Drain", lambda a: a.drain_node(name, address))
