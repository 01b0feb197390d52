"""nsqd's side of discovery: one connection per nsqlookupd (Go: nsqd/lookup.go,
nsqd/lookup_peer.go; https://nsq.io/components/nsqlookupd.html).

Each :class:`LookupPeer` connects, sends the magic and IDENTIFY, registers
every topic and channel this nsqd has, then forwards REGISTER/UNREGISTER as
topics and channels come and go and PINGs every 15 s. After a failure it
reconnects (1 s, doubling to 15 s) and registers everything again, so
commands lost while disconnected do not matter. ``--lookupd-tcp-address``
and ``PUT /config/nsqlookupd_tcp_addresses`` set the peers.

A new topic first asks the lookupds' HTTP ``/channels`` for the channels
the cluster has and creates them (:meth:`Lookupds.precreate_channels`, as
Go's nsqd/nsqd.go ``GetTopic``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import TYPE_CHECKING

from nsq import NSQ_VERSION
from nsq.protocol.errors import ClientError
from nsq.protocol.names import is_valid_channel_name
from nsq.protocol.lookupd import (
    MAGIC_V1,
    V1ClientParser,
    encode_identify,
    encode_ping,
    encode_register,
    encode_unregister,
)
from nsq._internal.addresses import fmt_addr, split_host_port

if TYPE_CHECKING:
    from nsq.client.lookupd import LookupdHTTPClient
    from nsq.server.nsqd.nsqd import NSQD
    from nsq.server.nsqd.delivery.topic import Topic

__all__ = ["LookupPeer", "Lookupds"]

log = logging.getLogger("nsq.nsqd")

#: seconds between PINGs (Go nsqd's fixed 15 s)
PING_INTERVAL = 15.0
#: seconds to wait for a lookupd's answer or a connection
IO_TIMEOUT = 5.0
#: reconnect delays (s): first, and the most
RECONNECT_MIN = 1.0
RECONNECT_MAX = 15.0


class LookupError_(Exception):
    """The lookupd answered an error or closed."""


class LookupPeer:
    """One nsqlookupd this nsqd registers with.

    Attributes:
        address: ``host:port`` of the lookupd's TCP listener.
        info: the lookupd's IDENTIFY answer (``broadcast_address``,
            ``http_port``, ``tcp_port``, ``version``, ``hostname``), {} until
            connected.
        connected: True between a successful IDENTIFY and a failure.
    """

    def __init__(self, nsqd: NSQD, address: str) -> None:
        self.nsqd = nsqd
        self.address = address
        self.info: dict = {}
        self.connected = False
        self._pending: deque[bytes] = deque()
        self._wakeup = asyncio.Event()
        self._closed = False
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self._identified = False

    def __repr__(self) -> str:
        return self.address

    @property
    def http_address(self) -> str | None:
        """``broadcast_address:http_port`` from the lookupd's IDENTIFY answer, if known."""
        host = self.info.get("broadcast_address")
        port = self.info.get("http_port")
        if not host or not isinstance(port, int):
            return None
        return fmt_addr(host, port)

    def start(self) -> None:
        """Start connecting in the background."""
        log.info("LOOKUP(%s): adding peer", self.address)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, command: bytes) -> None:
        """Queue a REGISTER/UNREGISTER (dropped while disconnected: the
        reconnect registers everything anew)."""
        if self.connected:
            self._pending.append(command)
            self._wakeup.set()

    async def close(self) -> None:
        """Disconnect and stop (the lookupd then forgets this nsqd)."""
        self._closed = True
        self._wakeup.set()
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    # -- the connection loop -------------------------------------------------------

    async def _run(self) -> None:
        delay = RECONNECT_MIN
        while not self._closed:
            self._identified = False
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ClientError, LookupError_, ValueError) as exc:
                if not self._closed:
                    log.error("LOOKUPD(%s): %s", self.address, exc or type(exc).__name__)
            finally:
                self.connected = False
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
            if self._closed:
                return
            if self._identified:
                delay = RECONNECT_MIN  # it worked for a while: start the backoff over
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)

    async def _session(self) -> None:
        host, port = split_host_port(self.address)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), IO_TIMEOUT)
        self._writer = writer
        parser = V1ClientParser(self.nsqd.options.max_body_size)
        nsqd = self.nsqd
        opts = nsqd.options
        identify = {
            "version": NSQ_VERSION,
            "tcp_port": opts.broadcast_tcp_port or nsqd.tcp_port,
            "http_port": opts.broadcast_http_port or nsqd.http_port,
            "hostname": nsqd.hostname(),
            "broadcast_address": opts.broadcast_address,
        }
        writer.write(MAGIC_V1)
        answer = await self._command(reader, writer, parser, encode_identify(identify))
        try:
            info = json.loads(answer)
        except ValueError:
            raise LookupError_(f"parsing IDENTIFY response - {answer[:200]!r}") from None
        if not isinstance(info, dict):
            raise LookupError_(f"parsing IDENTIFY response - {answer[:200]!r}")
        self.info = info
        # Go's %+v of its peerInfo struct, not a Python dict
        log.info("LOOKUPD(%s): peer info {TCPPort:%s HTTPPort:%s Version:%s BroadcastAddress:%s}", self.address,
                 info.get("tcp_port", 0), info.get("http_port", 0), info.get("version", ""),
                 info.get("broadcast_address", ""))
        if not info.get("broadcast_address"):
            log.error("LOOKUPD(%s): no broadcast address", self.address)
        # everything this nsqd has, now; later changes arrive through send()
        self._pending.clear()
        self.connected = True
        self._identified = True
        commands = nsqd.lookupds.registrations()
        for cmd in commands:
            log.info("LOOKUPD(%s): %s", self.address, cmd.decode().strip())
            await self._command(reader, writer, parser, cmd)
        loop = asyncio.get_running_loop()
        next_ping = loop.time() + PING_INTERVAL
        while not self._closed:
            if not self._pending:
                await self._idle(reader, max(0.0, next_ping - loop.time()))
            if self._closed:
                return
            if self._pending:
                cmd = self._pending.popleft()
                log.info("LOOKUPD(%s): %s", self.address, cmd.decode().strip())
                await self._command(reader, writer, parser, cmd)
            elif loop.time() >= next_ping:
                log.debug("LOOKUPD(%s): sending heartbeat", self.address)
                await self._command(reader, writer, parser, encode_ping())
                next_ping = loop.time() + PING_INTERVAL

    async def _idle(self, reader: asyncio.StreamReader, timeout: float) -> None:
        """Wait for a queued command or the next PING, watching the socket:
        a lookupd that closes (restarts) is noticed at once, not at the next
        PING as in Go, so re-registration follows within a second."""
        self._wakeup.clear()
        waker = asyncio.ensure_future(self._wakeup.wait())
        watcher = asyncio.ensure_future(reader.read(1))
        try:
            done, _ = await asyncio.wait({waker, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waker, watcher):
                if not task.done():
                    task.cancel()
            await asyncio.gather(waker, watcher, return_exceptions=True)
        if watcher in done and not watcher.cancelled():
            data = watcher.result()
            if not data:
                raise LookupError_("connection closed by lookupd")
            raise LookupError_(f"unexpected data from lookupd {data!r}")

    @staticmethod
    async def _command(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       parser: V1ClientParser, command: bytes) -> bytes:
        writer.write(command)
        await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
        while True:
            answer = parser.next_response()
            if answer is not None:
                break
            data = await asyncio.wait_for(reader.read(65536), IO_TIMEOUT)
            if not data:
                raise LookupError_("connection closed by lookupd")
            parser.feed(data)
        if answer.startswith(b"E_"):
            raise LookupError_(f"{command.split(b' ', 1)[0].strip().decode()} - {answer.decode(errors='replace')}")
        return answer


class Lookupds:
    """The set of :class:`LookupPeer` of one nsqd, and the HTTP client that
    asks them for a new topic's channels."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.peers: dict[str, LookupPeer] = {}
        #: for :meth:`precreate_channels`, made at its first query
        self._http: LookupdHTTPClient | None = None

    def registrations(self) -> list[bytes]:
        """REGISTER commands for everything this nsqd has (sent at each lookupd
        connect): a topic with no channel alone, else each of its channels."""
        out = []
        for topic in self.nsqd.topics.values():
            if not topic.channels:
                out.append(encode_register(topic.name))
            for channel in topic.channels.values():
                out.append(encode_register(topic.name, channel.name))
        return out

    def set_addresses(self, addresses: list[str]) -> None:
        """Connect to new addresses, drop peers no longer listed (Go's
        optsNotificationChan handling)."""
        wanted = list(dict.fromkeys(addresses))
        for addr in list(self.peers):
            if addr not in wanted:
                log.info("LOOKUP(%s): removing peer", addr)
                peer = self.peers.pop(addr)
                asyncio.get_running_loop().create_task(peer.close())
        for addr in wanted:
            if addr not in self.peers:
                peer = LookupPeer(self.nsqd, addr)
                self.peers[addr] = peer
                peer.start()

    def register(self, topic: str, channel: str = "") -> None:
        """Tell every lookupd about a new topic or channel."""
        cmd = encode_register(topic, channel)
        for peer in self.peers.values():
            peer.send(cmd)

    def unregister(self, topic: str, channel: str = "") -> None:
        """Tell every lookupd a topic or channel is gone."""
        cmd = encode_unregister(topic, channel)
        for peer in self.peers.values():
            peer.send(cmd)

    def http_addresses(self) -> list[str]:
        """The HTTP addresses of the connected lookupds (Go's lookupdHTTPAddrs)."""
        return [a for a in (p.http_address for p in self.peers.values()) if a]

    def precreate_channels(self, topic: Topic) -> None:
        """Go's GetTopic with lookupd: ask the lookupds for the topic's
        channels and create them before messages flow, so every channel
        of the cluster gets the first messages. Meanwhile the topic holds
        what is published (``topic.starting``)."""
        addrs = self.http_addresses()
        if not addrs:
            if self.nsqd.options.nsqlookupd_tcp_addresses:
                log.error("no available nsqlookupd to query for channels to pre-create for topic %s", topic.name)
            return
        topic.starting = True
        self.nsqd.run_in_background(self._query_channels(topic, addrs))

    async def _query_channels(self, topic: Topic, addrs: list[str]) -> None:
        """Create the channels ``addrs`` (lookupd HTTP ``host:port``) list for
        ``topic`` (unless it was deleted meanwhile), then release what it held.
        Query errors are logged, never raised."""
        try:
            client = self._http
            if client is None:
                from nsq.client.lookupd import LookupdHTTPClient

                opts = self.nsqd.options
                client = self._http = LookupdHTTPClient(opts.http_client_connect_timeout,
                                                        opts.http_client_request_timeout,
                                                        user_agent=f"nsqd/{NSQ_VERSION}")
            names, errors = await client.channels_all(addrs, topic.name)
            for err in errors:
                log.warning("failed to query nsqlookupd for channels to pre-create for topic %s - %s",
                            topic.name, err)
            if not topic.deleted:
                for name in names:
                    if not name.endswith("#ephemeral") and is_valid_channel_name(name):
                        topic.get_channel(name)
        finally:
            topic.starting = False
            topic.flush_held()

    async def close_http(self) -> None:
        """Close the HTTP client of :meth:`precreate_channels` (at exit, after
        the daemon's background queries were cancelled)."""
        if self._http is not None:
            await self._http.close()

    async def close(self) -> None:
        """Disconnect from every lookupd."""
        peers = list(self.peers.values())
        self.peers.clear()
        await asyncio.gather(*(p.close() for p in peers))
