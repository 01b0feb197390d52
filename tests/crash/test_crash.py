"""Power-cut crash states of nsqd's storage (see tests/crash/__init__.py).

- ``test_crash_states[engine]``: the CI exploration, both engines, at least
  10,000 crash states together in well under 3 minutes on 2 cores; fails on
  a failing state that no known finding (:data:`.runner.KNOWN`) explains.
- ``test_finding_*``: a finding that stands, reproduced by one minimal
  crash state (xfail until it is fixed; none stands now).
- ``test_fixed_*``: what the explorer found and is fixed (they failed on the
  code before the fix).
- ``test_ioerr_*``: the I/O-error mode (SQLite's ioerr.test) on a sample of
  N; the whole sweep is ``crash_deep``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .check import Expectations, Failure, check_tree, evaluate
from .explore import point_states
from .ioerr import NthCall, call_paths, count_calls, plan, run_one
from .runner import CI_PLAN, Step, known_finding, run_plan, summary
from .states import build, variants
from .vfs import Model, Recorder
from .workloads import Driver, Recording, Workload, quiet_nsq, record, scratch_dir

pytestmark = pytest.mark.timeout(400)

#: crash states each engine's CI exploration checks at least: a floor under a count that moves
#: with how the --sync-every=1 syncs group (one publisher's on the loop, several in the disk
#: thread): the disk queue's was 5,988-6,313 in 9 runs on 2026-11-29, the topic log's above 4,000
MIN_STATES = {"diskqueue": 5500, "wal": 4000}


# -- the CI exploration ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["diskqueue", "wal"])
async def test_crash_states(engine: str) -> None:
    results = await run_plan(CI_PLAN[engine])
    for line in summary(results):
        print(line)
    for ex in results:
        assert not ex.recording.errors, f"the recorder lost track of the file system: {ex.recording.errors}"
        acks = sum(1 for op in ex.recording.ops if op[:2] == ("mark", "ack"))
        assert acks > 10, "the workload published (almost) nothing"
    states = sum(ex.states for ex in results)
    assert states >= MIN_STATES[engine], f"only {states} crash states"
    unknown = []
    for ex in results:
        for rep in ex.failures:
            finding = known_finding(rep, ex.recording)
            print(f"({'known finding ' + finding if finding else 'NEW'}) {rep.signature}: {rep.count} states")
            if finding is None:
                unknown.append(rep)
    assert not unknown, "\n\n".join(rep.text() for rep in unknown)


@pytest.mark.crash_deep
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("engine", ["diskqueue", "wal"])
async def test_crash_states_deep(engine: str) -> None:
    steps = [Step(s.workload, s.engine, s.size * 3, s.seed + 100 * k) for s in CI_PLAN[engine] for k in range(3)]
    results = await run_plan(steps)
    for line in summary(results):
        print(line)
    unknown = [rep for ex in results for rep in ex.failures if known_finding(rep, ex.recording) is None]
    assert not unknown, "\n\n".join(rep.text() for rep in unknown)


# -- one crash state ------------------------------------------------------------------------------


async def _noop(drv: Driver, n: int) -> None:
    return None


async def scenario(engine: str, during: Callable[[Driver, Recorder], Awaitable[None]],
                   setup: Callable[[Driver, int], Awaitable[None]] | None = None, injector: Any = None,
                   **options: Any) -> Recording:
    """Record ``during`` against an nsqd with the CI workloads' options and ``options``."""
    root = scratch_dir()
    try:
        data = os.path.join(root, "data")
        os.mkdir(data)
        with quiet_nsq():
            return await record(Workload("scenario", _noop, setup=setup, options=options), engine, 0, 0, data,
                                injector=injector, during=during)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def at_label(name: str) -> Callable[[int, Any, Any], bool]:
    """The first crash point after the workload's ``label`` marker ``name``."""
    return lambda i, op, exp: name in exp.labels


async def crash(rec: Recording, where: Callable[[int, Any, Any], bool], variant: str | Callable[[Model], tuple],
                pick: Callable[[Model, tuple], bool] | None = None) -> list[Failure]:
    """The broken promises of the crash state ``variant`` (see
    :func:`~.states.variants`: every one of that name that ``pick`` takes;
    or a function of the model that makes the choice) at the first crash
    point ``where`` holds."""
    assert not rec.errors, rec.errors
    model, exp, _ = point_states(rec, where)
    fixed = {"kept": ("kept", {}, "C"), "synced": ("synced", {}, "S")}
    if callable(variant):
        choices = [variant(model)]
    elif variant in fixed:
        choices = [fixed[variant]]
    else:  # every variant of that name (that ``pick`` takes): the failures of the first that fails
        choices = [c for c in variants(model, random.Random(0)) if c[0] == variant and (pick is None or pick(model, c))]
    assert choices, f"no {variant!r} crash state there"
    scratch = scratch_dir()
    try:
        for choice in choices:
            fails = evaluate(exp, await check_tree(build(model, choice), rec.options, scratch))
            if fails:
                return fails
        return []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def crash_window(rec: Recording, first: str, last: str | None, names: tuple[str, ...] = ("kept", "synced")
                       ) -> list[Failure]:
    """The broken promises of the crash states ``names`` at every crash
    point from the label ``first`` to the label ``last`` (the end: None),
    those of the first point that breaks any."""
    assert not rec.errors, rec.errors
    model = Model(rec.initial)
    exp = Expectations()
    scratch = scratch_dir()
    inside = False
    try:
        for i in range(len(rec.ops) + 1):
            op = rec.ops[i] if i < len(rec.ops) else None
            if op is not None and op[:2] == ("mark", "label"):
                inside = inside or op[2] == first
                if op[2] == last:
                    break
            if inside and (op is None or op[0] not in ("mark", "fault")):
                for choice in variants(model, random.Random(0)):
                    if choice[0] in names:
                        fails = evaluate(exp, await check_tree(build(model, choice), rec.options, scratch))
                        if fails:
                            return fails
            if op is not None:
                model.apply(op)
                exp.feed(op, i)
        return []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _texts(fails: list[Failure]) -> str:
    return "; ".join(f.detail for f in fails[:3])


# -- fixed findings (each failed before its fix) ---------------------------------------------------------


async def test_fixed_a_restart_hands_held_to_every_channel() -> None:
    """Failed before 64b78b8 (finding A): a restart created the channels of
    nsqd.dat one by one and the first one was handed what the topic held
    (everything past topic.json's visible offset); the others started at the
    head and lost what was published since the last checkpoint (kill -9 too)."""

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "a")
        await drv.create_channel("t", "b")
        await asyncio.sleep(0.05)  # nsqd.dat written; no checkpoint (--sync-timeout 1h)
        await drv.pub("t", 3)
        drv.label("crash")

    rec = await scenario("wal", run, sync_timeout=3600)
    fails = await crash(rec, at_label("crash"), "kept")  # kill -9: every write reached the disk
    assert not fails, _texts(fails)


async def test_fixed_b_new_channel_survives_with_its_messages() -> None:
    """Failed before 64b78b8 (finding B): a channel created and published to
    was gone after a crash before nsqd.dat and its first checkpoint were
    written, with the messages acknowledged for it (kill -9 too)."""

    async def run(drv: Driver, rec: Recorder) -> None:
        from nsq.server.nsqd import metadata

        await drv.create_channel("t", "a")
        await drv.pub("t", 1)
        await drv.tick()  # nsqd.dat written
        metadata.METADATA_DELAY = 3600  # the crash comes within nsqd.dat's delay (50 ms by default) ...
        await drv.create_channel("t", "b")
        await drv.pub("t", 2)  # acknowledged for a and b
        drv.label("crash")

    rec = await scenario("wal", run, sync_timeout=3600)  # ... and before the first checkpoint (2 s)
    fails = await crash(rec, at_label("crash"), "kept")
    assert not fails, _texts(fails)


async def test_fixed_d_held_messages_kept_on_the_way_to_the_first_channel() -> None:
    """Failed before 65f8b08 (finding D): a topic's held messages handed to its
    first channel: the topic's disk-queue file was deleted once read, before
    the channel's copies were written and synced (kill -9 too)."""

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.pub("t", 3)  # held by the topic (no channel): its disk queue
        await drv.tick()
        drv.label("hand on")
        await drv.create_channel("t", "c")  # handed on: the topic's file read (and deleted)
        await drv.tick()
        drv.label("handed on")

    rec = await scenario("diskqueue", run)
    fails = await crash_window(rec, "hand on", "handed on")
    assert not fails, _texts(fails)


async def test_fixed_e_unsynced_record_with_zero_tail_not_delivered() -> None:
    """Failed before 65f8b08 / 4df2525 (finding E, in part): a disk queue's
    unsynced record whose tail sectors never reached the disk (zeros, its
    length kept) was taken at start and delivered damaged."""

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "c")
        drv.rng.random = lambda: 0.95  # type: ignore[method-assign]  # large bodies: records over 2 sectors
        await drv.pub("t", 2)

    rec = await scenario("diskqueue", run)
    rec_names = {op[3]: op[2] for op in rec.ops if op[0] == "create"}

    def before_record_fsync(i: int, op: Any, exp: Any) -> bool:
        prev = rec.ops[i - 1] if i else None
        return (op is not None and op[0] == "fsync" and prev is not None and prev[0] == "write" and len(prev[3]) > 900
                and ".diskqueue.0" in rec_names.get(prev[1], ""))

    def inside(model: Model, choice: tuple) -> bool:  # the cut is inside the write, not at its start
        ((_, fid), (_, j, cut)), = choice[1].items()
        return cut > model.files[fid].pending[j][1]

    fails = await crash(rec, before_record_fsync, "zero tail", inside)
    assert not fails, _texts(fails)


async def test_fixed_e_unsynced_deferred_record_with_zero_tail_not_delivered() -> None:
    """Failed before 5285017 (finding E, the rest): the second ADD record of
    a deferred log starts a few bytes before a sector boundary, so the zeroed
    sector after it takes its message's header, id and body but no whole
    sector; plausible_record looked for the zero run in the body only, and
    the damaged message was delivered (what the deep exploration found
    after 4df2525)."""
    fails: list[Failure] = []
    for start in (470, 490, 500, 505, 510):
        sizes = iter([start - 54, 60])  # an ADD record: 39 bytes, the body 15 (key, checksum) and the payload

        async def run(drv: Driver, rec: Recorder) -> None:
            await drv.create_channel("t", "c")
            drv._size = lambda: next(sizes)  # type: ignore[method-assign]
            await drv.dpub("t", 600_000)
            await drv.dpub("t", 600_000)

        rec = await scenario("diskqueue", run)
        names = {op[3]: op[2] for op in rec.ops if op[0] == "create"}
        adds = [i for i, op in enumerate(rec.ops) if op[0] == "write" and names.get(op[1], "").endswith(".deferred.dat")]
        assert len(adds) == 2 and rec.ops[adds[1]][2] == start, [rec.ops[i][2] for i in adds]
        fails = await crash(rec, lambda i, op, exp: i > adds[1], "zero tail")
        if fails:
            break
    assert not fails, _texts(fails)


async def test_fixed_f_interrupted_take_over() -> None:
    """Failed before e461b2a and 4df2525 (finding F): the take-over of a
    disk-queue data path deleted data files as it read them, before the log
    had their messages; then a crash while it removed the files left a
    channel's data files without a meta file, and the next start took it
    over again, rewriting its cursor past the first take-over's messages."""

    async def setup(drv: Driver, n: int) -> None:
        await drv.create_channel("t", "a")
        await drv.create_channel("t", "b")
        await drv.pub("t", 4)
        await drv.dpub("t", 600_000)  # the channels have deferred logs too

    async def run(drv: Driver, rec: Recorder) -> None:
        drv.label("taken over")
        await drv.pub("t", 1)

    rec = await scenario("wal", run, setup=setup)
    # every crash point of the take-over (the start); before e461b2a the first one that failed was right after
    # the first disk-queue data file was deleted, since then the one after a's meta file is deleted and b's not
    fails = await crash_window(rec, "start", "taken over")
    assert not fails, _texts(fails)


async def test_fixed_k_released_deferred_message_kept_until_queued() -> None:
    """Failed before 82b18a5 (finding K): a deferred message released to a
    channel got its REMOVE record in the deferred log while its disk-queue
    write was not synced yet: the REMOVE could reach the disk without it."""

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "c")
        await drv.dpub("t", 30)
        await drv.dpub("t", 600_000)  # still deferred: the release appends a REMOVE record
        await drv.tick(3)  # due: released into the channel's disk queue, REMOVE appended to its deferred log

    rec = await scenario("diskqueue", run)
    names = {op[3]: op[2] for op in rec.ops if op[0] == "create"}
    removes = [i for i, op in enumerate(rec.ops)  # [int32 size][u8 kind 2: REMOVE][16-byte id]
               if op[0] == "write" and names.get(op[1], "").endswith(".deferred.dat") and op[3][4:5] == b"\x02"]
    assert removes, "no REMOVE record written"

    def remove_kept_queue_dropped(model: Model) -> tuple:  # the deferred log's write reached the disk, nothing else
        fid = rec.ops[removes[0]][1]
        return ("REMOVE kept", {("f", fid): ("C",)}, "S")

    fails = await crash(rec, lambda i, op, exp: i > removes[0], remove_kept_queue_dropped)
    assert not fails, _texts(fails)


def _meta_tmp_full(call: str, path: str) -> int | None:
    """A disk with no room for a new meta file (the disk queue writes it in place)."""
    return errno.ENOSPC if call in ("open", "write") and ".meta.dat." in path and path.endswith(".tmp") else None


async def test_fixed_i_meta_in_place_syncs_the_directory() -> None:
    """Failed before e49f562 (finding I): on a full disk a disk queue wrote its
    meta file in place and fsynced no directory, so a data file a roll had
    created was not durable when the publish was acknowledged. With
    --sync-every=1 every sync now writes a meta slot in place (no temp
    file to fail), so this is the path of every roll."""

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "c")
        await drv.pub("t", 1)
        rec.injector = _meta_tmp_full
        await drv.pub("t", 6)  # rolls (--max-bytes-per-file 1024)
        rec.injector = None
        drv.label("crash")

    rec = await scenario("diskqueue", run)
    assert any(op[0] == "create" and op[2] == "t:c.diskqueue.000001.dat" for op in rec.ops)
    fails = await crash(rec, at_label("crash"), "synced")
    assert not fails, _texts(fails)


async def test_fixed_j_deferred_log_dir_fsync_failure_refuses() -> None:
    """Failed before e49f562 (finding J): a deferred log whose new file's
    directory could not be fsynced acknowledged the DPUB anyway; after a
    power cut the file and the message were gone."""

    def dir_sync_fails(call: str, path: str) -> int | None:
        return errno.EIO if call == "fsync" and path == "." else None

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "c")
        await drv.tick()
        rec.injector = dir_sync_fails
        await drv.dpub("t", 600_000)
        rec.injector = None
        drv.label("crash")

    rec = await scenario("diskqueue", run)
    fails = await crash(rec, at_label("crash"), "synced")
    assert not fails, _texts(fails)


async def test_fixed_n_requeued_message_held_until_its_new_copy_is_durable() -> None:
    """Failed before b7c2d44 (finding N): a message read from a disk queue and
    stored again at its tail (a timeout, a REQ) released its held read at
    once, so the files it was read from went before the new copy was durable."""

    async def run(drv: Driver, rec: Recorder) -> None:
        cons = await drv.consumer("t", "c")
        await drv.pub("t", 8)  # several data files (--max-bytes-per-file 1024)
        await drv.tick()
        assert len(await cons.take(8)) == 8
        drv.label("time out")  # none finished: each times out (--msg-timeout 80 ms) and goes to the tail again
        await drv.tick(6)
        drv.label("timed out")

    rec = await scenario("diskqueue", run, msg_timeout=0.08)
    fails = await crash_window(rec, "time out", "timed out")
    assert not fails, _texts(fails)


async def test_fixed_m_failed_segment_open_refuses_and_recovers() -> None:
    """Failed before cba7de4 (finding M, I/O-error mode): a topic log whose new
    segment and old segment both failed to open dropped the publisher
    unanswered and was left with no write fd, refusing every publish after
    the errors stopped."""

    failing = {"left": 0}

    def opens_fail(call: str, path: str) -> int | None:
        if call == "open" and path.endswith(".log") and failing["left"] > 0:
            failing["left"] -= 1
            return errno.EIO
        return None

    answers: list[bytes] = []

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "c")
        await drv.pub("t", 1)
        rec.injector = opens_fail
        failing["left"] = 2  # the new segment's open, then the old one's reopen
        drv.rng.random = lambda: 0.95  # type: ignore[method-assign]  # large bodies: a roll within 2 publishes
        for _ in range(3):
            await drv.pub("t", 1)
        rec.injector = None
        answers.extend(drv.errors)
        drv.errors.clear()
        await drv.tick(2)
        drv.label("errors stopped")
        assert await drv.pub("t", 3) == 3, f"refused after the errors stopped: {drv.errors}"

    rec = await scenario("wal", run)
    assert not rec.errors
    assert all(a.startswith(b"E_PUB_FAILED") for a in answers), answers


def _first_data_fsync_fails(state: dict[str, int]) -> Callable[[str, str], int | None]:
    """An injector: the next fsync of a data file (a disk-queue file, a log segment) fails with EIO, once."""

    def injector(call: str, path: str) -> int | None:
        if call == "fsync" and state["left"] > 0 and (".diskqueue.0" in path or path.endswith(".log")):
            state["left"] -= 1
            return errno.EIO
        return None

    return injector


@pytest.mark.parametrize("engine", ["diskqueue", "wal"])
async def test_fixed_o_mpub_across_a_roll_whose_fsync_failed_is_refused(engine: str) -> None:
    """Failed before 5285017 and 2645276 (finding O, I/O-error mode): an
    MPUB that spans a roll whose fsync of the full file failed (only logged)
    was acknowledged once the new file's fsync succeeded, though the records
    written before the roll were never synced (fsyncgate)."""
    state = {"left": 0}

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.create_channel("t", "c")
        drv._size = lambda: 30  # type: ignore[method-assign]
        await drv.pub("t", 1)
        await drv.tick()
        drv._size = lambda: 700  # type: ignore[method-assign]  # 3 records over 1,024 bytes: a roll inside
        rec.injector = _first_data_fsync_fails(state)
        state["left"] = 1
        await drv.mpub("t", 3)
        rec.injector = None
        drv.label("crash")

    rec = await scenario(engine, run)
    assert any(op[0] == "fsyncfail" for op in rec.ops), "no fsync failed"
    fails = await crash(rec, at_label("crash"), "synced")
    assert not fails, _texts(fails)


async def test_fixed_p_exit_flush_keeps_a_read_whose_new_copy_failed_to_sync() -> None:
    """Failed before 5285017 (finding P, I/O-error mode): a message read from
    a disk queue and written again at its tail (a REQ, a timeout) whose new
    copy's fsync failed kept its held read until the exit flush, whose
    release deleted the file it was read from anyway: after a power cut
    neither copy was there."""
    # the I/O-error sweep's run that shows it (seed 1: the fsync of the deferred log, then the one of the data
    # file a released deferred message was written to again; the 46th and 47th fsyncs with a meta file replaced
    # at each sync, found by their paths since); the order of the disk thread's and the loop's calls varies, so
    # a few tries
    runs = []
    with quiet_nsq():
        paths = await call_paths("diskqueue", "fsync", seed=1)
        last = max(i for i, p in enumerate(paths[:-1]) if p.endswith(".deferred.dat")
                   and ".diskqueue.0" in paths[i + 1])
        for _ in range(4):
            for n in (last + 1, last + 2):  # NthCall counts from 1
                run = await run_one("diskqueue", "fsync", n, errno.EIO, 1, seed=1)
                runs.append(run)
                assert not run.lost_in_flight and not run.lost, run.text()
    assert any(r.fired for r in runs)


# -- fixed (failed before the fix) --------------------------------------------------------------------


async def test_fixed_in_flight_read_from_disk_survives() -> None:
    """Failed before 8308b38: the disk queue synced its read position past
    messages read into flight, so a power cut after that sync lost them."""

    async def run(drv: Driver, rec: Recorder) -> None:
        cons = await drv.consumer("t", "c")
        drv.rng.random = lambda: 0.1  # type: ignore[method-assign]  # small bodies: one data file (see finding C)
        await drv.pub("t", 3)
        assert len(await cons.take(2)) == 2  # in flight, not finished
        await drv.tick()  # the disk queue syncs its read position
        drv.label("crash")

    rec = await scenario("diskqueue", run)
    fails = await crash(rec, at_label("crash"), "synced")
    assert not fails, _texts(fails)


async def test_fixed_exit_flush_syncs_the_deferred_log_before_the_read_position() -> None:
    """Failed before the fix (found by the CI exploration under load, restart
    seed 4): a message read from the disk queue and requeued with a delay
    lives in the deferred log; the exit flush released every held read and
    the disk queue's close wrote its read position past the message while
    the deferred log's ADD record was still unsynced: its --sync-every=1
    fsync was still waiting in the disk thread, and an inline sync() took
    the started background sync for done. A power cut there lost it."""
    from concurrent.futures import Future

    async def run(drv: Driver, rec: Recorder) -> None:
        cons = await drv.consumer("jobs", "w")
        await drv.pub("jobs", 3)
        await drv.tick()
        got = await cons.take(3)
        assert len(got) == 3
        dlog = drv.d.topics["jobs"].channels["w"].deferred_log
        dlog.background = lambda work: Future()  # a busy disk thread: its fsync has not run yet
        await cons.req(got[1], 50_000)  # deferred: its only other copy is the held disk-queue read
        while not any(op[0] == "write" and op[1] in dlogs(rec) for op in rec.ops):
            await asyncio.sleep(0.005)
        await drv.restart()

    def dlogs(rec: Recorder) -> set[Any]:
        return {op[3] for op in rec.ops if op[0] == "create" and op[2].endswith(".deferred.dat")}

    rec = await scenario("diskqueue", run, sync_timeout=3600)  # no --sync-timeout sync meanwhile either
    fails = await crash_window(rec, "restart: stop", "restart: start", names=("file dropped", "zero tail"))
    assert not fails, _texts(fails)


async def test_fixed_new_topic_log_directory_is_durable() -> None:
    """Failed before 2209a19: ``mkdir <topic>.wal`` was never followed by an
    fsync of the data path, so a power cut lost the whole log."""

    async def run(drv: Driver, rec: Recorder) -> None:
        await drv.pub("t", 2)
        drv.label("crash")

    rec = await scenario("wal", run)
    fails = await crash(rec, at_label("crash"), "synced")
    assert not fails, _texts(fails)


async def test_fixed_checkpoint_rename_is_durable() -> None:
    """Failed before 2209a19: a checkpoint renamed into place without an
    fsync of its directory: the segments it let go were deleted while the
    old checkpoint (pointing into them) came back after a power cut."""

    async def run(drv: Driver, rec: Recorder) -> None:
        cons = await drv.consumer("t", "c")
        await drv.pub("t", 12)  # several segments (--max-bytes-per-file 1024)
        for m in await cons.take(8):
            await cons.fin(m)
        await drv.tick(2)  # checkpoint written, segments below it deleted
        drv.label("crash")

    rec = await scenario("wal", run)
    fails = await crash(rec, at_label("crash"), "synced")
    assert not fails, _texts(fails)


async def test_fixed_c_read_batch_across_files() -> None:
    """Failed before 742d076 (finding C): DiskQueue.read_held registered its
    batch only after read_many returned, so a data file read to its end
    inside the batch was deleted at once, with the batch's records in it."""

    async def run(drv: Driver, rec: Recorder) -> None:
        cons = await drv.consumer("t", "c")
        await drv.pub("t", 8)  # several data files (--max-bytes-per-file 1024)
        await drv.tick()
        assert len(await cons.take(8)) == 8  # one read batch, in flight, across the files
        drv.label("crash")

    rec = await scenario("diskqueue", run)
    fails = await crash(rec, at_label("crash"), "kept")
    assert not fails, _texts(fails)


async def test_fixed_l_delivered_straight_from_publish() -> None:
    """Failed before 742d076 (finding L): with --mem-queue-size=0 a message
    published while a consumer was ready went straight into flight and was
    acknowledged without ever being written."""

    async def run(drv: Driver, rec: Recorder) -> None:
        cons = await drv.consumer("t", "c")
        await cons.rdy(3)
        await asyncio.sleep(0.01)
        await drv.pub("t", 2)  # acknowledged, and in flight
        drv.label("crash")

    rec = await scenario("diskqueue", run)
    fails = await crash(rec, at_label("crash"), "kept")
    assert not fails, _texts(fails)


# -- the I/O-error mode ------------------------------------------------------------------------------


#: every Nth N of each call kind in CI (the errnos alternate); the deep test runs them all, EIO and ENOSPC
IOERR_EVERY = {"diskqueue": 4, "wal": 2}


def _ioerr_known(rep: Any) -> str | None:
    """The known finding an I/O-error run's failing state shows (O, P: see their tests), or None."""
    return rep.finding


async def _sweep(engine: str, every: int, bursts: tuple[int, ...] = (1,)) -> list[Any]:
    with quiet_nsq():
        counts = await count_calls(engine)
        runs = []
        for call, n, err, burst in plan(counts, every, bursts):
            runs.append(await run_one(engine, call, n, err, burst))
    fired = sum(r.fired for r in runs)
    print(f"{engine}: {len(runs)} runs, calls failed {fired}, publishes refused {sum(r.refused for r in runs)}, "
          f"acknowledged lost {sum(r.lost for r in runs)} (+{sum(r.lost_in_flight for r in runs)} in flight), "
          f"{sum(r.states for r in runs)} crash states")
    problems = []
    for r in runs:
        assert not r.recording_errors, r.recording_errors
        assert r.stayed_up, r.text()
        if r.refused_healthy or not r.recovered or r.after_ok != 3:
            problems.append(r.text())
        for rep in r.reports:
            if _ioerr_known(rep) is None:
                problems.append(f"{r.text()}\n{rep.text()}")
    return problems


@pytest.mark.parametrize("engine", ["diskqueue", "wal"])
async def test_ioerr_sample(engine: str) -> None:
    problems = await _sweep(engine, IOERR_EVERY[engine])
    assert not problems, "\n\n".join(problems[:5])


@pytest.mark.crash_deep
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("engine", ["diskqueue", "wal"])
async def test_ioerr_all(engine: str) -> None:
    problems = await _sweep(engine, 1, (1, 3))
    assert not problems, "\n\n".join(problems[:5])


async def test_ioerr_injector_counts() -> None:
    inj = NthCall("write", 2, errno.EIO)
    inj.armed = True
    assert [inj("write", "x"), inj("write", "x"), inj("fsync", "x"), inj("write", "x")] == [None, errno.EIO, None,
                                                                                          None]
    assert inj.fired == 1
