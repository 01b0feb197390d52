"""Client-side encoders for every V2 command.

Sources: https://nsq.io/clients/tcp_protocol_spec.html ("Commands"); nsqio/go-nsq ``command.go``
(``Identify``, ``Publish``, ``MultiPublish``, ``Ready``, ...).

Each function returns the bytes to write after the ``"  V2"`` magic. Names
and sizes are not validated here beyond what encoding needs; nsqd answers
invalid input with the error of :mod:`nsq.protocol.errors`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "identify",
    "auth",
    "sub",
    "pub",
    "mpub",
    "dpub",
    "rdy",
    "fin",
    "req",
    "touch",
    "cls",
    "nop",
]

_LEN = struct.Struct(">i")


def _with_body(line: bytes, body: bytes) -> bytes:
    return line + _LEN.pack(len(body)) + body


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def identify(data: Mapping[str, Any]) -> bytes:
    """``IDENTIFY\\n[size][JSON]``; ``data`` holds the keys of nsqd's
    ``identifyDataV2`` (nsqio/nsq ``nsqd/client_v2.go``)."""
    return _with_body(b"IDENTIFY\n", json.dumps(data).encode())


def auth(secret: str | bytes) -> bytes:
    """``AUTH\\n[size][secret]``."""
    return _with_body(b"AUTH\n", _b(secret))


def sub(topic: str, channel: str) -> bytes:
    """``SUB <topic> <channel>\\n``."""
    return b"SUB %s %s\n" % (_b(topic), _b(channel))


def pub(topic: str, body: bytes) -> bytes:
    """``PUB <topic>\\n[size][body]``."""
    return _with_body(b"PUB %s\n" % _b(topic), body)


def mpub(topic: str, bodies: Iterable[bytes]) -> bytes:
    """``MPUB <topic>\\n[body size][count]([size][body])*``."""
    bodies = list(bodies)
    parts = [_LEN.pack(len(bodies))]
    for body in bodies:
        parts.append(_LEN.pack(len(body)))
        parts.append(body)
    return _with_body(b"MPUB %s\n" % _b(topic), b"".join(parts))


def dpub(topic: str, defer_ms: int, body: bytes) -> bytes:
    """``DPUB <topic> <defer ms>\\n[size][body]``."""
    return _with_body(b"DPUB %s %d\n" % (_b(topic), defer_ms), body)


def rdy(count: int) -> bytes:
    """``RDY <count>\\n``."""
    return b"RDY %d\n" % count


def fin(msg_id: bytes) -> bytes:
    """``FIN <16-byte id>\\n``."""
    return b"FIN " + msg_id + b"\n"


def req(msg_id: bytes, timeout_ms: int) -> bytes:
    """``REQ <16-byte id> <timeout ms>\\n``."""
    return b"REQ %s %d\n" % (msg_id, timeout_ms)


def touch(msg_id: bytes) -> bytes:
    """``TOUCH <16-byte id>\\n``."""
    return b"TOUCH " + msg_id + b"\n"


def cls() -> bytes:
    """``CLS\\n``."""
    return b"CLS\n"


def nop() -> bytes:
    """``NOP\\n``."""
    return b"NOP\n"
