"""Load that scripts/bench-matrix makes itself (not a command): many consumer
sockets per process, a round-robin producer, a timestamped PUB probe, a
self-signed certificate and the Go PUB -> OK probe (scripts/goprobe).

Import after ``benchlib`` (which re-executes under .venv and puts the
project on ``sys.path``).

- :class:`Consumers`: ``len(subs)`` V2 consumer connections (IDENTIFY, SUB,
  RDY, FIN every message) spread over a few processes, each multiplexing
  its sockets with :mod:`selectors`: 200 or 1,000 OS processes would bury
  the 2 cores. Counts are shared (one counter per process); a message whose
  body starts with :data:`MARK` carries the ``time.monotonic_ns()`` it was
  published at (CLOCK_MONOTONIC: one clock for every process of the
  machine), and the consumer keeps received - published;
- :func:`produce_round_robin`: processes that MPUB ``batch`` messages to
  each topic in turn, one MPUB in flight per connection;
- :func:`probe`: PUB one :data:`MARK` message every ``interval`` seconds
  (open loop, each PUB's OK read before the next);
- :func:`tls_files`: a self-signed certificate and key for 127.0.0.1;
- :func:`goprobe`: scripts/goprobe/main.go built with ``go build`` into a
  temp directory (once per source version), or None without ``go``.
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
import ipaddress
import multiprocessing
import os
import selectors
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from typing import Any

from nsq.apps.bench_wire import _response
from nsq.protocol import commands
from nsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, HEARTBEAT, MAGIC_V2, FrameReader

#: a latency probe message's body starts with it, then 8 bytes of monotonic_ns
MARK = b"\xfeLAT"
_HDR = struct.Struct(">ii")
_TS = struct.Struct(">q")
_ctx = multiprocessing.get_context("fork")


def _connect(tcp: str, timeout: float = 10) -> socket.socket:
    host, port = tcp.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# --- consumers -------------------------------------------------------------------------------------

def _consume(tcp: str, subs: list[tuple[str, str]], rdy: int, slot: int, counts: Any, stop: Any, pipe: Any) -> None:
    try:
        socks, bufs = [], {}
        for topic, channel in subs:
            s = _connect(tcp, 300)  # Go nsqd answers SUBs slowly while it rewrites its metadata file
            s.sendall(MAGIC_V2 + commands.identify({"client_id": "matrix", "hostname": "matrix"})
                      + commands.sub(topic, channel) + commands.rdy(rdy))
            socks.append(s)
        for s in socks:  # IDENTIFY's and SUB's OK
            reader = FrameReader()
            for _ in range(2):
                _response(s, reader)
            bufs[s.fileno()] = reader.take_rest()
            s.setblocking(False)
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        pipe.send(("ready", None))
        samples: list[int] = []
        count = 0
        unpack_from, ts_from = _HDR.unpack_from, _TS.unpack_from
        while not stop.is_set():
            for key, _ in sel.select(0.05):
                conn: socket.socket = key.fileobj  # type: ignore[assignment]
                fd = key.fd
                try:
                    data = conn.recv(1 << 16)
                except BlockingIOError:
                    continue
                now = time.monotonic_ns()
                if not data:
                    raise RuntimeError("nsqd closed a consumer connection")
                buf = bufs[fd] + data if bufs[fd] else data
                n, pos, out = len(buf), 0, []
                while n - pos >= 8:
                    size, frame_type = unpack_from(buf, pos)
                    end = pos + 4 + size
                    if end > n:
                        break
                    if frame_type == FRAME_TYPE_MESSAGE:
                        out.append(b"FIN " + buf[pos + 18:pos + 34] + b"\n")
                        count += 1
                        if buf[pos + 34:pos + 38] == MARK:
                            samples.append(now - ts_from(buf, pos + 38)[0])
                    elif frame_type == FRAME_TYPE_ERROR:
                        if not buf[pos + 8:end].startswith(b"E_FIN_FAILED"):  # FINs of an emptied channel
                            raise RuntimeError(buf[pos + 8:end].decode(errors="replace"))
                    elif buf[pos + 8:end] == HEARTBEAT:
                        out.append(commands.nop())
                    pos = end
                bufs[fd] = buf[pos:]
                if out:
                    _send(conn, b"".join(out))
                    counts[slot] = count
        pipe.send(("done", samples))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))


def _send(s: socket.socket, data: bytes) -> None:
    try:
        sent = s.send(data)
    except BlockingIOError:
        sent = 0
    if sent < len(data):
        s.setblocking(True)
        s.sendall(data[sent:])
        s.setblocking(False)


class Consumers:
    """``subs`` ((topic, channel) per connection) consumed at RDY ``rdy`` by
    ``procs`` processes; :meth:`count` is the messages FINed so far,
    :meth:`stop` returns the probe samples (ns)."""

    def __init__(self, tcp: str, subs: list[tuple[str, str]], rdy: int, procs: int = 4) -> None:
        procs = max(1, min(procs, len(subs)))
        self.counts = _ctx.RawArray("q", procs)
        self.stop_event = _ctx.Event()
        self.procs, self.pipes = [], []
        for i in range(procs):
            parent, child = _ctx.Pipe(duplex=False)
            p = _ctx.Process(target=_consume, args=(tcp, subs[i::procs], rdy, i, self.counts, self.stop_event, child),
                             daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.pipes.append(parent)
        for pipe in self.pipes:
            self._expect(pipe, "ready", 600)

    def __enter__(self) -> Consumers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()

    def count(self) -> int:
        return sum(self.counts)

    def wait_first(self, since: int, timeout: float = 60) -> tuple[float, int]:
        """Wait for a delivery past ``since``; (monotonic time, count) then."""
        deadline = time.monotonic() + timeout
        while (c := self.count()) <= since:
            if time.monotonic() > deadline:
                raise SystemExit("no message delivered")
            time.sleep(0.002)
        return time.monotonic(), c

    def stop(self) -> list[int]:
        self.stop_event.set()
        samples: list[int] = []
        for pipe in self.pipes:
            samples += self._expect(pipe, "done", 30)
        return samples

    @staticmethod
    def _expect(pipe: Any, what: str, timeout: float) -> Any:
        if not pipe.poll(timeout):
            raise SystemExit(f"a consumer process did not say {what!r} in {timeout:g}s")
        tag, value = pipe.recv()
        if tag != what:
            raise SystemExit(f"consumer process: {value}")
        return value


def wait_quiet(cpu: Any, window: float = 0.5, busy: float = 0.05, timeout: float = 600) -> None:
    """Wait until ``cpu()`` (CPU seconds so far) grows by less than ``busy``
    over ``window`` seconds: the process is done with what it had queued."""
    deadline = time.monotonic() + timeout
    prev = cpu()
    while time.monotonic() < deadline:
        time.sleep(window)
        now = cpu()
        if now - prev < busy:
            return
        prev = now
    raise SystemExit(f"nsqd still busy after {timeout:g}s")


# --- producers -------------------------------------------------------------------------------------

def _produce(tcp: str, topics: list[str], batch: int, size: int, offset: int, runfor: float, go: Any,
             pipe: Any) -> None:
    try:
        s = _connect(tcp)
        s.sendall(MAGIC_V2)
        cmds = [commands.mpub(t, [bytes(size)] * batch) for t in topics]
        reader = FrameReader()
        go.wait()
        end = time.monotonic() + runfor
        i, count = offset, 0
        while time.monotonic() < end:
            s.sendall(cmds[i % len(cmds)])
            _response(s, reader)
            count += batch
            i += 1
        s.close()
        pipe.send(("done", count))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))


def produce_round_robin(tcp: str, topics: list[str], batch: int, size: int, runfor: float,
                        procs: int = 2) -> tuple[int, float]:
    """``procs`` connections (processes) each MPUB ``batch`` x ``size`` B to
    the topics in turn (each from its own start) for ``runfor`` s; returns
    (messages published, seconds from the start to the last one done)."""
    go = _ctx.Event()
    ps, pipes = [], []
    for i in range(procs):
        parent, child = _ctx.Pipe(duplex=False)
        p = _ctx.Process(target=_produce, args=(tcp, topics, batch, size, i * len(topics) // procs, runfor, go, child),
                         daemon=True)
        p.start()
        child.close()
        ps.append(p)
        pipes.append(parent)
    t0 = time.monotonic()
    go.set()
    total = 0
    for pipe in pipes:
        tag, value = pipe.recv()
        if tag != "done":
            raise SystemExit(f"producer process: {value}")
        total += value
    seconds = time.monotonic() - t0
    for p in ps:
        p.join()
    return total, seconds


def probe(tcp: str, topic: str, count: int, interval: float, size: int = 200) -> None:
    """PUB ``count`` :data:`MARK` messages of ``size`` B, one every ``interval`` s."""
    pad = bytes(max(0, size - len(MARK) - _TS.size))
    with _connect(tcp) as s:
        s.sendall(MAGIC_V2)
        reader = FrameReader()
        due = time.monotonic()
        for _ in range(count):
            s.sendall(commands.pub(topic, MARK + _TS.pack(time.monotonic_ns()) + pad))
            _response(s, reader)
            due += interval
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)


# --- TLS and the Go probe ------------------------------------------------------------------------

_files: tuple[str, str] | None = None


def tls_files() -> tuple[str, str]:
    """(cert, key): a self-signed certificate for 127.0.0.1, made once per
    run in a temp directory (the ``cryptography`` package, else ``openssl``)."""
    global _files
    if _files is None:
        d = tempfile.mkdtemp(prefix="nsq-matrix-tls-")
        atexit.register(shutil.rmtree, d, True)
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        try:
            from cryptography import x509
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.x509.oid import NameOID
        except ImportError:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", key, "-out", cert], check=True, capture_output=True)
        else:
            k = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
            now = datetime.datetime.now(datetime.timezone.utc)
            c = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
                 .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                 .not_valid_after(now + datetime.timedelta(days=2))
                 .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
                 .sign(k, hashes.SHA256()))
            with open(cert, "wb") as f:
                f.write(c.public_bytes(serialization.Encoding.PEM))
            with open(key, "wb") as f:
                f.write(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
        _files = cert, key
    return _files


_GOPROBE_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goprobe", "main.go")


def goprobe() -> str | None:
    """The built Go probe (scripts/goprobe), or None when ``go`` is missing.
    Built into ``$TMPDIR/nsq-goprobe-<source hash>/`` with a generated
    go.mod (``module goprobe``, ``go 1.19``), offline, never in the repo."""
    go = shutil.which("go")
    if go is None:
        return None
    with open(_GOPROBE_SRC, "rb") as f:
        src = f.read()
    d = os.path.join(tempfile.gettempdir(), f"nsq-goprobe-{hashlib.sha256(src).hexdigest()[:12]}")
    binary = os.path.join(d, "goprobe")
    if not os.path.exists(binary):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "main.go"), "wb") as f:
            f.write(src)
        with open(os.path.join(d, "go.mod"), "w") as f:
            f.write("module goprobe\n\ngo 1.19\n")
        env = dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off", GOTOOLCHAIN="local")
        r = subprocess.run([go, "build", "-o", binary + ".tmp", "."], cwd=d, env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"go build scripts/goprobe failed: {r.stderr.strip()}")
        os.replace(binary + ".tmp", binary)
    return binary
