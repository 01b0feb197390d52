"""IDENTIFY negotiation, pure: a client's JSON in, the settings and answer out.

The rules are Go nsqd 1.2's (nsqd/protocol_v2.go ``IDENTIFY`` and
nsqd/client_v2.go ``Identify``, ``SetHeartbeatInterval``,
``SetOutputBuffer``, ``SetSampleRate``, ``SetMsgTimeout``): each field's
JSON type is checked first (a wrong type is ``E_BAD_BODY IDENTIFY failed to
decode JSON body``), then each value's range, in Go's order, with Go's texts.
Field meanings: https://nsq.io/clients/tcp_protocol_spec.html#identify.

No sockets, no clock: :func:`negotiate` returns an :class:`Identified`:
the :class:`Negotiated` settings the V2 connection keeps from then on, the
answer, and the TLS/compression upgrades it then makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nsq import NSQ_VERSION
from nsq.protocol.errors import E_BAD_BODY, E_IDENTIFY_FAILED, ClientError

if TYPE_CHECKING:
    from nsq.server.nsqd.options import NSQDOptions

__all__ = ["Negotiated", "Identified", "initial", "negotiate", "IDENTIFY_TYPES", "DEFAULT_OUTPUT_BUFFER_SIZE"]

#: IDENTIFY fields Go decodes, with the JSON type each must have
IDENTIFY_TYPES: dict[str, type | tuple[type, ...]] = {
    "client_id": str,
    "hostname": str,
    "heartbeat_interval": int,
    "output_buffer_size": int,
    "output_buffer_timeout": int,
    "feature_negotiation": bool,
    "tls_v1": bool,
    "deflate": bool,
    "deflate_level": int,
    "snappy": bool,
    "sample_rate": int,
    "user_agent": str,
    "msg_timeout": int,
}


@dataclass(frozen=True, slots=True)
class Negotiated:
    """A V2 connection's settings, as its last IDENTIFY left them (Go:
    the fields ``clientV2.Identify`` sets in nsqd/client_v2.go). The
    connection holds one (:attr:`ClientV2.negotiated
    <nsq.server.nsqd.tcp.client_v2.ClientV2.negotiated>`); its channel reads
    ``msg_timeout`` and ``sample_rate`` from there.

    Attributes:
        client_id, hostname: as sent ("" when absent); before any
            IDENTIFY, the remote IP (Go's ``newClientV2``).
        user_agent: as sent ("" when absent).
        heartbeat_interval: s, 0 = off.
        output_buffer_timeout: s.
        output_buffer_size: bytes.
        sample_rate: percent of messages delivered, 0 = every message.
        msg_timeout: s before an in-flight message times out.
    """

    client_id: str
    hostname: str
    user_agent: str
    heartbeat_interval: float
    output_buffer_timeout: float
    output_buffer_size: int
    sample_rate: int
    msg_timeout: float


#: Go's ``defaultBufferSize`` (nsqd/client_v2.go): the output buffer before
#: IDENTIFY sets one (bytes)
DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024


def initial(opts: NSQDOptions, identifier: str = "") -> Negotiated:
    """A connection's settings before any IDENTIFY (Go's ``newClientV2``):
    ``client_id`` and ``hostname`` are ``identifier`` (the remote IP),
    heartbeats every ``--client-timeout`` / 2, ``--msg-timeout``,
    ``--output-buffer-timeout``, a 16 KiB output buffer."""
    return Negotiated(client_id=identifier, hostname=identifier, user_agent="",
                      heartbeat_interval=opts.client_timeout / 2,
                      output_buffer_timeout=opts.output_buffer_timeout,
                      output_buffer_size=DEFAULT_OUTPUT_BUFFER_SIZE, sample_rate=0, msg_timeout=opts.msg_timeout)


@dataclass(frozen=True, slots=True)
class Identified:
    """What one IDENTIFY settles: the new settings, the answer and the
    upgrades to make after it.

    Attributes:
        settings: the connection's settings from now on.
        response: the JSON answer (feature negotiation) or None (answer OK).
        tls, snappy, deflate: upgrades to do after the answer, in this order.
        deflate_level: 1-9, capped by ``--max-deflate-level``.
    """

    settings: Negotiated
    response: dict[str, Any] | None
    tls: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6


def _check_types(data: dict[str, Any]) -> None:
    for key, typ in IDENTIFY_TYPES.items():
        value = data.get(key)
        if value is None:
            continue
        if typ is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, typ)
        if not ok:
            raise ClientError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")


def negotiate(data: dict[str, Any], opts: NSQDOptions, current: Negotiated, *, tls_available: bool,
              tls: bool = False, compressed: bool = False) -> Identified:
    """Apply Go's IDENTIFY rules to ``data`` (the client's decoded JSON).

    Args:
        data: the IDENTIFY body, decoded.
        opts: the daemon's options (``max_*`` limits, ``snappy``,
            ``deflate``, auth addresses).
        current: the connection's settings now (a field the client leaves
            out or sends as 0 keeps its value).
        tls_available: the daemon has a TLS certificate.
        tls: the connection is already upgraded to TLS.
        compressed: the connection is already upgraded to snappy or deflate.

    Returns:
        The settings, the answer and the upgrades.

    Raises:
        ClientError: ``E_BAD_BODY`` (a field of the wrong type or out of
            range, Go's text) or ``E_IDENTIFY_FAILED`` (both compressions).
    """
    _check_types(data)
    hb = data.get("heartbeat_interval") or 0
    if hb == -1:
        heartbeat = 0.0
    elif hb == 0:
        heartbeat = current.heartbeat_interval
    elif 1000 <= hb <= opts.max_heartbeat_interval * 1000:
        heartbeat = hb / 1000.0
    else:
        raise ClientError(E_BAD_BODY, f"IDENTIFY heartbeat interval ({hb}) is invalid")

    obt = data.get("output_buffer_timeout") or 0
    buffer_timeout = current.output_buffer_timeout
    if obt == -1:
        buffer_timeout = 0.0
    elif obt == 0:
        pass
    elif opts.min_output_buffer_timeout * 1000 <= obt <= opts.max_output_buffer_timeout * 1000:
        buffer_timeout = obt / 1000.0
    else:
        raise ClientError(E_BAD_BODY, f"IDENTIFY output buffer timeout ({obt}) is invalid")
    obs = data.get("output_buffer_size") or 0
    buffer_size = current.output_buffer_size
    if obs == -1:
        buffer_size, buffer_timeout = 1, 0.0
    elif obs == 0:
        pass
    elif 64 <= obs <= opts.max_output_buffer_size:
        buffer_size = obs
    else:
        raise ClientError(E_BAD_BODY, f"IDENTIFY output buffer size ({obs}) is invalid")

    rate = data.get("sample_rate") or 0
    if not 0 <= rate <= 99:
        raise ClientError(E_BAD_BODY, f"IDENTIFY sample rate ({rate}) is invalid")
    mt = data.get("msg_timeout") or 0
    msg_timeout = current.msg_timeout
    if mt == 0:
        pass
    elif 1000 <= mt <= opts.max_msg_timeout * 1000:
        msg_timeout = mt / 1000.0
    else:
        raise ClientError(E_BAD_BODY, f"IDENTIFY msg timeout ({mt}) is invalid")

    settings = Negotiated(client_id=data.get("client_id") or "", hostname=data.get("hostname") or "",
                          user_agent=data.get("user_agent") or "", heartbeat_interval=heartbeat,
                          output_buffer_timeout=buffer_timeout, output_buffer_size=buffer_size, sample_rate=rate,
                          msg_timeout=msg_timeout)
    if not data.get("feature_negotiation"):
        return Identified(settings, None)

    upgrade_tls = tls_available and bool(data.get("tls_v1")) and not tls
    deflate = opts.deflate and bool(data.get("deflate"))
    deflate_level = 6
    requested = data.get("deflate_level") or 0
    if deflate and requested > 0:
        deflate_level = requested
    if opts.max_deflate_level < deflate_level:
        deflate_level = opts.max_deflate_level
    snappy = opts.snappy and bool(data.get("snappy"))
    if deflate and snappy:
        raise ClientError(E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")
    if compressed:
        deflate = snappy = False  # already compressed: a second IDENTIFY changes nothing
    response = {
        "max_rdy_count": opts.max_rdy_count,
        "version": NSQ_VERSION,
        "max_msg_timeout": int(opts.max_msg_timeout * 1000),
        "msg_timeout": int(msg_timeout * 1000),
        "tls_v1": upgrade_tls,
        "deflate": deflate,
        "deflate_level": deflate_level,
        "max_deflate_level": opts.max_deflate_level,
        "snappy": snappy,
        "sample_rate": rate,
        "auth_required": bool(opts.auth_http_addresses),
        "output_buffer_size": buffer_size,
        "output_buffer_timeout": int(buffer_timeout * 1000),
    }
    return Identified(settings, response, tls=upgrade_tls, snappy=snappy, deflate=deflate,
                      deflate_level=deflate_level)
