"""A disk queue's meta file and its recovery, go-diskqueue's format.

The meta file ``<name>.diskqueue.meta.dat`` is ``"%d\\n%d,%d\\n%d,%d\\n"`` of
depth, read file number, read position, write file number, write position
(go-diskqueue diskqueue.go ``persistMetaData`` / ``retrieveMetaData``).

Our meta file holds that text twice, in two 512-byte slots (:class:`MetaFile`):
each slot is Go's text, then a line ``nsq <seq> <crc>`` (a sequence number
and the CRC-32 of the slot's bytes before the CRC), then zeros. Go reads the
first slot's numbers and ignores the rest (``fmt.Fscanf``); a file Go wrote
(no ``nsq`` line) is read as one slot with sequence 0.

The file is replaced atomically
(:func:`~nsq.server.nsqd.storage.atomicfile.replace_atomically`, then the
directory is fsynced), holding Go's text alone, except with
``--sync-every=1``, where a sync pays for each fsync in a publish's answer.
There the first write after start replaces the file with two slots holding
the same state, and each later sync writes one slot in place, the other one
than last time, and ``fdatasync``s it (LMDB's two meta pages): 2 fsyncs per
sync (data, meta) where a replace costs 3 (data, temp file, directory),
and Go 2 and a rename it never makes durable. A slot torn by a power cut
fails its CRC, and the other slot, synced before this sync began, holds the
state before it; nothing that sync covered was acknowledged yet. At close
the file is Go's text again. After a power cut, Go nsqd reading the two
slots takes the first, which may be one sync older than the second (the
records of that sync are then written over by Go's next write).

On a full disk, where no temp file fits, the file is rewritten in place: it
is 1 KiB, inside the block it already has. A meta file that is missing while
data files exist, or that cannot be parsed, is rebuilt by
:func:`scan_data_files`.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from collections.abc import Callable

from .atomicfile import NO_SPACE, fsync_dir, replace_atomically, write_all

__all__ = ["MetaFile", "SLOT", "format_meta", "parse_meta", "read_slots", "write_meta", "scan_data_files",
           "scan_records", "listdir", "plausible_record", "cut_tail"]

log = logging.getLogger("nsq.nsqd")

_SIZE = struct.Struct(">i")
_META_RE = re.compile(rb"\A(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n")
_SEAL_RE = re.compile(rb"nsq (\d+) ([0-9a-f]{8})\n")
#: bytes per slot of the meta file (one sector: written whole or not at all on
#: most disks; a torn one fails its CRC)
SLOT = 512


def format_meta(depth: int, read_num: int, read_pos: int, write_num: int, write_pos: int) -> bytes:
    """The meta file's bytes for this state."""
    return f"{depth}\n{read_num},{read_pos}\n{write_num},{write_pos}\n".encode()


def parse_meta(raw: bytes) -> tuple[int, int, int, int, int] | None:
    """``(depth, read_num, read_pos, write_num, write_pos)`` from a meta
    file's bytes, or None if they are not a valid meta file (a negative
    file number or position counts as invalid; a negative depth is left to
    the queue's tail check, as Go)."""
    got = _meta_at(raw)
    return None if got is None else got[0]


def _meta_at(raw: bytes) -> tuple[tuple[int, int, int, int, int], int] | None:
    """:func:`parse_meta`'s state and the offset where Go's text ends."""
    m = _META_RE.match(raw)
    if m is None:
        return None
    depth, read_num, read_pos, write_num, write_pos = (int(v) for v in m.groups())
    if read_num < 0 or read_pos < 0 or write_num < 0 or write_pos < 0:
        return None
    return (depth, read_num, read_pos, write_num, write_pos), m.end()


def _seal(text: bytes, seq: int) -> bytes:
    """A slot: Go's ``text``, the ``nsq <seq> <crc>`` line, zeros to :data:`SLOT` bytes."""
    head = text + b"nsq %d " % seq
    return (head + b"%08x\n" % zlib.crc32(head)).ljust(SLOT, b"\0")


def _parse_slot(raw: bytes) -> tuple[tuple[int, int, int, int, int], int, bool] | None:
    """``(state, seq, sealed)`` of one slot, or None if it is not valid (a
    sealed slot whose CRC fails is not). An unsealed one (Go's file) has
    sequence 0."""
    got = _meta_at(raw)
    if got is None:
        return None
    vals, end = got
    seal = _SEAL_RE.match(raw, end)
    if seal is None:
        return vals, 0, False
    head = raw[:seal.start(2)]
    if int(seal.group(2), 16) != zlib.crc32(head):
        return None
    return vals, int(seal.group(1)), True


def read_slots(raw: bytes) -> tuple[tuple[int, int, int, int, int], int, bool] | None:
    """The newest valid state of a meta file's bytes: ``(state, seq, both)``
    where ``both`` says whether both slots are sealed and valid (only then
    may one be written in place), or None if no slot is valid."""
    slots = [s for s in (_parse_slot(raw), _parse_slot(raw[SLOT:2 * SLOT]) if len(raw) > SLOT else None)
             if s is not None]
    if not slots:
        return None
    best = max(slots, key=lambda s: s[1])
    return best[0], best[1], len(slots) == 2 and all(s[2] for s in slots)


class MetaFile:
    """A disk queue's meta file in two slots (see the module docstring).

    Not thread-safe: the caller serialises reads and writes (DiskQueue's
    meta lock).

    Args:
        path: ``<name>.diskqueue.meta.dat``.
        subject: how log lines name the queue.
        in_place: write one slot in place per sync (``--sync-every=1``);
            else every write replaces the whole file.
    """

    def __init__(self, path: str, subject: str, in_place: bool) -> None:
        self.path = path
        self.subject = subject
        self.in_place = in_place
        self.seq = 0  # of the newest state written or read
        self._slots = False  # both slots on disk are sealed and valid
        self._text = b""  # the newest state's Go text

    def read(self) -> tuple[int, int, int, int, int] | None:
        """The newest valid state, or None if the file holds none.

        Raises:
            OSError: the file could not be read (FileNotFoundError: there is none).
        """
        with open(self.path, "rb") as f:
            raw = f.read(2 * SLOT)
        found = read_slots(raw)
        if found is None:
            return None
        vals, self.seq, self._slots = found
        self._text = format_meta(*vals)
        return vals

    @property
    def writes_in_place(self) -> bool:
        """Whether the next :meth:`write` goes to a slot in place (no
        directory fsync of its own)."""
        return self.in_place and self._slots

    def write(self, text: bytes) -> None:
        """Make ``text`` (:func:`format_meta`) the newest durable state.

        Raises:
            OSError: it could not be written or synced; the newest durable
                state is then the one before (a slot that may be torn is
                not written over: the next write replaces the whole file).
        """
        seq = self.seq + 1
        if not self.in_place:
            write_meta(self.path, text, self.subject)  # Go's file, as Go writes it
        elif self._slots:
            self._write_slot(seq % 2, text, seq)
        else:
            slot = _seal(text, seq)
            write_meta(self.path, slot + slot, self.subject)
            self._slots = True
        self.seq = seq
        self._text = text

    def settle(self) -> None:
        """At close: leave Go's file (the newest state's text alone), first
        making the first slot the newest, so that no crash on the way (nor
        the in-place rewrite of a full disk) can leave an older state.

        Raises:
            OSError: a write failed (the file still holds the newest state).
        """
        if not self._slots:
            return
        if self.seq % 2 == 1:
            self._write_slot(0, self._text, self.seq + 1)
            self.seq += 1
        write_meta(self.path, self._text, self.subject)
        self._slots = False

    def forget(self) -> None:
        """The file was removed: the next write replaces it whole."""
        self._slots = False

    def _write_slot(self, slot: int, text: bytes, seq: int) -> None:
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, _seal(text, seq), slot * SLOT)
            os.fdatasync(fd)
        except OSError:
            self._slots = False  # that slot may be torn: the next write replaces the file
            raise
        finally:
            os.close(fd)


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
