"""contrib/grafana/nsq.json: a Grafana dashboard whose every PromQL
expression parses and returns data from a real Prometheus scraping a
cluster, with the template variables set to "All" and to one value each."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.monitoring.conftest import DASHBOARD, Monitored

#: Grafana's built-in interval variables, as a dashboard over the last hour
#: scraped every 15 s would have them (long enough for the test's 1 s scrapes)
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1m", "__range_s": "60", "__range_ms": "60000"}

#: the panel types the dashboard uses (rows only group them)
PANEL_TYPES = {"timeseries", "stat"}


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too; rows left out."""
    out = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def variable_query(var: dict[str, Any]) -> str:
    query = var["query"]
    return query["query"] if isinstance(query, dict) else query


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's interpolation: ``$name``, ``${name}``, ``${name:format}``
    and ``[[name]]``, for ``values`` and :data:`BUILTINS`; fails on a
    variable it does not know."""
    names = {**BUILTINS, **values}

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        assert name in names, f"unknown variable {name!r} in {expr}"
        return names[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", one, expr)


def test_dashboard_structure() -> None:
    d = load()
    assert 36 <= d["schemaVersion"] <= 39
    assert d["uid"] and d["title"]
    every = panels(d)
    assert {p["type"] for p in every} == PANEL_TYPES
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    var = variables(d)
    assert var["datasource"]["type"] == "datasource" and var["datasource"]["query"] == "prometheus"
    for name in ("node", "topic", "channel"):
        assert var[name]["type"] == "query"
        assert variable_query(var[name]).startswith("label_values(")
        assert var[name]["datasource"]["uid"] == "${datasource}"
    for p in every:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), p["title"]
    # inside the 24 columns, no two panels on the same cells
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        assert g["x"] + g["w"] <= 24
        cells |= mine


def _regex_any(values: list[str]) -> str:
    """A multi-value variable as Grafana's Prometheus data source writes it
    in a regex matcher: each value regex-escaped, the backslashes escaped
    again for the PromQL string."""
    return "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in values) + ")"


def _cases(m: Monitored) -> dict[str, dict[str, str]]:
    nodes = m.nsqds + [m.lookupd]
    return {
        "All": {"datasource": "prometheus", "node": ".*", "topic": ".*", "channel": ".*"},
        "one each": {"datasource": "prometheus", "node": _regex_any(nodes), "topic": "orders", "channel": "fast"},
    }


def test_template_variables_list_the_cluster(monitored: Monitored) -> None:
    """The ``label_values(selector, label)`` queries, as Grafana's
    Prometheus data source runs them (``/api/v1/label/<label>/values``)."""
    m = monitored
    var = variables(load())
    found = {}
    for name in ("node", "topic", "channel"):
        query = substitute(variable_query(var[name]), _cases(m)["All"])
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert match, query
        found[name] = set(m.prometheus.api(f"label/{match.group(2)}/values", **{"match[]": match.group(1)}))
    assert found["node"] == set(m.nsqds) | {m.lookupd}
    assert {"orders", "clicks", "orders.fast.dead"} <= found["topic"]
    assert {"fast", "slow", "stream"} <= found["channel"]


def test_every_expression_parses_and_returns_data(monitored: Monitored) -> None:
    m = monitored
    exprs = [(p["title"], t["expr"]) for p in panels(load()) for t in p["targets"]]
    evaluated = 0
    empty = []
    for case, values in _cases(m).items():
        for title, expr in exprs:
            query = substitute(expr, values)
            result = m.prometheus.query(query)  # AssertionError unless it parses and runs
            evaluated += 1
            if not result:
                empty.append((case, title, query))
    assert empty == []
    print(f"\n{len(exprs)} dashboard expressions x {len(_cases(m))} variable settings: "
          f"{evaluated} queries evaluated, each with data")
