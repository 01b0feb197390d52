"""Fixtures of the cluster fault tests: a cluster in network namespaces, and
the closing table of figures (printed in pytest's terminal summary).

Every test here needs root, iproute2 and working network namespaces; each
is skipped with the reason otherwise. Select them with ``-m faults``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.faults import netns
from tests.faults.cluster import Cluster
from tests.faults.traffic import Row

_ROWS: list[Row] = []
_checked: dict[bool, str | None] = {}


def _unusable(need_tc: bool) -> str | None:
    if need_tc not in _checked:
        if not _checked:
            netns.cleanup_stale()
        _checked[need_tc] = netns.unusable(need_tc)
    return _checked[need_tc]


@pytest.fixture
def make_cluster(request: pytest.FixtureRequest, tmp_path) -> Iterator[Callable[..., Cluster]]:
    """Factory: ``make_cluster(nsqds=3, lookupds=2, clients=("c0",),
    nsqd_flags=(...), need_tc=False)`` builds the network, starts the
    daemons and moves the test's thread into the ``tester`` host; all of it
    is torn down after the test."""
    made: list[Cluster] = []

    def factory(*, need_tc: bool = False, **kwargs: Any) -> Cluster:
        reason = _unusable(need_tc)
        if reason is not None:
            pytest.skip(reason)
        net = netns.Net(request.node.name.removeprefix("test_")[:3])
        try:
            cluster = Cluster(net, tmp_path, **kwargs)
            made.append(cluster)
        except BaseException:
            net.close()
            raise
        cluster.start()
        return cluster

    yield factory
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for cluster in made:
        if failed:
            print(cluster.diagnostics())
        cluster.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    rep = yield
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
    return rep


@pytest.fixture
def report() -> Callable[[Row], None]:
    """``report(row)``: print a row of the closing table now and keep it for
    the terminal summary."""
    def add(row: Row) -> None:
        _ROWS.append(row)
        print(row.line())

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ROWS:
        return
    tr = terminalreporter
    tr.section("cluster fault scenarios")
    tr.write_line("| " + " | ".join(Row.COLUMNS) + " |")
    tr.write_line("|" + "---|" * len(Row.COLUMNS))
    for row in _ROWS:
        tr.write_line(row.line())
