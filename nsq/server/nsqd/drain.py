"""Graceful drain before a shutdown (beyond Go nsqd, where SIGTERM closes
at once; nsqio/nsq #1254 asks for this): a mixin of
:class:`~nsq.server.nsqd.nsqd.NSQD` (the attributes it uses are set there).

``nsq nsqd --drain-timeout`` drains on SIGTERM/SIGINT (``serve_daemon`` in
nsq/commands/_go.py); ``POST /drain`` calls :meth:`Draining.request_drain`.
"""

from __future__ import annotations

import asyncio
import logging
import time

__all__ = ["Draining"]

log = logging.getLogger("nsq.nsqd")


class Draining:
    """Draining an nsqd: :meth:`drain`, :meth:`skip_drain`, :meth:`request_drain`."""

    #: s between checks of what is still in flight while draining
    DRAIN_POLL = 0.05

    def in_flight_count(self) -> int:
        """Messages in flight over every channel."""
        return sum(len(c.in_flight) for t in self.topics.values() for c in t.channels.values())

    async def drain(self, timeout: float) -> bool:
        """Drain before a shutdown (beyond Go nsqd): unregister from every
        lookupd (consumers and ``nsq pub`` stop finding this nsqd), stop
        accepting TCP (V2) connections, refuse publishes (``E_PUB_FAILED
        PUB failed draining``, HTTP 503 ``DRAINING``), deliver nothing new,
        and wait until every message in flight is finished or requeued, at
        most ``timeout`` s (:meth:`skip_drain` ends the wait). The HTTP
        listener stays open so health checks see ``/ping`` answer 503
        ``DRAINING`` (and ``/stats`` shows the drain). Call :meth:`stop`
        after it: what is still in flight is persisted as usual.

        Returns:
            True if nothing was left in flight.
        """
        if self.exiting:
            return self.in_flight_count() == 0
        if not self.draining:
            self.draining = True
            log.info("NSQ: draining (up to %.1fs for %d messages in flight)", timeout, self.in_flight_count())
            self._skip_drain = asyncio.Event()
            await self.lookupds.close()
            if self._tcp_server is not None:
                self._tcp_server.close()
        assert self._skip_drain is not None
        deadline = time.monotonic() + timeout
        while self.in_flight_count() and not self._skip_drain.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._skip_drain.wait(), min(self.DRAIN_POLL, left))
            except asyncio.TimeoutError:
                pass
        remaining = self.in_flight_count()
        if remaining:
            log.warning("NSQ: drain ended with %d messages in flight (kept for the next start)", remaining)
        else:
            log.info("NSQ: drained")
        return remaining == 0

    def skip_drain(self) -> None:
        """End a drain's wait now (a second SIGTERM)."""
        if self._skip_drain is not None:
            self._skip_drain.set()

    def request_drain(self) -> None:
        """``POST /drain``: drain (``--drain-timeout``) and stop, in the
        background; :meth:`wait_stopped` returns once it is done."""
        if self.draining or self.exiting:
            return

        async def drain_and_stop() -> None:
            await self.drain(self.options.drain_timeout)
            await self.stop()

        task = asyncio.get_running_loop().create_task(drain_and_stop())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
