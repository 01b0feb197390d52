"""What a topic and its channels may ask of the daemon that holds them,
and what a channel needs of a subscribed consumer connection.

:class:`~nsq.server.nsqd.topic.Topic` and
:class:`~nsq.server.nsqd.channel.Channel` see the daemon only through
:class:`QueueHost` (a ``typing.Protocol``; :class:`~nsq.server.nsqd.nsqd.NSQD`
implements it), so what they depend on is listed in one place and a test
can hold them in any object that has these members. Go's topic.go and
channel.go reach into ``*NSQD`` the same way (``t.nsqd.Notify``,
``c.nsqd.SetHealth`` ...), through its whole type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nsq.server.nsqd.backend import BackendQueue
    from nsq.server.nsqd.channel import Channel
    from nsq.server.nsqd.deferredlog import DeferredLog
    from nsq.server.nsqd.identify import Negotiated
    from nsq.server.nsqd.options import NSQDOptions
    from nsq.server.nsqd.stats import ClientStats
    from nsq.server.nsqd.topic import Topic

__all__ = ["QueueHost", "Subscriber"]


class QueueHost(Protocol):
    """The daemon as topics and channels see it.

    Attributes:
        options: the daemon's options (``mem_queue_size``, ``node_id``,
            ``max_channel_consumers``, ``max_msg_timeout``, e2e settings).
    """

    options: NSQDOptions
    #: True while draining: no new deliveries, publishes refused
    draining: bool

    def make_backend(self, name: str, ephemeral: bool) -> BackendQueue:
        """The overflow backend of ``topic`` or ``topic:channel``."""

    def make_deferred_log(self, name: str, ephemeral: bool) -> DeferredLog | None:
        """The deferred log of a durable channel, or None."""

    def forget_backend(self, backend: Any) -> None:
        """Stop syncing a closed or deleted backend."""

    def write_at_exit(self, backend: BackendQueue, records: list[bytes], subject: str) -> None:
        """Write messages held in memory at exit, never raising."""

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


class Subscriber(Protocol):
    """A consumer connection as a channel sees it (Go: the ``Consumer``
    interface in nsqd/channel.go); :class:`~nsq.server.nsqd.client_v2.ClientV2`
    implements it.

    Attributes:
        id: the connection's client id (unique in the daemon).
        ready_count: its RDY.
        in_flight_count: messages sent to it and not yet answered.
        closing: True once it is being closed (no more deliveries).
        write_paused: True while its transport's buffer is above the
            high-water mark (no deliveries until it drains).
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
    negotiated: Negotiated

    def send_messages(self, msgs: list[Any]) -> None:
        """Write message frames for ``msgs`` (in-flight :data:`Message` lists)."""

    def timed_out_message(self) -> None:
        """One of its in-flight messages timed out (its in-flight count drops)."""

    def stats(self, topic: str = "") -> ClientStats:
        """Its ``/stats`` figures (Go ``Consumer.Stats``); with ``topic``,
        publish counts for that topic only."""

    def close(self) -> None:
        """Close the connection (the channel was deleted or emptied of clients)."""
