"""The ``crash_deep`` marker: the long explorations (bigger workloads, every
seed, the whole I/O-error sweep) run only when asked for, with ``-m
crash_deep`` or ``NSQ_CRASH_DEEP=1``; the default run checks its 10,000
crash states in well under 3 minutes."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "crash_deep: long crash-state explorations (tests/crash), skipped unless "
                                       "selected with -m crash_deep or NSQ_CRASH_DEEP=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("NSQ_CRASH_DEEP") == "1" or "crash_deep" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long exploration: -m crash_deep or NSQ_CRASH_DEEP=1 runs it")
    for item in items:
        if item.get_closest_marker("crash_deep"):
            item.add_marker(skip)
