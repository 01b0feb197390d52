"""Topic and channel name rules (nsqio/nsq internal/protocol/names.go)."""

from __future__ import annotations

import pytest

from nsq.protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name

VALID = [
    "a",
    "topic",
    "Topic.Name_with-all.chars_0123456789",
    "...",
    "-",
    "_",
    "a" * 64,
    "a#ephemeral",
    "a" * 54 + "#ephemeral",  # 64 with the suffix
]

INVALID = [
    "",
    "a" * 65,
    "a" * 55 + "#ephemeral",  # 65 with the suffix
    "#ephemeral",
    "a#ephemeral#ephemeral",
    "a#eph",
    "a#Ephemeral",
    "a#",
    "#",
    "a b",
    "a!",
    "a/b",
    "a:b",
    "a\n",
    "\na",
    "a\x00",
    "café",
    "ａ",  # fullwidth letter
    "a*",
    " a",
]


@pytest.mark.parametrize("name", VALID)
def test_valid(name):
    assert is_valid_topic_name(name)
    assert is_valid_channel_name(name)


@pytest.mark.parametrize("name", INVALID)
def test_invalid(name):
    assert not is_valid_topic_name(name)
    assert not is_valid_channel_name(name)


def test_is_ephemeral():
    assert is_ephemeral("a#ephemeral")
    assert is_ephemeral("a" * 54 + "#ephemeral")
    assert not is_ephemeral("a")
    assert not is_ephemeral("ephemeral")
    assert not is_ephemeral("a#ephemeral.x")
