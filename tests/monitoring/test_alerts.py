"""contrib/prometheus/nsq-alerts.yml: ``promtool check rules``, its unit
tests (nsq-alerts.test.yml: ``promtool test rules``, a firing and a quiet
case for every rule), and the rules evaluated without error by the test
Prometheus against a real cluster."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

from tests.monitoring.conftest import ALERT_TESTS, ALERTS, Monitored, require_tool, wait_for


def promtool(*args: str) -> str:
    done = subprocess.run([require_tool("promtool"), *args], capture_output=True, text=True, timeout=60,
                          cwd=ALERT_TESTS.parent)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def rule_names() -> list[str]:
    """The alert names of nsq-alerts.yml, in order."""
    return re.findall(r"^\s*- alert: (\w+)\s*$", ALERTS.read_text(), re.M)


def test_promtool_check_rules() -> None:
    output = promtool("check", "rules", str(ALERTS))
    found = re.search(r"SUCCESS: (\d+) rules found", output)
    assert found and int(found.group(1)) == len(rule_names()), output
    print(f"\npromtool check rules: {found.group(1)} rules")


def test_promtool_test_rules() -> None:
    output = promtool("test", "rules", str(ALERT_TESTS))
    assert "SUCCESS" in output, output


def _load(path: Any) -> Any:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(path.read_text())


def test_every_rule_has_a_firing_and_a_quiet_case() -> None:
    rules = [r["alert"] for g in _load(ALERTS)["groups"] for r in g["rules"]]
    assert rules == rule_names() and len(rules) == len(set(rules))
    firing: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for test in _load(ALERT_TESTS)["tests"]:
        for case in test.get("alert_rule_test", []):
            counts = firing if case.get("exp_alerts") else quiet
            counts[case["alertname"]] = counts.get(case["alertname"], 0) + 1
    assert set(firing) == set(rules), "rules without a firing case or tests of unknown rules"
    assert set(quiet) == set(rules), "rules without a quiet case or tests of unknown rules"
    print(f"\n{len(rules)} alert rules; promtool cases: {sum(firing.values())} firing, "
          f"{sum(quiet.values())} quiet")


def test_rules_evaluate_on_the_cluster(monitored: Monitored) -> None:
    """The test Prometheus loaded the rules: each evaluates without error;
    the cluster's channel nobody consumes makes NSQChannelWithoutConsumers
    pending and its dead letters fire NSQDeadLetters, nothing else."""
    prom = monitored.prometheus

    def evaluated() -> list[dict[str, Any]] | None:
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = wait_for(evaluated, "every rule evaluated", timeout=20, interval=0.2)
    assert sorted(r["name"] for r in rules) == sorted(rule_names())
    for r in rules:
        assert r["health"] == "ok" and not r.get("lastError"), r

    def active() -> dict[tuple[str, str], set[tuple[str, str, str]]]:
        out: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        for a in prom.api("alerts")["alerts"]:
            labels = a["labels"]
            key = (labels["alertname"], a["state"])
            out.setdefault(key, set()).add((labels["instance"], labels.get("topic", ""), labels.get("channel", "")))
        return out

    want = {
        ("NSQChannelWithoutConsumers", "pending"): {(n, "orders", "slow") for n in monitored.nsqds},
        ("NSQDeadLetters", "firing"): {(n, "orders", "fast") for n in monitored.nsqds},
    }
    wait_for(lambda: active() == want, f"the alerts {want}", timeout=20, interval=0.2)
    print(f"\n{len(rules)} rules evaluated by Prometheus without error; active: {sorted(want)}")
