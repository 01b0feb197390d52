"""Server-side max attempts: where a channel's dead letters go, and the
per-channel settings that survive a restart (beyond Go nsqd, where giving
up is left to each consumer: go-nsq ``Config.MaxAttempts``, pynsq
``max_tries``).

With ``--max-attempts=N`` (or a channel's own setting), a message that was
delivered N times on a channel and is then requeued (REQ, with or without a
delay) or times out is published to the channel's dead-letter topic instead
(id, body and timestamp kept, attempts 0) and leaves the channel. If that
topic cannot take it (an invalid name, a full disk) it is requeued as
without the feature: nothing is dropped (:func:`dead_letter`, which
``Channel.requeue`` and the channel's timeout scan call).

Settings a channel overrides (``POST /channel/config``) are kept in
``<data-path>/nsqd.channels.json`` (``{"t:c": {"max_attempts": N}}``) beside
``nsqd.dat``, which stays byte-compatible with Go's.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from nsq.protocol.errors import NSQError
from nsq.protocol.names import is_valid_topic_name
from nsq.server.nsqd.storage.atomicfile import replace_atomically
from nsq.server.nsqd.storage.message import BODY, ID, NO_OFFSET, OFFSET, TIMESTAMP, Message

if TYPE_CHECKING:
    from nsq.server.nsqd.delivery.channel import Channel

__all__ = ["dead_letter_topic", "dead_letter", "ChannelSettings", "SETTINGS_FILE", "EPHEMERAL"]

log = logging.getLogger("nsq.nsqd")

SETTINGS_FILE = "nsqd.channels.json"
EPHEMERAL = "#ephemeral"


def dead_letter_topic(template: str, topic: str, channel: str) -> str | None:
    """The dead-letter topic of ``topic:channel`` from ``--dead-letter-topic``.

    ``{topic}`` and ``{channel}`` are replaced by the names without their
    ``#ephemeral`` suffix; the dead letters of an ephemeral topic or channel
    go to an ephemeral topic (the suffix is added back at the end).

    Returns:
        The topic name, or None if it is not a valid topic name (too long,
        bad characters) or is the channel's own topic.
    """
    ephemeral = topic.endswith(EPHEMERAL) or channel.endswith(EPHEMERAL)
    name = template.replace("{topic}", topic.removesuffix(EPHEMERAL)).replace(
        "{channel}", channel.removesuffix(EPHEMERAL))
    if ephemeral and not name.endswith(EPHEMERAL):
        name += EPHEMERAL
    if not is_valid_topic_name(name) or name == topic:
        return None
    return name


def dead_letter(channel: Channel, msg: Message) -> bool:
    """Publish ``msg``, just taken out of flight, to the channel's
    dead-letter topic (id, body and timestamp kept, attempts 0).

    Counted in ``channel.dead_letter_count``; in a topic log it is finished
    for the channel (``Channel`` calls it on a message's last attempt).

    Returns:
        True if it went there; False if it cannot (an invalid topic name,
        logged once per channel; a refused publish, e.g. a full disk,
        logged): the caller requeues it, nothing is dropped.
    """
    name = channel.dead_letter_topic
    if name is None:
        if not channel._dead_letter_warned:
            channel._dead_letter_warned = True
            log.error("CHANNEL(%s:%s): dead-letter topic %r is not a valid topic name; requeueing instead",
                      channel.topic.name, channel.name, channel.nsqd.options.dead_letter_topic)
        return False
    try:
        channel.nsqd.get_topic(name).put_entries([(msg[ID], msg[BODY], msg[TIMESTAMP], 0, 0, NO_OFFSET)])
    except NSQError as exc:
        log.error("CHANNEL(%s:%s): failed to dead-letter %s to %s, requeueing - %s",
                  channel.topic.name, channel.name, msg[ID].decode("latin-1"), name, exc)
        return False
    channel.dead_letter_count += 1
    if channel.store.tracks_offsets:
        channel.store.finish((msg[OFFSET],))  # done here: it lives on in the dead-letter topic
    return True


class ChannelSettings:
    """Per-channel overrides of daemon options, persisted when there is a data path.

    Args:
        data_path: the ``--data-path`` ("" = memory only).
    """

    KEYS = ("max_attempts",)

    def __init__(self, data_path: str) -> None:
        self.path = os.path.join(data_path, SETTINGS_FILE) if data_path else ""
        self.overrides: dict[str, dict[str, Any]] = {}
        if self.path:
            self._load()

    def get(self, topic: str, channel: str) -> dict[str, Any]:
        """The overrides of ``topic:channel`` ({} for none)."""
        return self.overrides.get(f"{topic}:{channel}", {})

    def set(self, topic: str, channel: str, **settings: Any) -> None:
        """Override settings of ``topic:channel`` and persist them.

        Raises:
            OSError: the file could not be written; nothing changed.
        """
        key = f"{topic}:{channel}"
        before = self.overrides.get(key)
        self.overrides[key] = {**(before or {}), **settings}
        try:
            self._save()
        except OSError:
            if before is None:
                del self.overrides[key]
            else:
                self.overrides[key] = before
            raise

    def forget(self, topic: str, channel: str) -> None:
        """Drop the overrides of a deleted channel (persisted, errors logged)."""
        if self.overrides.pop(f"{topic}:{channel}", None) is not None:
            try:
                self._save()
            except OSError as exc:
                log.error("failed to write %s - %s", self.path, exc)

    def _save(self) -> None:
        if self.path:
            replace_atomically(self.path, json.dumps(self.overrides, sort_keys=True).encode())

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error("failed to read %s (channel settings ignored) - %s", self.path, exc)
            return
        if not isinstance(data, dict):
            return
        for key, value in data.items():
            if isinstance(key, str) and isinstance(value, dict):
                kept = {k: v for k, v in value.items() if k in self.KEYS and isinstance(v, int)
                        and not isinstance(v, bool)}
                if kept:
                    self.overrides[key] = kept
