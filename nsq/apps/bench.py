"""Load generators for nsqd: what ``nsq bench`` runs (Go's bench_writer and
bench_reader, plus a latency probe).

Go's ``bench/bench_writer`` and ``bench/bench_reader`` as :func:`run_writer`
and :func:`run_reader` do it, over the V2 protocol only, so they work against
any NSQ-compatible nsqd:

- one connection per CPU (Go: one goroutine per ``GOMAXPROCS``; here
  ``connections``, default :func:`default_connections`), each in its own OS
  process so the load generator is not the bottleneck. Every worker dials
  (1 s timeout), sends the magic and IDENTIFY (the reader also SUB) and
  reports ready; with ``tls_v1``, ``snappy`` or ``deflate`` (go-nsq's
  options, not in Go's bench tools) it negotiates them first and waits for
  each upgrade's ``OK`` (:func:`nsq.apps.bench_wire._open`); when all are, an optional ``deadline`` is slept until, the
  clock starts and all are released at once;
- writer: ``MPUB <topic>`` of ``batch_size`` messages of ``size`` zero bytes,
  then wait for the answer, again and again (one batch in flight per
  connection), until ``runfor`` has passed after an answer. An error frame
  stops the run (Go panics);
- reader: ``RDY <rdy>`` once, then FIN every message received, until
  ``runfor`` has passed, then close. Each read's FINs go out in one write
  (Go buffers them and flushes when its 4 KiB buffer fills and through the
  last quarter of every ``rdy`` window);
- the run's duration is from the release to the last worker's result; the
  result line is Go's, byte for byte::

    [bench_writer] 2024/05/01 12:00:00 duration: 10.000512345s - 171.713mb/s - 900242.612ops/s - 1.111us/op

  (``mb/s`` counts ``size`` bytes per message in MiB; ``us/op`` is whole
  microseconds of the duration over the count.)

:func:`run_latency` has no Go counterpart: one process, a producer PUBs one
message, a consumer with RDY 1 on ``channel`` receives it and FINs it, then
the next; each sample is PUB written -> message frame read. Use a topic
without a backlog. With ``until="ok"`` there is no consumer: each sample is
PUB written -> its ``OK`` read (what a request/response producer waits).

Workers are tight loops over blocking sockets (:mod:`nsq.apps.bench_wire`)
with the sans-IO encoders of :mod:`nsq.protocol.commands` and
:class:`~nsq.protocol.frames.FrameReader` for handshakes and answers; the
reader's message loop parses frames inline and joins its FINs
(``bench_wire._read_messages``, ``_fins``): 0.33 us per message
against 1.07 us with ``FrameReader.next_frame`` and ``commands.fin`` per
message. Measured against scripts/bench-ceiling's bare server (one
connection, 2 s): blocking reader 2.41-2.47M msg/s, the same loop in a
uvloop ``asyncio.Protocol`` 2.46-2.49M; writer 1.76-1.91M vs 1.83-2.08M.
Equal, so the simpler blocking loop. Not the asyncio client: it costs
several microseconds per message, the whole budget of the server measured.

The command prints the result line on stdout (Go's ``log`` writes it to
stderr); the deadline's "sleeping until" line goes to stderr.

This module starts and times the worker processes; settings, results and
their lines are :mod:`nsq.apps.bench_results` (re-exported here).
"""

from __future__ import annotations

import datetime as _dt
import multiprocessing
import multiprocessing.connection
import sys
import time
from collections.abc import Callable
from typing import Any

from nsq._internal.durations import format_duration
from nsq.apps.bench_results import (
    DEADLINE_FORMAT,
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHANNEL,
    DEFAULT_NSQD_TCP_ADDRESS,
    DEFAULT_RDY,
    DEFAULT_RUNFOR,
    DEFAULT_SIZE,
    DEFAULT_TOPIC,
    LATENCY_LINE,
    RESULT_LINE,
    BenchError,
    BenchOptions,
    BenchResult,
    LatencyResult,
    default_connections,
    go_float,
    go_log_prefix,
    parse_deadline,
    parse_latency_line,
    parse_result_line,
)
from nsq.apps.bench_wire import _next_message, _open, _read, _response, _write
from nsq.apps.bench_wire import _fins as _fins  # re-export: tests/cli/test_bench.py imports it from here
from nsq.protocol import commands

__all__ = [
    "DEADLINE_FORMAT",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHANNEL",
    "DEFAULT_NSQD_TCP_ADDRESS",
    "DEFAULT_RDY",
    "DEFAULT_RUNFOR",
    "DEFAULT_SIZE",
    "DEFAULT_TOPIC",
    "LATENCY_LINE",
    "RESULT_LINE",
    "BenchError",
    "BenchOptions",
    "BenchResult",
    "LatencyResult",
    "default_connections",
    "go_float",
    "parse_deadline",
    "parse_latency_line",
    "parse_result_line",
    "run_latency",
    "run_reader",
    "run_writer",
]

#: called about every 0.1 s with (seconds since the start, messages so far)
Progress = Callable[[float, int], None]


# --- workers (separate processes) ----------------------------------------------------------------

def _worker(kind: str, opts: BenchOptions, slot: int, counts: Any, go: Any, pipe: Any) -> None:
    """Process body: connect, report ready, wait for go, run, send the count."""
    try:
        if kind == "writer":
            sock, reader, owed = _open(opts, "bench_writer")
        else:
            sock, reader, owed = _open(opts, "bench_reader", commands.sub(opts.topic, opts.channel))
            owed += 1  # SUB's OK
        pipe.send(("ready", 0))
        go.wait()
        if kind == "writer":
            count = _write(sock, reader, owed, opts, slot, counts)
        else:
            count = _read(sock, reader, owed, opts, slot, counts)
        pipe.send(("done", count))
    except BenchError as exc:
        pipe.send(("error", str(exc)))
    except OSError as exc:
        pipe.send(("error", f"{opts.nsqd_tcp_address}: {exc.strerror or exc}"))
    except KeyboardInterrupt:
        pass
    finally:
        pipe.close()



# --- running ---------------------------------------------------------------------------------------

def _context() -> Any:
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(method)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _sleep_until_deadline(name: str, deadline: _dt.datetime | None) -> None:
    if deadline is None:
        return
    wait = (deadline - _dt.datetime.now(_dt.UTC)).total_seconds()
    _log(f"{go_log_prefix(name)}sleeping until {deadline:%Y-%m-%d %H:%M:%S +0000 UTC} ({format_duration(wait)})")
    if wait > 0:
        time.sleep(wait)


def _run_workers(kind: str, opts: BenchOptions, progress: Progress | None) -> BenchResult:
    if opts.connections < 1:
        raise BenchError("connections must be >= 1")
    ctx = _context()
    counts = ctx.RawArray("q", opts.connections)
    go = ctx.Event()
    procs, pipes = [], []
    try:
        for slot in range(opts.connections):
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_worker, args=(kind, opts, slot, counts, go, child), daemon=True,
                               name=f"bench_{kind}-{slot}")
            proc.start()
            child.close()
            procs.append(proc)
            pipes.append(parent)
            # one at a time, as Go's <-rdyChan
            _expect(parent, "ready")
        _sleep_until_deadline(f"bench_{kind}", opts.deadline)
        start = time.perf_counter_ns()
        go.set()
        total = 0
        waiting = list(pipes)
        last_progress = 0.0
        while waiting:
            for p in multiprocessing.connection.wait(waiting, timeout=0.1):
                total += _expect(p, "done")
                waiting.remove(p)
            now = time.perf_counter_ns()
            if progress is not None and (now - last_progress >= 1e8 or not waiting):
                last_progress = now
                progress((now - start) / 1e9, sum(counts) if waiting else total)
        end = time.perf_counter_ns()
    except BaseException:
        for proc in procs:  # some may wait for a go that never comes
            proc.terminate()
        raise
    finally:
        for proc in procs:
            proc.join(1)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    return BenchResult(kind, end - start, total, opts.size)


def _expect(pipe: Any, what: str) -> int:
    try:
        tag, value = pipe.recv()
    except EOFError:
        raise BenchError("a worker process died") from None
    if tag == "error":
        raise BenchError(value)
    if tag != what:
        raise BenchError(f"worker said {tag!r}, expected {what!r}")
    return int(value)


def run_writer(opts: BenchOptions, progress: Progress | None = None) -> BenchResult:
    """Go's bench_writer: ``opts.connections`` processes MPUB ``opts.batch_size``
    messages at a time for ``opts.runfor`` seconds.

    Raises:
        BenchError: a worker could not connect or nsqd answered an error.
    """
    return _run_workers("writer", opts, progress)


def run_reader(opts: BenchOptions, progress: Progress | None = None) -> BenchResult:
    """Go's bench_reader: ``opts.connections`` processes SUB, RDY ``opts.rdy``
    and FIN every message for ``opts.runfor`` seconds.

    Raises:
        BenchError: a worker could not connect or nsqd answered an error.
    """
    return _run_workers("reader", opts, progress)


def run_latency(opts: BenchOptions, progress: Progress | None = None) -> LatencyResult:
    """PUB one message, receive it with RDY 1, FIN, repeat for ``opts.runfor``;
    with ``opts.until == "ok"``, PUB and read its ``OK`` (no consumer).

    Raises:
        BenchError: could not connect, or nsqd answered an error.
    """
    consumer = None
    if opts.until != "ok":
        consumer, creader, cowed = _open(opts, "bench_latency", commands.sub(opts.topic, opts.channel)
                                         + commands.rdy(1))
    producer, preader, powed = _open(opts, "bench_latency")
    try:
        if consumer is not None:
            for _ in range(cowed + 1):  # IDENTIFY's (unless read in the handshake) and SUB's OK
                _response(consumer, creader)
        for _ in range(powed):
            _response(producer, preader)
        _sleep_until_deadline("bench_latency", opts.deadline)
        cmd = commands.pub(opts.topic, bytes(opts.size))
        samples: list[int] = []
        clock = time.perf_counter_ns
        start = clock()
        end = start + int(opts.runfor * 1e9)
        next_progress = start
        while True:
            t0 = clock()
            producer.sendall(cmd)
            if consumer is None:
                _response(producer, preader)  # PUB's OK
                t1 = clock()
            else:
                msg_id = _next_message(consumer, creader)
                t1 = clock()
                consumer.sendall(commands.fin(msg_id))
                _response(producer, preader)  # PUB's OK
            samples.append(t1 - t0)
            if progress is not None and t1 >= next_progress:
                next_progress = t1 + 100_000_000
                progress((t1 - start) / 1e9, len(samples))
            if t1 >= end:
                break
        duration = clock() - start
    finally:
        if consumer is not None:
            consumer.close()
        producer.close()
    if progress is not None:
        progress(duration / 1e9, len(samples))
    return LatencyResult(duration, samples)
