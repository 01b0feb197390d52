"""nsqd's TCP (V2 protocol) connections.

``client_v2`` (one consumer or producer connection, its state and
counts), ``commands`` (one function per V2 command, as Go's
protocol_v2.go), ``identify`` (the IDENTIFY rules and negotiated
settings), ``features`` (TLS and compression upgrades, AUTH), ``auth``
(the auth server client) and ``output`` (write scheduling).

Imports: :mod:`nsq.server.nsqd.delivery` and below; the daemon only
through :class:`~nsq.server.nsqd.delivery.host.DaemonHost`.
"""
