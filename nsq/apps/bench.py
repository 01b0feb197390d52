"""Load generators for nsqd: what ``nsq bench`` runs (Go's bench_writer and
bench_reader, plus a latency probe).

Go's ``bench/bench_writer`` and ``bench/bench_reader`` as :func:`run_writer`
and :func:`run_reader` do it, over the V2 protocol only, so they work against
any NSQ-compatible nsqd:

- one connection per CPU (Go: one goroutine per ``GOMAXPROCS``; here
  ``connections``, default :func:`default_connections`), each in its own OS
  process so the load generator is not the bottleneck. Every worker dials
  (1 s timeout), sends the magic and IDENTIFY (the reader also SUB) and
  reports ready; when all are, an optional ``deadline`` is slept until, the
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
without a backlog.

Workers are tight loops over blocking sockets with the sans-IO encoders of
:mod:`nsq.protocol.commands` and :class:`~nsq.protocol.frames.FrameReader`
for handshakes and answers; the reader's message loop parses frames inline
and joins its FINs (``_read_messages``, ``_fins``): 0.33 us per message
against 1.07 us with ``FrameReader.next_frame`` and ``commands.fin`` per
message. Measured against scripts/bench-ceiling's bare server (one
connection, 2 s): blocking reader 2.41-2.47M msg/s, the same loop in a
uvloop ``asyncio.Protocol`` 2.46-2.49M; writer 1.76-1.91M vs 1.83-2.08M.
Equal, so the simpler blocking loop. Not the asyncio client: it costs
several microseconds per message, the whole budget of the server measured.

The command prints the result line on stdout (Go's ``log`` writes it to
stderr); the deadline's "sleeping until" line goes to stderr.
"""

from __future__ import annotations

import datetime as _dt
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nsq import __version__
from nsq.protocol import commands
from nsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameReader,
)
from nsq.server.durations import format_duration, parse_duration

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

# Go's defaults (bench_writer.go, bench_reader.go)
DEFAULT_NSQD_TCP_ADDRESS = "127.0.0.1:4150"
DEFAULT_TOPIC = "sub_bench"
DEFAULT_CHANNEL = "ch"
DEFAULT_SIZE = 200
DEFAULT_BATCH_SIZE = 200
DEFAULT_RUNFOR = 10.0
DEFAULT_RDY = 2500
#: Go's ``time.Parse("2006-01-02 15:04:05", deadline)``: UTC
DEADLINE_FORMAT = "%Y-%m-%d %H:%M:%S"

#: called about every 0.1 s with (seconds since the start, messages so far)
Progress = Callable[[float, int], None]

_FRAME_HDR = struct.Struct(">ii")
_NOP = commands.nop()
_RECV = 1 << 18


class BenchError(Exception):
    """A worker could not connect, or nsqd answered with an error."""


@dataclass
class BenchOptions:
    """One run's settings (Go's flags).

    Attributes:
        nsqd_tcp_address: ``host:port`` of nsqd.
        topic: topic to publish to / receive from.
        channel: channel to receive on (reader, latency).
        size: message size in bytes.
        batch_size: messages per MPUB (writer).
        runfor: seconds to run.
        rdy: RDY count (reader).
        deadline: UTC time to start the run at, or None for at once.
        connections: connections, one OS process each (latency: always 1 pair).
    """

    nsqd_tcp_address: str = DEFAULT_NSQD_TCP_ADDRESS
    topic: str = DEFAULT_TOPIC
    channel: str = DEFAULT_CHANNEL
    size: int = DEFAULT_SIZE
    batch_size: int = DEFAULT_BATCH_SIZE
    runfor: float = DEFAULT_RUNFOR
    rdy: int = DEFAULT_RDY
    deadline: _dt.datetime | None = None
    connections: int = field(default_factory=lambda: default_connections())


def default_connections() -> int:
    """Go's ``runtime.GOMAXPROCS(0)``: ``$GOMAXPROCS`` if set, else the CPUs
    this process may run on."""
    env = os.environ.get("GOMAXPROCS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_deadline(text: str) -> _dt.datetime:
    """``"2006-01-02 15:04:05"`` (UTC, as Go parses it) -> aware datetime.

    Raises:
        ValueError: another format.
    """
    return _dt.datetime.strptime(text, DEADLINE_FORMAT).replace(tzinfo=_dt.UTC)


def go_float(value: float) -> str:
    """``fmt.Sprintf("%.03f", value)``, including ``+Inf`` and ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.3f}"


def _go_log_prefix(name: str) -> str:
    # log.SetPrefix("[bench_writer] ") with the default LstdFlags (local time)
    return f"[{name}] {time.strftime('%Y/%m/%d %H:%M:%S')} "


@dataclass
class BenchResult:
    """A writer or reader run.

    Attributes:
        mode: ``writer`` or ``reader``.
        duration_ns: release of the workers -> last result.
        count: messages published (acknowledged) or received.
        size: message size used for ``mb_per_s``.
    """

    mode: str
    duration_ns: int
    count: int
    size: int

    @property
    def seconds(self) -> float:
        return self.duration_ns / 1e9

    @property
    def mb_per_s(self) -> float:
        return _div(self.count * self.size, self.seconds) / 1024 / 1024

    @property
    def ops_per_s(self) -> float:
        return _div(self.count, self.seconds)

    @property
    def us_per_op(self) -> float:
        # Go: float64(duration/time.Microsecond)/float64(tmc)
        return _div(self.duration_ns // 1000, self.count)

    def line(self) -> str:
        """Go's final log line."""
        return (f"{_go_log_prefix('bench_' + self.mode)}duration: {format_duration(self.duration_ns / 1e9)} - "
                f"{go_float(self.mb_per_s)}mb/s - {go_float(self.ops_per_s)}ops/s - {go_float(self.us_per_op)}us/op")


@dataclass
class LatencyResult:
    """A latency run: one sample (ns) per message, PUB written -> message read."""

    duration_ns: int
    samples_ns: list[int]

    @property
    def count(self) -> int:
        return len(self.samples_ns)

    def percentile_us(self, q: float) -> float:
        """The ``q`` quantile (0..1, nearest rank) in microseconds; NaN without samples."""
        if not self.samples_ns:
            return math.nan
        ordered = sorted(self.samples_ns)
        rank = max(1, math.ceil(q * len(ordered)))
        return ordered[rank - 1] / 1000

    def line(self) -> str:
        """``duration: 10.0001s - 12345 msgs - p50: 42.000us - p90: ... - p99: ... - max: ...``."""
        parts = [f"{_go_log_prefix('bench_latency')}duration: {format_duration(self.duration_ns / 1e9)}",
                 f"{self.count} msgs"]
        parts += [f"{name}: {go_float(self.percentile_us(q))}us"
                  for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))]
        return " - ".join(parts)


_NUM = r"([-+]?(?:[\d.]+|Inf|NaN))"
#: Go's bench result line (what bench.py parses): mode, duration, mb/s, ops/s, us/op
RESULT_LINE = re.compile(r"\[bench_(\w+)\] .*?duration: (\S+) - " + _NUM + r"mb/s - " + _NUM + r"ops/s - "
                         + _NUM + r"us/op")
#: the latency line: duration, count, p50, p90, p99, max (us)
LATENCY_LINE = re.compile(r"\[bench_latency\] .*?duration: (\S+) - (\d+) msgs - p50: " + _NUM + r"us - p90: "
                          + _NUM + r"us - p99: " + _NUM + r"us - max: " + _NUM + r"us")


def parse_result_line(text: str) -> dict[str, Any] | None:
    """The first writer/reader result line in ``text`` as ``{"mode", "seconds",
    "mb_per_s", "ops_per_s", "us_per_op"}``, or None."""
    m = RESULT_LINE.search(text)
    if m is None:
        return None
    return {"mode": m.group(1), "seconds": parse_duration(m.group(2)), "mb_per_s": float(m.group(3)),
            "ops_per_s": float(m.group(4)), "us_per_op": float(m.group(5))}


def parse_latency_line(text: str) -> dict[str, Any] | None:
    """The first latency line in ``text`` as ``{"seconds", "count", "p50",
    "p90", "p99", "max"}`` (microseconds), or None."""
    m = LATENCY_LINE.search(text)
    if m is None:
        return None
    out: dict[str, Any] = {"seconds": parse_duration(m.group(1)), "count": int(m.group(2))}
    for i, name in enumerate(("p50", "p90", "p99", "max")):
        out[name] = float(m.group(3 + i))
    return out


def _div(a: float, b: float) -> float:
    if b:
        return a / b
    if a:
        return math.inf
    return math.nan


# --- wire helpers --------------------------------------------------------------------------------

def _dial(address: str) -> socket.socket:
    from nsq.client.connection import parse_address

    try:
        host, port = parse_address(address)
    except ValueError:
        raise BenchError(f"invalid address {address!r}") from None
    try:
        sock = socket.create_connection((host, port), timeout=1.0)  # Go: net.DialTimeout(.., time.Second)
    except OSError as exc:
        raise BenchError(f"dial tcp {address}: {exc.strerror or exc}") from None
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Go's default
    return sock


def _identify(name: str) -> bytes:
    return commands.identify({"client_id": name, "hostname": name, "user_agent": f"{name}/{__version__}"})


def _response(sock: socket.socket, reader: FrameReader) -> bytes:
    """The next response frame's data; answers heartbeats.

    Raises:
        BenchError: an error frame, a message frame or the connection closed.
    """
    while True:
        frame_type, data = _read_frame(sock, reader)
        if frame_type == FRAME_TYPE_RESPONSE:
            if data == HEARTBEAT:
                sock.sendall(_NOP)
                continue
            return data
        if frame_type == FRAME_TYPE_ERROR:
            raise BenchError(data.decode(errors="replace"))
        raise BenchError("unexpected message frame")


# --- workers (separate processes) ----------------------------------------------------------------

def _worker(kind: str, opts: BenchOptions, slot: int, counts: Any, go: Any, pipe: Any) -> None:
    """Process body: connect, report ready, wait for go, run, send the count."""
    try:
        sock = _dial(opts.nsqd_tcp_address)
        if kind == "writer":
            sock.sendall(MAGIC_V2 + _identify("bench_writer"))
        else:
            sock.sendall(MAGIC_V2 + _identify("bench_reader") + commands.sub(opts.topic, opts.channel))
        pipe.send(("ready", 0))
        go.wait()
        if kind == "writer":
            count = _write(sock, opts, slot, counts)
        else:
            count = _read(sock, opts, slot, counts)
        pipe.send(("done", count))
    except BenchError as exc:
        pipe.send(("error", str(exc)))
    except OSError as exc:
        pipe.send(("error", f"{opts.nsqd_tcp_address}: {exc.strerror or exc}"))
    except KeyboardInterrupt:
        pass
    finally:
        pipe.close()


def _write(sock: socket.socket, opts: BenchOptions, slot: int, counts: Any) -> int:
    reader = FrameReader()
    _response(sock, reader)  # IDENTIFY's OK
    batch = opts.batch_size
    cmd = commands.mpub(opts.topic, [bytes(opts.size)] * batch)
    sendall = sock.sendall
    end = time.monotonic() + opts.runfor
    count = 0
    while True:
        sendall(cmd)
        _response(sock, reader)
        count += batch
        counts[slot] = count
        if time.monotonic() > end:
            break
    sock.close()
    return count


def _read(sock: socket.socket, opts: BenchOptions, slot: int, counts: Any) -> int:
    sock.sendall(commands.rdy(opts.rdy))
    end = time.monotonic() + opts.runfor
    reader = FrameReader()
    for _ in range(2):  # IDENTIFY's and SUB's OK (Go reads two responses)
        _response(sock, reader)
    count = _read_messages(sock, reader.take_rest(), end, slot, counts)
    sock.close()
    return count


def _read_messages(sock: socket.socket, pending: bytes, end: float, slot: int, counts: Any) -> int:
    """FIN every message until ``end`` (monotonic); returns the count.

    The hot loop: frames are parsed in place (what FrameReader.next_frame
    does, without a call, checks and a copy per frame: 2-3x faster) and one
    read's FINs leave in one write.
    """
    unpack_from = _FRAME_HDR.unpack_from
    recv = sock.recv
    sendall = sock.sendall
    monotonic = time.monotonic
    buf = pending
    count = 0
    # a kernel receive timeout (one syscall per read, not poll + recv) bounds how long
    # a quiet nsqd keeps us past the end
    tick = min(0.05, max(end - monotonic(), 0.001))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, int(tick * 1e6)))
    while True:
        if monotonic() >= end:
            break
        try:
            data = recv(_RECV)
        except (BlockingIOError, TimeoutError):
            continue
        if not data:
            raise BenchError("connection closed by nsqd")
        buf = buf + data if buf else data
        n = len(buf)
        pos = 0
        ids = []
        while n - pos >= 8:
            size, frame_type = unpack_from(buf, pos)
            frame_end = pos + 4 + size
            if frame_end > n:
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                ids.append(buf[pos + 18:pos + 34])
            elif frame_type == FRAME_TYPE_RESPONSE:
                if buf[pos + 8:frame_end] == HEARTBEAT:
                    sendall(_NOP)
            elif frame_type == FRAME_TYPE_ERROR:
                text = buf[pos + 8:frame_end]
                if not text.startswith(b"E_FIN_FAILED"):
                    raise BenchError(text.decode(errors="replace"))
            else:
                raise BenchError(f"invalid frame type {frame_type}")
            pos = frame_end
        buf = buf[pos:] if pos < n else b""
        if ids:
            sendall(_fins(ids))
            count += len(ids)
            counts[slot] = count
    return count


def _fins(ids: list[bytes]) -> bytes:
    """``commands.fin`` of each ID, concatenated; one join instead of a call
    and two concatenations per message (a third of the reader's time)."""
    return b"FIN " + b"\nFIN ".join(ids) + b"\n"


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
    _log(f"{_go_log_prefix(name)}sleeping until {deadline:%Y-%m-%d %H:%M:%S +0000 UTC} ({format_duration(wait)})")
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
    return value


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
    """PUB one message, receive it with RDY 1, FIN, repeat for ``opts.runfor``.

    Raises:
        BenchError: could not connect, or nsqd answered an error.
    """
    consumer = _dial(opts.nsqd_tcp_address)
    producer = _dial(opts.nsqd_tcp_address)
    try:
        creader, preader = FrameReader(), FrameReader()
        consumer.sendall(MAGIC_V2 + _identify("bench_latency") + commands.sub(opts.topic, opts.channel)
                         + commands.rdy(1))
        producer.sendall(MAGIC_V2 + _identify("bench_latency"))
        for _ in range(2):
            _response(consumer, creader)
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
            msg_id = _next_message(consumer, creader)
            t1 = clock()
            samples.append(t1 - t0)
            consumer.sendall(commands.fin(msg_id))
            _response(producer, preader)  # PUB's OK
            if progress is not None and t1 >= next_progress:
                next_progress = t1 + 100_000_000
                progress((t1 - start) / 1e9, len(samples))
            if t1 >= end:
                break
        duration = clock() - start
    finally:
        consumer.close()
        producer.close()
    if progress is not None:
        progress(duration / 1e9, len(samples))
    return LatencyResult(duration, samples)


def _read_frame(sock: socket.socket, reader: FrameReader) -> tuple[int, bytes]:
    """The next frame, reading the socket as needed (blocking).

    Raises:
        BenchError: the connection closed.
    """
    while True:
        frame = reader.next_frame()
        if frame is not None:
            return frame
        data = sock.recv(_RECV)
        if not data:
            raise BenchError("connection closed by nsqd")
        reader.feed(data)


def _next_message(sock: socket.socket, reader: FrameReader) -> bytes:
    """Read to the next message frame; returns its ID."""
    while True:
        frame_type, data = _read_frame(sock, reader)
        if frame_type == FRAME_TYPE_MESSAGE:
            return data[10:26]
        if frame_type == FRAME_TYPE_ERROR:
            raise BenchError(data.decode(errors="replace"))
        if data == HEARTBEAT:
            sock.sendall(_NOP)
