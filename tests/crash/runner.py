"""Record and explore a plan of workloads; the known findings; a summary."""

from __future__ import annotations

import os
import re
import shutil
import time
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
                  Step("basic", "diskqueue", 16, 3)],
    "wal": [Step("basic", "wal", 40, 1), Step("lifecycle", "wal", 40, 2), Step("migrate", "wal", 24, 3),
            Step("basic", "wal", 60, 4), Step("lifecycle", "wal", 60, 5), Step("migrate", "wal", 40, 6),
            Step("basic", "wal", 80, 7), Step("lifecycle", "wal", 80, 8)],
}


async def run_step(step: Step, sample: float = 1.0, keep_trees: bool = False,
                   progress: Callable[[Explored], None] | None = None) -> Explored:
    root = scratch_dir()
    try:
        data = os.path.join(root, "data")
        os.mkdir(data)
        with quiet_nsq():
            rec = await record(WORKLOADS[step.workload], step.engine, step.size, step.seed, data)
        scratch = os.path.join(root, "states")
        os.mkdir(scratch)
        return await explore(rec, scratch, seed=step.seed, sample=sample, keep_trees=keep_trees, progress=progress)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def run_plan(steps: list[Step], sample: float = 1.0, keep_trees: bool = False,
                   progress: Callable[[Explored], None] | None = None) -> list[Explored]:
    return [await run_step(s, sample, keep_trees, progress) for s in steps]


# -- the findings this explorer found, not fixed yet ------------------------------------------------
#
# Each is reproduced on its own by an xfail test in test_crash.py (test_finding_*). The CI
# exploration fails only on a failing state none of these explains: delete an entry once its
# fix is in (its test then passes), so that it cannot come back unnoticed.

KNOWN: dict[str, tuple[str, str]] = {
    "A": ("wal", "a restart creates the channels of nsqd.dat one by one and the first one is handed the "
                 "topic's held messages (everything past topic.json's visible offset): the others start at "
                 "the head and lose what was published since the last checkpoint (kill -9 too)"),
    "B": ("wal", "a channel created (answered) and published to is gone after a crash before nsqd.dat and its "
                 "first checkpoint are written, with the messages acknowledged for it (kill -9 too)"),
    "C": ("diskqueue", "a message read from a disk queue into memory is lost: DiskQueue.read_held registers its "
                       "batch only after read_many returned, so a data file read to its end inside the batch is "
                       "deleted at once (_advance_read_file sees no held batch), with the batch's records in it "
                       "(kill -9 too; before 8308b38 every read was lost this way, the read position synced past it)"),
    "L": ("diskqueue", "--mem-queue-size=0 --sync-every=1: a message published while a consumer is ready goes "
                       "straight into flight and is acknowledged without ever being written: a crash before it is "
                       "finished loses it (docs/operations/durability.md says everything acknowledged survives)"),
    "D": ("diskqueue", "a topic's held messages handed to its first channel: the topic's disk-queue file is "
                       "deleted once read, before the channel's copies are written and synced (kill -9 too)"),
    "E": ("diskqueue", "no checksum: a record written after the meta file's write position and not synced, "
                       "whose tail did not reach the disk (zeros), is counted at start and delivered damaged"),
    "F": ("wal", "the take-over of a disk-queue data path deletes each disk-queue data file as it reads it, "
                 "before the messages are in the topic log: a crash during it loses them (kill -9 too)"),
    "I": ("diskqueue", "on a full disk a disk queue writes its meta file in place (diskqueue_meta._write_in_place) "
                       "and fsyncs no directory: a data file created by a roll is not durable when the publish is "
                       "acknowledged (I/O-error mode)"),
    "J": ("diskqueue", "a deferred log's directory fsync after its file is created (deferredlog._fsync_dir) fails "
                       "silently and the DPUB is acknowledged: after a power cut the file and the message are gone "
                       "(I/O-error mode)"),
    "K": ("diskqueue", "a deferred message released to a channel: the deferred log's REMOVE record and the disk-queue "
                       "write of the message are synced independently, so the REMOVE can reach the disk without the "
                       "message: it is gone from both"),
}


def known_finding(rep: FailureReport, recording: Recording | None = None) -> str | None:
    """Which known finding explains ``rep`` (of ``recording``) (None: a new one)."""
    f = rep.failures[0]
    sig = rep.signature
    if rep.engine == "wal":
        if rep.workload == "migrate" and rep.label == "start" and f.kind == "lost":
            return "F"
        if f.kind == "lost" and "gone after the crash" in f.detail:
            return "B"
        if f.kind == "lost" and not f.delivered and "<-" not in sig:
            return "A"
        if f.kind == "lost" and not f.delivered and re.search(r"cursor|topic\.json|nsqd\.dat", sig):
            return "A"
        return None
    if f.kind == "damaged" and re.search(r"zeros|torn", sig):
        return "E"
    if f.kind == "lost" and not f.delivered and any("deferred.dat [" in line for line in rep.context) \
            and "diskqueue" in " ".join(rep.lost):
        return "K"
    if f.kind == "lost" and f.channel == "#held" or (f.kind == "lost" and rep.label in ("first channel",
                                                                                           "second channel of events")):
        return "D"
    if f.kind == "lost" and f.delivered and recording is not None and f.key is not None \
            and not written_to(recording, f.key, f"{f.topic}:{f.channel}.diskqueue."):
        return "L"
    if f.kind == "lost" and f.delivered:
        return "C"
    return None


def written_to(recording: Recording, key: str, prefix: str) -> bool:
    """Whether a record of the message ``key`` was ever written to a file whose name starts with ``prefix``."""
    names = {op[3]: op[2] for op in recording.ops if op[0] == "create"}
    needle = key.encode() + b"|"
    return any(op[0] == "write" and names.get(op[1], "").startswith(prefix) and needle in op[3]
               for op in recording.ops)


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
                     f"distinct, each recovered by an nsqd), {sum(e.failed_states for e in exs)} failed, "
                     f"{sum(e.recording.seconds for e in exs):.1f} s recording + "
                     f"{sum(e.seconds for e in exs):.1f} s exploring")
    return lines


def timed() -> Callable[[], float]:
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
