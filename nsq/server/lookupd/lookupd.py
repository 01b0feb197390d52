"""The nsqlookupd daemon as a library: ``NSQLookupd(options)``, ``await start()``, ``await stop()``.

nsqds connect over TCP (protocol V1, :mod:`nsq.protocol.lookupd`, one
:class:`~nsq.server.lookupd.protocol_v1.LookupProtocolV1` per connection)
and register their topics and channels; clients ask over HTTP
(:mod:`nsq.server.lookupd.http`) where a topic is produced. Lookupds share
nothing; each holds what its nsqds told it (https://nsq.io/components/nsqlookupd.html;
Go: nsqlookupd/nsqlookupd.go).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from nsq.protocol.names import is_ephemeral
from nsq._internal.addresses import fmt_addr, split_host_port
from nsq._internal.neterrors import listen_errors
from nsq.server.lookupd.options import LookupdOptions
from nsq.server.lookupd.protocol_v1 import LookupProtocolV1
from nsq.server.lookupd.registration_db import Peer, Producer, RegistrationDB

if TYPE_CHECKING:
    from nsq.server.lookupd.http import LookupdHTTPServer

__all__ = ["NSQLookupd"]

log = logging.getLogger("nsq.lookupd")


class NSQLookupd:
    """The nsqlookupd daemon.

    Args:
        options: :class:`LookupdOptions`; defaults are Go nsqlookupd v1.2's.

    Attributes:
        db: the :class:`RegistrationDB`.
        tcp_port, http_port: bound ports (after :meth:`start`; useful with port 0).
    """

    def __init__(self, options: LookupdOptions | None = None) -> None:
        self.options = options or LookupdOptions()
        self.db = RegistrationDB()
        self.tcp_host = ""
        self.tcp_port = 0
        self.http_host = ""
        self.http_port = 0
        self._tcp_server: asyncio.base_events.Server | None = None
        self._http: LookupdHTTPServer | None = None
        self._conns: set[LookupProtocolV1] = set()
        self._started = False

    async def start(self) -> None:
        """Bind the TCP and HTTP listeners.

        Raises:
            nsq._internal.neterrors.ListenError: (an OSError) an address
                that is malformed or cannot be bound (``cannot listen on
                0.0.0.0:4160 (TCP): address already in use``).
        """
        from nsq.server.lookupd.http import LookupdHTTPServer

        loop = asyncio.get_running_loop()
        with listen_errors("TCP", self.options.tcp_address):
            host, port = split_host_port(self.options.tcp_address)
            self._tcp_server = await loop.create_server(
                lambda: LookupProtocolV1(self), host or None, port, reuse_address=True, backlog=1024,
                start_serving=False
            )
        self.tcp_host, self.tcp_port = self._tcp_server.sockets[0].getsockname()[:2]
        try:
            http = self._http = LookupdHTTPServer(self)
            self.http_host, self.http_port = await http.start(self.options.http_address)
        except BaseException:
            self._tcp_server.close()
            raise
        await self._tcp_server.start_serving()
        log.info("TCP: listening on %s", fmt_addr(self.tcp_host, self.tcp_port))
        log.info("HTTP: listening on %s", fmt_addr(self.http_host, self.http_port))
        self._started = True

    async def stop(self) -> None:
        """Close the listeners and every nsqd connection."""
        if self._tcp_server is not None:
            self._tcp_server.close()
        for conn in list(self._conns):
            conn.close()
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._tcp_server is not None:
            try:
                await asyncio.wait_for(self._tcp_server.wait_closed(), 2)
            except (TimeoutError, OSError):
                log.debug("TCP listener did not close in 2 s")
            self._tcp_server = None
        log.info("LOOKUPD: bye")

    @property
    def tcp_address(self) -> str:
        """``host:port`` the TCP listener is bound to."""
        return fmt_addr(self.tcp_host, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` the HTTP listener is bound to."""
        return fmt_addr(self.http_host, self.http_port)

    @staticmethod
    def hostname() -> str:
        """The OS hostname (IDENTIFY's answer)."""
        return socket.gethostname()

    # -- registrations (V1 commands) ---------------------------------------------

    def register(self, peer: Peer, topic: str, channel: str) -> None:
        """REGISTER: a channel registers its topic too (Go's order: channel first)."""
        db = self.db
        if channel:
            if db.add_producer(("channel", topic, channel), Producer(peer)):
                log.info("DB: client(%s) REGISTER category:channel key:%s subkey:%s", peer.id, topic, channel)
        if db.add_producer(("topic", topic, ""), Producer(peer)):
            log.info("DB: client(%s) REGISTER category:topic key:%s subkey:", peer.id, topic)

    def unregister(self, peer: Peer, topic: str, channel: str) -> None:
        """UNREGISTER: a channel, or a topic with all its channels for this nsqd."""
        db = self.db
        if channel:
            reg = ("channel", topic, channel)
            removed, left = db.remove_producer(reg, peer.id)
            if removed:
                log.info("DB: client(%s) UNREGISTER category:channel key:%s subkey:%s", peer.id, topic, channel)
            if left == 0 and is_ephemeral(channel):
                db.remove_registration(reg)
            return
        for reg in db.find_registrations("channel", topic, "*"):
            removed, left = db.remove_producer(reg, peer.id)
            if removed:
                log.warning("client(%s) unexpected UNREGISTER category:channel key:%s subkey:%s",
                            peer.id, topic, reg[2])
            if left == 0 and is_ephemeral(reg[2]):
                db.remove_registration(reg)
        reg = ("topic", topic, "")
        removed, left = db.remove_producer(reg, peer.id)
        if removed:
            log.info("DB: client(%s) UNREGISTER category:topic key:%s subkey:", peer.id, topic)
        if left == 0 and is_ephemeral(topic):
            db.remove_registration(reg)

    def peer_gone(self, peer: Peer) -> None:
        """A connection closed: remove its nsqd from every registration.

        Ephemeral topics and channels left without producers go too.
        """
        db = self.db
        for reg in db.lookup_registrations(peer.id):
            removed, left = db.remove_producer(reg, peer.id)
            if removed:
                log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", peer.id, *reg)
            if left == 0 and is_ephemeral(reg[2] if reg[0] == "channel" else reg[1]):
                db.remove_registration(reg)
