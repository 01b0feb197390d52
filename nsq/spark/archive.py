"""``spark.read.format("nsq-archive").load(path)``: ``nsq to-file`` output as a dataset.

``nsq to-file`` (and Go's nsq_to_file) writes each message followed by a
newline, in plain or gzip files (``--gzip``: a gzip member per sync, so a
file is a concatenation of members), named by ``--filename-format``
(default ``<TOPIC>.<HOST><REV>.<DATETIME>.log``, ``.gz`` appended) and
rotated into revisions. This reader gives one row per message:

- ``body`` binary: the line, without its newline;
- ``topic`` string: from the file name (the ``<TOPIC>`` part of
  ``filename_format``), or the ``topic`` option;
- ``file`` string: the file's absolute path;
- ``line`` long: the line number in the (decompressed) file, from 1.

Options:

- ``path`` (``load(path)``; several with ``load([p1, p2])``): files,
  directories (walked recursively) or glob patterns (``**`` allowed).
  Only files whose name matches ``filename_format`` are read (hidden files
  never); a file given by name is always read.
- ``filename_format``: to-file's ``--filename-format``, to find the topic in
  a name (a topic containing dots is ambiguous in the default format: set
  ``topic``).
- ``topic``: read only this topic's files (and trust the name for it).

One Spark partition per file, read on an executor (the paths must be
visible there: local paths in local mode, a shared mount on a cluster).
A file still being written is read up to its last complete line (a gzip
file ending inside a member: as far as it decompresses); that is logged,
not an error. A gzip file that is corrupt (bad header or checksum) fails
the task. Bodies containing a newline cannot be told apart from two messages,
as with to-file itself.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import zlib
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

__all__ = ["ARCHIVE_SCHEMA", "ArchiveFile", "NSQArchiveDataSource", "filename_regex", "find_files",
           "read_lines"]

log = logging.getLogger("nsq.spark")

#: the archive reader's columns (DDL)
ARCHIVE_SCHEMA = "body binary, topic string, file string, line long"
_ARCHIVE_STRUCT = StructType([
    StructField("body", BinaryType()),
    StructField("topic", StringType()),
    StructField("file", StringType()),
    StructField("line", LongType()),
])
#: nsq to-file's default --filename-format
DEFAULT_FILENAME_FORMAT = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
#: rows per Arrow record batch
BATCH_ROWS = 8192
_CHUNK = 1 << 20
_TOKEN = re.compile(r"(<TOPIC>|<HOST>|<PID>|<DATETIME>|<REV>)")


def filename_regex(filename_format: str = DEFAULT_FILENAME_FORMAT, topic: str | None = None) -> re.Pattern:
    """A regex matching the end of a path to-file wrote with
    ``filename_format``; group ``topic`` is the topic (``.gz`` optional,
    ``<REV>`` optional since to-file drops it when unused)."""
    out = []
    seen_topic = False
    for part in _TOKEN.split(filename_format):
        if part == "<TOPIC>":
            if seen_topic:
                out.append("(?P=topic)")
            else:
                body = re.escape(topic) if topic else r"[.a-zA-Z0-9_-]+?(?:#ephemeral)?"
                out.append(f"(?P<topic>{body})")
                seen_topic = True
        elif part == "<HOST>" or part == "<DATETIME>":
            out.append(r"[^/]+?")
        elif part == "<PID>":
            out.append(r"\d+")
        elif part == "<REV>":
            out.append(r"(?:-\d{6})?")
        else:
            out.append(re.escape(part))
    return re.compile(r"(?:^|/)" + "".join(out) + r"(?:\.gz)?$")


class ArchiveFile(InputPartition):
    """One file to read (a Spark partition).

    Attributes:
        path: absolute path.
        topic: the topic its rows get.
    """

    def __init__(self, path: str, topic: str) -> None:
        self.path = path
        self.topic = topic

    def __repr__(self) -> str:
        return f"ArchiveFile({self.path!r}, {self.topic!r})"


def _load_paths(options: Any) -> list[str]:
    paths: list[str] = []
    raw = options.get("paths")
    if raw:
        try:
            value = json.loads(raw)
            paths.extend(value if isinstance(value, list) else [str(value)])
        except ValueError:
            paths.extend(p for p in str(raw).split(",") if p)
    if options.get("path"):
        paths.append(options["path"])
    if not paths:
        raise ValueError("nsq-archive: give the archive's path: spark.read.format('nsq-archive').load(path)")
    return list(dict.fromkeys(paths))


def find_files(paths: list[str], filename_format: str = DEFAULT_FILENAME_FORMAT,
               topic: str | None = None) -> list[ArchiveFile]:
    """The archive files under ``paths`` (files, directories, globs), sorted
    by path, each with its topic.

    Raises:
        FileNotFoundError: a path (or glob) that matches nothing.
        ValueError: a file named explicitly whose topic cannot be told (no
            ``topic`` and the name does not match ``filename_format``).
    """
    pattern = filename_regex(filename_format, topic)
    found: dict[str, str] = {}
    for path in paths:
        if glob.has_magic(path):
            matches = sorted(glob.glob(path, recursive=True))
        else:
            matches = [path] if os.path.exists(path) else []
        if not matches:
            raise FileNotFoundError(f"nsq-archive: no such file or directory: {path}")
        for match in matches:
            if os.path.isdir(match):
                for root, dirs, files in os.walk(match):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    for name in sorted(files):
                        if name.startswith("."):
                            continue
                        full = os.path.join(root, name)
                        m = pattern.search(full.replace(os.sep, "/"))
                        if m is not None:
                            found[os.path.abspath(full)] = m.group("topic")
            elif os.path.isfile(match):
                m = pattern.search(match.replace(os.sep, "/"))
                if m is None and not topic:
                    raise ValueError(f"nsq-archive: cannot tell the topic of {match} from --filename-format "
                                     f"{filename_format!r}: set the topic option")
                # m is None only with a topic given (raised above otherwise)
                found[os.path.abspath(match)] = topic or m.group("topic")  # type: ignore[union-attr]
    return [ArchiveFile(p, t) for p, t in sorted(found.items())]


def _plain_chunks(f: Any) -> Iterator[bytes]:
    while chunk := f.read(_CHUNK):
        yield chunk


def _gzip_chunks(f: Any, path: str) -> Iterator[bytes]:
    """Decompressed data of every gzip member; a truncated last member ends
    the data (logged)."""
    d = zlib.decompressobj(wbits=31)
    started = False
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        while chunk:
            started = True
            try:
                out = d.decompress(chunk)
            except zlib.error as exc:
                raise ValueError(f"nsq-archive: {path}: corrupt gzip data: {exc}") from None
            if out:
                yield out
            if d.eof:
                chunk = d.unused_data
                d = zlib.decompressobj(wbits=31)
                started = False
            else:
                chunk = b""
    if started:
        log.warning("nsq-archive: %s ends in an incomplete gzip member (still being written?)", path)


def read_lines(path: str) -> Iterator[bytes]:
    """The complete lines (messages) of an archive file, without their
    newlines; gzip (by its magic bytes) or plain. An unterminated last line
    (a write in progress) is left out.

    Raises:
        OSError: unreadable file; ValueError: corrupt gzip data.
    """
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        chunks = _gzip_chunks(f, path) if gz else _plain_chunks(f)
        tail = b""
        for chunk in chunks:
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            yield from lines
        if tail:
            log.warning("nsq-archive: %s ends in an unterminated line (still being written?)", path)


class NSQArchiveReader(DataSourceReader):
    """Batch reader of to-file archives (see the module docstring).

    Raises:
        ValueError: no path given.
    """

    def __init__(self, options: Any) -> None:
        self.paths = _load_paths(options)
        self.filename_format = options.get("filename_format") or DEFAULT_FILENAME_FORMAT
        self.topic = (options.get("topic") or "").strip() or None

    def partitions(self) -> list[ArchiveFile]:
        """One partition per file (runs where the query is planned)."""
        return find_files(self.paths, self.filename_format, self.topic)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of up to :data:`BATCH_ROWS` rows."""
        import pyarrow as pa

        assert isinstance(partition, ArchiveFile)
        names = ["body", "topic", "file", "line"]

        def batch(bodies: list[bytes], first: int) -> Any:
            n = len(bodies)
            return pa.RecordBatch.from_arrays([
                pa.array(bodies, pa.binary()),
                pa.array([partition.topic] * n, pa.string()),
                pa.array([partition.path] * n, pa.string()),
                pa.array(range(first, first + n), pa.int64()),
            ], names=names)

        def batches() -> Iterator[Any]:
            bodies: list[bytes] = []
            first = 1
            for body in read_lines(partition.path):
                bodies.append(body)
                if len(bodies) >= BATCH_ROWS:
                    yield batch(bodies, first)
                    first += len(bodies)
                    bodies = []
            if bodies:
                yield batch(bodies, first)

        return batches()


class NSQArchiveDataSource(DataSource):
    """The ``nsq-archive`` data source (batch reads of ``nsq to-file``
    output); register it with :func:`nsq.spark.register`."""

    @classmethod
    def name(cls) -> str:
        return "nsq-archive"

    def schema(self) -> StructType:
        return _ARCHIVE_STRUCT

    def reader(self, schema: StructType) -> NSQArchiveReader:
        if [f.name for f in schema.fields] != [f.name for f in _ARCHIVE_STRUCT.fields]:
            raise ValueError(f"nsq-archive has a fixed schema ({ARCHIVE_SCHEMA}); got {schema.simpleString()}")
        return NSQArchiveReader(self.options)
