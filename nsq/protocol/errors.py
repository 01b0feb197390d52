"""NSQ protocol errors (Go: internal/protocol/errors.go; the codes of
nsqd/protocol_v2.go and nsqlookupd/lookup_protocol_v1.go).

On the wire an error frame carries ``CODE + " " + description``. Only
``E_FIN_FAILED``, ``E_REQ_FAILED`` and ``E_TOUCH_FAILED`` leave the
connection open; every other client error closes it after the frame.
A :class:`ReadError` closes it without a frame, as Go does when its
reader fails.
"""

from __future__ import annotations

__all__ = [
    "NSQError",
    "ClientError",
    "ProtocolError",
    "ReadError",
    "NON_FATAL_CODES",
    "E_INVALID",
    "E_BAD_PROTOCOL",
    "E_BAD_BODY",
    "E_BAD_TOPIC",
    "E_BAD_CHANNEL",
    "E_BAD_MESSAGE",
    "E_PUB_FAILED",
    "E_MPUB_FAILED",
    "E_DPUB_FAILED",
    "E_FIN_FAILED",
    "E_REQ_FAILED",
    "E_TOUCH_FAILED",
    "E_IDENTIFY_FAILED",
    "E_AUTH_DISABLED",
    "E_AUTH_FIRST",
    "E_AUTH_FAILED",
    "E_AUTH_ERROR",
    "E_UNAUTHORIZED",
    "E_TOO_MANY_CHANNEL_CONSUMERS",
    "E_SUB_FAILED",
]

E_INVALID = "E_INVALID"
E_BAD_PROTOCOL = "E_BAD_PROTOCOL"
E_BAD_BODY = "E_BAD_BODY"
E_BAD_TOPIC = "E_BAD_TOPIC"
E_BAD_CHANNEL = "E_BAD_CHANNEL"
E_BAD_MESSAGE = "E_BAD_MESSAGE"
E_PUB_FAILED = "E_PUB_FAILED"
E_MPUB_FAILED = "E_MPUB_FAILED"
E_DPUB_FAILED = "E_DPUB_FAILED"
E_FIN_FAILED = "E_FIN_FAILED"
E_REQ_FAILED = "E_REQ_FAILED"
E_TOUCH_FAILED = "E_TOUCH_FAILED"
E_IDENTIFY_FAILED = "E_IDENTIFY_FAILED"
E_AUTH_DISABLED = "E_AUTH_DISABLED"
E_AUTH_FIRST = "E_AUTH_FIRST"
E_AUTH_FAILED = "E_AUTH_FAILED"
E_AUTH_ERROR = "E_AUTH_ERROR"
E_UNAUTHORIZED = "E_UNAUTHORIZED"
E_TOO_MANY_CHANNEL_CONSUMERS = "E_TOO_MANY_CHANNEL_CONSUMERS"
#: beyond Go: a SUB to an nsqd that is a replica (docs/operations/replication.md)
E_SUB_FAILED = "E_SUB_FAILED"

#: error codes after which nsqd keeps the connection open
NON_FATAL_CODES = frozenset({E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED})


class NSQError(Exception):
    """Base class of every error this package raises about NSQ."""


class ClientError(NSQError):
    """An error caused by what a client sent, reported to it as an error frame.

    Attributes:
        code: the NSQ error code, e.g. ``"E_BAD_TOPIC"``.
        description: human text after the code (may be empty).
        fatal: whether the connection is closed after the error frame;
            defaults to ``code not in NON_FATAL_CODES``.
        answer: whether the server sends the error frame (or V1 response)
            at all; False for :class:`ReadError`, where Go closes the
            connection without one.
    """

    answer = True

    def __init__(self, code: str, description: str = "", fatal: bool | None = None) -> None:
        self.code = code
        self.description = description
        self.fatal = (code not in NON_FATAL_CODES) if fatal is None else fatal
        super().__init__(self.wire_text())

    def wire_text(self) -> str:
        """The error frame's text: ``CODE description`` (or ``CODE`` alone)."""
        return f"{self.code} {self.description}" if self.description else self.code

    def wire_bytes(self) -> bytes:
        """The error frame's data as bytes (UTF-8, invalid bytes escaped)."""
        return self.wire_text().encode("utf-8", "backslashreplace")


class ProtocolError(ClientError):
    """The byte stream is not valid NSQ framing (garbage, bad sizes).

    Always fatal: after it the parser's position in the stream is unknown.
    Parsers raise this and nothing else for malformed input.
    """

    def __init__(self, code: str, description: str = "") -> None:
        super().__init__(code, description, fatal=True)


class ReadError(ProtocolError):
    """The client's stream cannot be read on; the connection closes silently.

    Go nsqd reads commands with ``bufio.Reader.ReadSlice('\\n')``; when that
    fails (e.g. ``bufio: buffer full``: a line longer than the reader's
    buffer) its IOLoop (nsqd/protocol_v2.go) leaves the loop with
    ``failed to read command - <error>``, which nsqd/tcp.go ``Handle`` logs
    as ``client(<addr>) - failed to read command - ...``; no error frame is
    sent. :attr:`answer` is False so a server logs this error and closes the
    connection without writing it.
    """

    answer = False
