"""``format("nsq-archive")`` over files written by the real ``nsq to-file``."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess

import pytest

from tests.cli.conftest import NSQ
from tests.spark.conftest import drained, require_spark, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def archive(cluster, topic: str, out, *flags: str) -> None:
    """Run ``nsq to-file`` on ``topic`` until every message is FINed (so on
    disk), then SIGTERM it (closing its files)."""
    proc = subprocess.Popen(NSQ + ["to-file", f"--topic={topic}", "--channel=archive",
                                   f"--nsqd-tcp-address={cluster.nsqd.tcp}", f"--output-dir={out}",
                                   "--sync-interval=200ms", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        c = wait_for(lambda: proc.poll() is not None or (drained(cluster, topic, "archive") and
                                                         cluster.channel_stats(topic, "archive")),
                     60, f"to-file archived {topic}")
        assert proc.poll() is None, proc.stderr.read().decode()
        assert c["message_count"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr.read().decode()
        proc.stdout.close()
        proc.stderr.close()


def test_archive_reads_gzip_and_plain_files_of_to_file(spark, cluster, tmp_path):
    gz_bodies = [f"gz-{i}-{'x' * (i % 50)}".encode() for i in range(3000)]
    plain_bodies = [f"plain-{i}".encode() for i in range(700)]
    cluster.mpub("arch_gz", gz_bodies)
    cluster.mpub("arch_plain", plain_bodies)
    out = tmp_path / "archive"
    archive(cluster, "arch_gz", out, "--gzip", "--rotate-size=20000")
    archive(cluster, "arch_plain", out)
    gz_files = sorted(p.name for p in out.iterdir() if p.name.endswith(".gz"))
    assert len(gz_files) > 1, gz_files  # rotated
    (out / "notes.txt").write_text("not an archive file\n")  # not to-file's name: skipped

    df = spark.read.format("nsq-archive").load(str(out))
    assert df.columns == ["body", "topic", "file", "line"]
    rows = df.collect()
    by_topic: dict[str, list[bytes]] = {}
    for r in rows:
        by_topic.setdefault(r.topic, []).append(bytes(r.body))
    assert sorted(by_topic) == ["arch_gz", "arch_plain"]
    assert sorted(by_topic["arch_gz"]) == sorted(gz_bodies)
    assert sorted(by_topic["arch_plain"]) == sorted(plain_bodies)
    assert {r.file.rsplit("/", 1)[1] for r in rows if r.topic == "arch_gz"} == set(gz_files)
    # line numbers count from 1 in each file, without gaps
    per_file: dict[str, list[int]] = {}
    for r in rows:
        per_file.setdefault(r.file, []).append(r.line)
    for lines in per_file.values():
        assert sorted(lines) == list(range(1, len(lines) + 1))

    # one topic, and a glob
    only = spark.read.format("nsq-archive").option("topic", "arch_plain").load(str(out))
    assert only.count() == len(plain_bodies)
    assert spark.read.format("nsq-archive").load(str(out / "arch_gz.*.gz")).count() == len(gz_bodies)


def test_read_lines_of_a_file_still_being_written(tmp_path):
    require_spark()
    from nsq.spark.archive import read_lines

    path = tmp_path / "t.host-000000.2026-01-01_00.log.gz"
    member1 = gzip.compress(b"a\nb\n")
    later = [b"c%d-%s" % (i, os.urandom(16).hex().encode()) for i in range(4000)]
    member2 = gzip.compress(b"".join(line + b"\n" for line in later))
    path.write_bytes(member1 + member2[: len(member2) // 2])  # the second member cut short
    lines = list(read_lines(str(path)))
    assert lines[:2] == [b"a", b"b"]
    assert 100 < len(lines) - 2 < len(later)  # what decompressed, in whole lines
    assert lines[2:] == later[: len(lines) - 2]

    plain = tmp_path / "t.host.2026-01-01_00.log"
    plain.write_bytes(b"one\ntwo\nthr")  # an unterminated last line is not a message yet
    assert list(read_lines(str(plain))) == [b"one", b"two"]

    corrupt = tmp_path / "bad.log.gz"
    corrupt.write_bytes(member1[:10] + b"\x00" * 20 + member1[30:])
    with pytest.raises(ValueError, match="corrupt gzip"):
        list(read_lines(str(corrupt)))


def test_topic_from_file_names(tmp_path):
    require_spark()
    from nsq.spark.archive import filename_regex, find_files

    rx = filename_regex()
    assert rx.search("/a/events.box-000003.2026-11-21_12.log.gz").group("topic") == "events"
    assert rx.search("events.box.2026-11-21_12.log").group("topic") == "events"
    assert rx.search("events.box.2026-11-21_12.txt") is None
    custom = filename_regex("<DATETIME>/<TOPIC><REV>.ndjson")
    assert custom.search("x/2026-11-21/clicks-000001.ndjson.gz").group("topic") == "clicks"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.b.h.2026-11-21_12.log").write_bytes(b"")
    (tmp_path / ".hidden.h.2026-11-21_12.log").write_bytes(b"")
    files = find_files([str(tmp_path)], topic="a.b")
    assert [(f.topic, f.path.rsplit("/", 1)[1]) for f in files] == [("a.b", "a.b.h.2026-11-21_12.log")]
    with pytest.raises(FileNotFoundError):
        find_files([str(tmp_path / "missing")])
