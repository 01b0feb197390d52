"""Reading a range of a topic log over HTTP, on a Spark executor.

A task of the offsets source reads offsets ``[start, end)`` of one topic on
one nsqd with ``GET /topic/read?topic=T&offset=N&limit=K&max_bytes=B``
(nsqd ``--storage=wal``; docs/reference/http.md "Retention, replay and
reading by offset", nsq/server/nsqd/http/replay.py), paging on with the
``X-NSQ-Next-Offset`` header until ``end``. A page is up to ``K``
(at most 10000) messages, each::

    [i64 offset][i64 timestamp ns][u16 attempts][16-byte id][i32 size][body]
     8 bytes     8 bytes           2 bytes       16 bytes    4 bytes   size bytes

all big-endian, and becomes one Arrow record batch (:func:`decode_page`).
The request is a blocking ``urllib.request`` call (stdlib), made by a
thread one page ahead of the decoding.

Above ``end`` nothing is read, so a range reads the same rows every time
while nsqd retains it. Offsets below the oldest retained message answer
400 ``OFFSET_NOT_RETAINED``: a :class:`DataLossError`, unless the range may
be clamped (a newly found nsqd: from its oldest message) or the query was
told ``failOnDataLoss=false`` (read on from the oldest retained).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from nsq.protocol.logpage import PAGE_HEADER
from nsq.spark import columns as _columns

__all__ = ["DataLossError", "PAGE_BYTES", "PAGE_MESSAGES", "arrow_schema", "decode_page", "read_range"]

log = logging.getLogger("nsq.spark")

#: one message's header in a /topic/read answer (nsq.protocol.logpage)
READ_HEADER = PAGE_HEADER
#: messages per /topic/read at most (nsqd's own cap)
PAGE_MESSAGES = 10_000
#: bytes of bodies per /topic/read asked for at most
PAGE_BYTES = 8 << 20
#: seconds a request may take; attempts on a connection error, and the pause between
TIMEOUT, ATTEMPTS, RETRY_PAUSE = 30.0, 3, 0.5



class DataLossError(RuntimeError):
    """Offsets a query must read are gone from nsqd: deleted by retention,
    or the topic's log went back (deleted and created again).

    Attributes:
        nsqd, topic: where.
        offset: the first offset missing.
        first: the oldest offset nsqd still has (-1: unknown).
    """

    def __init__(self, nsqd: str, topic: str, offset: int, first: int, why: str) -> None:
        super().__init__(f"topic {topic} on nsqd {nsqd}: offset {offset} {why}; set option failOnDataLoss=false "
                         "to read on from what is left")
        self.nsqd, self.topic, self.offset, self.first = nsqd, topic, offset, first


def arrow_schema() -> Any:
    """The Arrow schema of the offsets source's rows (:func:`nsq.spark.columns.arrow_schema` with ``offset``)."""
    return _columns.arrow_schema(offset=True)


def decode_page(page: bytes, topic: str, nsqd: str, stop: int | None = None) -> tuple[Any, int]:
    """A /topic/read answer as one Arrow record batch (schema
    :func:`arrow_schema`), and the offset after its last message (-1 when
    empty); with ``stop``, messages from that offset on are left out.

    Raises:
        ValueError: a truncated page.
    """
    import pyarrow as pa

    offsets: list[int] = []
    timestamps: list[int] = []
    attempts: list[int] = []
    ids: list[bytes] = []
    bodies: list[bytes] = []
    unpack = READ_HEADER.unpack_from
    head = READ_HEADER.size
    pos, size_all = 0, len(page)
    while pos < size_all:
        if pos + head > size_all:
            raise ValueError(f"truncated /topic/read answer at byte {pos}")
        offset, ts, att, msg_id, size = unpack(page, pos)
        if stop is not None and offset >= stop:
            break
        pos += head
        offsets.append(offset)
        timestamps.append(ts)
        attempts.append(att + 1)  # this read is a delivery, as the in-flight source counts it
        ids.append(msg_id)
        bodies.append(page[pos:pos + size])
        pos += size
    if pos > size_all:
        raise ValueError("truncated /topic/read answer: a body runs past its end")
    schema = arrow_schema()
    n = len(offsets)
    batch = pa.RecordBatch.from_arrays([
        pa.array(bodies, pa.binary()),
        pa.array(ids, pa.binary()).cast(pa.string()),
        pa.array(attempts, pa.int32()),
        pa.array(timestamps, pa.timestamp("ns", tz="UTC")).cast(schema.field("timestamp").type, safe=False),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(nsqd, pa.string()), n),
        pa.array(offsets, pa.int64()),
    ], schema=schema)
    return batch, (offsets[-1] + 1 if n else -1)


def _get(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One GET with a few attempts on connection errors: (status, headers, body)."""
    for attempt in range(ATTEMPTS):
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers or {}), exc.read()
        except OSError:
            if attempt + 1 == ATTEMPTS:
                raise
            time.sleep(RETRY_PAUSE)
    raise AssertionError("unreachable")


def _reason(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")


def read_range(nsqd: str, topic: str, start: int, end: int, *, clamp: bool = False,
               fail_on_data_loss: bool = True, auth_secret: str = "",
               page_messages: int = PAGE_MESSAGES, page_bytes: int = PAGE_BYTES) -> Iterator[Any]:
    """Offsets ``[start, end)`` of ``topic`` on ``nsqd`` (its HTTP address,
    ``host:port`` or ``https://host:port``), one Arrow record batch per page.

    A thread fetches the pages one after another (the next as soon as a
    page's ``X-NSQ-Next-Offset`` is known) while this generator decodes
    the one before: nsqd's work and the decoding overlap.

    Args:
        clamp: offsets below the oldest retained are skipped (the range of
            a newly found nsqd), not an error.
        fail_on_data_loss: with False, missing offsets are logged and
            skipped instead of raising.
        auth_secret: ``Authorization: Bearer`` ("" none).

    Raises:
        DataLossError: offsets of the range are gone (see the class).
        OSError: nsqd unreachable (after :data:`ATTEMPTS` tries).
        RuntimeError: nsqd refused the read (its reason in the text).
    """
    pages = _pages(nsqd, topic, start, end, clamp, fail_on_data_loss, auth_secret, page_messages, page_bytes)
    for offset, lenient, body in _prefetched(pages):
        batch, _ = decode_page(body, topic, nsqd, end)
        if not batch.num_rows:
            continue
        first = batch.column(6)[0].as_py()
        if first != offset and not lenient:
            if fail_on_data_loss:
                raise DataLossError(nsqd, topic, offset, first, f"to {first - 1} are missing from the log")
            log.warning("nsq offsets source: %s %s offsets %d-%d missing", nsqd, topic, offset, first - 1)
        yield batch


def _pages(nsqd: str, topic: str, start: int, end: int, clamp: bool, fail_on_data_loss: bool, auth_secret: str,
           page_messages: int, page_bytes: int) -> Iterator[tuple[int, bool, bytes]]:
    """``(offset asked for, clamped, body)`` of each /topic/read of the
    range, in order (see :func:`read_range` for the errors)."""
    base = nsqd if "://" in nsqd else f"http://{nsqd}"
    headers = {"Accept": "application/octet-stream"}
    if auth_secret:
        headers["Authorization"] = f"Bearer {auth_secret}"
    offset = start
    lenient = clamp
    while offset < end:
        query = {"topic": topic, "offset": offset, "limit": min(page_messages, end - offset),
                 "max_bytes": page_bytes}
        if lenient or not fail_on_data_loss:
            query["clamp"] = "true"
        status, resp_headers, body = _get(f"{base}/topic/read?{urlencode(query)}", headers)
        if status != 200:
            reason = _reason(body)
            if reason == "OFFSET_NOT_RETAINED":
                raise DataLossError(nsqd, topic, offset, -1, "is no longer retained (deleted by retention)")
            if reason in ("INVALID_OFFSET", "TOPIC_NOT_FOUND"):
                if fail_on_data_loss:
                    raise DataLossError(nsqd, topic, offset, -1, f"is past the topic's log ({reason}: the log "
                                        "went back, or the topic was deleted)")
                log.warning("nsq offsets source: %s %s offset %d: %s: skipping to %d", nsqd, topic, offset,
                            reason, end)
                return
            raise RuntimeError(f"nsqd {nsqd}: GET /topic/read answered {status} {reason}")
        try:
            nxt = int(resp_headers["X-NSQ-Next-Offset"])
        except (KeyError, ValueError):
            raise RuntimeError(f"nsqd {nsqd}: GET /topic/read answered without X-NSQ-Next-Offset") from None
        if body:
            yield offset, lenient, body
        elif nxt <= offset:  # nothing at offset although it is below end: the head is behind end
            if fail_on_data_loss:
                raise DataLossError(nsqd, topic, offset, -1, "is past the head of the topic's log (the log "
                                    "went back)")
            log.warning("nsq offsets source: %s %s: the head is below %d now", nsqd, topic, end)
            return
        lenient = False
        offset = min(nxt, end)


_DONE = object()


def _prefetched(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """``items``, produced by a thread up to ``depth`` ahead of the caller;
    an exception the producer raises is raised here, in order. Closing the
    generator early stops the producer at its next item."""
    out: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple[Any, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                out.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # handed to the consumer
            put((_DONE, exc))

    thread = threading.Thread(target=produce, name="nsq-spark-read", daemon=True)
    thread.start()
    try:
        while True:
            item, error = out.get()
            if item is _DONE:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
