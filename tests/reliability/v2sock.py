"""A blocking V2 producer/consumer over a real socket, for the disk-fault and
load tests: PUB and its answer, SUB/RDY, messages, FIN. Frames as
nsq.io/clients/tcp_protocol_spec.html draws them.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["V2Socket", "FRAME_RESPONSE", "FRAME_ERROR", "FRAME_MESSAGE"]

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2


class V2Socket:
    """One blocking V2 connection to ``127.0.0.1:port`` (magic sent)."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(b"  V2")
        self._buf = bytearray()

    def _recv_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by nsqd")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def read_frame(self) -> tuple[int, bytes]:
        """``(frame type, data)``; heartbeats are answered with NOP and skipped."""
        while True:
            size, ftype = struct.unpack(">ii", self._recv_exact(8))
            data = self._recv_exact(size - 4)
            if ftype == FRAME_RESPONSE and data == b"_heartbeat_":
                self.sock.sendall(b"NOP\n")
                continue
            return ftype, data

    def pub(self, topic: str, body: bytes) -> tuple[int, bytes]:
        """PUB and its answer frame."""
        self.sock.sendall(b"PUB %s\n" % topic.encode() + struct.pack(">i", len(body)) + body)
        return self.read_frame()

    def mpub(self, topic: str, bodies: list[bytes]) -> tuple[int, bytes]:
        """MPUB and its answer frame."""
        payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)
        self.sock.sendall(b"MPUB %s\n" % topic.encode() + struct.pack(">i", len(payload)) + payload)
        return self.read_frame()

    def sub(self, topic: str, channel: str, rdy: int) -> None:
        """SUB (its OK read) and RDY."""
        self.sock.sendall(b"SUB %s %s\n" % (topic.encode(), channel.encode()))
        ftype, data = self.read_frame()
        assert (ftype, data) == (FRAME_RESPONSE, b"OK"), data
        self.sock.sendall(b"RDY %d\n" % rdy)

    def read_message(self) -> tuple[bytes, int, bytes]:
        """The next message frame: ``(id, attempts, body)``."""
        ftype, data = self.read_frame()
        assert ftype == FRAME_MESSAGE, (ftype, data[:200])
        attempts = struct.unpack_from(">H", data, 8)[0]
        return data[10:26], attempts, data[26:]

    def fin(self, msg_id: bytes) -> None:
        self.sock.sendall(b"FIN " + msg_id + b"\n")

    def close(self) -> None:
        self.sock.close()
