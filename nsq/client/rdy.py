"""RDY flow control and backoff for a consumer, sans-IO.

Sources: https://nsq.io/clients/building_client_libraries.html
("RDY State", "Backoff"); nsqio/go-nsq ``consumer.go`` (``maybeUpdateRDY``,
``perConnMaxInFlight``, ``redistributeRDY``, ``startStopContinueBackoff``).

:class:`RdyController` decides the RDY count of every connection of one
consumer; the :class:`~nsq.client.consumer.Consumer` feeds it events
(connection added or gone, message received, handler result, backoff timer,
periodic tick) with the time, and sends the ``(connection, count)`` pairs it
returns. It never touches a socket or a clock.

Rules (as go-nsq and pynsq apply them):

- A new connection starts at RDY 1 (the number of connections is not
  settled yet), then on its first message gets ``max_in_flight /
  connections`` (at least 1);
  the sum over connections never exceeds ``max_in_flight``, nor one
  connection nsqd's ``max_rdy_count``.
- After each message, RDY is sent again when what is left of the last RDY
  is at most 1 or under 25 % of it.
- With fewer ``max_in_flight`` than connections, every tick takes RDY from
  connections idle for ``low_rdy_idle_timeout`` and gives 1 to random
  others, so an nsqd with messages is found eventually.
- A failed message starts or deepens backoff: RDY 0 everywhere for
  ``backoff_multiplier * 2**level`` seconds (at most ``max_backoff``); when
  that expires one random connection gets RDY 1 to test the waters; each
  success lowers the level, and at 0 every connection gets its share back.
  Results that arrive during a backoff wait are ignored.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["ConnRdy", "RdyController"]

#: a connection as the controller knows it (the consumer uses its Connection objects)
K = TypeVar("K", bound=Hashable)
#: ``(connection, RDY count)`` to send, in order
Sends = list[tuple[K, int]]


@dataclass
class ConnRdy:
    """RDY bookkeeping of one connection.

    Attributes:
        max_rdy: nsqd's ``max_rdy_count`` (IDENTIFY answer; 2500 if unknown).
        rdy: the last RDY count sent.
        remaining: messages still allowed by ``rdy`` (decremented per message).
        last_message: time of the last message (s, caller's clock).
        last_rdy: time the last RDY was sent.
    """

    max_rdy: int = 2500
    rdy: int = 0
    remaining: int = 0
    last_message: float = 0.0
    last_rdy: float = 0.0


class RdyController(Generic[K]):
    """RDY counts and backoff state for one consumer's connections.

    Args:
        max_in_flight: messages in flight over all connections (0 pauses).
        backoff_multiplier: seconds; backoff at level n lasts
            ``backoff_multiplier * 2**n`` (go-nsq's default 1 s).
        max_backoff: seconds; the deepest backoff (go-nsq's 2 min).
        low_rdy_idle_timeout: seconds without a message before a
            connection's RDY may go elsewhere (when connections outnumber
            ``max_in_flight``).
        rng: randomness for picking connections (tests pass a seeded one).
    """

    def __init__(self, max_in_flight: int, backoff_multiplier: float = 1.0, max_backoff: float = 120.0,
                 low_rdy_idle_timeout: float = 10.0, rng: random.Random | None = None) -> None:
        if max_in_flight < 0:
            raise ValueError("max_in_flight must be >= 0")
        self.max_in_flight = max_in_flight
        self.backoff_multiplier = backoff_multiplier
        self.max_backoff = max_backoff
        self.low_rdy_idle_timeout = low_rdy_idle_timeout
        self.rng = rng or random.Random()
        self.conns: dict[K, ConnRdy] = {}
        #: consecutive-failure level (0: not backing off)
        self.backoff_level = 0
        #: True between the start of a backoff wait and its expiry
        self.in_backoff_wait = False
        self.closing = False

    # -- queries -----------------------------------------------------------------

    @property
    def total_rdy(self) -> int:
        """Sum of the RDY counts last sent."""
        return sum(c.rdy for c in self.conns.values())

    def in_backoff(self) -> bool:
        """True while the consumer is backing off (level > 0 or waiting)."""
        return self.backoff_level > 0 or self.in_backoff_wait

    def per_conn(self) -> int:
        """``max_in_flight`` split over the connections, at least 1."""
        n = len(self.conns)
        if not n or not self.max_in_flight:
            return 0
        return max(1, self.max_in_flight // n)

    def backoff_duration(self, level: int) -> float:
        """Seconds of backoff at ``level`` (exponential, capped)."""
        return min(self.backoff_multiplier * (2.0 ** level), self.max_backoff)

    # -- sending -----------------------------------------------------------------

    def _set(self, key: K, count: int, now: float, out: Sends[K]) -> None:
        """Queue RDY ``count`` for ``key``, capped by nsqd's max and by what
        ``max_in_flight`` leaves (go-nsq's updateRDY)."""
        c = self.conns[key]
        count = min(count, c.max_rdy)
        if count > c.rdy:  # lowering (or re-sending) a count is always allowed
            room = self.max_in_flight - (self.total_rdy - c.rdy)
            if room <= 0:
                return
            count = min(count, room)
        c.rdy = count
        c.remaining = count
        c.last_rdy = now
        out.append((key, count))

    # -- events ------------------------------------------------------------------

    def add(self, key: K, max_rdy: int | None, now: float) -> Sends[K]:
        """A connection subscribed: RDY 1 to start (it grows to the share on
        its first message, go-nsq ``maybeUpdateRDY``), others trimmed to the new share.
        Returns the RDY commands to send."""
        self.conns[key] = ConnRdy(max_rdy=max_rdy or 2500, last_message=now)
        out: Sends[K] = []
        if self.closing or not self.max_in_flight:
            return out
        if self.in_backoff():
            if not self.in_backoff_wait and self.total_rdy == 0:
                self._set(key, 1, now, out)  # testing the waters and nobody has RDY yet
            return out
        share = self.per_conn()
        for other, c in self.conns.items():
            if other != key and c.rdy > share:
                self._set(other, share, now, out)
        self._set(key, 1, now, out)
        return out

    def remove(self, key: K, now: float) -> Sends[K]:
        """A connection closed or was dropped; its share goes to the others."""
        self.conns.pop(key, None)
        return self.rebalance(now)

    def rebalance(self, now: float) -> Sends[K]:
        """Give every connection its share (not during backoff or close)."""
        out: Sends[K] = []
        if self.closing or self.in_backoff_wait:
            return out
        if self.in_backoff():
            # the connection testing the waters went away: test on another
            if self.conns and self.total_rdy == 0 and self.max_in_flight:
                self._set(self.rng.choice(list(self.conns)), 1, now, out)
            return out
        share = self.per_conn()
        for key, c in self.conns.items():
            if c.rdy > share:
                self._set(key, share, now, out)
        # more connections at RDY 1 than a lowered max_in_flight: the longest
        # idle give theirs up (tick() hands RDY out again later)
        for key, c in sorted(self.conns.items(), key=lambda kc: kc[1].last_message):
            if self.total_rdy <= self.max_in_flight:
                break
            if c.rdy:
                self._set(key, 0, now, out)
        if len(self.conns) <= self.max_in_flight:
            for key, c in self.conns.items():
                if c.rdy < share:
                    self._set(key, share, now, out)
        return out

    def message(self, key: K, now: float) -> Sends[K]:
        """A message arrived on ``key``: refresh RDY when it runs low."""
        c = self.conns.get(key)
        if c is None:
            return []
        c.last_message = now
        if c.remaining > 0:
            c.remaining -= 1
        if self.closing or self.in_backoff() or c.rdy == 0:
            return []
        if c.remaining <= 1 or c.remaining < c.rdy // 4:
            out: Sends[K] = []
            share = self.per_conn() if len(self.conns) <= self.max_in_flight else c.rdy
            self._set(key, share, now, out)
            return out
        return []

    def result(self, success: bool | None, now: float) -> tuple[Sends[K], float | None]:
        """A handler's outcome: True success, False failure, None neutral.

        Returns:
            (RDY commands, seconds to wait before calling
            :meth:`backoff_expired`, or None).
        """
        if success is None or self.closing or self.in_backoff_wait:
            return [], None
        if success:
            if self.backoff_level == 0:
                return [], None
            self.backoff_level -= 1
            if self.backoff_level == 0:
                out: Sends[K] = []
                share = self.per_conn()
                for key in self.conns:
                    self._set(key, share, now, out)
                return out, None
        elif self.backoff_level == 0 or self.backoff_multiplier * 2 ** (self.backoff_level + 1) <= self.max_backoff:
            self.backoff_level += 1
        out = []
        for key, c in self.conns.items():
            if c.rdy:
                self._set(key, 0, now, out)
        self.in_backoff_wait = True
        return out, self.backoff_duration(self.backoff_level)

    def backoff_expired(self, now: float) -> tuple[Sends[K], float | None]:
        """The backoff wait ended: RDY 1 on one random connection.

        Returns (RDY commands, seconds to wait again if there is no connection).
        """
        self.in_backoff_wait = False
        if self.closing:
            return [], None
        if not self.conns:
            self.in_backoff_wait = True
            return [], 1.0
        out: Sends[K] = []
        key = self.rng.choice(list(self.conns))
        self._set(key, 1, now, out)
        return out, None

    def tick(self, now: float) -> Sends[K]:
        """Periodic check (every few seconds): with more connections than
        ``max_in_flight``, move RDY from idle connections to random others."""
        out: Sends[K] = []
        if self.closing or self.in_backoff_wait or not self.conns:
            return out
        if len(self.conns) <= self.max_in_flight and not self.in_backoff():
            return out
        for key, c in self.conns.items():
            if c.rdy > 0 and now - c.last_message > self.low_rdy_idle_timeout:
                self._set(key, 0, now, out)
        limit = 1 if self.in_backoff() else self.max_in_flight
        available = limit - self.total_rdy
        candidates = [k for k, c in self.conns.items() if c.rdy == 0]
        self.rng.shuffle(candidates)
        for key in candidates[:max(0, available)]:
            self._set(key, 1, now, out)
        return out

    def set_max_in_flight(self, max_in_flight: int, now: float) -> Sends[K]:
        """Change ``max_in_flight`` (0 pauses every connection)."""
        self.max_in_flight = max_in_flight
        out: Sends[K] = []
        if max_in_flight == 0:
            for key, c in self.conns.items():
                if c.rdy:
                    self._set(key, 0, now, out)
            return out
        return self.rebalance(now)

    def close(self, now: float) -> Sends[K]:
        """Stop the flow: RDY 0 everywhere (before CLS)."""
        self.closing = True
        out: Sends[K] = []
        for key, c in self.conns.items():
            if c.rdy:
                self._set(key, 0, now, out)
        return out
