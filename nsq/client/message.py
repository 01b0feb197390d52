"""The message a Consumer hands to its handler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsq.protocol import commands

if TYPE_CHECKING:
    from nsq.client.connection import Connection
    from nsq.client.consumer import Consumer

__all__ = ["Message"]


class Message:
    """A received message, answerable once (FIN or REQ) and touchable.

    Attributes:
        id: 16 ASCII hex bytes.
        body: payload bytes.
        timestamp: ns since the epoch when nsqd accepted it.
        attempts: delivery attempts including this one.
        topic: the topic it came from.
        nsqd_address: the nsqd that delivered it.
    """

    __slots__ = ("id", "body", "timestamp", "attempts", "topic", "nsqd_address", "_conn", "_consumer", "responded",
                 "auto_response")

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, attempts: int, topic: str,
                 conn: Connection, consumer: Consumer) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.topic = topic
        self.nsqd_address = conn.address
        self._conn = conn
        self._consumer = consumer
        self.responded = False
        #: False once :meth:`disable_auto_response` was called
        self.auto_response = True

    def disable_auto_response(self) -> None:
        """Keep the handler's return value from answering this message: the
        caller will :meth:`finish` or :meth:`requeue` it later (go-nsq's
        ``DisableAutoResponse``). Until then it counts as in flight, and
        :meth:`Consumer.close` waits for it."""
        self.auto_response = False

    def finish(self) -> None:
        """FIN: processed successfully (sent on the connection it came from)."""
        if not self.responded:
            self.responded = True
            self._consumer._finished(self, self._conn, commands.fin(self.id))

    def requeue(self, delay_ms: int | None = None, backoff: bool = True) -> None:
        """REQ: retry later.

        Args:
            delay_ms: None uses the consumer's delay, growing with attempts.
            backoff: count this as a failure for the consumer's backoff
                (go-nsq's Requeue vs RequeueWithoutBackoff).
        """
        if not self.responded:
            self.responded = True
            if delay_ms is None:
                delay_ms = self._consumer.requeue_delay_ms(self.attempts)
            self._consumer._finished(self, self._conn, commands.req(self.id, delay_ms), failed=True,
                                     backoff=backoff)

    def touch(self) -> None:
        """TOUCH: reset the in-flight timeout."""
        if not self.responded and not self._conn.closed:
            self._conn.send(commands.touch(self.id))
