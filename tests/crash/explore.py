"""The explorer: every crash point of a recording, every variant, each recovered and checked.

A crash point is the moment before each file-system operation of the log
(and after the last): the state there has every operation before it, and
the expectations every marker before it (a publish acknowledged just
before the next write must survive it). At each point the variants of
:func:`~.states.variants` are built; identical trees at one point are
checked once, and a tree already recovered at another point is not started
again (its recovery is cached; the expectations differ, so it is evaluated
again). The first failing state of each kind is minimized: every lost item
that is not needed for the failure is put back, so what is left says what
the storage code failed to make durable.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .check import Expectations, Failure, Recovered, check_tree, evaluate, materialize
from .states import Choice, build, describe_choice, fingerprint, reachable, variants
from .vfs import Model, describe_op
from .workloads import Recording

__all__ = ["Explored", "FailureReport", "explore", "point_states"]


@dataclass
class FailureReport:
    """The first failing state of one kind, minimized, and how often that kind failed."""

    signature: str
    workload: str
    engine: str
    seed: int
    size: int
    point: int
    variant: str
    failures: list[Failure]
    lost: list[str]
    context: list[str]
    label: str
    recovery_log: list[str]
    count: int = 1
    tree: dict[str, bytes | None] | None = None
    #: the known finding it shows, when the caller could tell (the I/O-error mode)
    finding: str | None = None

    def text(self) -> str:
        f = self.failures[0]
        lines = [f"[{self.engine}/{self.workload} seed={self.seed} size={self.size}] {self.signature}: "
                 f"{self.count} failing states",
                 f"  first: crash before op #{self.point} (step: {self.label}), variant '{self.variant}'",
                 f"  broken: {f.detail}" + (f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else ""),
                 "  minimal crash state: everything written before the crash reached the disk except:"]
        lines += [f"    - {x}" for x in self.lost] or ["    (nothing: the state is the one a kill -9 leaves)"]
        lines.append("  last operations before the crash:")
        lines += [f"    {x}" for x in self.context]
        if self.recovery_log:
            lines.append("  recovery log:")
            lines += [f"    {x[:160]}" for x in self.recovery_log[:4]]
        return "\n".join(lines)


@dataclass
class Explored:
    recording: Recording
    points: int = 0
    states: int = 0
    recoveries: int = 0
    #: recoveries checked by consuming over TCP
    consumed: int = 0
    failed_states: int = 0
    reports: dict[str, FailureReport] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failures(self) -> list[FailureReport]:
        return list(self.reports.values())


def _signature(fail: Failure, lost: list[str]) -> str:
    what = fail.kind
    if fail.kind == "lost":
        what += " (in flight, not finished)" if fail.delivered else " (never delivered)"
        if "gone after the crash" in fail.detail:
            what += " with its channel"
    if fail.kind == "start":
        what += ": " + re.sub(r"\d+", "N", fail.detail.split(" - ")[0])[:80]
    causes = sorted({re.sub(r"\[\d+, \d+\)|\d+", "N", x.split(":")[0] + ":" + x.split(":", 1)[1].split("(")[0])
                     for x in lost})
    if causes:
        what += " <- " + "; ".join(causes)[:300]
    return what


def _context(model: Model, ops: list[tuple], point: int, n: int = 8) -> tuple[list[str], str]:
    out: list[str] = []
    label = "start"
    i = point - 1
    while i >= 0 and len(out) < n:
        op = ops[i]
        if op[0] == "mark" and op[1] == "label" and label == "start":
            label = op[2]
        if op[0] != "mark" or op[1] in ("ack", "fin", "chdel", "tdel"):
            out.append(f"#{i} {describe_op(op, model.path_of)}")
        i -= 1
    for j in range(i, -1, -1):
        if label != "start":
            break
        if ops[j][0] == "mark" and ops[j][1] == "label":
            label = ops[j][2]
    out.reverse()
    nxt = ops[point] if point < len(ops) else None
    if nxt is not None:
        out.append(f"#{point} (not reached) {describe_op(nxt, model.path_of)}")
    return out, label


def _explicit(model: Model, choice: Choice) -> dict[tuple[str, int], tuple]:
    """``choice`` with an option for every item that has pending operations."""
    _, opts, base = choice
    files, dirs = reachable(model)
    out: dict[tuple[str, int], tuple] = {}
    for f in files:
        if model.files[f].pending:
            out[("f", f)] = opts.get(("f", f), (base,))
    for d in dirs:
        n = len(model.dirs[d].pending)
        if n:
            opt = opts.get(("d", d), (base,))
            out[("d", d)] = ("P", {"S": 0, "C": n}.get(opt[0], opt[-1]))
    return out


def _kept(model: Model, item: tuple[str, int], opt: tuple) -> bool:
    if item[0] == "f":
        return opt[0] == "C"
    return opt[1] == len(model.dirs[item[1]].pending)


async def _minimize(model: Model, choice: Choice, exp: Expectations, fail: Failure, options: dict[str, Any],
                    scratch: str, cache: dict[int, Recovered]) -> Choice:
    """Put back every lost item the failure does not need."""
    opts = _explicit(model, choice)

    def same(fails: list[Failure]) -> bool:
        return any(f.kind == fail.kind and f.key == fail.key and f.channel == fail.channel for f in fails)

    for item in sorted(opts):
        if _kept(model, item, opts[item]):
            continue
        trial = dict(opts)
        trial[item] = ("C",) if item[0] == "f" else ("P", len(model.dirs[item[1]].pending))
        tree = build(model, ("min", trial, "C"))
        fp = fingerprint(tree)
        rec = cache.get(fp)
        if rec is None:
            rec = cache[fp] = await check_tree(tree, options, scratch)
        if same(evaluate(exp, rec)):
            opts = trial
    return ("minimized", opts, "C")


async def explore(recording: Recording, scratch: str, seed: int = 0, sample: float = 1.0, max_minimize: int = 12,
                  progress: Callable[[Explored], None] | None = None, keep_trees: bool = False,
                  only: tuple[str, ...] | None = None, consume: float = 0.0) -> Explored:
    """Check every crash state of ``recording`` (a fraction ``sample`` of
    the crash points that are not next to an fsync, chosen with ``seed``;
    only the variants named in ``only``, if given). A fraction ``consume``
    of the states is checked by consuming every channel over TCP instead of
    reading its store (slower: 50 ms of quiet per channel)."""
    started = time.perf_counter()
    rng = random.Random(seed)
    ops = recording.ops
    out = Explored(recording)
    model = Model(recording.initial)
    exp = Expectations()
    cache: dict[int, Recovered] = {}
    minimized = 0
    for i in range(len(ops) + 1):
        op = ops[i] if i < len(ops) else None
        if op is None or op[0] not in ("mark", "fault"):
            prev = ops[i - 1] if i > 0 else None
            near_sync = prev is not None and prev[0] in ("fsync", "fsyncfail") or op is None or op[0] == "fsync"
            if near_sync or sample >= 1.0 or rng.random() < sample:
                out.points += 1
                seen: set[int] = set()
                for choice in variants(model, rng):
                    if only is not None and choice[0] not in only:
                        continue
                    tree = build(model, choice)
                    fp = fingerprint(tree)
                    if fp in seen:
                        continue
                    seen.add(fp)
                    rec = cache.get(fp)
                    if rec is None:
                        by_consumer = consume > 0 and rng.random() < consume
                        rec = cache[fp] = await check_tree(tree, recording.options, scratch, by_consumer)
                        out.recoveries += 1
                        out.consumed += by_consumer
                    out.states += 1
                    fails = evaluate(exp, rec)
                    if not fails:
                        continue
                    out.failed_states += 1
                    pre = _signature(fails[0], [])
                    known = [r for r in out.reports.values() if r.signature.startswith(pre)]
                    if known and (minimized >= max_minimize or any(r.variant == choice[0] for r in known)):
                        known[0].count += 1
                        continue
                    if minimized >= max_minimize:
                        if known:
                            known[0].count += 1
                            continue
                        mini = choice  # not minimized: the description may name more than is needed
                    else:
                        minimized += 1
                        mini = await _minimize(model, choice, exp, fails[0], recording.options, scratch, cache)
                    lost = describe_choice(model, mini)
                    sig = _signature(fails[0], lost)
                    if sig in out.reports:
                        out.reports[sig].count += 1
                        continue
                    context, label = _context(model, ops, i)
                    mrec = cache.get(fingerprint(build(model, mini)), rec)
                    mfails = evaluate(exp, mrec) or fails
                    out.reports[sig] = FailureReport(
                        sig, recording.workload, recording.engine, recording.seed, recording.size, i, choice[0],
                        mfails, lost, context, label, [x for x in mrec.log if x.startswith("ERROR")],
                        tree=build(model, mini) if keep_trees else None)
                if progress is not None:
                    progress(out)
        if op is not None:
            model.apply(op)
            exp.feed(op, i)
    out.seconds = time.perf_counter() - started
    return out


def point_states(recording: Recording, predicate: Callable[[int, tuple | None, Expectations], bool]
                 ) -> tuple[Model, Expectations, int]:
    """The model and expectations at the first crash point where
    ``predicate(index, next op, expectations)`` holds."""
    model = Model(recording.initial)
    exp = Expectations()
    ops = recording.ops
    for i in range(len(ops) + 1):
        op = ops[i] if i < len(ops) else None
        if (op is None or op[0] not in ("mark", "fault")) and predicate(i, op, exp):
            return model, exp, i
        if op is not None:
            model.apply(op)
            exp.feed(op, i)
    raise LookupError("no crash point matches")


def dump_tree(tree: dict[str, bytes | None], path: str) -> None:
    """Write a crash state to ``path`` (created) to start nsqd on it by hand."""
    os.makedirs(path, exist_ok=True)
    materialize(tree, path)
