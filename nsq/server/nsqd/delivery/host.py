"""What a topic and its channels may ask of the daemon that holds them,
what a channel needs of a subscribed consumer connection, and what the
connections, stats and the HTTP API may ask of the daemon.

:class:`~nsq.server.nsqd.delivery.topic.Topic` and
:class:`~nsq.server.nsqd.delivery.channel.Channel` see the daemon only through
:class:`QueueHost` (a ``typing.Protocol``; :class:`~nsq.server.nsqd.nsqd.NSQD`
implements it), so what they depend on is listed in one place and a test
can hold them in any object that has these members. Go's topic.go and
channel.go reach into ``*NSQD`` the same way (``t.nsqd.Notify``,
``c.nsqd.SetHealth`` ...), through its whole type.

:class:`DaemonHost` is the daemon as the rooms above delivery (``tcp``,
``stats``, ``http``) see it: they import it from here, never the daemon
itself, so imports go one way (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    import ssl

    import aiohttp

    from nsq.protocol.v2 import Limits
    from nsq.server.nsqd.delivery.channel import Channel
    from nsq.server.nsqd.delivery.deadletter import ChannelSettings
    from nsq.server.nsqd.delivery.topic import Topic
    from nsq.server.nsqd.options import NSQDOptions
    from nsq.server.nsqd.storage.backend import BackendQueue
    from nsq.server.nsqd.storage.datapath import DataPath
    from nsq.server.nsqd.storage.deferredlog import DeferredLog

__all__ = ["QueueHost", "Subscriber", "Settings", "DaemonHost"]


class QueueHost(Protocol):
    """The daemon as topics and channels see it.

    Attributes:
        options: the daemon's options (``mem_queue_size``, ``node_id``,
            ``max_channel_consumers``, ``max_msg_timeout``, e2e settings).
    """

    options: NSQDOptions
    #: True while draining: no new deliveries, publishes refused
    draining: bool
    #: the leader's HTTP address while this nsqd is a replica ("": a leader)
    replica_of: str

    def make_backend(self, name: str, ephemeral: bool) -> BackendQueue:
        """The overflow backend of ``topic`` or ``topic:channel``."""

    def make_deferred_log(self, name: str, ephemeral: bool) -> DeferredLog | None:
        """The deferred log of a durable channel, or None."""

    def forget_backend(self, backend: Any) -> None:
        """Stop syncing a closed or deleted backend."""

    def write_at_exit(self, backend: BackendQueue, records: list[bytes], subject: str) -> int:
        """Write messages held in memory at exit, never raising; how many
        (the first ones) were written."""

    def set_health(self, error: str | None) -> None:
        """Report a disk error (``/ping`` NOK) or None for OK."""

    def persist_metadata(self) -> None:
        """Write ``nsqd.dat`` now (pause / unpause)."""

    def notify_channel_created(self, topic: Topic, channel: Channel) -> None:
        """A channel appeared (persist, register with lookupd)."""

    def notify_channel_deleted(self, topic: Topic, channel: Channel) -> None:
        """A channel went away (persist, unregister)."""

    def delete_topic(self, name: str) -> bool:
        """Delete a topic (an ephemeral topic's last channel went)."""

    def get_topic(self, name: str) -> Topic:
        """The topic ``name``, created if new (a channel's dead-letter topic)."""

    def channel_settings(self, topic: str, channel: str) -> dict[str, Any]:
        """A channel's own settings (``max_attempts``), {} for the defaults."""

    def arm_timers(self, channel: Channel) -> None:
        """Have the timeout scan visit ``channel``."""

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the next loop turn."""

    def call_later(self, delay: float, callback: Callable[[], Any]) -> None:
        """Run ``callback`` after ``delay`` s."""


class Settings(Protocol):
    """A connection's negotiated settings as a channel reads them
    (:class:`~nsq.server.nsqd.tcp.identify.Negotiated` implements it).

    Attributes:
        msg_timeout: s before a message sent to it times out (and a
            TOUCH's new timeout).
        sample_rate: 0: every message; else the percentage delivered.
    """

    @property
    def msg_timeout(self) -> float: ...
    @property
    def sample_rate(self) -> int: ...


#: message bytes one loop turn hands to one consumer (bytes): a channel
#: sizes each hand-out by it and a connection stops at it (a 2,500 RDY of
#: 512 KiB bodies would otherwise be 1.3 GB written at once; Go's
#: ``messagePump`` in nsqd/protocol_v2.go blocks on the socket instead)
TURN_BYTES = 1 << 20


class Subscriber(Protocol):
    """A consumer connection as a channel sees it (Go: the ``Consumer``
    interface in nsqd/channel.go); :class:`~nsq.server.nsqd.tcp.client_v2.ClientV2`
    implements it.

    Attributes:
        id: the connection's client id (unique in the daemon).
        ready_count: its RDY.
        in_flight_count: messages sent to it and not yet answered.
        closing: True once it is being closed (no more deliveries).
        write_paused: True while its transport's buffer is above the
            high-water mark (no deliveries until it drains).
        out_full: True once this loop turn's output holds a
            :meth:`send_messages` budget (no deliveries until it is written).
        negotiated: its IDENTIFY settings; a channel reads ``msg_timeout``
            (s before a message sent to it times out, and a TOUCH's new
            timeout) and ``sample_rate`` (0: every message, else the
            percentage delivered).
    """

    id: int
    ready_count: int
    in_flight_count: int
    closing: bool
    write_paused: bool
    out_full: bool
    @property
    def negotiated(self) -> Settings: ...

    def send_messages(self, msgs: list[Any]) -> int:
        """Write message frames for ``msgs`` (in-flight :data:`Message`
        lists) while this turn's output holds less than :data:`TURN_BYTES`
        (one message may pass it); returns how many were written, 0 when it
        was full already (the channel takes the rest back). Sets
        ``out_full`` once the budget is reached."""

    def timed_out_message(self) -> None:
        """One of its in-flight messages timed out (its in-flight count drops)."""

    def close(self) -> None:
        """Close the connection (the channel was deleted or emptied of clients)."""


class DaemonHost(QueueHost, Protocol):
    """The daemon as its connections, stats and HTTP API see it
    (:class:`~nsq.server.nsqd.nsqd.NSQD` implements it).

    Attributes:
        topics: by name.
        clients: the V2 connections by client id
            (:class:`~nsq.server.nsqd.tcp.client_v2.ClientV2`).
        disk: the data path.
        limits: the V2 parser's size limits.
        output: the connections' write scheduling
            (:class:`~nsq.server.nsqd.tcp.output.Output`).
        spinner: ``--spin-before-sleep``'s poller, or None.
        pub_spinner: ``--spin-after-lone-pub``'s poller, or None.
        settings: the channels' own settings (``max_attempts``).
        health: ``OK`` or the last disk error.
        exiting: True once stopping.
        start_time: Unix s.
        tls_context: the server's TLS context, or None.
        tls_required: ``"false"``, ``"true"`` or ``"tcp-https"`` (Go's wording).
        tcp_port, http_port, https_port: bound ports (0: none).
    """

    topics: dict[str, Topic]
    clients: dict[int, Any]
    disk: DataPath
    limits: Limits
    output: Any
    spinner: Any
    pub_spinner: Any
    settings: ChannelSettings
    health: str
    exiting: bool
    start_time: int
    tls_context: ssl.SSLContext | None
    tls_required: str
    tcp_port: int
    http_port: int
    https_port: int

    def get_existing_topic(self, name: str) -> Topic | None:
        """The topic ``name`` if it exists."""

    def add_client(self, client: Any) -> None:
        """A V2 connection was made."""

    def remove_client(self, client: Any) -> None:
        """A V2 connection went away."""

    def durability_barrier(self) -> asyncio.Future[Any] | None:
        """With ``--sync-every=1``: what to await before answering a publish."""

    def auth_session(self) -> aiohttp.ClientSession:
        """The HTTP session for auth server queries."""

    def request_drain(self) -> None:
        """Drain, then stop (``POST /drain``)."""

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """Replace ``--lookupd-tcp-address`` (``PUT /config/nsqlookupd_tcp_addresses``)."""

    def hostname(self) -> str:
        """The OS hostname."""

    def replication_status(self) -> dict[str, Any] | None:
        """Role, epoch, leader or replicas and lag (None without a topic log)."""
