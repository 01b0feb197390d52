"""The server's in-memory message (one object per channel copy)."""

from __future__ import annotations

__all__ = ["Message"]


class Message:
    """A message queued in a topic or channel.

    Attributes:
        id: 16 ASCII hex bytes (WIRE-FACTS "Message IDs").
        body: payload bytes, shared between the channel copies.
        timestamp: ns since the epoch when nsqd accepted it.
        attempts: deliveries so far (incremented when sent).
        defer_ms: ms to hold it back when it reaches a channel (DPUB).
        client: the client it is in flight to, or None.
        deadline: monotonic s at which it times out (in flight) or is due
            (deferred).
        delivered: monotonic s of the last delivery (caps TOUCH).
    """

    __slots__ = ("id", "body", "timestamp", "attempts", "defer_ms", "client", "deadline", "delivered")

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, attempts: int = 0, defer_ms: int = 0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.defer_ms = defer_ms
        self.client = None
        self.deadline = 0.0
        self.delivered = 0.0

    def copy(self) -> Message:
        """A fresh copy for another channel (same id, body, timestamp)."""
        return Message(self.id, self.body, self.timestamp, self.attempts, self.defer_ms)
