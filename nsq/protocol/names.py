"""Topic and channel name rules (nsqio/nsq ``internal/protocol/names.go``:
``IsValidTopicName``, ``IsValidChannelName``).

A valid name matches ``^[.a-zA-Z0-9_-]+(#ephemeral)?$`` and is 1 to 64
characters long (the ``#ephemeral`` suffix counts).
"""

from __future__ import annotations

import re

__all__ = ["is_valid_topic_name", "is_valid_channel_name", "is_ephemeral", "EPHEMERAL_SUFFIX"]

EPHEMERAL_SUFFIX = "#ephemeral"
_NAME_RE = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def _is_valid_name(name: str) -> bool:
    return 0 < len(name) <= 64 and _NAME_RE.fullmatch(name) is not None


def is_valid_topic_name(name: str) -> bool:
    """True if ``name`` is a valid topic name."""
    return _is_valid_name(name)


def is_valid_channel_name(name: str) -> bool:
    """True if ``name`` is a valid channel name."""
    return _is_valid_name(name)


def is_ephemeral(name: str) -> bool:
    """True if the topic or channel name ends in ``#ephemeral``."""
    return name.endswith(EPHEMERAL_SUFFIX)
