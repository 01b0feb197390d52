"""``nsq stat`` as a library: Go nsq_stat's plain report.

Plain, pipe-friendly output as Go nsq_stat v1.2 prints it (nsqio/nsq
``apps/nsq_stat/nsq_stat.go``; https://nsq.io/components/utilities.html#nsq_stat):
a header every 25 reports, then per interval the ingress and egress rates
(messages/s) and the channel's depth (total, memory, disk), in-flight,
deferred, requeued, timed out, messages and clients, summed over every nsqd
that has the topic. The first poll only sets the base for the rates, so
``count`` N makes N+1 polls and prints N rows, as Go's does (its loop runs
``i`` from 0 to N); any error ends the report (Go's ``log.Fatalf``).
Beyond Go, an nsqd that is a replica or a leader with replicas adds a
``replication:`` line before each row (:func:`nsq.cluster.stat.replication_line`).

The polling and the line format are :mod:`nsq.cluster.stat`'s, shared with
the live TUI (:mod:`nsq.tui.stat`).
"""

from __future__ import annotations

import asyncio
from typing import IO

from nsq.cluster.stat import FIELDS, NodeReport, PlainWriter, StatPoller, StatReport

__all__ = ["FIELDS", "NodeReport", "PlainWriter", "StatError", "StatPoller", "StatReport", "run_plain"]


class StatError(Exception):
    """The report ended on an error (the text Go nsq_stat logs before exiting)."""


async def run_plain(poller: StatPoller, out: IO[str], *, count: int | None = None,
                    stop: asyncio.Event | None = None) -> int:
    """Poll every ``poller.interval`` seconds and write nsq_stat's lines to ``out``.

    Args:
        poller: what to poll (closed before returning).
        out: a text stream; a closed pipe ends the report quietly.
        count: rows to print (N+1 polls; None: until ``stop``).
        stop: set to end the report early (SIGINT, SIGTERM).

    Returns:
        0.

    Raises:
        StatError: a poll failed (every lookupd, an nsqd, or the channel is
            on no nsqd), with nsq_stat's message.
    """
    writer = PlainWriter(out)
    stop = stop or asyncio.Event()
    try:
        i = 0
        while count is None or i <= count:
            report = await poller.poll()
            error = report.first_error
            if error:
                raise StatError(error)
            writer.write(report)
            try:
                out.flush()
            except BrokenPipeError:
                return 0
            i += 1
            if count is not None and i > count:
                return 0
            try:
                await asyncio.wait_for(stop.wait(), poller.interval)
                return 0
            except TimeoutError:
                pass
    finally:
        await poller.close()
    return 0
