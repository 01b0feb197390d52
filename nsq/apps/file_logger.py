"""Writing one topic's messages to newline-delimited files (nsq_to_file's file side).

Synchronous file work only (no asyncio): naming, opening with revisions,
rotation, gzip members, fsync preparation, and moving finished files from
the work dir to the output dir. :mod:`nsq.apps.to_file` drives it.

Behaviour as Go nsq_to_file v1.2 (nsqio/nsq ``apps/nsq_to_file/file_logger.go``
``FileLogger.updateFile``/``needsRotation``; https://nsq.io/components/utilities.html):

- The file name is ``--filename-format`` with ``<TOPIC>``, ``<HOST>``
  (``--host-identifier`` with ``<SHORT_HOST>``/``<HOSTNAME>``, default the
  short hostname), ``<PID>`` and ``<DATETIME>`` (``--datetime-format``,
  strftime, local time) replaced; ``<REV>`` becomes ``-000000``,
  ``-000001`` ... and is required when gzip, rotation or a work dir is on
  (it is dropped otherwise). ``.gz`` is appended for gzip.
- Plain files without rotate-interval are opened for append; gzip files and
  interval rotation always start a new revision (``O_EXCL``); an existing
  file over ``--rotate-size`` bytes also moves on to the next revision.
- Rotation happens when the ``<DATETIME>`` part changes, after
  ``--rotate-interval``, or once more than ``--rotate-size`` bytes
  (uncompressed) were written.
- gzip: each sync closes the current gzip member and starts a new one, so
  the file is a valid concatenation of members after any clean stop.
- Closing a file in the work dir links it into the output dir under the
  same relative name (never overwriting: the revision is bumped) and
  removes the work copy.
"""

from __future__ import annotations

import gzip
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["FileLoggerOptions", "FileLogger", "compute_filename_format"]

log = logging.getLogger("nsq.to_file")


@dataclass
class FileLoggerOptions:
    """nsq_to_file's file flags, defaults as Go's.

    Attributes:
        output_dir: where finished files go.
        work_dir: where files are written; "" means ``output_dir``.
        datetime_format: strftime format for ``<DATETIME>``.
        filename_format: see the module docstring.
        host_identifier: replaces ``<HOST>``; "" means the short hostname.
        gzip, gzip_level: compress (level 1-9).
        skip_empty_files: do not create files no message was written to.
        rotate_size: bytes; 0 disables.
        rotate_interval: seconds; 0 disables.
        sync_interval: seconds between syncs (and rotation checks).
        max_in_flight: a sync is forced once this many messages wait.
    """

    output_dir: str = "/tmp"
    work_dir: str = ""
    datetime_format: str = "%Y-%m-%d_%H"
    filename_format: str = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    host_identifier: str = ""
    gzip: bool = False
    gzip_level: int = 6
    skip_empty_files: bool = False
    rotate_size: int = 0
    rotate_interval: float = 0.0
    sync_interval: float = 30.0
    max_in_flight: int = 200

    @property
    def work(self) -> str:
        """The directory files are written in (``work_dir`` or ``output_dir``)."""
        return self.work_dir or self.output_dir


def compute_filename_format(opts: FileLoggerOptions, topic: str, hostname: str | None = None,
                            pid: int | None = None) -> str:
    """The filename template for ``topic``: every token but ``<DATETIME>``
    (and ``<REV>``, when kept) replaced.

    Raises:
        ValueError: ``<REV>`` missing although gzip, rotation or a work dir
            is on (Go's message).
    """
    hostname = hostname if hostname is not None else socket.gethostname()
    short = hostname.split(".")[0]
    identifier = short
    if opts.host_identifier:
        identifier = opts.host_identifier.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)
    fmt = opts.filename_format
    if opts.gzip or opts.rotate_size > 0 or opts.rotate_interval > 0 or opts.work != opts.output_dir:
        if "<REV>" not in fmt:
            raise ValueError("missing <REV> in --filename-format when gzip, rotation, or work dir enabled")
    else:
        fmt = fmt.replace("<REV>", "")
    fmt = fmt.replace("<TOPIC>", topic).replace("<HOST>", identifier)
    fmt = fmt.replace("<PID>", str(os.getpid() if pid is None else pid))
    if opts.gzip and not fmt.endswith(".gz"):
        fmt += ".gz"
    return fmt


def _rev(template: str, rev: int) -> str:
    return template.replace("<REV>", f"-{rev:06d}")


class FileLogger:
    """The open output file of one topic.

    Args:
        opts: the file options.
        topic: topic name (for the file name and logs).
        clock: returns the time in seconds since the epoch (tests pass a fake).

    Raises:
        ValueError: from :func:`compute_filename_format`.

    File errors (``OSError``) propagate: the caller stops, as Go exits.
    """

    def __init__(self, opts: FileLoggerOptions, topic: str, clock: Callable[[], float] = time.time) -> None:
        self.opts = opts
        self.topic = topic
        self.clock = clock
        self.filename_format = compute_filename_format(opts, topic)
        self.filename = ""
        self.rev = 0
        self.open_time = 0.0
        self.filesize = 0
        self.path: str | None = None
        self._out: BinaryIO | None = None
        self._gz: gzip.GzipFile | None = None
        #: files moved to the output dir (or closed in place)
        self.files_written = 0

    @property
    def is_open(self) -> bool:
        """True while an output file is open."""
        return self._out is not None

    def current_filename(self) -> str:
        """The file name template for now (``<DATETIME>`` filled in)."""
        stamp = time.strftime(self.opts.datetime_format, time.localtime(self.clock()))
        return self.filename_format.replace("<DATETIME>", stamp)

    def needs_rotation(self) -> bool:
        """True if no file is open, the name changed, the file is older than
        ``rotate_interval`` or bigger than ``rotate_size``."""
        if self._out is None:
            return True
        if self.current_filename() != self.filename:
            return True
        if self.opts.rotate_interval > 0 and self.clock() - self.open_time > self.opts.rotate_interval:
            return True
        return self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size

    def update_file(self) -> None:
        """Close the current file (moving it) and open the next one."""
        self.close()
        filename = self.current_filename()
        if filename != self.filename:
            self.rev = 0
        else:
            self.rev += 1
        self.filename = filename
        self.open_time = self.clock()
        work, output = self.opts.work, self.opts.output_dir
        full = os.path.join(work, filename)
        _makedirs_for(full)
        while True:
            path = _rev(full, self.rev)
            if work != output:
                out_path = os.path.join(output, os.path.relpath(path, work))
                _makedirs_for(out_path)
                if os.path.exists(out_path):
                    log.warning("[%s] output file already exists: %s", self.topic, out_path)
                    self.rev += 1
                    continue
            exclusive = self.opts.gzip or self.opts.rotate_interval > 0
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND), 0o666)
            except FileExistsError:
                log.warning("[%s] working file already exists: %s", self.topic, path)
                self.rev += 1
                continue
            size = os.fstat(fd).st_size
            if self.opts.rotate_size > 0 and size > self.opts.rotate_size:
                os.close(fd)
                self.rev += 1
                continue
            break
        log.debug("[%s] opening %s", self.topic, path)
        self.path = path
        self.filesize = size
        self._out = os.fdopen(fd, "ab" if not exclusive else "wb", buffering=64 * 1024)
        self._gz = self._new_member() if self.opts.gzip else None

    def _new_member(self) -> gzip.GzipFile:
        return gzip.GzipFile(filename="", mode="wb", fileobj=self._out, compresslevel=self.opts.gzip_level, mtime=0)

    def write(self, body: bytes) -> None:
        """Append ``body`` and a newline (to the open file; call
        :meth:`update_file` first when :meth:`needs_rotation`)."""
        writer = self._gz if self._gz is not None else self._out
        assert writer is not None  # update_file opened it
        writer.write(body)
        writer.write(b"\n")
        self.filesize += len(body) + 1

    def flush_for_sync(self) -> int | None:
        """End the gzip member (a new one starts) and flush Python's buffer.

        Returns:
            the file descriptor to fsync (the caller may do it in a thread),
            or None if no file is open.
        """
        if self._out is None:
            return None
        if self._gz is not None:
            self._gz.close()
            self._gz = None
        self._out.flush()
        if self.opts.gzip:
            self._gz = self._new_member()
        return self._out.fileno()

    def sync(self) -> None:
        """Flush and fsync now (in this thread)."""
        fd = self.flush_for_sync()
        if fd is not None:
            os.fsync(fd)

    def close(self) -> None:
        """Finish the gzip stream, fsync, close, and move the file to the
        output dir (work dir in use) without overwriting. With
        ``skip_empty_files`` an empty file is removed instead."""
        out = self._out
        if out is None:
            return
        self._out = None
        path = self.path or ""
        if self._gz is not None:
            self._gz.close()
            self._gz = None
        out.flush()
        os.fsync(out.fileno())
        empty = os.fstat(out.fileno()).st_size == 0
        out.close()
        if empty and self.opts.skip_empty_files:
            os.unlink(path)
            return
        work, output = self.opts.work, self.opts.output_dir
        if work != output:
            dst = os.path.join(output, os.path.relpath(path, work))
            rev = self.rev
            while True:
                try:
                    os.link(path, dst)
                    break
                except FileExistsError:
                    log.warning("[%s] destination file already exists: %s", self.topic, dst)
                    rev += 1
                    dst = _rev(os.path.join(os.path.dirname(dst), os.path.basename(self.filename)), rev)
            os.unlink(path)
            log.debug("[%s] moved finished file %s to %s", self.topic, path, dst)
        self.files_written += 1


def _makedirs_for(path: str) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o770, exist_ok=True)
