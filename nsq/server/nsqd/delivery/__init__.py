"""nsqd's delivery core: topics, channels and how messages reach consumers.

``topic`` and ``channel`` (memory queues, in flight, deferred, timeouts,
RDY, counts), dead letters, the e2e latency quantiles, what a topic and a
channel may ask of the daemon and of a consumer (``host``: Protocols,
implemented above), and the storage engines behind one interface per role
(``stores``: the Protocols; ``queuestore``: memory queue + Go disk queue;
``logstore``: topic log + cursors).

Imports: :mod:`nsq.server.nsqd.storage`, :mod:`nsq.server.nsqd.options`,
:mod:`nsq.protocol`, :mod:`nsq._internal` and itself. The daemon, the
connections, stats and HTTP are seen only through ``host``'s Protocols.
"""
