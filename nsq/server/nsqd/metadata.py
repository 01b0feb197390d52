"""``nsqd.dat``: which topics and channels exist and whether they are paused.

Format as Go nsqd 1.2 writes it (nsqd/nsqd.go ``PersistMetadata``; keys sorted)::

    {"topics":[{"channels":[{"name":"c","paused":false}],"name":"t","paused":false}],"version":"1.2.1"}

Ephemeral topics and channels are not written. The file is written to a
temporary file in the same directory, fsynced, then renamed over the old one.
:class:`MetadataStore` is the daemon's side: it loads the file at start and
rewrites it as topics and channels come and go.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from typing import TYPE_CHECKING, Any

from nsq import NSQ_VERSION
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from nsq.server.nsqd.storage.atomicfile import replace_atomically

if TYPE_CHECKING:
    from nsq.server.nsqd.nsqd import NSQD

__all__ = ["METADATA_FILE", "METADATA_DELAY", "MetadataStore", "dump_metadata", "write_metadata", "read_metadata",
           "orphan_queues"]

log = logging.getLogger("nsq.nsqd")

METADATA_FILE = "nsqd.dat"

#: s: topic/channel creates and deletes within this window share one
#: nsqd.dat write (Go persists them asynchronously too, from Notify)
METADATA_DELAY = 0.05


class MetadataStore:
    """One nsqd's ``nsqd.dat``: read at start, rewritten after changes.

    Go: nsqd/nsqd.go ``LoadMetadata`` and ``PersistMetadata`` (the latter
    from ``Notify`` as topics and channels come and go, and at exit).
    :class:`~nsq.server.nsqd.nsqd.NSQD` owns one (``nsqd.metadata``) and
    keeps ``persist_metadata`` / ``persist_metadata_soon`` for its callers.

    Args:
        nsqd: the daemon; its ``data_path``, ``topics`` and ``get_topic``
            are used ("" data path: nothing is read or written).

    Attributes:
        timer: the pending :meth:`persist_soon` write, or None.
        loading: True while :meth:`load` runs: nothing is written, and the
            topics it creates do not ask lookupd for their channels.
        loaded: True once the file was read (the daemon sets it after
            :meth:`load`); nothing is written before.
        failed: the last write raised OSError; the daemon's scan retries
            every ``--sync-timeout`` and exit retries after freeing the
            reserve.
    """

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.timer: asyncio.TimerHandle | None = None
        self.loading = False
        self.loaded = False
        self.failed = False  # nsqd.dat could not be written: retry

    def persist_soon(self) -> None:
        """Write ``nsqd.dat`` within :data:`METADATA_DELAY` s, once for every
        change made meanwhile (creating 10,000 topics must not rewrite a
        growing file 10,000 times); at once when no loop runs."""
        if self.timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.persist()
            return
        self.timer = loop.call_later(METADATA_DELAY, self.persist)

    def persist(self) -> None:
        """Write ``nsqd.dat`` now (no-op without a data path or while loading).

        An OSError is logged once and sets :attr:`failed`, never raised.
        """
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        nsqd = self.nsqd
        if not nsqd.data_path or self.loading or not self.loaded:
            # never overwrite nsqd.dat before it was read (a failed start, or
            # a data path another nsqd holds)
            return
        try:
            write_metadata(nsqd.data_path, dump_metadata(nsqd))
        except OSError as exc:
            # the old file stays; the scan retries every --sync-timeout, and
            # a start finds queues missing from it (orphan_queues)
            if not self.failed:
                log.error("failed to persist metadata - %s", exc)
            self.failed = True
            return
        if self.failed:
            log.info("metadata persisted again")
            self.failed = False

    def load(self) -> None:
        """Create the topics and channels of ``nsqd.dat`` (paused as it says),
        and those with messages on disk but missing from it
        (:func:`orphan_queues`), then let held messages flow.

        Raises:
            ValueError: the file is not valid metadata (:func:`read_metadata`).
            OSError: it cannot be read, or a queue cannot be opened.
        """
        nsqd = self.nsqd
        self.loading = True
        known: set[str] = set()
        try:
            for t in read_metadata(nsqd.data_path):
                topic = nsqd.get_topic(t["name"])
                # what the topic holds goes to all its channels at once, once
                # they all exist (not to the first one alone)
                topic.starting = True
                topic.paused = t["paused"]
                known.add(topic.name)
                for c in t["channels"]:
                    channel = topic.get_channel(c["name"])
                    channel.paused = c["paused"]
                    known.add(f"{topic.name}:{channel.name}")
            orphans = orphan_queues(nsqd.data_path, known)
            for name in orphans:
                log.warning("QUEUE(%s): has messages on disk but is not in nsqd.dat, restoring it", name)
                topic_name, _, channel_name = name.partition(":")
                topic = nsqd.get_topic(topic_name)
                topic.starting = True
                if channel_name:
                    topic.get_channel(channel_name)
        finally:
            self.loading = False
            for topic in nsqd.topics.values():
                topic.starting = False
        if orphans:
            self.persist_soon()
        for topic in nsqd.topics.values():
            topic.flush_held()


def dump_metadata(nsqd: NSQD) -> dict[str, Any]:
    """The metadata object for ``nsqd``'s durable topics and channels."""
    topics = []
    for topic in nsqd.topics.values():
        if topic.ephemeral:
            continue
        channels = [
            {"name": c.name, "paused": c.paused} for c in topic.channels.values() if not c.ephemeral
        ]
        topics.append({"channels": channels, "name": topic.name, "paused": topic.paused})
    return {"topics": topics, "version": NSQ_VERSION}


def write_metadata(data_path: str, meta: dict[str, Any]) -> None:
    """Atomically write ``meta`` to ``<data_path>/nsqd.dat``.

    Raises:
        OSError: the file cannot be written (the old one is left as it was).
    """
    path = os.path.join(data_path, METADATA_FILE)
    replace_atomically(path, json.dumps(meta, separators=(",", ":"), sort_keys=True).encode())


def read_metadata(data_path: str) -> list[dict[str, Any]]:
    """The ``topics`` list of ``<data_path>/nsqd.dat`` ([] if there is none).

    Entries with invalid names are skipped with a log line, as Go does.

    Raises:
        ValueError: the file exists but is not valid metadata JSON.
    """
    path = os.path.join(data_path, METADATA_FILE)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return []
    try:
        meta = json.loads(raw)
        topics = meta.get("topics") or []
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"failed to parse metadata {path}: {exc}") from None
    out = []
    for t in topics:
        name = t.get("name", "") if isinstance(t, dict) else ""
        if not is_valid_topic_name(name):
            log.warning("skipping creation of invalid topic %r", name)
            continue
        channels = []
        for c in t.get("channels") or []:
            cname = c.get("name", "") if isinstance(c, dict) else ""
            if not is_valid_channel_name(cname):
                log.warning("skipping creation of invalid channel %r", cname)
                continue
            channels.append({"name": cname, "paused": bool(c.get("paused"))})
        out.append({"name": name, "paused": bool(t.get("paused")), "channels": channels})
    return out


_QUEUE_FILE = re.compile(r"(?P<name>.+?)\.(?:diskqueue\.(?:meta|\d{6,})|deferred)\.dat")


def orphan_queues(data_path: str, known: set[str]) -> list[str]:
    """Queues in ``data_path`` that hold messages but are not in ``known``.

    A topic or channel created while the disk was full may have a disk
    queue or deferred log but no entry in ``nsqd.dat`` (which could not be
    rewritten). nsqd recreates them at start so their messages are not left
    behind unseen (Go nsqd would ignore the files).

    Args:
        data_path: the ``--data-path`` directory.
        known: names from ``nsqd.dat``: ``topic`` and ``topic:channel``.

    Returns:
        Queue names (``topic`` or ``topic:channel``, valid NSQ names only),
        topics before channels, each with a non-empty data or deferred file.
    """
    try:
        names = os.listdir(data_path)
    except OSError:
        return []
    found: set[str] = set()
    for fn in names:
        m = _QUEUE_FILE.fullmatch(fn)
        if m is None or m.group("name") in known or m.group("name") in found:
            continue
        if fn.endswith(".meta.dat"):
            continue  # the data files say whether there are messages
        try:
            if os.path.getsize(os.path.join(data_path, fn)) == 0:
                continue
        except OSError:
            continue
        name = m.group("name")
        topic, _, channel = name.partition(":")
        if is_valid_topic_name(topic) and (not channel or is_valid_channel_name(channel)):
            found.add(name)
    found.update(_orphan_logs(data_path, names, known))
    return sorted(found, key=lambda n: (":" in n, n))


def _orphan_logs(data_path: str, names: list[str], known: set[str]) -> set[str]:
    """Topic logs (``<topic>.wal/``, ``--storage=wal``) with messages, and
    their channels' checkpoints, missing from ``known``."""
    found: set[str] = set()
    for fn in names:
        if not fn.endswith(".wal") or not is_valid_topic_name(fn[:-4]):
            continue
        topic = fn[:-4]
        try:
            files = os.listdir(os.path.join(data_path, fn))
        except OSError:
            continue
        if topic not in known and any(f.endswith(".log") and os.path.getsize(os.path.join(data_path, fn, f))
                                      for f in files):
            found.add(topic)
        for f in files:
            if f.endswith(".cursor") and is_valid_channel_name(f[:-7]) and f"{topic}:{f[:-7]}" not in known:
                found.update((topic, f"{topic}:{f[:-7]}"))
    return found
