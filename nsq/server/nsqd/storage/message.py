"""The server's in-memory messages: queue entries and in-flight messages.

A message waiting in a topic or channel memory queue is a plain tuple, an
:data:`Entry` ``(id, body, timestamp, attempts, defer_ms, offset)``: immutable, so
every channel shares the same entries, and untracked by CPython's cycle
collector once it has seen them (a queue of a million entries costs the
collector nothing). A :data:`Message` list is made only when a message is
delivered (in flight), where it carries mutable state.
"""

from __future__ import annotations

import logging
import struct

from nsq.protocol.errors import ProtocolError
from nsq.protocol.message import MIN_MESSAGE_LENGTH, decode_message

log = logging.getLogger("nsq.nsqd")

__all__ = ["Entry", "Message", "ID", "BODY", "TIMESTAMP", "ATTEMPTS", "CLIENT", "DEADLINE", "DELIVERED", "OFFSET",
           "NO_OFFSET", "entry", "encode_entries", "decode_entries"]

_MSG_HDR = struct.Struct(">qH")

#: ``(id, body, timestamp, attempts, defer_ms, offset)``: 16 hex bytes,
#: payload bytes, ns since the epoch, deliveries so far, ms to hold back
#: (DPUB), the message's offset in its topic log (``--storage=wal``; else
#: :data:`NO_OFFSET`)
Entry = tuple[bytes, bytes, int, int, int, int]
#: the offset of a message that is in no topic log (``--storage=diskqueue``)
NO_OFFSET = -1


#: A message in flight to a client: a list ``[id, body, timestamp,
#: attempts, client, deadline, delivered, offset]`` (made per delivery, so a list
#: display, not an object with an ``__init__``: a third of the cost),
#: indexed by the constants below. id: 16 ASCII hex bytes (Go:
#: nsqd/guid.go ``Hex``); body: payload bytes, shared between the channel
#: copies; timestamp: ns since the epoch when nsqd accepted it; attempts:
#: deliveries so far, this one included; client: the client it is in
#: flight to, or None once answered; deadline: monotonic s at which it
#: times out; delivered: monotonic s of the last delivery (caps TOUCH);
#: offset: as the entry's.
Message = list
ID, BODY, TIMESTAMP, ATTEMPTS, CLIENT, DEADLINE, DELIVERED, OFFSET = range(8)


def entry(msg: Message) -> Entry:
    """The queue entry for ``msg`` (its delay dropped: it has been applied)."""
    return (msg[ID], msg[BODY], msg[TIMESTAMP], msg[ATTEMPTS], 0, msg[OFFSET])


def encode_entries(entries: list[Entry]) -> list[bytes]:
    """Disk records (message frame data: timestamp, attempts, id, body) for
    ``entries`` (Go: nsqd/message.go ``WriteTo``)."""
    pack = _MSG_HDR.pack
    return [pack(e[2], e[3]) + e[0] + e[1] for e in entries]


def decode_entries(records: list[bytes], subject: str = "", offset: int = NO_OFFSET) -> list[Entry]:
    """Queue entries (delay 0, ``offset`` for each) from disk records; a
    record that does not decode is skipped with a log line naming
    ``subject`` (``TOPIC(t)``)."""
    # the usual case, none too short to fail: decode_message's layout inline (no object per record)
    if len(records) == 1 and len(r := records[0]) >= MIN_MESSAGE_LENGTH:  # a RDY 1 worker's read
        ts, attempts = _MSG_HDR.unpack_from(r)
        return [(r[10:26], r[26:], ts, attempts, 0, offset)]
    if records and min(map(len, records)) >= MIN_MESSAGE_LENGTH:
        unpack = _MSG_HDR.unpack_from
        return [(r[10:26], r[26:], ts, attempts, 0, offset) for r in records for ts, attempts in (unpack(r),)]
    out: list[Entry] = []
    for record in records:
        try:
            m = decode_message(record)
        except ProtocolError as exc:
            log.error("%s: failed to decode message - %s", subject, exc)
            continue
        out.append((m.id, m.body, m.timestamp, m.attempts, 0, offset))
    return out
