"""Fixtures shared by every test package.

The daemons come from the package's own pytest plugin (nsq/pytest_plugin.py:
``make_nsqd``, ``make_lookupd``, ``make_nsq_cluster``, ``nsqd``, ``lookupd``,
``nsq_cluster`` and the threaded variants), registered by its ``pytest11``
entry point when the package is installed (``pip install -e .``); a checkout
that is only on ``sys.path`` gets it from :func:`pytest_configure` below.
"""

from __future__ import annotations

import logging

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("nsq") and not config.pluginmanager.is_blocked("nsq"):
        from nsq import pytest_plugin

        config.pluginmanager.register(pytest_plugin, "nsq")


@pytest.fixture(autouse=True)
def _restore_nsq_logger():
    """Commands run in-process (pytest-console-scripts) call setup_logging,
    which gives the ``nsq`` logger its own handler and stops propagation;
    put it back so later tests' ``caplog`` sees nsq's records."""
    logger = logging.getLogger("nsq")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved
