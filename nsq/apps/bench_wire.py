"""``nsq bench``'s socket work: blocking V2 connections, the handshake, and
the writer's and reader's loops that each worker process runs.

The sans-IO encoders of :mod:`nsq.protocol.commands` and
:class:`~nsq.protocol.frames.FrameReader` serve handshakes and answers; the
reader's message loop parses frames inline and joins its FINs
(:func:`_read_messages`, :func:`_fins`), see :mod:`nsq.apps.bench` for the
figures behind that choice.

Upgrades (``--tls-v1``, ``--snappy``, ``--deflate``) are negotiated as the
protocol says (https://nsq.io/clients/tcp_protocol_spec.html, IDENTIFY):
IDENTIFY with ``feature_negotiation``, read nsqd's JSON answer; for TLS
wrap the socket (:mod:`ssl`, a blocking handshake) and read the ``OK`` nsqd
sends over it; for compression read the ``OK`` that nsqd sends already
compressed. Only then do SUB and the rest go out. An upgraded connection is
a :class:`_Stream`: the socket (or its TLS wrapper) and the client
library's codec (:mod:`nsq.protocol.compression`: snappy framing, raw
deflate sync-flushed per write), with ``recv``/``sendall`` over the
uncompressed stream, so the same frame parsing serves every connection.
Without upgrades the worker keeps the bare socket, as before.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import struct
import time
from typing import Any, Protocol

from nsq import __version__
from nsq.apps.bench_results import BenchError, BenchOptions
from nsq.protocol import commands
from nsq.protocol.compression import Codec, CompressionError, DeflateCodec, SnappyCodec
from nsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameReader,
)

_FRAME_HDR = struct.Struct(">ii")


class _Conn(Protocol):
    """A worker's connection: a socket, or an upgraded :class:`_Stream`."""

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> None: ...

    def close(self) -> None: ...

_NOP = commands.nop()
_RECV = 1 << 18


def _dial(address: str) -> socket.socket:
    from nsq.client.connection import parse_address

    try:
        host, port = parse_address(address)
    except ValueError:
        raise BenchError(f"invalid address {address!r}") from None
    try:
        sock = socket.create_connection((host, port), timeout=1.0)  # Go: net.DialTimeout(.., time.Second)
    except OSError as exc:
        from nsq._internal.addresses import fmt_addr
        from nsq._internal.neterrors import error_words

        raise BenchError(f"cannot connect to {fmt_addr(host, port)}: {error_words(exc)}") from None
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Go's default
    return sock


def _identify(name: str, extra: dict[str, Any] | None = None) -> bytes:
    return commands.identify({"client_id": name, "hostname": name, "user_agent": f"{name}/{__version__}",
                              **(extra or {})})


class _Stream:
    """An upgraded connection: ``sock`` (a socket or its TLS wrapper) and,
    after a compression upgrade, ``codec``; :meth:`recv` and :meth:`sendall`
    carry the uncompressed stream."""

    def __init__(self, sock: socket.socket, codec: Codec | None = None) -> None:
        self.sock = sock
        self.codec = codec

    def recv(self, size: int) -> bytes:
        """Stream bytes (at least one), or ``b""`` when nsqd closed."""
        codec = self.codec
        while True:
            data = self.sock.recv(size)
            if not data or codec is None:
                return data
            try:
                out = codec.decode(data)
            except CompressionError as exc:
                raise BenchError(str(exc)) from None
            if out:
                return out

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(self.codec.encode(data) if self.codec is not None else data)

    def wait(self, timeout: float) -> bool:
        """True when :meth:`recv` has something to read within ``timeout`` s.
        (A kernel receive timeout does not do here: CPython's SSL read retries
        on it forever.)"""
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        return bool(select.select([sock], [], [], timeout)[0])

    def close(self) -> None:
        self.sock.close()


def _open(opts: BenchOptions, name: str, then: bytes = b"") -> tuple[Any, FrameReader, int]:
    """Dial, send the magic and IDENTIFY, do the upgrades ``opts`` asks for,
    then send ``then`` (SUB, RDY).

    Returns:
        The connection (the socket, or a :class:`_Stream` when upgraded), its
        FrameReader (holding what was read past the handshake) and how many
        IDENTIFY answers are still to be read (1 without upgrades: nothing
        was read yet; 0 with).

    Raises:
        BenchError: cannot connect, nsqd refused or did not offer an
            upgrade, or the TLS handshake failed.
    """
    sock = _dial(opts.nsqd_tcp_address)
    wanted = opts.features()
    reader = FrameReader()
    if not wanted:
        sock.sendall(MAGIC_V2 + _identify(name) + then)
        return sock, reader, 1
    sock.sendall(MAGIC_V2 + _identify(name, {"feature_negotiation": True, **wanted}))
    answer = _response(sock, reader)
    try:
        got = json.loads(answer)
    except ValueError:
        got = {}
    if not isinstance(got, dict):
        got = {}
    refused = [key for key in ("tls_v1", "snappy", "deflate") if wanted.get(key) and not got.get(key)]
    if refused:
        raise BenchError(f"nsqd did not agree to {', '.join(refused)} (its IDENTIFY answer: "
                         f"{answer.decode(errors='replace')})")
    stream = _Stream(sock)
    if got.get("tls_v1"):
        stream.sock = _start_tls(sock, opts)
        _response(stream, reader)  # the OK nsqd sends over TLS
    if got.get("snappy") or got.get("deflate"):
        codec: Codec = (SnappyCodec() if got.get("snappy")
                        else DeflateCodec(int(got.get("deflate_level") or opts.deflate_level)))
        rest = reader.take_rest()  # compressed already
        stream.codec = codec
        if rest:
            try:
                reader.feed(codec.decode(rest))
            except CompressionError as exc:
                raise BenchError(str(exc)) from None
        _response(stream, reader)  # the OK, compressed
    if then:
        stream.sendall(then)
    return stream, reader, 0


def _start_tls(sock: socket.socket, opts: BenchOptions) -> ssl.SSLSocket:
    from nsq.client.connection import parse_address
    from nsq.client.errors import ClientConfigError
    from nsq.client.tls import client_context

    try:
        ctx = client_context(opts.tls_root_ca_file, opts.tls_insecure_skip_verify)
    except ClientConfigError as exc:
        raise BenchError(str(exc)) from None
    host = parse_address(opts.nsqd_tcp_address)[0]
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except (ssl.SSLError, ssl.CertificateError) as exc:
        raise BenchError(f"TLS handshake with {opts.nsqd_tcp_address}: {exc}") from None


def _response(sock: _Conn, reader: FrameReader) -> bytes:
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


def _read_frame(sock: _Conn, reader: FrameReader) -> tuple[int, bytes]:
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


def _next_message(sock: _Conn, reader: FrameReader) -> bytes:
    """Read to the next message frame; returns its ID."""
    while True:
        frame_type, data = _read_frame(sock, reader)
        if frame_type == FRAME_TYPE_MESSAGE:
            return data[10:26]
        if frame_type == FRAME_TYPE_ERROR:
            raise BenchError(data.decode(errors="replace"))
        if data == HEARTBEAT:
            sock.sendall(_NOP)


# --- the workers' loops (run inside each worker process) -------------------------------------------

def _write(sock: _Conn, reader: FrameReader, owed: int, opts: BenchOptions, slot: int, counts: Any) -> int:
    for _ in range(owed):
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


def _read(sock: _Conn, reader: FrameReader, owed: int, opts: BenchOptions, slot: int, counts: Any) -> int:
    sock.sendall(commands.rdy(opts.rdy))
    end = time.monotonic() + opts.runfor
    for _ in range(owed):  # IDENTIFY's (unless read in the handshake) and SUB's OK (Go reads two responses)
        _response(sock, reader)
    count = _read_messages(sock, reader.take_rest(), end, slot, counts)
    sock.close()
    return count


def _read_messages(sock: _Conn, pending: bytes, end: float, slot: int, counts: Any) -> int:
    """FIN every message until ``end`` (monotonic); returns the count.

    The hot loop: frames are parsed in place (what FrameReader.next_frame
    does, without a call, checks and a copy per frame: 2-3x faster) and one
    read's FINs leave in one write.
    """
    unpack_from = _FRAME_HDR.unpack_from
    recv = sock.recv
    sendall = sock.sendall
    monotonic = time.monotonic
    buf = b""
    data = pending  # what the handshake read past SUB's OK: may hold the first messages
    count = 0
    # a kernel receive timeout (one syscall per read, not poll + recv) bounds how long
    # a quiet nsqd keeps us past the end; an upgraded stream polls first instead
    tick = min(0.05, max(end - monotonic(), 0.001))
    wait = sock.wait if isinstance(sock, _Stream) else None
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, int(tick * 1e6)))
    while True:
        if not data:
            if monotonic() >= end:
                break
            if wait is not None and not wait(tick):
                continue
            try:
                data = recv(_RECV)
            except (BlockingIOError, TimeoutError):
                continue
            if not data:
                raise BenchError("connection closed by nsqd")
        buf = buf + data if buf else data
        data = b""
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
