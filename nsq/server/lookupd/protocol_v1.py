"""One nsqd's V1 TCP connection to nsqlookupd (Go: nsqlookupd/lookup_protocol_v1.go).

:class:`LookupProtocolV1` is an :class:`asyncio.Protocol` around the sans-IO
:class:`~nsq.protocol.lookupd.V1ServerParser`: every complete command of a
read is executed and the answers go out in one write. What a hostile client
can make lookupd hold is bounded:

- input: the parser refuses lines over ``MAX_LINE`` and IDENTIFY bodies over
  ``MAX_IDENTIFY_BODY`` bytes (or negative) before they arrive;
- output: a client that pipelines commands and never reads its answers
  stops being read (``transport.pause_reading()``) while its transport's
  write buffer is above the high-water mark, and is read again once it
  drains (``pause_writing`` / ``resume_writing``), as Go's IOLoop blocks in
  its own ``SendResponse`` write;
- failures: any exception while handling a connection's bytes closes that
  connection only (and is logged), never the daemon;
- references: once the connection is lost its producer leaves every
  registration and the daemon's connection set, and the protocol drops its
  transport, parser and peer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, cast

from nsq.protocol.errors import ClientError
from nsq.protocol.lookupd import (
    CMD_IDENTIFY,
    CMD_PING,
    CMD_REGISTER,
    PeerInfo,
    V1ServerParser,
    encode_response,
)
from nsq._internal.addresses import fmt_addr
from nsq.server.lookupd.registration_db import Peer, Producer

if TYPE_CHECKING:
    from nsq.server.lookupd.lookupd import NSQLookupd

__all__ = ["LookupProtocolV1"]

log = logging.getLogger("nsq.lookupd")

_OK = encode_response(b"OK")


class LookupProtocolV1(asyncio.Protocol):
    """One nsqd's TCP connection to this lookupd.

    Attributes:
        remote: the connection's ``ip:port`` (the producer id).
        peer: the nsqd once it sent IDENTIFY, else None.
        reading_paused: True while reading is stopped because the client
            does not read its answers (write buffer above the high-water mark).
    """

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.parser: V1ServerParser | None = V1ServerParser()
        self.transport: asyncio.Transport | None = None
        self.remote = ""
        self.peer: Peer | None = None
        self.reading_paused = False
        self._closing = False

    def __repr__(self) -> str:
        return self.remote

    # -- asyncio.Protocol --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's: it writes
        addr = transport.get_extra_info("peername")
        self.remote = fmt_addr(addr[0], addr[1]) if addr else "?"
        self.lookupd._conns.add(self)
        log.info("TCP: new client(%s)", self.remote)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self.lookupd._conns.discard(self)
        log.info("PROTOCOL(V1): [%s] exiting ioloop", self.remote)
        peer, self.peer = self.peer, None
        self.transport = None
        self.parser = None
        if peer is not None:
            self.lookupd.peer_gone(peer)

    def pause_writing(self) -> None:
        """The write buffer went above the high-water mark: stop reading."""
        if self.transport is not None and not self._closing and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        """The write buffer drained below the low-water mark: read again."""
        if self.reading_paused:
            self.reading_paused = False
            if self.transport is not None and not self._closing:
                self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing or self.parser is None:
            return
        out: list[bytes] = []
        try:
            self._handle(data, out)
        except ClientError as exc:
            log.error("[%s] - %s", self.remote, exc.wire_text())
            if exc.answer:
                out.append(encode_response(exc.wire_bytes()))
            self._write(out)
            self.close()
            return
        except Exception:
            # one connection's bytes must never take the daemon down
            log.exception("[%s] - internal error handling a command, closing", self.remote)
            self._write(out)
            self.close()
            return
        self._write(out)

    # -- commands ----------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (its registrations go when it is lost)."""
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def _write(self, out: list[bytes]) -> None:
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    def _handle(self, data: bytes, out: list[bytes]) -> None:
        """Parse ``data`` and append the answer of every complete command to ``out``."""
        parser = self.parser
        assert parser is not None
        parser.feed(data)
        while (cmd := parser.next_command()) is not None:
            out.append(self._exec(cmd))

    def _exec(self, cmd: tuple) -> bytes:
        name = cmd[0]
        lookupd = self.lookupd
        if name == CMD_PING:
            if self.peer is not None:
                now = time.monotonic()
                log.debug("CLIENT(%s): pinged (last ping %.3fs)", self.peer.id, now - self.peer.last_update)
                self.peer.last_update = now
            return _OK
        if name == CMD_IDENTIFY:
            return self._identify(cmd[1])
        assert self.peer is not None  # the parser refuses REGISTER before IDENTIFY
        if name == CMD_REGISTER:
            lookupd.register(self.peer, cmd[1], cmd[2])
        else:
            lookupd.unregister(self.peer, cmd[1], cmd[2])
        return _OK

    def _identify(self, info: PeerInfo) -> bytes:
        from nsq import NSQ_VERSION

        lookupd = self.lookupd
        info.remote_address = self.remote
        self.peer = peer = Peer(self.remote, info, time.monotonic())
        log.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
                 self.remote, info.broadcast_address, info.tcp_port, info.http_port, info.version)
        if lookupd.db.add_producer(("client", "", ""), Producer(peer)):
            log.info("DB: client(%s) REGISTER category:client key: subkey:", self.remote)
        answer = {
            "tcp_port": lookupd.tcp_port,
            "http_port": lookupd.http_port,
            "version": NSQ_VERSION,
            "broadcast_address": lookupd.options.broadcast_address,
            "hostname": lookupd.hostname(),
        }
        return encode_response(json.dumps(answer, separators=(",", ":")).encode())
