"""Logging set up as Go nsqd's: ``[nsqd] 2026/11/21 10:59:00.123456 INFO: ...``."""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["setup_logging", "set_level", "LEVELS"]

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
