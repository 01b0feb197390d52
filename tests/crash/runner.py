"""Record and explore a plan of workloads; the known findings; a summary."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from .explore import Explored, FailureReport, explore
from .workloads import WORKLOADS, Recording, quiet_nsq, record, scratch_dir

__all__ = ["Step", "CI_PLAN", "run_plan", "summary", "KNOWN", "known_finding"]


@dataclass(frozen=True)
class Step:
    workload: str
    engine: str
    size: int
    seed: int


#: what the CI test explores: at least 10,000 crash states in well under 3 minutes on 2 cores
CI_PLAN = {
    "diskqueue": [Step("basic", "diskqueue", 24, 1), Step("lifecycle", "diskqueue", 24, 2),
                  Step("basic", "diskqueue", 16, 3), Step("restart", "diskqueue", 32, 4)],
    "wal": [Step("basic", "wal", 40, 1), Step("lifecycle", "wal", 40, 2), Step("migrate", "wal", 24, 3),
            Step("basic", "wal", 60, 4), Step("lifecycle", "wal", 60, 5), Step("migrate", "wal", 40, 6),
            Step("basic", "wal", 80, 7), Step("lifecycle", "wal", 80, 8), Step("restart", "wal", 32, 9),
            Step("restart", "wal", 48, 10)],
}


async def run_step(step: Step, sample: float = 1.0, keep_trees: bool = False,
                   progress: Callable[[Explored], None] | None = None, consume: float = 0.01) -> Explored:
    root = scratch_dir()
    try:
        data = os.path.join(root, "data")
        os.mkdir(data)
        with quiet_nsq():
            rec = await record(WORKLOADS[step.workload], step.engine, step.size, step.seed, data)
        scratch = os.path.join(root, "states")
        os.mkdir(scratch)
        return await explore(rec, scratch, seed=step.seed, sample=sample, keep_trees=keep_trees, progress=progress,
                             consume=consume)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def run_plan(steps: list[Step], sample: float = 1.0, keep_trees: bool = False,
                   progress: Callable[[Explored], None] | None = None, consume: float = 0.01) -> list[Explored]:
    return [await run_step(s, sample, keep_trees, progress, consume) for s in steps]


# -- the findings this explorer found, not fixed yet ------------------------------------------------
#
# Each is reproduced on its own by an xfail test in test_crash.py (test_finding_*). The CI
# exploration fails only on a failing state none of these explains: delete an entry once its
# fix is in (its test then passes), so that it cannot come back unnoticed. Fixed so far (each
# has a test_fixed_* test): a new topic log's directory and the renames of nsqd.dat and the
# checkpoints not durable (2209a19); a message read from a disk queue into memory lost, as its
# read position was synced past it (8308b38), or as a file read to its end inside a read batch
# was deleted at once (742d076, "C"); a message published while a consumer was ready acknowledged
# unwritten (742d076, "L"); a meta file written in place with no directory fsync and a deferred
# log's failed directory fsync ignored (e49f562, "I", "J"); a restart handing what a topic held
# to its first channel only, and a new channel gone with its messages (64b78b8, "A", "B"); a
# released deferred message's REMOVE record reaching the disk before its new copy (82b18a5, "K");
# a topic's held messages deleted on their way to its first channel (65f8b08, "D"); a requeued
# message's old files deleted before its new copy was durable (b7c2d44, "N"); a topic log wedged
# by two failed segment opens (cba7de4, "M", I/O-error mode); an interrupted take-over rewriting a
# cursor (4df2525, "F"); zero-tailed unsynced records taken (65f8b08, 4df2525, 5285017, "E"); an
# MPUB across a roll whose fsync failed acknowledged (5285017, 2645276, "O"); the exit flush
# releasing a read whose new copy failed to sync (5285017, "P"), or a read whose message was
# deferred since while the deferred log's ADD record was unsynced (found in CI under load).

KNOWN: dict[str, tuple[str, str]] = {}


def known_finding(rep: FailureReport, recording: Recording | None = None) -> str | None:
    """Which known finding explains ``rep`` (of ``recording``) (None: a new one)."""
    return None  # none stands


def summary(results: list[Explored]) -> list[str]:
    """Counts per engine, then each failure report."""
    lines = []
    engines: dict[str, list[Explored]] = {}
    for ex in results:
        engines.setdefault(ex.recording.engine, []).append(ex)
    for engine, exs in engines.items():
        lines.append(f"{engine}: {len(exs)} workloads, {sum(len(e.recording.ops) for e in exs)} recorded operations "
                     f"({sum(e.recording.fs_ops for e in exs)} file-system), {sum(e.points for e in exs)} crash "
                     f"points, {sum(e.states for e in exs)} crash states checked ({sum(e.recoveries for e in exs)} "
                     f"distinct, each recovered by an nsqd, {sum(e.consumed for e in exs)} of them consumed over "
                     f"TCP), {sum(e.failed_states for e in exs)} failed, "
                     f"{sum(e.recording.seconds for e in exs):.1f} s recording + "
                     f"{sum(e.seconds for e in exs):.1f} s exploring")
    return lines
