"""nsqd's figures: ``/stats`` (``collect``: typed stats, Go's stats.go;
``text``: the text format), ``/metrics`` (``metrics``), statsd
(``statsd``) and the process's memory figures (``memstats``).

Imports: :mod:`nsq.server.nsqd.tcp` (client figures) and below; the daemon
only through :class:`~nsq.server.nsqd.delivery.host.DaemonHost`.
"""
