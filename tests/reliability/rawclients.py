"""Blocking raw-socket clients for the fuzz, bomb and flow-control tests (V2 frames, V1 answers).

Blocking sockets keep the client side simple and independent of the event
loop of an in-process daemon; every read has a timeout.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

from nsq.protocol import commands as c
from nsq.protocol.compression import Codec, DeflateCodec, SnappyCodec
from nsq.protocol.frames import FRAME_TYPE_RESPONSE, MAGIC_V2, FrameReader
from nsq.protocol.lookupd import MAGIC_V1, V1ClientParser, encode_identify, encode_register

__all__ = ["V2Client", "V1Client", "abort", "send_quietly"]


def abort(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def send_quietly(sock: socket.socket, data: bytes) -> bool:
    """``sendall`` that reports a peer that closed (False) instead of raising."""
    try:
        sock.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
        return False


class V2Client:
    """One raw V2 connection to nsqd; frames are parsed after the codec, if any."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(MAGIC_V2)
        self.reader = FrameReader()
        self.codec: Codec | None = None
        self.eof = False

    def send(self, data: bytes) -> bool:
        return send_quietly(self.sock, self.codec.encode(data) if self.codec is not None else data)

    def _fill(self, deadline: float) -> None:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, ConnectionAbortedError):
            data = b""
        if not data:
            self.eof = True
            return
        if self.codec is not None:
            data = self.codec.decode(data)
        self.reader.feed(data)

    def read_frame(self, timeout: float = 5.0) -> tuple[int, bytes] | None:
        """The next frame, or None at EOF; raises TimeoutError (socket.timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.reader.next_frame()
            if frame is not None:
                return frame
            if self.eof:
                return None
            if time.monotonic() >= deadline:
                raise TimeoutError("no frame")
            self._fill(deadline)

    def read_until_closed(self, timeout: float = 10.0) -> list[tuple[int, bytes]]:
        """Every frame until EOF; raises TimeoutError if the server keeps it open."""
        frames = []
        deadline = time.monotonic() + timeout
        while (frame := self.read_frame(max(0.0, deadline - time.monotonic()))) is not None:
            frames.append(frame)
        return frames

    def identify(self, **data: Any) -> dict[str, Any] | bytes:
        """IDENTIFY; with deflate or snappy granted, also switch to the codec
        and read its ``OK``. Returns the JSON answer (or ``b"OK"``)."""
        self.send(c.identify(data))
        frame = self.read_frame()
        assert frame is not None and frame[0] == FRAME_TYPE_RESPONSE, frame
        if frame[1] == b"OK":
            return frame[1]
        answer = json.loads(frame[1])
        if answer.get("deflate") or answer.get("snappy"):
            self.codec = DeflateCodec() if answer.get("deflate") else SnappyCodec()
            rest = self.reader.take_rest()
            if rest:
                self.reader.feed(self.codec.decode(rest))
            assert self.read_frame() == (FRAME_TYPE_RESPONSE, b"OK")
        return answer

    def command(self, data: bytes) -> tuple[int, bytes] | None:
        self.send(data)
        return self.read_frame()

    def close(self) -> None:
        self.sock.close()


class V1Client:
    """One raw V1 connection to nsqlookupd."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(MAGIC_V1)
        self.parser = V1ClientParser()

    def read(self, timeout: float = 5.0) -> bytes | None:
        """The next answer, or None at EOF."""
        deadline = time.monotonic() + timeout
        while (answer := self.parser.next_response()) is None:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                return None
            self.parser.feed(data)
        return answer

    def command(self, data: bytes) -> bytes | None:
        self.sock.sendall(data)
        return self.read()

    def identify(self, **over: Any) -> dict[str, Any]:
        info = {"broadcast_address": "nsqd.example", "tcp_port": 4150, "http_port": 4151,
                "version": "1.2.1", "hostname": "box", **over}
        answer = self.command(encode_identify(info))
        assert answer is not None and answer.startswith(b"{"), answer
        return json.loads(answer)

    def register(self, topic: str, channel: str = "") -> None:
        assert self.command(encode_register(topic, channel)) == b"OK"

    @property
    def local(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def close(self) -> None:
        self.sock.close()
