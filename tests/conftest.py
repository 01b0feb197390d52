"""Fixtures shared by every test package: an in-process nsqd on loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
import logging
from typing import Any

import pytest

from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.options import NSQDOptions


@pytest.fixture(autouse=True)
def _restore_nsq_logger():
    """Commands run in-process (pytest-console-scripts) call setup_logging,
    which gives the ``nsq`` logger its own handler and stops propagation;
    put it back so later tests' ``caplog`` sees nsq's records."""
    logger = logging.getLogger("nsq")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved


@pytest.fixture
async def make_nsqd() -> AsyncIterator[Callable[..., Awaitable[NSQD]]]:
    """Factory: ``await make_nsqd(mem_queue_size=5)`` starts an nsqd."""
    started: list[NSQD] = []

    async def factory(**options: Any) -> NSQD:
        options.setdefault("tcp_address", "127.0.0.1:0")
        options.setdefault("http_address", "127.0.0.1:0")
        options.setdefault("https_address", "127.0.0.1:0")  # used only with a TLS cert
        opts = NSQDOptions(**options)
        d = NSQD(opts)
        await d.start()
        started.append(d)
        return d

    yield factory
    for d in started:
        await d.stop()
