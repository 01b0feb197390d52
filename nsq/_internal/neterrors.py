"""Socket errors in plain words, naming the address, for the one-line
``Error: ...`` the commands print.

Python's texts name neither the address nor the side that failed
(``[Errno 111] Connection refused``; asyncio's bind error is ``[Errno 98]
error while attempting to bind on address ('127.0.0.1', 4151): address
already in use``). These helpers give Go's wording (``address already in
use``, ``connection refused``; Go's net package uses the C library's
strerror texts, lower-cased) with the address and what it was for:
``cannot listen on 127.0.0.1:4151 (HTTP): address already in use``,
``cannot connect to nonsense:4150: name or service not known``.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

from nsq._internal.addresses import AddressError

__all__ = ["ListenError", "error_words", "listen_errors", "describe_error"]


class ListenError(OSError):
    """An address a daemon cannot listen on.

    ``str()`` is ``cannot listen on ADDRESS (KIND): REASON``.

    Attributes:
        kind: what the listener is for (``TCP``, ``HTTP``, ``HTTPS``).
        address: the address as configured (``127.0.0.1:4151``).
        reason: :func:`error_words` of the cause.
    """

    def __init__(self, kind: str, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address} ({kind}): {reason}")
        self.kind = kind
        self.address = address
        self.reason = reason


def error_words(exc: BaseException) -> str:
    """The cause of a socket error in lower-case words, without Python's
    ``[Errno N]`` and without any address: ``address already in use``,
    ``connection refused``, ``temporary failure in name resolution``."""
    if isinstance(exc, AddressError):
        return exc.reason
    if type(exc).__module__ == "ssl":  # its errno is OpenSSL's code, not errno
        text = getattr(exc, "reason", None) or str(exc)
    elif isinstance(exc, socket.gaierror) and exc.strerror:
        text = exc.strerror  # getaddrinfo's own text (its errno is an EAI_* code)
    elif isinstance(exc, OSError) and exc.errno and exc.errno > 0:
        text = os.strerror(exc.errno)  # asyncio wraps strerror in a longer text
    elif isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    elif isinstance(exc, TimeoutError):  # asyncio.TimeoutError too (Python >= 3.11)
        text = "timed out"
    else:
        text = str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def describe_error(exc: BaseException) -> str:
    """One line for ``Error: ...``: a :class:`ListenError` or a non-OS error
    as it is; another OSError as ``FILE: words`` or ``words``."""
    if isinstance(exc, ListenError) or not isinstance(exc, OSError):
        return str(exc)
    if exc.errno is None and not exc.strerror:
        return str(exc)  # a text of ours (a held --data-path lock)
    words = error_words(exc)
    return f"{exc.filename}: {words}" if exc.filename else words


@contextlib.contextmanager
def listen_errors(kind: str, address: str) -> Iterator[None]:
    """Turn a failure to parse or bind ``address`` inside the block into a
    :class:`ListenError` (``OSError``, a ``ValueError`` for a malformed
    address, ``OverflowError`` for a port out of range)."""
    try:
        yield
    except ListenError:
        raise
    except (OSError, ValueError, OverflowError) as exc:
        raise ListenError(kind, address, error_words(exc)) from exc
