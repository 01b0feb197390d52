"""One client connection to nsqd over TCP (protocol V2).

Handles the magic, IDENTIFY, heartbeats (answered with NOP), and pairs
responses with the commands that expect one (IDENTIFY, SUB, PUB, MPUB, DPUB,
CLS) in order. Message frames go to a callback. Non-fatal error frames for
FIN/REQ/TOUCH (``E_FIN_FAILED`` ...) are logged and never answer a command.

A connection that reads nothing for two heartbeat intervals is taken as
dead and aborted: nsqd's own rule for its clients (Go nsqd/protocol_v2.go
sets the read deadline to twice the heartbeat interval). A peer cut off by
the network sends neither data nor FIN nor RST; without a deadline the
connection would wait forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

from nsq._internal.addresses import fmt_addr, split_host_port
from nsq._internal.neterrors import error_words
from nsq import __version__
from nsq.client.errors import ConnectError, ConnectionClosedError, ConnectTimeoutError, ErrorResponse
from nsq.protocol import commands
from nsq.protocol.compression import Codec, CompressionError, DeflateCodec, SnappyCodec
from nsq.protocol.errors import NON_FATAL_CODES, ProtocolError
from nsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    FrameReader,
)
from nsq.protocol.message import decode_message, DecodedMessage

__all__ = ["Connection", "parse_address", "read_timeout_for", "DEFAULT_USER_AGENT"]

log = logging.getLogger("nsq.client")

DEFAULT_USER_AGENT = f"nsq-python/{__version__}"
#: most stream bytes decompressed before the frames they hold are handled
#: (bytes); bounds what a compressed stream from nsqd costs at once
_DECODE_STEP = 1 << 20
_HEARTBEAT_NOP = commands.nop()
#: nsqd's default heartbeat interval (s): half its default --client-timeout
#: (60 s), used when IDENTIFY does not ask for one
_NSQD_HEARTBEAT = 30.0


def read_timeout_for(identify: dict[str, Any]) -> float:
    """Seconds without a byte from nsqd after which a connection is dead:
    two heartbeat intervals (IDENTIFY ``heartbeat_interval``, ms; nsqd's
    default 30 s when absent), 0 (never) when heartbeats are off (-1)."""
    hb = identify.get("heartbeat_interval")
    if isinstance(hb, (int, float)) and not isinstance(hb, bool) and hb != 0:
        return 0.0 if hb < 0 else 2 * hb / 1000.0
    return 2 * _NSQD_HEARTBEAT


def parse_address(address: str, default_port: int = 4150) -> tuple[str, int]:
    """``host:port`` -> (host, port); no port: ``default_port``; no host:
    127.0.0.1 (:func:`nsq._internal.addresses.split_host_port`).

    Raises:
        ValueError: a port that is not a number in 0..65535.
    """
    host, port = split_host_port(address, default_port)
    return host or "127.0.0.1", port


class _Protocol(asyncio.Protocol):
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn._transport = cast(asyncio.Transport, transport)  # a stream connection's: it writes

    def data_received(self, data: bytes) -> None:
        self.conn._data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._connection_lost(exc)


class Connection:
    """A V2 connection to one nsqd.

    Args:
        address: ``host:port`` of nsqd's TCP listener.
        identify: extra IDENTIFY fields (``heartbeat_interval``,
            ``msg_timeout`` ms, ``user_agent``, ...).
        on_message: called with each :class:`DecodedMessage` received.
        on_close: called once when the connection closes.
        connect_timeout: seconds.
        read_timeout: seconds without reading anything after which the
            connection is aborted (``close_error`` a TimeoutError); None:
            :func:`read_timeout_for` the IDENTIFY fields; 0: never.

    Attributes:
        features: nsqd's IDENTIFY answer (feature negotiation JSON).
        closed: True once the socket is gone.
    """

    def __init__(
        self,
        address: str,
        identify: dict[str, Any] | None = None,
        on_message: Callable[[Connection, DecodedMessage], None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
        connect_timeout: float = 5.0,
        tls_context: Any = None,
        auth_secret: str | None = None,
        read_timeout: float | None = None,
    ) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.identify_data: dict[str, Any] = {
            "client_id": socket.gethostname().split(".")[0],
            "hostname": socket.gethostname(),
            "feature_negotiation": True,
            "user_agent": DEFAULT_USER_AGENT,
        }
        if identify:
            self.identify_data.update(identify)
        self.on_message = on_message
        self.on_close = on_close
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout_for(self.identify_data) if read_timeout is None else read_timeout
        self._last_read = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.features: dict[str, Any] = {}
        self.closed = False
        self.close_error: Exception | None = None
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader()
        self._pending: deque[asyncio.Future[bytes]] = deque()
        self._closed_event = asyncio.Event()
        self.tls_context = tls_context
        self.auth_secret = auth_secret
        #: the auth server's answer to AUTH (identity, identity_url, permission_count)
        self.auth: dict[str, Any] | None = None
        self._protocol: _Protocol | None = None
        self._codec: Codec | None = None
        # (future, hook): when the response for ``future`` is read, ``hook``
        # runs before any later byte is parsed (a stream upgrade starts there)
        self._hook: tuple[asyncio.Future[bytes], Callable[[bytes], bool]] | None = None
        self._hold = False
        #: inside :meth:`batched`: what :meth:`send` is asked to write, joined at the end
        self._batch: list[bytes] | None = None
        self._compression_ok: asyncio.Future[bytes] | None = None

    def __repr__(self) -> str:
        return f"Connection({self.address})"

    async def connect(self) -> dict[str, Any]:
        """Open the socket, send the magic and IDENTIFY, then do the upgrades
        nsqd agreed to (TLS, then snappy or deflate; each confirmed by an
        ``OK``) and AUTH when nsqd requires it.

        Returns:
            nsqd's IDENTIFY answer (``{}`` for a plain ``OK``).

        Raises:
            ConnectError: (an OSError) cannot connect: ``cannot connect to
                127.0.0.1:4150: connection refused``.
            ConnectTimeoutError: (a ConnectError and an asyncio.TimeoutError)
                no connection or no IDENTIFY answer within ``connect_timeout``.
            ssl.SSLError: the TLS handshake failed.
            ErrorResponse: IDENTIFY or AUTH refused.
            ClientConfigError: nsqd requires AUTH and no ``auth_secret`` was
                given.
        """
        loop = self._loop = asyncio.get_running_loop()
        where = fmt_addr(self.host, self.port)
        try:
            await asyncio.wait_for(
                loop.create_connection(self._make_protocol, self.host, self.port), self.connect_timeout
            )
        except TimeoutError:
            raise ConnectTimeoutError(where, f"no connection within {self.connect_timeout:g}s") from None
        except OSError as exc:
            raise ConnectError(where, error_words(exc)) from exc
        self._last_read = loop.time()
        if self.read_timeout > 0:
            self._read_timer = loop.call_at(self._last_read + self.read_timeout, self._check_read)
        try:
            await asyncio.wait_for(self._handshake(), self.connect_timeout)
        except TimeoutError:
            self.close()
            raise ConnectTimeoutError(where, f"no answer to IDENTIFY within {self.connect_timeout:g}s") from None
        except BaseException:
            self.close()
            raise
        return self.features

    def _make_protocol(self) -> _Protocol:
        self._protocol = _Protocol(self)
        return self._protocol

    async def _handshake(self) -> None:
        assert self._transport is not None
        wanted = self.identify_data
        if wanted.get("tls_v1") and self.tls_context is None:
            import ssl

            self.tls_context = ssl.create_default_context()
        self._transport.write(MAGIC_V2)
        fut = self.command(commands.identify(wanted))
        self._hook = (fut, self._identify_answer)
        data = await fut
        if self.features.get("tls_v1"):
            loop = asyncio.get_running_loop()
            ok = loop.create_future()
            self._pending.append(ok)
            if self._compression():
                self._hook = (ok, self._start_compression)
            assert self._protocol is not None  # made with the transport
            tls_transport = await loop.start_tls(self._transport, self._protocol, self.tls_context,
                                                 server_hostname=self.host)
            if tls_transport is None:  # the connection went during the handshake
                raise ConnectionClosedError(f"connection to {self.address} closed during the TLS handshake")
            self._transport = tls_transport
            self._hold = False
            await ok
        if self._compression():
            assert self._compression_ok is not None  # set by _start_compression, from the IDENTIFY answer
            await self._compression_ok
        if data != b"OK" and self.features.get("auth_required"):
            if not self.auth_secret:
                from nsq.client.errors import ClientConfigError

                raise ClientConfigError(f"nsqd {self.address} requires AUTH: set auth_secret")
            answer = await self.command(commands.auth(self.auth_secret))
            try:
                self.auth = json.loads(answer)
            except ValueError:
                self.auth = {}

    def _compression(self) -> str | None:
        if self.features.get("snappy"):
            return "snappy"
        if self.features.get("deflate"):
            return "deflate"
        return None

    def _identify_answer(self, payload: bytes) -> bool:
        """Runs on the IDENTIFY answer; True stops parsing (TLS comes next)."""
        if payload != b"OK":
            try:
                self.features = json.loads(payload)
            except ValueError:
                self.features = {}
        if self.features.get("tls_v1"):
            self._hold = True
            return True
        if self._compression():
            self._start_compression(payload)
        return False

    def _start_compression(self, payload: bytes) -> bool:
        """From the next byte on, nsqd's stream is compressed; its OK follows."""
        kind = self._compression()
        if kind == "snappy":
            self._codec = SnappyCodec()
        else:
            self._codec = DeflateCodec(int(self.features.get("deflate_level") or 6))
        self._compression_ok = asyncio.get_running_loop().create_future()
        self._pending.append(self._compression_ok)
        rest = self._reader.take_rest()
        if rest:
            # held, not decoded: _data_received drains it step by step
            self._codec.decode(rest, 0)
        return False

    # -- sending -----------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Write bytes for commands that get no response (RDY, FIN, REQ, TOUCH, NOP).

        Raises:
            ConnectionClosedError: the connection is closed.
        """
        if self.closed or self._transport is None:
            raise ConnectionClosedError(f"connection to {self.address} is closed")
        if self._batch is not None:
            self._batch.append(data)
            return
        self._write(data)

    def _write(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None  # callers check that the connection is open
        transport.write(self._codec.encode(data) if self._codec is not None else data)

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Within the block, :meth:`send` collects its bytes and the block's
        end writes them in one piece, in order: thousands of FINs cost one
        socket write (and one compressed frame) instead of one each. For the
        loop's thread, around code that does not await; nests (the outer
        block writes). Bytes left when the connection closed meanwhile are
        dropped (nsqd times those messages out).
        """
        if self._batch is not None:
            yield
            return
        parts: list[bytes] = []
        self._batch = parts
        try:
            yield
        finally:
            self._batch = None
            if parts and not self.closed and self._transport is not None:
                self._write(b"".join(parts))

    def command(self, data: bytes) -> asyncio.Future[bytes]:
        """Write a command that nsqd answers; the future gets the response data.

        The future fails with :class:`ErrorResponse` for an error frame or
        :class:`ConnectionClosedError` if the connection drops first.
        """
        fut = asyncio.get_running_loop().create_future()
        if self.closed or self._transport is None:
            fut.set_exception(ConnectionClosedError(f"connection to {self.address} is closed"))
            return fut
        self._pending.append(fut)
        self._write(data)
        return fut

    def close(self) -> None:
        """Close the socket now."""
        if self._transport is not None and not self.closed:
            self._transport.close()

    async def wait_closed(self) -> None:
        """Wait until the socket is closed."""
        await self._closed_event.wait()

    @property
    def pending(self) -> int:
        """Commands awaiting a response."""
        return len(self._pending)

    # -- receiving ---------------------------------------------------------------

    def _check_read(self) -> None:
        """The read deadline: abort when nothing came for ``read_timeout``
        (abort, not close: a close would wait for buffered writes that a
        dead peer never takes)."""
        self._read_timer = None
        if self.closed or self._transport is None or self._loop is None:
            return
        idle = self._loop.time() - self._last_read
        if idle < self.read_timeout:
            self._read_timer = self._loop.call_at(self._last_read + self.read_timeout, self._check_read)
            return
        log.error("[%s] nothing read in %.1fs (missed heartbeats), closing", self.address, idle)
        self.close_error = TimeoutError(f"nothing read from {self.address} in {idle:.1f}s")
        self._transport.abort()

    def _data_received(self, data: bytes) -> None:
        """Bytes from the socket: decompress them (at most ``_DECODE_STEP``
        stream bytes at a time, parsing frames between steps) and handle
        every complete frame."""
        if self._loop is not None:
            self._last_read = self._loop.time()
        while True:
            codec = self._codec
            if codec is not None:
                try:
                    data = codec.decode(data, _DECODE_STEP)
                except CompressionError as exc:
                    log.error("[%s] %s", self.address, exc)
                    self.close_error = exc
                    self.close()
                    return
            if not self._receive(data):
                return
            # more held compressed input, or an upgrade that started while
            # parsing and left its first compressed bytes with the codec
            codec = self._codec
            if codec is None or not codec.pending:
                return
            data = b""

    def _receive(self, data: bytes) -> bool:
        """Handle stream bytes; False when parsing stopped (a TLS upgrade
        comes next, or the connection is closing)."""
        reader = self._reader
        reader.feed(data)
        if self._hold:
            return False
        try:
            while (frame := reader.next_frame()) is not None:
                frame_type, payload = frame
                if frame_type == FRAME_TYPE_MESSAGE:
                    if self.on_message is not None:
                        self.on_message(self, decode_message(payload))
                elif frame_type == FRAME_TYPE_RESPONSE:
                    if payload == HEARTBEAT:
                        self.send(_HEARTBEAT_NOP)
                    elif self._pending:
                        fut = self._pending.popleft()
                        hook = self._hook
                        stop = False
                        if hook is not None and hook[0] is fut:
                            self._hook = None
                            stop = hook[1](payload)
                        if not fut.done():
                            fut.set_result(payload)
                        if stop:
                            return False
                elif frame_type == FRAME_TYPE_ERROR:
                    text = payload.decode("utf-8", "replace")
                    code = text.split(" ", 1)[0]
                    if code in NON_FATAL_CODES or not self._pending:
                        log.warning("[%s] nsqd error: %s", self.address, text)
                    else:
                        fut = self._pending.popleft()
                        if not fut.done():
                            fut.set_exception(ErrorResponse(text))
                    if code not in NON_FATAL_CODES:
                        # nsqd closes the connection after a fatal error:
                        # refuse new commands now rather than lose them
                        self.close_error = ErrorResponse(text)
                        self.close()
                        self.closed = True
                        return False
        except ProtocolError as exc:
            log.error("[%s] protocol error: %s", self.address, exc)
            self.close_error = exc
            self.close()
            return False
        return not self.closed

    def _connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        if exc is not None and self.close_error is None:
            self.close_error = exc
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(ConnectionClosedError(f"connection to {self.address} closed"))
        self._closed_event.set()
        if self.on_close is not None:
            self.on_close(self)
