"""nsqd's HTTP API: ``api`` (Go's http.go: publish, admin, /stats,
/metrics, /ping ...), ``replay`` (the topic log's retention, replay and
reads by offset) and ``auth`` (``--http-auth-required``).

Imports: :mod:`nsq.server.nsqd.stats` and below; the daemon only through
:class:`~nsq.server.nsqd.delivery.host.DaemonHost`.
"""
