"""nsqd's storage: what is written to the data path, and how.

The go-diskqueue format (``diskqueue``, ``diskqueue_meta``), the topic log
and its channel cursors (``topiclog``, ``cursor``), the deferred log, the
sync policy the files share (``syncpolicy``), atomic file replacement,
the data path (lock, disk thread, ``--sync-every=1`` barrier, probes), the
take-over of a disk-queue data path by the topic log (``walmigrate``), the
queue entry and its disk encoding (``message``) and the overflow backend
interface (``backend``).

Imports: :mod:`nsq.protocol`, :mod:`nsq._internal`,
:mod:`nsq.server.nsqd.options` and itself; nothing of delivery, the
connections, stats, HTTP or the daemon (import-linter's layers contract in
pyproject.toml holds it).
"""
