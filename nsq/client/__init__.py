"""asyncio NSQ client: ``Producer`` and ``Consumer``.

Example::

    from nsq.client import Consumer, Producer

    async with Producer("127.0.0.1:4150") as p:
        await p.publish("events", b"hello")

    def handle(msg):
        print(msg.body)          # return True/None: FIN; False: REQ

    c = Consumer("events", "archive", handle, nsqd_tcp_addresses=["127.0.0.1:4150"], max_in_flight=100)
    await c.start()
"""

from nsq.client.connection import Connection
from nsq.client.consumer import Consumer
from nsq.client.errors import ClientConfigError, ConnectionClosedError, ErrorResponse
from nsq.client.message import Message
from nsq.client.producer import Producer

__all__ = [
    "Connection",
    "Consumer",
    "Producer",
    "Message",
    "ErrorResponse",
    "ConnectionClosedError",
    "ClientConfigError",
]
