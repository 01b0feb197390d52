"""Graceful drain before a shutdown (beyond Go nsqd, where SIGTERM closes
at once; nsqio/nsq #1254 asks for this).

:class:`DrainController` is owned by :class:`~nsq.server.nsqd.nsqd.NSQD`
(``nsqd.drainer``); ``NSQD.drain``, ``request_drain``, ``skip_drain`` and
``in_flight_count`` call it. ``nsq nsqd --drain-timeout`` drains on
SIGTERM/SIGINT (``serve_daemon`` in nsq/commands/_go.py); ``POST /drain``
calls :meth:`DrainController.request`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsq.server.nsqd.nsqd import NSQD

__all__ = ["DrainController"]

log = logging.getLogger("nsq.nsqd")


class DrainController:
    """Draining one nsqd: :meth:`drain`, :meth:`skip`, :meth:`request`.

    The daemon's ``draining`` flag (read by topics, channels and HTTP) is
    set here, on the daemon itself.
    """

    #: s between checks of what is still in flight while draining
    POLL = 0.05

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        #: set to end a drain's wait early (a second SIGTERM); made by the first drain
        self._skip: asyncio.Event | None = None

    def in_flight_count(self) -> int:
        """Messages in flight over every channel."""
        return sum(len(c.in_flight) for t in self.nsqd.topics.values() for c in t.channels.values())

    async def drain(self, timeout: float) -> bool:
        """Drain before a shutdown (see :meth:`NSQD.drain
        <nsq.server.nsqd.nsqd.NSQD.drain>`), waiting at most ``timeout`` s.

        Returns:
            True if nothing was left in flight.
        """
        nsqd = self.nsqd
        if nsqd.exiting:
            return self.in_flight_count() == 0
        if not nsqd.draining:
            nsqd.draining = True
            log.info("NSQ: draining (up to %.1fs for %d messages in flight)", timeout, self.in_flight_count())
            self._skip = asyncio.Event()
            await nsqd.lookupds.close()
            nsqd.stop_accepting()
        skip = self._skip
        assert skip is not None  # made above by the first drain
        deadline = time.monotonic() + timeout
        while self.in_flight_count() and not skip.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(skip.wait(), min(self.POLL, left))
            except asyncio.TimeoutError:
                pass
        remaining = self.in_flight_count()
        if remaining:
            log.warning("NSQ: drain ended with %d messages in flight (kept for the next start)", remaining)
        else:
            log.info("NSQ: drained")
        return remaining == 0

    def skip(self) -> None:
        """End a drain's wait now (a second SIGTERM)."""
        if self._skip is not None:
            self._skip.set()

    def request(self) -> None:
        """``POST /drain``: drain (``--drain-timeout``) and stop, in the
        background; ``NSQD.wait_stopped`` returns once it is done."""
        nsqd = self.nsqd
        if nsqd.draining or nsqd.exiting:
            return

        async def drain_and_stop() -> None:
            await self.drain(nsqd.options.drain_timeout)
            await nsqd.stop()

        nsqd.run_in_background(drain_and_stop())
