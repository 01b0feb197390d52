"""The keys of ``nsq admin`` and what bounds its screens (no Textual):
the help screen and the README show :data:`KEYS`."""

from __future__ import annotations

__all__ = ["ADMIN_ACTIONS", "KEYS", "REFRESH_INTERVALS", "WIDE_FROM"]

#: the refresh intervals ``+`` and ``-`` step through, seconds
REFRESH_INTERVALS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0)

#: the keys, by screen: (keys, what, changes the cluster); the help screen
#: and the README show this table
KEYS: list[tuple[str, list[tuple[str, str, bool]]]] = [
    ("Everywhere", [
        ("?", "this help", False),
        ("1 / 2 / 3 / 4", "Topics / Nodes / Counter / Lookup screen", False),
        ("escape, backspace", "back (up from channel to topic to topics)", False),
        ("up, down, pgup, pgdn", "move in the table; enter (or a second click) opens the row", False),
        ("tab", "next table or field", False),
        ("r", "refresh now", False),
        ("+ / -", "refresh less / more often (0.5s to 60s)", False),
        ("q", "quit", False),
    ]),
    ("Topics", [
        ("enter", "open the topic", False),
        ("/", "filter topics by name (escape clears)", False),
        ("s / S", "sort by the next column / reverse (or click a column header)", False),
        ("c", "create a topic and optionally a channel", True),
        ("p", "pause or unpause the topic", True),
        ("e", "empty the topic's own queue", True),
        ("d", "delete the topic", True),
    ]),
    ("Topic", [
        ("enter", "open the channel (channel table)", False),
        ("c", "create a channel in this topic", True),
        ("p / e / d", "pause or unpause / empty / delete the topic", True),
        ("t", "tombstone the topic on the selected nsqd (and delete it there)", True),
        ("m", "peek at the messages queued in the topic itself (no channel, or paused)", False),
    ]),
    ("Channel", [
        ("p / e / d", "pause or unpause / empty / delete the channel", True),
        ("m", "peek at the next 20 messages on each nsqd (changes nothing)", False),
        ("R", "rewind to a time (1h, or RFC 3339): its retained messages again (nsqd --storage=wal)", True),
    ]),
    ("Nodes", [
        ("enter", "open the nsqd (also from the nsqd rows of a topic or channel)", False),
        ("l", "show each nsqd's lookupd connections (again: their count)", False),
        ("D", "drain the selected nsqd (then it exits)", True),
        ("P", "promote the selected replica to leader (docs/operations/replication.md)", True),
    ]),
    ("Node", [
        ("enter", "open the topic or channel", False),
        ("t", "tombstone the selected topic on this nsqd (and delete it there)", True),
    ]),
    ("Lookup", [
        ("enter", "open the topic or channel", False),
        ("c", "create a topic and optionally a channel (in the lookupds and nsqds)", True),
        ("d", "delete the selected topic or channel", True),
    ]),
    ("Peek", [
        ("r", "peek again", False),
    ]),
]

#: terminal width from which each table uses full column names (and all its
#: columns); "sparks": from which a topic's or channel's three sparklines
#: (queued, in/s, out/s) share one line; "topic-log-times": from which the
#: retained window shows the oldest message's time and the first offset
#: (narrower: its age and the head offset only)
WIDE_FROM = {"topics": 110, "topic-nodes": 112, "channels": 152, "channel-nodes": 150, "clients": 160,
             "sparks": 120, "topic-log": 130, "topic-log-times": 100}

#: every action that changes the cluster (none of them in read-only mode)
ADMIN_ACTIONS = frozenset({"create", "pause", "empty", "delete", "tombstone", "drain", "rewind", "promote"})
