"""Status lines of the forwarding tools (``nsq to-http``, ``nsq to-nsq``).

Go v1.2's nsq_to_http and nsq_to_nsq log request/publish timings through
bitly/timer_metrics; :class:`TimerMetrics` is that, sans-IO (no clock, no
logging of its own: the caller measures and decides where lines go).
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["TimerMetrics"]


class TimerMetrics:
    """Durations summarised every ``every`` of them, as bitly/timer_metrics:
    the line is ``<prefix> finished <n> - 99th: <ms>ms - 95th: <ms>ms -
    avg: <ms>ms`` (milliseconds, 2 decimals), then the window starts over.

    Args:
        every: durations per line; <= 0 disables (no line is ever made).
        prefix: ``[aggregate]:`` or ``[<address>]:``.
        emit: called with each line; None (default): the line is only
            returned by :meth:`status`.
    """

    def __init__(self, every: int, prefix: str, emit: Callable[[str], None] | None = None) -> None:
        self.every = every
        self.prefix = prefix
        self.emit = emit
        self._timings: list[float] = []

    @staticmethod
    def percentile(perc: float, ordered: list[float]) -> float:
        """timer_metrics' percentile of an ascending list: the element at
        ``ceil(perc/100 * len + 0.5)``, clamped to the last one; 0.0 for an
        empty list."""
        if not ordered:
            return 0.0
        index = math.ceil(perc / 100.0 * len(ordered) + 0.5)
        return ordered[min(index, len(ordered) - 1)]

    def status(self, seconds: float) -> str | None:
        """Record one duration (seconds). When it completes a window of
        ``every``, return the summary line (after passing it to ``emit``);
        otherwise None."""
        if self.every <= 0:
            return None
        self._timings.append(seconds)
        if len(self._timings) < self.every:
            return None
        ordered = sorted(self._timings)
        self._timings = []
        avg = sum(ordered) / len(ordered)
        line = (f"{self.prefix} finished {len(ordered)} - 99th: {self.percentile(99.0, ordered) * 1000:.2f}ms - "
                f"95th: {self.percentile(95.0, ordered) * 1000:.2f}ms - avg: {avg * 1000:.2f}ms")
        if self.emit is not None:
            self.emit(line)
        return line
