"""Logging set up as Go nsqd's: ``[nsqd] 2026/11/21 10:59:00.123456 INFO: ...``."""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["HeldLogs", "setup_logging", "set_level", "LEVELS"]

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
          logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}


class _GoFormatter(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        micros = int((record.created % 1) * 1e6)
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", t) + f".{micros:06d}"
        text = f"{self.prefix}{stamp} {_NAMES.get(record.levelno, record.levelname)}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(prefix: str, level: str) -> None:
    """Log ``nsq.*`` loggers to stderr with Go's layout.

    Raises:
        ValueError: unknown level name.
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"invalid log level {level!r} (debug, info, warn, error, fatal)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_GoFormatter(prefix))
    root = logging.getLogger("nsq")
    root.handlers[:] = [handler]
    root.propagate = False
    set_level(level)


def set_level(level: str) -> None:
    """Change the ``nsq`` loggers' level (``/config/log_level``)."""
    logging.getLogger("nsq").setLevel(LEVELS[level.lower()])


class HeldLogs(logging.Handler):
    """Holds back what the ``nsq`` loggers log (a daemon's start), so a
    start that fails prints one ``Error:`` line and nothing before it.

    Made by :meth:`hold`; then either :meth:`replay` (log everything held,
    in order, with its own time) or :meth:`discard`.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._root = logging.getLogger("nsq")
        self._handlers: list[logging.Handler] = []
        self._propagate = True

    @classmethod
    def hold(cls) -> HeldLogs:
        """Start holding: the ``nsq`` logger's handlers are set aside."""
        held = cls()
        root = held._root
        held._handlers, held._propagate = root.handlers[:], root.propagate
        root.handlers[:] = [held]
        root.propagate = False
        return held

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def _restore(self) -> None:
        if self._root.handlers == [self]:
            self._root.handlers[:] = self._handlers
            self._root.propagate = self._propagate

    def replay(self, min_level: int = logging.NOTSET) -> None:
        """Stop holding; log the held records of ``min_level`` and above."""
        self._restore()
        for record in self.records:
            if record.levelno >= min_level:
                self._root.handle(record)
        self.records.clear()

    def discard(self) -> None:
        """Stop holding; forget the held records."""
        self._restore()
        self.records.clear()
