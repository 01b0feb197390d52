"""A crash-state explorer for nsqd's storage (a power cut, not ``kill -9``).

In the style of SQLite's crash-simulating VFS (src/test6.c) and RocksDB's
FaultInjectionTestFS:

- :mod:`.vfs` records every file operation the storage code makes while a
  workload runs against the real daemon in process (``os`` functions,
  ``shutil.rmtree`` and Python file objects are patched), and keeps a model
  of the file system: each file's content as written and as of its last
  fsync, each directory's entries as they are and as of its last fsync.
- :mod:`.states` replays the recorded operations and builds, at every
  crash point, the states a power cut may leave (unsynced data dropped,
  the last write torn at a 512-byte boundary, some files or directories
  kept and others dropped).
- :mod:`.workloads` drives an in-process nsqd (PUB, MPUB, DPUB, SUB, FIN,
  REQ, topics and channels created and deleted, rolled files, checkpoints,
  the take-over of a disk-queue data path) and records markers in the
  operation log: a publish acknowledged, a FIN sent, a channel deleted.
- :mod:`.check` starts nsqd on a materialized state and checks that
  everything acknowledged and not finished is there, and nothing damaged
  or never published.
- :mod:`.explore` puts them together (crash points, variants, a cache of
  recoveries, the minimization of a failing state); :mod:`.ioerr` is the
  I/O-error mode (SQLite's ioerr.test).

``scripts/crash-explore`` runs it standalone; ``tests/crash/test_crash.py``
is the CI test.
"""
