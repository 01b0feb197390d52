"""Client-side errors."""

from __future__ import annotations

from nsq.protocol.errors import NSQError

__all__ = ["ConnectionClosedError", "ErrorResponse", "ClientConfigError"]


class ConnectionClosedError(NSQError):
    """The connection to nsqd closed before the command was answered."""


class ErrorResponse(NSQError):
    """nsqd answered a command with an error frame.

    Attributes:
        code: the NSQ error code (``E_BAD_TOPIC``).
        text: the whole error text as sent.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
        self.code = text.split(" ", 1)[0]


class ClientConfigError(NSQError, ValueError):
    """An unknown or invalid client option (``--consumer-opt``/``--producer-opt``)."""
