"""A disk queue's meta file and its recovery, go-diskqueue's format.

The meta file ``<name>.diskqueue.meta.dat`` is ``"%d\\n%d,%d\\n%d,%d\\n"`` of
depth, read file number, read position, write file number, write position
(go-diskqueue diskqueue.go ``persistMetaData`` / ``retrieveMetaData``).

It is replaced atomically (:func:`~nsq.server.nsqd.storage.atomicfile.replace_atomically`,
then the directory is fsynced). On a full disk, where no temp file fits, it
is rewritten in place: it is under 100 bytes, inside the block it already
has. A meta file that is missing while data files exist, or that cannot be
parsed (a torn in-place write), is rebuilt by :func:`scan_data_files`.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Callable

from .atomicfile import NO_SPACE, fsync_dir, replace_atomically, write_all

__all__ = ["format_meta", "parse_meta", "write_meta", "scan_data_files", "scan_records", "listdir", "plausible_record",
           "cut_tail"]

log = logging.getLogger("nsq.nsqd")

_SIZE = struct.Struct(">i")
_META_RE = re.compile(rb"\A(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n")


def format_meta(depth: int, read_num: int, read_pos: int, write_num: int, write_pos: int) -> bytes:
    """The meta file's bytes for this state."""
    return f"{depth}\n{read_num},{read_pos}\n{write_num},{write_pos}\n".encode()


def parse_meta(raw: bytes) -> tuple[int, int, int, int, int] | None:
    """``(depth, read_num, read_pos, write_num, write_pos)`` from a meta
    file's bytes, or None if they are not a valid meta file (a negative
    file number or position counts as invalid; a negative depth is left to
    the queue's tail check, as Go)."""
    m = _META_RE.match(raw)
    if m is None:
        return None
    depth, read_num, read_pos, write_num, write_pos = (int(v) for v in m.groups())
    if read_num < 0 or read_pos < 0 or write_num < 0 or write_pos < 0:
        return None
    return depth, read_num, read_pos, write_num, write_pos


def write_meta(meta_path: str, text: bytes, subject: str) -> None:
    """Write the meta file: atomically, else (a full disk) in place.

    Raises:
        OSError: neither worked.
    """
    try:
        replace_atomically(meta_path, text)  # the directory is fsynced too
    except OSError as e:
        if e.errno not in NO_SPACE or not _write_in_place(meta_path, text, subject):
            raise


def _write_in_place(meta_path: str, text: bytes, subject: str) -> bool:
    """Overwrite the existing meta file (no new blocks needed); False if
    there is none or it fails too."""
    try:
        fd = os.open(meta_path, os.O_WRONLY)
    except OSError:
        return False
    try:
        write_all(fd, text)
        os.ftruncate(fd, len(text))
        os.fsync(fd)
        # a data file a roll created is in the directory: durable only now
        fsync_dir(os.path.dirname(meta_path))
    except OSError as e:
        log.error("DISKQUEUE(%s) failed to write meta data in place - %s", subject, e)
        return False
    finally:
        os.close(fd)
    return True


def listdir(path: str) -> list[str]:
    """``os.listdir``, or [] if the directory cannot be read."""
    try:
        return os.listdir(path)
    except OSError:
        return []


def scan_data_files(data_path: str, data_re: re.Pattern, file_name: Callable[[int], str], min_size: int,
                    max_size: int) -> tuple[int, int, int, int] | None:
    """Rebuild a queue's state from its data files.

    Reads from the start of the lowest-numbered file (records already
    consumed there are delivered again) and appends after the last complete
    record of the highest-numbered one.

    Args:
        data_path: the directory.
        data_re: full match of the queue's data file names, group 1 the number.
        file_name: a data file's path from its number.
        min_size, max_size: valid record sizes (bytes).

    Returns:
        ``(depth, first file number, last file number, end of its last
        whole record)``, or None when there is no data file.
    """
    nums = sorted(int(m.group(1)) for m in map(data_re.fullmatch, listdir(data_path)) if m)
    if not nums:
        return None
    depth = end = 0
    for num in nums:
        count, end = _scan_file(file_name(num), min_size, max_size)
        depth += count
    return depth, nums[0], nums[-1], end


def _scan_file(path: str, min_size: int, max_size: int) -> tuple[int, int]:
    """Count the valid records at the start of a data file: ``(count, end
    offset)``; without a meta file none is known to be synced, so each must
    look whole (``strict``)."""
    return scan_records(path, 0, min_size, max_size, strict=True)


def scan_records(path: str, start: int, min_size: int, max_size: int, strict: bool = False) -> tuple[int, int]:
    """Count the whole valid records of a data file from offset ``start``
    on: ``(count, end offset)`` (``(0, start)`` if there are none or the
    file cannot be read). With ``strict`` (records never synced: a power
    cut may have left zeros where their end was) a record also needs a
    tail with no zeroed sector (:func:`plausible_record`)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return 0, start
    pos = count = 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        if size < min_size or size > max_size or pos + 4 + size > len(data):
            break
        if strict and not plausible_record(data, pos, pos + 4 + size, start):
            break
        pos += 4 + size
        count += 1
    return count, start + pos


def cut_tail(path: str, size: int, subject: str) -> None:
    """Cut a data file back to ``size`` bytes and fsync it, if it is longer:
    what a crash left past the meta file's write position and nobody may
    read. A file that cannot be cut is logged (its next write goes over
    the tail unless a roll comes first)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    except OSError as e:
        log.error("%s failed to open %s to cut its tail - %s", subject, path, e)
        return
    try:
        extra = os.fstat(fd).st_size - size
        if extra > 0:
            os.ftruncate(fd, size)
            os.fsync(fd)
            log.warning("%s cut %d bytes after the meta data's write position in %s: never acknowledged",
                        subject, extra, os.path.basename(path))
    except OSError as e:
        log.error("%s failed to cut the tail of %s - %s", subject, path, e)
    finally:
        os.close(fd)


def plausible_record(data: bytes, start: int, end: int, base: int) -> bool:
    """A record ``data[start:end]`` (``data`` begins at file offset
    ``base``) that a torn write did not leave: no run of zeros at its end
    that begins at or before a 512-byte sector boundary (a sector that never
    reached the disk)."""
    zeros_from = start + len(data[start:end].rstrip(b"\0"))
    if zeros_from < end:
        boundary = -(-(base + zeros_from) // 512) * 512 - base
        if boundary < end:
            return False
    return True
