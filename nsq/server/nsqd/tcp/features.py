"""What a V2 connection negotiated beyond its settings: the TLS and
compression upgrades an IDENTIFY asks for, and AUTH against the auth servers.

:class:`Features` is owned by :class:`~nsq.server.nsqd.tcp.client_v2.ClientV2`
(``client.features``); its methods take the connection as an argument, so
the two objects hold no reference cycle (a closed connection is freed by
reference counting). The settings an IDENTIFY settles are
:func:`nsq.server.nsqd.tcp.identify.negotiate`'s, kept by the connection as
``client.negotiated``. Go: nsqd/protocol_v2.go ``IDENTIFY``, ``AUTH``,
``CheckAuth``; nsqd/client_v2.go ``UpgradeTLS``, ``UpgradeDeflate``,
``UpgradeSnappy``, ``QueryAuthd``.

A handler that must wait (a TLS handshake, an auth server) raises
:class:`Suspend`; the connection stops reading and holds its output until
the future is done.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsq.protocol.compression import Codec, DeflateCodec, SnappyCodec
from nsq.protocol.errors import (
    E_AUTH_DISABLED,
    E_AUTH_FAILED,
    E_AUTH_FIRST,
    E_INVALID,
    E_UNAUTHORIZED,
    ClientError,
)
from nsq.protocol.frames import FRAME_TYPE_RESPONSE, OK, encode_frame
from nsq.server.tls import peer_common_name

if TYPE_CHECKING:
    from nsq.server.nsqd.tcp.auth import AuthState
    from nsq.server.nsqd.tcp.client_v2 import ClientV2
    from nsq.server.nsqd.tcp.identify import Identified

__all__ = ["Features", "Suspend"]

log = logging.getLogger("nsq.nsqd")

_OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, OK)


class Suspend(Exception):
    """Raised by a command handler that must wait for ``future`` (a TLS
    handshake, an auth server). ``retry``: run the same command again once
    it is done; ``on_done``: called with the future first (a
    :class:`~nsq.protocol.errors.ClientError` it raises is answered)."""

    def __init__(self, future: asyncio.Future[Any], on_done: Callable[[asyncio.Future[Any]], None],
                 retry: bool = False) -> None:
        self.future = future
        self.on_done = on_done
        self.retry = retry


class Features:
    """The upgrades and the authorization of one V2 connection (Go: the
    ``tls``, ``snappy``, ``deflate`` flags and ``AuthState`` of ``clientV2``).

    Attributes:
        tls, snappy, deflate: upgrades done (``/stats`` shows them).
        ssl_object: the TLS connection's ``ssl.SSLObject`` (cipher, version,
            peer certificate), None before the upgrade.
        tls_common_name: the client certificate's subject CN ("" without one).
        auth_secret: the secret of the last AUTH ("" before).
        auth_state: the auth server's cached answer, None before AUTH.
    """

    __slots__ = ("tls", "snappy", "deflate", "ssl_object", "tls_common_name", "auth_secret", "auth_state",
                 "_refresh_failed")

    def __init__(self) -> None:
        self.tls = False
        self.snappy = False
        self.deflate = False
        self.ssl_object: ssl.SSLObject | None = None
        self.tls_common_name = ""
        self.auth_secret = ""
        self.auth_state: AuthState | None = None
        #: the re-query of a lapsed answer failed: the next command is refused
        self._refresh_failed = False

    # -- upgrades ------------------------------------------------------------------

    def upgrade(self, conn: ClientV2, got: Identified) -> None:
        """After the IDENTIFY answer (already in ``conn.out``): TLS, then
        compression, each confirmed by an ``OK`` on the upgraded stream.

        Raises:
            Suspend: the TLS handshake runs; compression follows it.
        """
        if not (got.tls or got.deflate or got.snappy):
            return
        # the answer goes out as it is, before the stream changes
        conn.write_now()
        codec: Codec | None = None
        if got.snappy:
            # Go: chunks of output_buffer_size; unbuffered (-1): whole writes
            size = got.settings.output_buffer_size
            codec = SnappyCodec(size if size >= 64 else 65536)
        elif got.deflate:
            codec = DeflateCodec(got.deflate_level)
        if got.tls:
            transport = conn.transport
            tls_context = conn.nsqd.tls_context
            assert transport is not None and tls_context is not None  # negotiate offers TLS only with a context
            log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", conn.remote_address)
            loop = asyncio.get_running_loop()
            task = loop.create_task(loop.start_tls(transport, conn, tls_context, server_side=True,
                                                   ssl_handshake_timeout=10.0))
            raise Suspend(task, lambda fut: self._tls_done(conn, fut, codec))
        self._compress(conn, codec)

    def _compress(self, conn: ClientV2, codec: Codec | None) -> None:
        if codec is None:
            return
        log.info("PROTOCOL(V2): [%s] upgrading connection to %s", conn.remote_address, codec.name)
        conn.codec = codec
        if codec.name == "snappy":
            self.snappy = True
        else:
            self.deflate = True
        conn.out += _OK_FRAME

    def _tls_done(self, conn: ClientV2, fut: asyncio.Future[Any], codec: Codec | None) -> None:
        exc = None if fut.cancelled() else fut.exception()
        transport = None if fut.cancelled() or exc is not None else fut.result()
        if transport is None:
            log.error("PROTOCOL(V2): [%s] TLS handshake failed: %s", conn.remote_address, exc)
            old = conn.transport
            conn.out = bytearray()
            if old is not None:
                old.abort()
            conn.connection_lost(exc if isinstance(exc, Exception) else None)
            return
        conn.transport = transport
        self.tls = True
        self.ssl_object = transport.get_extra_info("ssl_object")
        self.tls_common_name = peer_common_name(self.ssl_object)
        conn.out += _OK_FRAME
        conn.write_now()
        self._compress(conn, codec)

    # -- AUTH ----------------------------------------------------------------------

    def auth(self, conn: ClientV2, secret: bytes) -> None:
        """``AUTH``: ask the auth servers about ``secret``.

        Raises:
            ClientError: ``E_INVALID`` (already authorized),
                ``E_AUTH_DISABLED`` (no ``--auth-http-address``).
            Suspend: always otherwise; the answer is written once the auth
                server replied (``E_AUTH_FAILED``, ``E_UNAUTHORIZED`` or the
                identity JSON).
        """
        if self.auth_state is not None and self.auth_state.authorizations:
            raise ClientError(E_INVALID, "AUTH already set")
        if not conn.nsqd.options.auth_http_addresses:
            raise ClientError(E_AUTH_DISABLED, "AUTH disabled")
        self.auth_secret = secret.decode("utf-8", "replace")
        task = asyncio.get_running_loop().create_task(self._query_auth(conn))
        raise Suspend(task, lambda fut: self._auth_done(conn, fut))

    async def _query_auth(self, conn: ClientV2) -> AuthState:
        from nsq.server.nsqd.tcp.auth import query_any_authd

        remote_ip = conn.remote_address.rsplit(":", 1)[0].strip("[]")
        nsqd = conn.nsqd
        return await query_any_authd(nsqd.auth_session(), nsqd.options.auth_http_addresses, remote_ip,
                                     self.tls, self.tls_common_name, self.auth_secret)

    def _auth_done(self, conn: ClientV2, fut: asyncio.Future[Any]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            # the auth server's error stays in the log, not with the client
            log.warning("PROTOCOL(V2): [%s] AUTH failed %s", conn.remote_address, exc)
            raise ClientError(E_AUTH_FAILED, "AUTH failed")
        self.auth_state = state = fut.result()
        if not state.authorizations:
            raise ClientError(E_UNAUTHORIZED, "AUTH no authorizations found")
        body = {"identity": state.identity, "identity_url": state.identity_url,
                "permission_count": len(state.authorizations)}
        conn.out += encode_frame(FRAME_TYPE_RESPONSE, json.dumps(body, separators=(",", ":")).encode())

    def _refresh_done(self, conn: ClientV2, fut: asyncio.Future[Any]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            log.warning("PROTOCOL(V2): [%s] AUTH failed - %s", conn.remote_address, exc)
            self._refresh_failed = True
        else:
            self.auth_state = fut.result()

    def check_auth(self, conn: ClientV2, command: str, topic: str, channel: str) -> None:
        """Go's CheckAuth for SUB/PUB/MPUB/DPUB (call only with auth servers).

        Raises:
            ClientError: E_AUTH_FIRST, E_AUTH_FAILED, E_UNAUTHORIZED (fatal).
            Suspend: the cached answer lapsed; asks again, then retries.
        """
        state = self.auth_state
        if state is None or not state.authorizations:
            raise ClientError(E_AUTH_FIRST, f"AUTH required before {command}")
        if self._refresh_failed:
            self._refresh_failed = False
            raise ClientError(E_AUTH_FAILED, "AUTH failed")
        if state.is_expired():
            task = asyncio.get_running_loop().create_task(self._query_auth(conn))
            raise Suspend(task, lambda fut: self._refresh_done(conn, fut), retry=True)
        if not state.is_allowed(topic, channel):
            raise ClientError(E_UNAUTHORIZED, f'AUTH failed for {command} on "{topic}" "{channel}"')
