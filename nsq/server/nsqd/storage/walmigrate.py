"""Moving a data path between the storage engines (``--storage``).

- ``--storage=wal`` on a data path written in the disk-queue format (by
  this nsqd or by Go nsqd): every message queued in a topic's disk queue,
  its channels' disk queues and their deferred logs is appended to the
  topic's new log once, each channel set to read exactly its own messages
  (and then the topic's), the disk-queue files removed, and the take-over
  recorded in ``nsqd.storage.json``. Nothing is lost; a crash in the middle
  may deliver some messages twice.
- ``--storage=diskqueue`` on a data path that holds topic logs, or that
  ``nsqd.storage.json`` says a ``--storage=wal`` nsqd used (written at every
  such start, :func:`mark_data_path`), refuses to start
  (:func:`check_data_path`): the way back is to let the consumers empty the
  channels (depth 0), stop nsqd, and remove the ``*.wal`` directories and
  ``nsqd.storage.json`` (docs/storage.md).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING

from nsq.protocol.message import MIN_MESSAGE_LENGTH, decode_message
from nsq.server.nsqd.storage.atomicfile import replace_atomically
from nsq.server.nsqd.storage.topiclog import encode_record

if TYPE_CHECKING:
    from nsq.server.nsqd.options import NSQDOptions
    from nsq.server.nsqd.storage.topiclog import TopicLog

__all__ = ["check_data_path", "mark_data_path", "take_over", "STATE_FILE"]

log = logging.getLogger("nsq.nsqd")

#: what the data path was taken over from, beside nsqd.dat
STATE_FILE = "nsqd.storage.json"
_META_SUFFIX = ".diskqueue.meta.dat"


def check_data_path(path: str, wal: bool) -> None:
    """Refuse a data path the storage engine cannot read.

    Raises:
        ValueError: ``--storage=diskqueue`` on a data path with topic logs,
            or one a ``--storage=wal`` nsqd used (``nsqd.storage.json``).
    """
    if wal or not path:
        return
    try:
        logs = sorted(f[:-4] for f in os.listdir(path) if f.endswith(".wal") and os.path.isdir(os.path.join(path, f)))
    except OSError:
        return
    if not logs and _state(path).get("storage") != "wal":
        return
    shown = f"topic logs ({', '.join(logs[:3])}{', ...' if len(logs) > 3 else ''})" if logs else \
        f"{STATE_FILE}, which says"
    raise ValueError(f"--data-path {path} holds {shown} written with --storage=wal: start nsqd with "
                     f"--storage=wal (to go back to --storage=diskqueue, empty every channel, stop nsqd and remove "
                     f"the *.wal directories and {STATE_FILE})")


def _state(path: str) -> dict:
    try:
        with open(os.path.join(path, STATE_FILE), "rb") as fh:
            state = json.loads(fh.read())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def mark_data_path(path: str) -> None:
    """Record in ``nsqd.storage.json`` that a ``--storage=wal`` nsqd uses
    ``path`` (so the default engine refuses it even before a topic log
    exists).

    Raises:
        OSError: the file could not be written.
    """
    state = _state(path)
    if state.get("storage") != "wal":
        state["storage"] = "wal"
        replace_atomically(os.path.join(path, STATE_FILE), json.dumps(state, indent=1).encode())


def _drain(name: str, data_path: str, options: NSQDOptions) -> list[bytes]:
    """Every record of the disk queue ``name``, oldest first, read without
    consuming it: its files go only once the log holds the records."""
    from nsq.server.nsqd.storage.diskqueue import DiskQueue

    dq = DiskQueue(name, data_path, max_bytes_per_file=options.max_bytes_per_file, min_msg_size=MIN_MESSAGE_LENGTH,
                   max_msg_size=options.max_msg_size + MIN_MESSAGE_LENGTH, sync_every=options.sync_every,
                   sync_timeout=options.sync_timeout)
    out: list[bytes] = []
    while dq.depth:
        # held reads: a data file read to its end is kept, not deleted
        chunk, _token = dq.read_held(4096)
        if not chunk:
            break
        out += chunk
    dq.close()
    return out


def _framed(records: list[bytes]) -> list[bytes]:
    framed = []
    for rec in records:
        try:
            m = decode_message(rec)
        except Exception as exc:  # a record Go wrote that does not decode: say so, keep the rest
            log.error("failed to decode a queued message while taking it over - %s", exc)
            continue
        framed.append(encode_record(m.id, m.body, m.timestamp, m.attempts, 0))
    return framed


def take_over(topic: str, data_path: str, topic_log: TopicLog, options: NSQDOptions) -> int:
    """Append the disk-queue messages of ``topic`` and its channels to
    ``topic_log`` and set each channel to read its own (see the module
    docstring). Returns how many messages were taken over (0: nothing to do).

    Raises:
        OSError: a file could not be read or written; the disk queues are
            then left in place (nothing is removed before the log, the
            checkpoints and the state file are written).
    """
    try:
        names = os.listdir(data_path)
    except OSError:
        return 0
    channel_prefix = f"{topic}:"
    channels = sorted(f[len(channel_prefix):-len(_META_SUFFIX)] for f in names
                      if f.startswith(channel_prefix) and f.endswith(_META_SUFFIX))
    deferred = sorted(f[len(channel_prefix):-len(".deferred.dat")] for f in names
                      if f.startswith(channel_prefix) and f.endswith(".deferred.dat"))
    has_topic_queue = f"{topic}{_META_SUFFIX}" in names
    if any(t.get("topic") == topic for t in _state(data_path).get("taken_over", [])):
        # taken over already, and a crash came while its files were being
        # removed: the log has the messages; finish the removal, take nothing again
        leftovers = [f for f in names if f.startswith((f"{topic}.diskqueue.", f"{topic}:"))
                     and (".diskqueue." in f or f.endswith(".deferred.dat"))]
        if leftovers:
            log.info("TOPIC(%s): removing %d disk-queue files an interrupted take-over left", topic, len(leftovers))
            for f in leftovers:
                if not f.endswith(".deferred.dat"):  # the deferred log stays: it keeps REQ delays
                    os.remove(os.path.join(data_path, f))
        return 0
    if not channels and not has_topic_queue:
        return 0
    regions: dict[str, tuple[int, int]] = {}
    #: per channel, (offset, due unix ns) of its deferred messages: deferred again at start
    due: dict[str, list[tuple[int, int]]] = {}
    total = 0
    for channel in sorted(set(channels) | set(deferred)):
        records = _drain(f"{topic}:{channel}", data_path, options) if channel in channels else []
        framed = _framed(records)
        if channel in deferred:
            # deferred messages live only in the deferred log in this format:
            # the log gets them too, the deferred log keeps their due times
            from nsq.server.nsqd.storage.deferredlog import DeferredLog

            dlog = DeferredLog(f"{topic}:{channel}", data_path, options.sync_every)
            for msg_id, (due_ns, ts, attempts, body) in dlog.pending.items():
                due.setdefault(channel, []).append((topic_log.head + len(framed), due_ns))
                framed.append(encode_record(msg_id, body, ts, attempts, 0))
            dlog.close()
        start = topic_log.head
        if framed:
            topic_log.append(framed)
        regions[channel] = (start, topic_log.head)
        total += len(framed)
    held_start = topic_log.head
    held = _framed(_drain(topic, data_path, options)) if has_topic_queue else []
    if held:
        topic_log.append(held)
    total += len(held)
    topic_log.sync()
    for channel, (start, end) in regions.items():
        finished = [[end, held_start]] if end < held_start else []
        doc: dict = {"version": 1, "low": start, "finished": finished}
        if channel in due:
            doc["deferred"] = due[channel]
        replace_atomically(os.path.join(topic_log.path, f"{channel}.cursor"), json.dumps(doc).encode())
    replace_atomically(os.path.join(topic_log.path, "topic.json"), json.dumps({"visible": held_start}).encode())
    _record(data_path, topic, total, {c: e - s for c, (s, e) in regions.items()}, len(held))
    for channel in channels:
        _remove_queue(data_path, f"{topic}:{channel}")
    if has_topic_queue:
        _remove_queue(data_path, topic)
    log.info("TOPIC(%s): took over %d messages from the disk-queue format (%d held by the topic, %s)", topic, total,
             len(held), ", ".join(f"{c}: {e - s}" for c, (s, e) in regions.items()) or "no channel queues")
    return total


def _remove_queue(data_path: str, name: str) -> None:
    for f in os.listdir(data_path):
        if f.startswith(f"{name}.diskqueue."):
            os.remove(os.path.join(data_path, f))


def _record(data_path: str, topic: str, total: int, channels: dict[str, int], held: int) -> None:
    path = os.path.join(data_path, STATE_FILE)
    state = _state(data_path)
    state["storage"] = "wal"
    state.setdefault("taken_over", []).append({
        "topic": topic, "messages": total, "channels": channels, "held_by_topic": held,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    replace_atomically(path, json.dumps(state, indent=1).encode())
