"""What the cluster fault tests count, and the load they make.

- :class:`Stream`: one stream of unique message bodies: what nsqd
  acknowledged (``OK``) and when each consumer got what; lost, duplicates,
  longest gap between deliveries.
- :class:`Row`: one line of the closing table.
- :class:`FailoverPublisher`: :class:`~nsq.client.Producer` s behind a round
  robin that moves on to the next nsqd after a failed publish.

Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.faults.cluster import ClientProcess

__all__ = ["Stream", "Row", "FailoverPublisher", "RETRYABLE"]


class Row:
    """One line of the closing table (times in seconds, None: not measured)."""

    COLUMNS = ("scenario", "stream", "acknowledged", "delivered", "lost", "duplicates", "longest gap s",
               "recover s", "notes")

    def __init__(self, scenario: str, stream: str, acknowledged: int, delivered: int, lost: int, duplicates: int,
                 gap: float | None, recover: float | None, note: str = "") -> None:
        self.values = (scenario, stream, acknowledged, delivered, lost, duplicates, gap, recover)
        self.note = note

    def cells(self) -> list[str]:
        out = []
        for v in self.values:
            if v is None:
                out.append("-")
            elif isinstance(v, float):
                out.append(f"{v:.2f}")
            else:
                out.append(str(v))
        return out

    def line(self) -> str:
        return "| " + " | ".join([*self.cells(), self.note]) + " |"


class Stream:
    """One stream of unique bodies (``b"<name>:<seq>"``), as one consumer sees it.

    Args:
        name: the bodies' prefix.
        label: what the table calls it (default ``name``).

    Attributes:
        acked: bodies nsqd answered ``OK`` to (or, for a tool that only
            reports at exit, every body it exited 0 on).
        deliveries: ``(time, body)`` per message handed to a consumer.
    """

    def __init__(self, name: str, label: str = "") -> None:
        self.name = name
        self.label = label or name
        self.acked: set[bytes] = set()
        self.deliveries: list[tuple[float, bytes]] = []
        self._seq = 0
        self._proc: ClientProcess | None = None
        self._pulled = 0

    def view(self, label: str) -> Stream:
        """Another consumer's view of the same bodies (another channel): it
        shares ``acked``, and has its own deliveries."""
        other = Stream(self.name, label)
        other.acked = self.acked
        return other

    def attach(self, proc: ClientProcess) -> Stream:
        """Take deliveries from ``proc``'s stdout lines (one body per line)."""
        self._proc = proc
        return self

    def _pull(self) -> None:
        if self._proc is not None:
            lines = self._proc.lines
            n = len(lines)
            for t, line in lines[self._pulled:n]:
                self.deliveries.append((t, self.key(line)))
            self._pulled = n

    def next_body(self, pad: int = 0) -> bytes:
        """A new body: ``name:seq`` and, with ``pad``, a space and ``pad`` x's."""
        self._seq += 1
        body = f"{self.name}:{self._seq}".encode()
        return body + b" " + b"x" * pad if pad else body

    def numbered(self, count: int) -> bytes:
        """Bodies ``name:1`` .. ``name:count``, one per line (a tool's stdin)."""
        return b"".join(b"%s:%d\n" % (self.name.encode(), i) for i in range(1, count + 1))

    def ack_numbered(self, count: int) -> None:
        """:meth:`numbered`'s bodies were all acknowledged (the tool exited 0)."""
        for i in range(1, count + 1):
            self.ack(b"%s:%d" % (self.name.encode(), i))

    def check(self, gap: float, max_gap: float) -> None:
        """Assert that something was acknowledged, that every acknowledged
        body was delivered, and that no gap in deliveries passed ``max_gap`` s."""
        assert self.acked, f"{self.label}: nothing was acknowledged"
        assert not self.lost(), f"{self.label}: {len(self.lost())} acknowledged messages never delivered"
        assert gap <= max_gap, f"{self.label}: a {gap:.1f} s gap in deliveries"

    @staticmethod
    def key(body: bytes) -> bytes:
        """The ``name:seq`` part of a body."""
        return body.split(b" ", 1)[0]

    def ack(self, body: bytes) -> None:
        self.acked.add(self.key(body))

    def got(self, body: bytes, t: float | None = None) -> None:
        self.deliveries.append((time.monotonic() if t is None else t, self.key(body)))

    def delivered(self) -> set[bytes]:
        self._pull()
        return {b for _, b in self.deliveries}

    def lost(self) -> set[bytes]:
        return self.acked - self.delivered()

    def duplicates(self) -> int:
        unique = self.delivered()
        return len(self.deliveries) - len(unique)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time in [start, end] without a delivery (s)."""
        self._pull()
        times = sorted(t for t, _ in self.deliveries if start <= t <= end)
        points = [start, *times, end]
        return max(b - a for a, b in zip(points, points[1:]))

    async def wait_delivered(self, timeout: float) -> bool:
        """Poll until every acknowledged body was delivered; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.lost():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    def row(self, scenario: str, gap: float | None, recover: float | None, note: str = "") -> Row:
        return Row(scenario, self.label, len(self.acked), len(self.delivered()), len(self.lost()),
                   self.duplicates(), gap, recover, note)


#: errors after which a publish may go to another nsqd: the connection is
#: gone or never came (the message may or may not have been written)
def _retryable() -> tuple[type[BaseException], ...]:
    from nsq.client.errors import ConnectionClosedError

    return (ConnectionClosedError, OSError, asyncio.TimeoutError)


RETRYABLE = _retryable()


class FailoverPublisher:
    """:class:`~nsq.client.Producer` s, one per nsqd, behind a round robin:
    a publish that fails on a lost connection goes to the next nsqd, and the
    failed one is skipped for ``down_for`` seconds.

    Publishes run as tasks (up to ``window`` at once), so one nsqd that
    stops answering holds only its own share until the client gives up on
    its connection.
    """

    def __init__(self, addresses: list[str], identify: dict[str, Any] | None = None, down_for: float = 1.0,
                 window: int = 1000) -> None:
        from nsq.client import Producer

        self.producers = [Producer(a, identify, connect_timeout=2.0) for a in addresses]
        self.down_until = [0.0] * len(addresses)
        self.down_for = down_for
        self.failures = 0
        #: the errors of publishes that gave up (never acknowledged)
        self.errors: list[str] = []
        self._next = 0
        self._tasks: set[asyncio.Task] = set()
        self._window = asyncio.Semaphore(window)
        self.acked_by: dict[str, int] = {a: 0 for a in addresses}

    def _pick(self) -> int:
        n = len(self.producers)
        now = time.monotonic()
        for _ in range(n):
            i = self._next % n
            self._next += 1
            if self.down_until[i] <= now:
                return i
        i = self._next % n  # every one is down: try the next anyway
        self._next += 1
        return i

    async def publish(self, topic: str, body: bytes, attempts: int = 12) -> None:
        """Publish ``body``, moving on after failures; raises the last error
        after ``attempts`` tries."""
        last: BaseException | None = None
        for _ in range(attempts):
            i = self._pick()
            producer = self.producers[i]
            try:
                await producer.publish(topic, body)
                self.acked_by[producer.address] += 1
                return
            except RETRYABLE as exc:
                last = exc
                self.failures += 1
                self.down_until[i] = time.monotonic() + self.down_for
                await asyncio.sleep(0.05)
        assert last is not None
        raise last

    async def run(self, topic: str, stream: Stream, rate: float, until: asyncio.Event, pad: int = 0) -> None:
        """Publish new bodies of ``stream`` at ``rate`` per second until
        ``until`` is set; each body acknowledged goes to ``stream.acked``."""
        start = time.monotonic()
        sent = 0
        while not until.is_set():
            delay = start + sent / rate - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(until.wait(), delay)
                    break
                except asyncio.TimeoutError:
                    pass
            await self._window.acquire()
            body = stream.next_body(pad)
            task = asyncio.ensure_future(self._one(topic, body, stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            sent += 1

    async def _one(self, topic: str, body: bytes, stream: Stream) -> None:
        try:
            await self.publish(topic, body)
            stream.ack(body)
        except Exception as exc:  # never acknowledged: not counted
            self.errors.append(repr(exc))
        finally:
            self._window.release()

    async def drain(self, timeout: float = 30) -> None:
        """Wait for the publishes still running."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def close(self) -> None:
        await self.drain(5)
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*(p.close(timeout=1) for p in self.producers), return_exceptions=True)
