"""The I/O-error mode (SQLite's ioerr.test): the Nth call of one kind fails.

One small workload is run once to count the calls it makes under the data
path once nsqd has started (``open``, ``write``, ``fsync``, ``rename``),
then again for each ``N`` with the Nth call of a kind failing with ``EIO``
or ``ENOSPC`` (once, or for a burst of calls), after which the errors stop.
Each run checks that

- nsqd stays up (the workload goes on, ``/ping`` answers);
- what it could not make durable is refused (``E_PUB_FAILED`` and kin),
  and the error is in ``/stats``'s ``health`` when the refusal is answered
  (or was, between the publish and its answer: a one-off error may be
  over by then, nsqd's probe finding that the disk takes writes again);
- once the errors stop it reports OK again and takes publishes;
- nothing it acknowledged is lost: every crash point of the run's log is
  checked with a power cut that drops everything not fsynced (an fsync that
  failed drops its file's unsynced writes for good, as Linux does), and
  every acknowledged message not finished must be there.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .explore import FailureReport, explore
from .workloads import Driver, Recording, Workload, record, scratch_dir
from .vfs import Recorder

__all__ = ["NthCall", "IoErrRun", "IoErrSummary", "count_calls", "run_one", "sweep", "CALLS", "ERRNOS"]

CALLS = ("write", "fsync", "open", "rename")
ERRNOS = (errno.EIO, errno.ENOSPC)


class NthCall:
    """An injector: the ``n``-th call of kind ``call`` (and the ``burst - 1``
    after it) fails with ``err``, counting from :meth:`arm`."""

    def __init__(self, call: str | None, n: int, err: int, burst: int = 1) -> None:
        self.call = call
        self.n = n
        self.err = err
        self.burst = burst
        self.armed = False
        self.counts: dict[str, int] = {}
        self.fired = 0

    def __call__(self, call: str, path: str) -> int | None:
        if not self.armed:
            return None
        self.counts[call] = self.counts.get(call, 0) + 1
        if call == self.call and self.n <= self.counts[call] < self.n + self.burst:
            self.fired += 1
            return self.err
        return None


async def _health(drv: Driver) -> str:
    import aiohttp

    if drv._http is None:
        drv._http = aiohttp.ClientSession()
    async with drv._http.get(f"http://127.0.0.1:{drv.d.http_port}/stats", params={"format": "json"}) as resp:
        return json.loads(await resp.read())["health"]


async def _ping(drv: Driver) -> int:
    import aiohttp

    if drv._http is None:
        drv._http = aiohttp.ClientSession()
    async with drv._http.get(f"http://127.0.0.1:{drv.d.http_port}/ping") as resp:
        await resp.read()
        return resp.status


def _during(injector: NthCall, notes: dict[str, Any]) -> Any:
    """The workload of the I/O-error mode, errors armed in its first part."""

    async def run(drv: Driver, rec: Recorder) -> None:
        t = "io"
        notes.update(refused_healthy=0, refusals=[], stayed_up=True, recovered=False, after_ok=0)

        async def pub(kind: str) -> None:
            before = drv.refused
            start = len(rec.ops)
            if kind == "pub":
                await drv.pub(t, 1)
            elif kind == "mpub":
                await drv.mpub(t, 3)
            else:
                await drv.dpub(t, 600_000)
            if drv.refused > before:
                notes["refusals"].append(drv.errors[-1][:60].decode(errors="replace"))
                # reported: /stats says it now, or it did meanwhile (a one-off error may be
                # over already: the scan's probe finds the disk taking writes again)
                health = [op[2] for op in rec.ops if op[:2] == ("mark", "health")]
                before = [op[2] for op in rec.ops[:start] if op[:2] == ("mark", "health")]
                said = any(h != "OK" for h in health[len(before):]) or bool(before and before[-1] != "OK")
                if await _health(drv) == "OK" and not said:
                    notes["refused_healthy"] += 1

        cons = await drv.consumer(t, "c")
        await drv.pub(t, 1)
        await drv.tick()  # nsqd.dat and the first checkpoint written
        drv.label("errors armed")
        injector.armed = True
        for kind in ("pub", "pub", "mpub", "pub", "dpub", "pub", "pub", "mpub", "pub"):
            await pub(kind)
        got = await cons.take(3)
        for m in got[:2]:
            await cons.fin(m)
        for m in got[2:]:
            await cons.req(m, 20)
        await pub("pub")
        await drv.tick()
        await pub("pub")
        injector.armed = False
        drv.label("errors stopped")
        notes["stayed_up"] = not drv.d.exiting and await _ping(drv) in (200, 500)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if await _health(drv) == "OK":
                notes["recovered"] = True
                break
            await drv.tick()
        for _ in range(3):
            notes["after_ok"] += await drv.pub(t, 1)
        for m in await cons.take(4):
            await cons.fin(m)
        await drv.tick()

    return run


IOERR_WORKLOAD = Workload("ioerr", lambda drv, n: asyncio.sleep(0), options={"max_bytes_per_file": 700})


@dataclass
class IoErrRun:
    engine: str
    call: str
    n: int
    err: int
    burst: int
    fired: int
    acked: int
    refused: int
    refused_healthy: int
    refusals: list[str]
    stayed_up: bool
    recovered: bool
    after_ok: int
    #: acknowledged messages lost that no consumer had taken
    lost: int
    #: acknowledged messages lost that were in flight (delivered, not finished)
    lost_in_flight: int
    #: other broken promises in the crash states (nsqd did not start, a damaged body)
    broken: int
    lost_detail: list[str]
    recording_errors: list[str]
    states: int
    seconds: float
    #: the failing crash states, one per kind (minimized)
    reports: list[FailureReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.stayed_up and self.recovered and self.after_ok == 3 and not self.lost and not self.broken
                and not self.lost_in_flight and not self.refused_healthy and not self.recording_errors)

    def text(self) -> str:
        name = errno.errorcode.get(self.err, str(self.err))
        problems = []
        if self.lost or self.broken or self.lost_in_flight:
            problems.append(f"{self.lost} acknowledged lost ({self.lost_in_flight} more in flight), {self.broken} "
                            f"other: {'; '.join(self.lost_detail[:2])}")
        if self.refused_healthy:
            problems.append(f"{self.refused_healthy} refusals with /stats health OK")
        if not self.stayed_up:
            problems.append("nsqd did not stay up")
        if not self.recovered:
            problems.append("health not OK again after the errors stopped")
        if self.after_ok != 3:
            problems.append(f"{3 - self.after_ok} of 3 publishes refused after the errors stopped")
        if self.recording_errors:
            problems.append(f"recorder: {self.recording_errors[:2]}")
        return (f"[{self.engine}] {self.call} #{self.n} x{self.burst} {name}: fired {self.fired}, "
                f"refused {self.refused}, acked {self.acked}: " + ("; ".join(problems) or "ok"))


@dataclass
class IoErrSummary:
    runs: list[IoErrRun] = field(default_factory=list)

    @property
    def calls_failed(self) -> int:
        return sum(r.fired for r in self.runs)

    @property
    def refused(self) -> int:
        return sum(r.refused for r in self.runs)

    @property
    def acked_lost(self) -> int:
        return sum(r.lost for r in self.runs)

    @property
    def in_flight_lost(self) -> int:
        return sum(r.lost_in_flight for r in self.runs)

    @property
    def bad(self) -> list[IoErrRun]:
        return [r for r in self.runs if not r.ok]


async def _record(engine: str, injector: NthCall, notes: dict[str, Any], seed: int) -> Recording:
    root = scratch_dir()
    data = os.path.join(root, "data")
    os.mkdir(data)
    try:
        rec = await record(IOERR_WORKLOAD, engine, 0, seed, data, injector=injector, during=_during(injector, notes))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rec.notes = dict(notes)
    return rec


async def count_calls(engine: str, seed: int = 0) -> dict[str, int]:
    """How many calls of each kind the armed part of the workload makes."""
    inj = NthCall(None, 0, 0)
    await _record(engine, inj, {}, seed)
    return dict(inj.counts)


class _CallLog(NthCall):
    """An injector that never fails and lists the paths of the armed part's ``call`` calls in order."""

    def __init__(self, call: str) -> None:
        super().__init__(None, 0, 0)
        self.watched = call
        self.paths: list[str] = []

    def __call__(self, call: str, path: str) -> int | None:
        if self.armed and call == self.watched:
            self.paths.append(path)
        return super().__call__(call, path)


async def call_paths(engine: str, call: str, seed: int = 0) -> list[str]:
    """The paths of the armed part's ``call`` calls, in order (the ``n``-th
    is what :class:`NthCall` ``(call, n, ...)`` fails; the order of the disk
    thread's calls and the loop's may differ from run to run)."""
    inj = _CallLog(call)
    await _record(engine, inj, {}, seed)
    return inj.paths


async def run_one(engine: str, call: str, n: int, err: int, burst: int = 1, seed: int = 0) -> IoErrRun:
    started = time.perf_counter()
    inj = NthCall(call, n, err, burst)
    notes: dict[str, Any] = {}
    rec = await _record(engine, inj, notes, seed)
    scratch = scratch_dir()
    try:
        ex = await explore(rec, scratch, only=("synced",), max_minimize=3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for report in ex.failures:
        report.finding = _finding(rec, report)
    lost = {f.key for r in ex.failures for f in r.failures if f.kind == "lost" and not f.delivered}
    in_flight = {f.key for r in ex.failures for f in r.failures if f.kind == "lost" and f.delivered}
    broken = sum(1 for r in ex.failures for f in r.failures if f.kind != "lost")
    detail = [r.failures[0].detail + f" (crash before op #{r.point}, step '{r.label}')" for r in ex.failures]
    return IoErrRun(engine, call, n, err, burst, inj.fired, rec.acked, rec.refused, notes["refused_healthy"],
                    notes["refusals"], notes["stayed_up"], notes["recovered"], notes["after_ok"],
                    len(lost), len(in_flight - lost), broken, detail, rec.errors, ex.states,
                    time.perf_counter() - started, ex.failures)


def _finding(rec: Recording, report: FailureReport) -> str | None:
    """The finding of tests/crash/test_crash.py a failing state of an I/O-error run shows, if it is one:

    - "O": an acknowledged message lost whose publish saw a data file's fsync fail before its answer (an
      MPUB across a roll whose fsync failed);
    - "P": a message in flight lost after the clean stop, in a run where a data file's fsync failed (the
      exit flush released a read whose new copy had failed to sync)."""
    f = report.failures[0]
    if f.kind != "lost" or f.key is None:
        return None
    ops = rec.ops
    send = next((i for i, op in enumerate(ops) if op[:3] == ("mark", "send", f.key)), None)
    ack = next((i for i, op in enumerate(ops) if op[:3] == ("mark", "ack", f.key)), None)
    if send is not None and ack is not None and any(op[0] == "fsyncfail" for op in ops[send:ack]):
        return "O"
    if f.delivered and report.label in ("stop", "stopped") and any(op[0] == "fsyncfail" for op in ops):
        return "P"
    return None


def plan(counts: dict[str, int], every: int = 1, bursts: tuple[int, ...] = (1,),
         errnos: tuple[int, ...] = ERRNOS) -> Iterator[tuple[str, int, int, int]]:
    """``(call, n, errno, burst)`` for every ``every``-th N of each kind
    (the errnos alternate over N when ``every`` > 1)."""
    for call in CALLS:
        for n in range(1, counts.get(call, 0) + 1, every):
            errs = errnos if every == 1 else (errnos[(n // every) % len(errnos)],)
            for err in errs:
                for burst in bursts:
                    yield call, n, err, burst


async def sweep(engine: str, every: int = 1, bursts: tuple[int, ...] = (1,), seed: int = 0,
                progress: Any = None) -> IoErrSummary:
    counts = await count_calls(engine, seed)
    out = IoErrSummary()
    for call, n, err, burst in plan(counts, every, bursts):
        run = await run_one(engine, call, n, err, burst, seed)
        out.runs.append(run)
        if progress is not None:
            progress(run)
    return out
