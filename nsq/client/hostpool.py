"""Choosing one of several upstream hosts per request (sans-IO).

The Go utilities that fan out to several endpoints (``nsq_to_http``,
``nsq_to_nsq``; https://nsq.io/components/utilities.html) take ``--mode``:

- ``round-robin``: a counter, incremented *before* use, indexes the host
  list; so the first request goes to the second host (Go v1.2's
  ``atomic.AddUint64(&counter, 1) % len``). Failures change nothing.
- ``hostpool`` (bitly/go-hostpool ``New``): round-robin over the hosts not
  marked dead. A failure marks a live host dead for 30 s; once that time has
  passed the host gets one request, and its next retry wait doubles (60 s,
  120 s ... up to 900 s) until a success makes it live again. When every
  host is dead, all are made live again and the first host is returned.
- ``epsilon-greedy`` (go-hostpool ``NewEpsilonGreedy`` with the linear
  value calculator and the default 5 min decay): with probability epsilon
  (0.3 at first, times 0.9 after each exploration, never below 0.01) a
  ``hostpool`` pick; otherwise a random pick weighted by
  ``1 / weighted-average response time`` over the last 5 minutes (120
  buckets, newer buckets weigh more). Hosts with no timing yet are reached
  only by exploration or by the ``hostpool`` fall-back.

Every chooser has ``get() -> host`` and ``mark(host, ok, elapsed)``;
``elapsed`` is the request's duration in seconds. Time comes from the
``clock`` argument (seconds, monotonic) and randomness from ``rng``, so the
choices are testable without sleeping. Not thread-safe (one event loop).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable

__all__ = ["RoundRobin", "HostPool", "EpsilonGreedy", "make_chooser", "MODES"]

#: the ``--mode`` values, Go v1.2's set
MODES = ("round-robin", "hostpool", "epsilon-greedy")


class RoundRobin:
    """Go's ``--mode=round-robin``: cycle the hosts, ignoring failures.

    Raises:
        ValueError: no hosts.
    """

    def __init__(self, hosts: Iterable[str]) -> None:
        self.hosts = list(hosts)
        if not self.hosts:
            raise ValueError("no hosts")
        self._counter = 0

    def get(self) -> str:
        """The next host (the first call returns the second host, as Go)."""
        self._counter += 1
        return self.hosts[self._counter % len(self.hosts)]

    def mark(self, host: str, ok: bool, elapsed: float = 0.0) -> None:
        """Nothing: round-robin does not track results."""


class _Host:
    __slots__ = ("name", "dead", "next_retry", "retry_delay", "retry_count", "counts", "totals")

    def __init__(self, name: str, retry_delay: float) -> None:
        self.name = name
        self.dead = False
        self.next_retry = 0.0
        self.retry_delay = retry_delay
        self.retry_count = 0
        self.counts: list[int] = []
        self.totals: list[float] = []

    def can_try(self, now: float) -> bool:
        """True if the host is alive or its retry time (s, clock) has come."""
        return not self.dead or self.next_retry < now

    def will_retry(self, now: float, max_interval: float) -> None:
        """Schedule the next try of a dead host: the delay (s) doubles, at most ``max_interval``."""
        self.retry_count += 1
        self.retry_delay = min(self.retry_delay * 2, max_interval)
        self.next_retry = now + self.retry_delay


class HostPool:
    """go-hostpool's standard pool: round-robin over live hosts, failed
    hosts retried after a growing delay.

    Args:
        hosts: host names (URLs for nsq_to_http); order is the round-robin
            order; a repeated host counts once.
        initial_retry_delay: seconds a host stays dead after its first failure (30).
        max_retry_interval: the longest wait between retries of a dead host (900 s).
        clock: monotonic seconds.

    Raises:
        ValueError: no hosts.
    """

    def __init__(self, hosts: Iterable[str], initial_retry_delay: float = 30.0, max_retry_interval: float = 900.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        names = list(dict.fromkeys(hosts))
        if not names:
            raise ValueError("no hosts")
        self.initial_retry_delay = initial_retry_delay
        self.max_retry_interval = max_retry_interval
        self.clock = clock
        self._list = [_Host(n, initial_retry_delay) for n in names]
        self._by_name = {h.name: h for h in self._list}
        self._next = 0

    @property
    def hosts(self) -> list[str]:
        """The host names, in the order given."""
        return [h.name for h in self._list]

    def is_dead(self, host: str) -> bool:
        """True while ``host`` is marked failed."""
        return self._by_name[host].dead

    def get(self) -> str:
        """The next live host, or a dead one whose retry time has come."""
        return self._round_robin(self.clock())

    def _round_robin(self, now: float) -> str:
        count = len(self._list)
        for i in range(count):
            index = (self._next + i) % count
            h = self._list[index]
            if not h.dead:
                self._next = index + 1
                return h.name
            if h.next_retry < now:
                h.will_retry(now, self.max_retry_interval)
                self._next = index + 1
                return h.name
        for h in self._list:  # every host is down: start over
            h.dead = False
        self._next = 0
        return self._list[0].name

    def mark(self, host: str, ok: bool, elapsed: float = 0.0) -> None:
        """Record a request's result: a success revives ``host``; a failure
        of a live host marks it dead for ``initial_retry_delay``.

        Raises:
            KeyError: ``host`` is not in the pool.
        """
        h = self._by_name[host]
        if ok:
            h.dead = False
            return
        if not h.dead:
            h.dead = True
            h.retry_count = 0
            h.retry_delay = self.initial_retry_delay
            h.next_retry = self.clock() + h.retry_delay


class EpsilonGreedy(HostPool):
    """go-hostpool's epsilon-greedy pool: mostly the fastest hosts, sometimes
    (epsilon) a plain :class:`HostPool` pick.

    Args:
        hosts, initial_retry_delay, max_retry_interval, clock: as :class:`HostPool`.
        decay_duration: seconds of response times remembered (300; split in
            120 buckets, the oldest dropped as time passes).
        rng: a :class:`random.Random` (seeded in tests).
        value: maps a weighted average response time (ms) to a weight;
            go-hostpool's linear calculator ``1 / v`` by default.
    """

    BUCKETS = 120
    INITIAL_EPSILON = 0.3
    EPSILON_DECAY = 0.90
    MIN_EPSILON = 0.01

    def __init__(self, hosts: Iterable[str], decay_duration: float = 300.0, initial_retry_delay: float = 30.0,
                 max_retry_interval: float = 900.0, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None, value: Callable[[float], float] | None = None) -> None:
        super().__init__(hosts, initial_retry_delay, max_retry_interval, clock)
        if decay_duration <= 0:
            decay_duration = 300.0
        self.epsilon = self.INITIAL_EPSILON
        self.rng = rng or random.Random()
        self.value = value or (lambda v: 1.0 / v)
        self._bucket_span = decay_duration / self.BUCKETS
        self._start = clock()
        self._tick = 0  # buckets advanced so far
        for h in self._list:
            h.counts = [0] * self.BUCKETS
            h.totals = [0.0] * self.BUCKETS

    def _advance(self, now: float) -> int:
        """Drop the buckets that aged out; returns the current bucket index."""
        tick = int((now - self._start) / self._bucket_span)
        steps = min(tick - self._tick, self.BUCKETS)
        for s in range(1, steps + 1):
            i = (self._tick + s) % self.BUCKETS
            for h in self._list:
                h.counts[i] = 0
                h.totals[i] = 0.0
        if tick > self._tick:
            self._tick = tick
        return self._tick % self.BUCKETS

    def average_ms(self, host: str) -> float:
        """The weighted average response time of ``host`` in ms (0 if none
        recorded): newer buckets weigh more; an empty bucket repeats the
        last non-empty older one (go-hostpool's formula)."""
        current = self._advance(self.clock())
        h = self._by_name[host]
        total = 0.0
        last = 0.0
        for i in range(1, self.BUCKETS + 1):  # oldest first
            pos = (current + i) % self.BUCKETS
            weight = i / self.BUCKETS
            if h.counts[pos]:
                last = h.totals[pos] / h.counts[pos]
            total += last * weight
        return total

    def get(self) -> str:
        """The host for the next request: explore (round robin) with
        probability epsilon, else the best by recent response time."""
        now = self.clock()
        if self.rng.random() < self.epsilon:  # explore
            self.epsilon = max(self.epsilon * self.EPSILON_DECAY, self.MIN_EPSILON)
            return self._round_robin(now)
        candidates: list[tuple[_Host, float]] = []
        for h in self._list:
            if h.can_try(now):
                avg = self.average_ms(h.name)
                if avg > 0:
                    candidates.append((h, self.value(avg)))
        total = sum(v for _, v in candidates)
        if candidates and total > 0:
            pick = self.rng.random() * total
            ceiling = 0.0
            for h, v in candidates:
                ceiling += v
                if pick <= ceiling:
                    if h.dead:
                        h.will_retry(now, self.max_retry_interval)
                    return h.name
        return self._round_robin(now)

    def mark(self, host: str, ok: bool, elapsed: float = 0.0) -> None:
        """As :meth:`HostPool.mark`; a success also records ``elapsed`` (s)."""
        super().mark(host, ok, elapsed)
        if ok:
            current = self._advance(self.clock())
            h = self._by_name[host]
            h.counts[current] += 1
            h.totals[current] += elapsed * 1000.0


def make_chooser(mode: str, hosts: Iterable[str], clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> RoundRobin | HostPool:
    """The chooser for a Go ``--mode`` value.

    Raises:
        ValueError: unknown mode or no hosts.
    """
    if mode == "round-robin":
        return RoundRobin(hosts)
    if mode == "hostpool":
        return HostPool(hosts, clock=clock)
    if mode == "epsilon-greedy":
        return EpsilonGreedy(hosts, clock=clock, rng=rng)
    raise ValueError(f"unknown mode {mode!r}")
