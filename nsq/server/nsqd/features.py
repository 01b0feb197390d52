"""What an IDENTIFY and AUTH negotiate on a V2 connection: settings, the TLS
and compression upgrades, and AUTH against the auth servers.

A mixin of :class:`~nsq.server.nsqd.client_v2.ClientV2` (the attributes it
uses are set there). Go: nsqd/protocol_v2.go ``IDENTIFY``, ``AUTH``,
``CheckAuth``; nsqd/client_v2.go ``UpgradeTLS``, ``UpgradeDeflate``,
``UpgradeSnappy``, ``QueryAuthd``. The settings rules are
:func:`nsq.server.nsqd.identify.negotiate`.

A handler that must wait (a TLS handshake, an auth server) raises
:class:`Suspend`; the connection stops reading and holds its output until
the future is done.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

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
from nsq.server.nsqd.identify import Current, negotiate

__all__ = ["NegotiatedFeatures", "Suspend"]

log = logging.getLogger("nsq.nsqd")

_OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, OK)


class Suspend(Exception):
    """Raised by a command handler that must wait for ``future`` (a TLS
    handshake, an auth server). ``retry``: run the same command again once
    it is done; ``on_done``: called with the future first."""

    def __init__(self, future: asyncio.Future, on_done: Any, retry: bool = False) -> None:
        self.future = future
        self.on_done = on_done
        self.retry = retry


class NegotiatedFeatures:
    """IDENTIFY, the upgrades it asks for, and AUTH (mixed into ClientV2)."""

    # -- IDENTIFY and upgrades ----------------------------------------------------

    def _identify(self, cmd: tuple) -> None:
        nsqd = self.nsqd
        current = Current(self.heartbeat_interval, self.output_buffer_timeout, self.output_buffer_size,
                          self.msg_timeout, self.tls, self._codec is not None)
        _, data = cmd
        got = negotiate(data, nsqd.options, current, nsqd.tls_context is not None)
        self.client_id = got.client_id
        self.hostname = got.hostname
        self.user_agent = got.user_agent
        self.heartbeat_interval = got.heartbeat_interval
        self.output_buffer_timeout = got.output_buffer_timeout
        self.output_buffer_size = got.output_buffer_size
        self.sample_rate = got.sample_rate
        self.msg_timeout = got.msg_timeout
        self.parser.heartbeats_enabled = got.heartbeat_interval > 0
        self._schedule_heartbeat()
        if got.response is None:
            self.out += _OK_FRAME
            return
        self.out += encode_frame(FRAME_TYPE_RESPONSE, json.dumps(got.response, separators=(",", ":")).encode())
        if not (got.tls or got.deflate or got.snappy):
            return
        # the answer goes out as it is; each upgrade is then confirmed by an
        # OK on the upgraded stream (TLS first, then compression)
        self._write_now()
        codec: Codec | None = None
        if got.snappy:
            # Go: chunks of output_buffer_size; unbuffered (-1): whole writes
            codec = SnappyCodec(self.output_buffer_size if self.output_buffer_size >= 64 else 65536)
        elif got.deflate:
            codec = DeflateCodec(got.deflate_level)
        if got.tls:
            log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", self.remote_address)
            task = self._loop.create_task(self._loop.start_tls(self.transport, self, nsqd.tls_context,
                                                               server_side=True, ssl_handshake_timeout=10.0))
            raise Suspend(task, lambda fut: self._tls_done(fut, codec))
        self._compress(codec)

    def _write_now(self) -> None:
        if self.out and self.transport is not None:
            data = self._codec.encode(self.out) if self._codec is not None else self.out
            self.transport.write(data)
            self.out = bytearray()

    def _compress(self, codec: Codec | None) -> None:
        if codec is None:
            return
        log.info("PROTOCOL(V2): [%s] upgrading connection to %s", self.remote_address, codec.name)
        self._codec = codec
        if codec.name == "snappy":
            self.snappy = True
        else:
            self.deflate = True
        self.out += _OK_FRAME

    def _tls_done(self, fut: asyncio.Future, codec: Codec | None) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            log.error("PROTOCOL(V2): [%s] TLS handshake failed: %s", self.remote_address, exc)
            transport = self.transport
            self.out = bytearray()
            if transport is not None:
                transport.abort()
            self.connection_lost(exc)
            return
        self.transport = fut.result()
        self.tls = True
        self.ssl_object = self.transport.get_extra_info("ssl_object")
        cert = self.ssl_object.getpeercert() if self.ssl_object is not None else None
        for rdn in (cert or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    self.tls_common_name = value
        self.out += _OK_FRAME
        self._write_now()
        self._compress(codec)

    # -- AUTH --------------------------------------------------------------------

    def _auth(self, cmd: tuple) -> None:
        if self.auth_state is not None and self.auth_state.authorizations:
            raise ClientError(E_INVALID, "AUTH already set")
        if not self.nsqd.options.auth_http_addresses:
            raise ClientError(E_AUTH_DISABLED, "AUTH disabled")
        _, secret = cmd
        self.auth_secret = secret.decode("utf-8", "replace")
        raise Suspend(self._loop.create_task(self._query_auth()), self._auth_done)

    async def _query_auth(self) -> Any:
        from nsq.server.nsqd.auth import query_any_authd

        remote_ip = self.remote_address.rsplit(":", 1)[0].strip("[]")
        return await query_any_authd(self.nsqd.auth_session(), self.nsqd.options.auth_http_addresses, remote_ip,
                                     self.tls, self.tls_common_name, self.auth_secret)

    def _auth_done(self, fut: asyncio.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            # the auth server's error stays in the log, not with the client
            log.warning("PROTOCOL(V2): [%s] AUTH failed %s", self.remote_address, exc)
            raise ClientError(E_AUTH_FAILED, "AUTH failed")
        self.auth_state = state = fut.result()
        if not state.authorizations:
            raise ClientError(E_UNAUTHORIZED, "AUTH no authorizations found")
        body = {"identity": state.identity, "identity_url": state.identity_url,
                "permission_count": len(state.authorizations)}
        self.out += encode_frame(FRAME_TYPE_RESPONSE, json.dumps(body, separators=(",", ":")).encode())

    def _refresh_done(self, fut: asyncio.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            log.warning("PROTOCOL(V2): [%s] AUTH failed - %s", self.remote_address, exc)
            self._auth_refresh_failed = True
        else:
            self.auth_state = fut.result()

    def _check_auth(self, command: str, topic: str, channel: str) -> None:
        """Go's CheckAuth for SUB/PUB/MPUB/DPUB (a no-op without auth servers).

        Raises:
            ClientError: E_AUTH_FIRST, E_AUTH_FAILED, E_UNAUTHORIZED (fatal).
            Suspend: the cached answer lapsed; asks again, then retries.
        """
        state = self.auth_state
        if state is None or not state.authorizations:
            raise ClientError(E_AUTH_FIRST, f"AUTH required before {command}")
        if self._auth_refresh_failed:
            self._auth_refresh_failed = False
            raise ClientError(E_AUTH_FAILED, "AUTH failed")
        if state.is_expired():
            raise Suspend(self._loop.create_task(self._query_auth()), self._refresh_done, retry=True)
        if not state.is_allowed(topic, channel):
            raise ClientError(E_UNAUTHORIZED, f'AUTH failed for {command} on "{topic}" "{channel}"')
