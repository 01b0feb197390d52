"""The messages an ``nsq admin`` screen posts to open another screen.

A screen never builds another screen: it posts one of these (``enter`` on a
topic row posts :class:`ShowTopic`, ``m`` posts :class:`ShowPeek` ...);
the message bubbles up to :class:`~nsq.tui.admin.app.AdminApp`, whose
handlers (``on_show_topic`` ...) push the screen. So the screen modules
import none of each other, and the app is the one place that knows them
all.
"""

from __future__ import annotations

from textual.message import Message

__all__ = ["ShowChannel", "ShowNode", "ShowPeek", "ShowTopic"]


class ShowTopic(Message):
    """Open the Topic screen of ``topic``."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.topic = topic


class ShowChannel(Message):
    """Open the Channel screen of ``topic``/``channel``."""

    def __init__(self, topic: str, channel: str) -> None:
        super().__init__()
        self.topic = topic
        self.channel = channel


class ShowNode(Message):
    """Open the Node screen of the nsqd whose ``broadcast_address:http_port`` is ``http_address``."""

    def __init__(self, http_address: str) -> None:
        super().__init__()
        self.http_address = http_address


class ShowPeek(Message):
    """Open the Peek screen of ``topic``/``channel`` (``channel`` "": the topic's own queue)."""

    def __init__(self, topic: str, channel: str = "") -> None:
        super().__init__()
        self.topic = topic
        self.channel = channel
