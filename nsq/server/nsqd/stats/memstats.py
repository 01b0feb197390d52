"""nsqd's memory figures: Go's ``memStats`` (``/stats`` ``memory``, statsd
``mem.*``) mapped to what CPython can tell cheaply.

:class:`MemoryStats` has the keys of Go's ``memStats`` and
:func:`memory_stats` fills them as Go's ``getMemStats`` does (nsqd/stats.go),
from CPython figures (its docstring says which). :class:`GCPauses` keeps the
durations of the last 256 garbage collections, as Go's
``runtime.MemStats.PauseNs``, and picks their percentiles by Go's
``percentile`` rule (nsqd/statsd.go); :data:`GC_PAUSES` is the process-wide
recorder a running nsqd holds.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["MemoryStats", "GCPauses", "GC_PAUSES", "memory_stats"]


@dataclass(slots=True)
class MemoryStats:
    """Go's ``memStats`` keys mapped to CPython figures (:func:`memory_stats`
    says which); JSON keys in this order."""

    heap_objects: int
    heap_idle_bytes: int
    heap_in_use_bytes: int
    heap_released_bytes: int
    #: us
    gc_pause_usec_100: int
    gc_pause_usec_99: int
    gc_pause_usec_95: int
    next_gc_bytes: int
    gc_total_runs: int

    def to_json(self) -> dict[str, int]:
        """The ``/stats`` ``memory`` object."""
        return {
            "heap_objects": self.heap_objects,
            "heap_idle_bytes": self.heap_idle_bytes,
            "heap_in_use_bytes": self.heap_in_use_bytes,
            "heap_released_bytes": self.heap_released_bytes,
            "gc_pause_usec_100": self.gc_pause_usec_100,
            "gc_pause_usec_99": self.gc_pause_usec_99,
            "gc_pause_usec_95": self.gc_pause_usec_95,
            "next_gc_bytes": self.next_gc_bytes,
            "gc_total_runs": self.gc_total_runs,
        }


class GCPauses:
    """Durations of CPython's last 256 garbage collections (Go keeps the last
    256 GC pauses in ``runtime.MemStats.PauseNs``).

    Installed as a :data:`gc.callbacks` hook while at least one nsqd runs
    (:meth:`acquire` / :meth:`release`, reference counted): two calls of a
    small function per collection, nothing per message.
    """

    SIZE = 256

    def __init__(self) -> None:
        self.pauses_ns: deque[int] = deque(maxlen=self.SIZE)
        self._started = 0
        self._users = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.pauses_ns.append(time.perf_counter_ns() - self._started)
            self._started = 0

    def acquire(self) -> None:
        """Start recording (first user installs the hook)."""
        self._users += 1
        if self._users == 1:
            gc.callbacks.append(self._callback)

    def release(self) -> None:
        """Stop recording (last user removes the hook)."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users == 0:
            try:
                gc.callbacks.remove(self._callback)
            except ValueError:
                pass
            self._started = 0

    def percentiles_usec(self) -> tuple[int, int, int]:
        """(100th, 99th, 95th) percentile of the recorded pauses in us, by
        Go statsd.go's ``percentile`` rule (sorted, index
        ``floor(p/100 * len + 0.5)`` capped at the last); zeros if none."""
        pauses = sorted(self.pauses_ns)
        length = len(pauses)
        if not length:
            return 0, 0, 0

        def pick(p: float) -> int:
            index = min(int(math.floor(p / 100.0 * length + 0.5)), length - 1)
            return pauses[index] // 1000

        return pick(100.0), pick(99.0), pick(95.0)


#: the process-wide GC pause recorder (nsqd acquires it while running)
GC_PAUSES = GCPauses()


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:  # no /proc (macOS, BSD): the peak RSS is the best cheap figure
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    except (ImportError, OSError, ValueError):
        return 0


def memory_stats() -> MemoryStats:
    """Go's ``memStats`` keys (``/stats`` ``memory``, statsd ``mem.*``) mapped
    to what CPython can tell cheaply.

    ============================ ==============================================
    key                          CPython figure
    ============================ ==============================================
    heap_objects                 ``sys.getallocatedblocks()``: memory blocks
                                 allocated by the interpreter (Go: live heap
                                 objects)
    heap_idle_bytes              0 (Go: idle heap spans; not exposed)
    heap_in_use_bytes            resident set size, bytes (``/proc/self/statm``;
                                 elsewhere the peak RSS from ``getrusage``)
    heap_released_bytes          0 (Go: heap returned to the OS; not exposed)
    gc_pause_usec_100 / 99 / 95  percentiles of the last 256 garbage
                                 collections' durations, us (:data:`GC_PAUSES`;
                                 0 while no nsqd runs in the process)
    next_gc_bytes                0 (CPython collects by allocation counts,
                                 not heap bytes)
    gc_total_runs                collections so far, all generations
                                 (``gc.get_stats()``)
    ============================ ==============================================
    """
    p100, p99, p95 = GC_PAUSES.percentiles_usec()
    return MemoryStats(
        heap_objects=sys.getallocatedblocks(),
        heap_idle_bytes=0,
        heap_in_use_bytes=_rss_bytes(),
        heap_released_bytes=0,
        gc_pause_usec_100=p100,
        gc_pause_usec_99=p99,
        gc_pause_usec_95=p95,
        next_gc_bytes=0,
        gc_total_runs=sum(s["collections"] for s in gc.get_stats()),
    )
