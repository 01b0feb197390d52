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

The kernel's own busy polling (``SO_BUSY_POLL``, ``net.core.busy_poll``)
needs a NIC driver with NAPI busy-poll support and does nothing for
loopback; this works on any socket. Measured in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio

__all__ = ["Spinner"]


class Spinner:
    """Keeps ``loop`` polling for ``window`` seconds after the last
    :meth:`touch`.

    Attributes:
        window: how long to keep polling after a read (s, > 0).
        running: a spin callback is scheduled.
        turns: loop turns spent spinning (for tests and benchmarks).
    """

    __slots__ = ("_loop", "_until", "running", "turns", "window")

    def __init__(self, loop: asyncio.AbstractEventLoop, window: float) -> None:
        if window <= 0:
            raise ValueError(f"spin window must be positive, not {window!r}")
        self._loop = loop
        self.window = window
        self._until = 0.0
        self.running = False
        self.turns = 0

    def touch(self, now: float) -> None:
        """A read happened at ``now`` (``loop.time()``, s): poll until
        ``now + window``."""
        self._until = now + self.window
        if not self.running:
            self.running = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        self.turns += 1
        if self._loop.time() < self._until:
            self._loop.call_soon(self._spin)  # a ready callback: the next poll does not block
        else:
            self.running = False
