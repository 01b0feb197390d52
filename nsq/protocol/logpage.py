"""The page format of nsqd's ``GET /topic/read`` (``--storage=wal``), sans-IO.

A page is the messages of a topic log from an offset on, each::

    [i64 offset][i64 timestamp ns][u16 attempts][16-byte id][i32 size][body]
     8 bytes     8 bytes           2 bytes       16 bytes    4 bytes   size bytes

all big-endian (docs/reference/http.md, "Retention, replay and reading by
offset"). nsqd writes it (nsq/server/nsqd/http/replay.py), the Spark source's
executors read it (nsq/spark/logread.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["PAGE_HEADER", "encode_page"]

#: one message's header in a page
PAGE_HEADER = struct.Struct(">qqH16si")


def encode_page(messages: Iterable[tuple[int, bytes, bytes, int, int]]) -> bytes:
    """A page of ``(offset, id, body, timestamp ns, attempts)`` messages."""
    pack = PAGE_HEADER.pack
    parts: list[bytes] = []
    for offset, msg_id, body, ts, attempts in messages:
        parts.append(pack(offset, ts, attempts, bytes(msg_id), len(body)))
        parts.append(bytes(body))
    return b"".join(parts)
