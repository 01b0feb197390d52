"""Client-side errors."""

from __future__ import annotations

from nsq.protocol.errors import NSQError

__all__ = ["ConnectError", "ConnectTimeoutError", "ConnectionClosedError", "ErrorResponse", "ClientConfigError"]


class ConnectError(OSError):
    """nsqd cannot be reached: ``cannot connect to 127.0.0.1:4150: connection
    refused`` (the words of :func:`nsq._internal.neterrors.error_words`).

    Attributes:
        address: ``host:port`` dialled.
        reason: why, in a few words.
    """

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot connect to {address}: {reason}")
        self.address = address
        self.reason = reason


class ConnectTimeoutError(ConnectError, TimeoutError):
    """No connection (or no answer to IDENTIFY) within the connect timeout;
    also an ``asyncio.TimeoutError``."""


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
