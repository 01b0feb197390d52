"""What a topic and its channels may ask of the daemon that holds them.

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
    from nsq.server.nsqd.options import NSQDOptions
    from nsq.server.nsqd.topic import Topic

__all__ = ["QueueHost"]


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
