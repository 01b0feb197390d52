"""Spin before sleep: keep an event loop polling, not sleeping, for a short
window after each read (``nsq nsqd --spin-before-sleep``, off by default).

An idle event loop blocks in ``epoll_wait``; the next request then pays the
kernel's wake-up of the sleeping thread (tens of µs on a virtual machine)
before any of our code runs. While a :class:`Spinner` is running, the loop
always has a callback ready, so each turn polls with a zero timeout and
never sleeps: a request that arrives within the window is read at once.
The window restarts at every read and the spinning stops when it lapses,
so an idle daemon uses no CPU; a daemon that gets a request more often
than once per window keeps one core busy.

Spinning only pays while a core is idle: on a machine whose cores are all
busy it takes CPU from the clients and the rest of the daemon's work. So a
window starts only when the kernel's count of runnable tasks
(``/proc/loadavg``, read at most every 20 ms) is below the number of CPUs,
as Go's scheduler spins only while a processor is idle (runtime/proc.go,
``findRunnable``).

Without a window after every read, :meth:`Spinner.touch_alone` starts one
only for a request from a lone source: nsqd's ``--spin-after-lone-pub``
(on by default) for the PUB of the only producer publishing, which waits
for its ``OK`` before the next PUB. Such a producer is often still
runnable on its way into that wait when its PUB is read; a gate that
counts it reads a two-core machine as busy at the very moment a window
would start, so that spinner leaves it out (``peers``).

The kernel's own busy polling (``SO_BUSY_POLL``, ``net.core.busy_poll``)
needs a NIC driver with NAPI busy-poll support and does nothing for
loopback; this works on any socket. Measured in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import os

__all__ = ["Spinner", "runnable_tasks"]

_LOADAVG = "/proc/loadavg"


def runnable_tasks(fd: int) -> int:
    """Tasks runnable now, machine-wide (``/proc/loadavg``'s fourth field,
    ``running/total``; proc(5)), read from ``fd`` (an open ``/proc/loadavg``).

    Raises:
        OSError: ``fd`` cannot be read.
        ValueError, IndexError: the text is not ``/proc/loadavg``'s.
    """
    return int(os.pread(fd, 128, 0).split()[3].split(b"/", 1)[0])


class Spinner:
    """Keeps ``loop`` polling for ``window`` seconds after the last
    :meth:`touch`; with ``when_idle_cpu`` (the default) only while fewer
    tasks are runnable than the machine has CPUs (:func:`runnable_tasks`;
    without ``/proc``, always). ``peers``: tasks left out of that count,
    each runnable when a read comes and then waiting for this loop's answer
    (the lone producer that wrote the PUB): counted, they read as busy
    exactly when a window would start, and the gate would shut it for a
    whole reading.

    Raises:
        ValueError: ``window`` is not positive.

    Attributes:
        window: how long to keep polling after a read (s, > 0).
        running: a spin callback is scheduled.
        turns: loop turns spent spinning (for tests and benchmarks).
    """

    __slots__ = ("_loop", "_until", "running", "turns", "window", "_fd", "_cpus", "_checked", "_idle_cpu",
                 "_last", "_last_at", "_shared_until")

    #: how often the runnable count is read (s)
    CHECK_EVERY = 0.02

    def __init__(self, loop: asyncio.AbstractEventLoop, window: float, when_idle_cpu: bool = True,
                 peers: int = 0) -> None:
        if window <= 0:
            raise ValueError(f"spin window must be positive, not {window!r}")
        self._loop = loop
        self.window = window
        self._until = 0.0
        self.running = False
        self.turns = 0
        self._fd = -1
        if when_idle_cpu:
            try:
                self._fd = os.open(_LOADAVG, os.O_RDONLY | os.O_CLOEXEC)
                runnable_tasks(self._fd)
            except (OSError, ValueError, IndexError):  # no /proc (not Linux): spin always
                self.close()
        self._cpus = (os.cpu_count() or 1) + peers  # the machine's, as the runnable count is
        self._checked = -1.0
        self._idle_cpu = True
        self._last = 0
        self._last_at = -1.0
        self._shared_until = -1.0

    def touch(self, now: float) -> None:
        """A read happened at ``now`` (``loop.time()``, s): poll until
        ``now + window``, if a core is idle."""
        self._until = now + self.window
        if not self.running and self._core_idle(now):
            self.running = True
            self._loop.call_soon(self._spin)

    #: how long (s) after one source's request another source's counts as "at the same time"
    SHARED = 0.001

    def touch_alone(self, source: object, now: float) -> None:
        """As :meth:`touch`, for a request from ``source`` (a connection),
        but only while ``source`` is alone: a request from another source
        within :attr:`SHARED` s of the last one stops the windows for
        :attr:`SHARED` s. A lone producer that waits for each answer
        (PUB, ``OK``, PUB) has its next request read at once; several
        producers keep the loop awake for each other, and spinning
        between them costs CPU without saving a wake-up."""
        key = id(source)  # not the object: a closed connection is not kept alive by it
        if key != self._last:
            if now - self._last_at < self.SHARED:
                self._shared_until = now + self.SHARED
            self._last = key
        self._last_at = now
        if now >= self._shared_until:
            self.touch(now)

    def _core_idle(self, now: float) -> bool:
        """True while a core is idle: the runnable count, read again when
        the last reading is ``CHECK_EVERY`` old (always True without the gate)."""
        if self._fd >= 0 and now - self._checked >= self.CHECK_EVERY:
            self._checked = now
            try:
                self._idle_cpu = runnable_tasks(self._fd) < self._cpus  # this thread is one of them
            except (OSError, ValueError, IndexError):
                self._idle_cpu = True
        return self._idle_cpu

    def close(self) -> None:
        """Stop reading ``/proc/loadavg``: from then on every read starts a
        window, as without the idle-core gate (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._idle_cpu = True

    def _spin(self) -> None:
        self.turns += 1
        now = self._loop.time()
        if now < self._until and self._core_idle(now):
            self._loop.call_soon(self._spin)  # a ready callback: the next poll does not block
        else:
            self.running = False
