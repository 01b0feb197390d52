"""The nsqlookupd TCP protocol V1, sans-IO (Go: nsqlookupd/lookup_protocol_v1.go).

nsqd talks to each nsqlookupd over one TCP connection::

    "  V1"                                  magic, once
    IDENTIFY\\n [int32 len][JSON peer info] answer: JSON about the lookupd
    REGISTER topic [channel]\\n             answer: OK
    UNREGISTER topic [channel]\\n           answer: OK
    PING\\n                                 answer: OK

Every answer is ``[int32 size][data]`` (no frame type). Every error answers
``CODE description`` and closes the connection.

:class:`V1ServerParser` is the lookupd side (bytes in, commands out, Go's
checks in Go's order, and bounds Go does not have: see :data:`MAX_LINE`
and :data:`MAX_IDENTIFY_BODY`); :class:`V1ClientParser` and the
``encode_*`` functions are the nsqd side.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from nsq.protocol.errors import E_BAD_BODY, E_BAD_CHANNEL, E_BAD_PROTOCOL, E_BAD_TOPIC, E_INVALID, ClientError
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "MAGIC_V1",
    "PeerInfo",
    "V1ClientParser",
    "V1ServerParser",
    "encode_identify",
    "encode_ping",
    "encode_register",
    "encode_response",
    "encode_unregister",
]

MAGIC_V1 = b"  V1"
_SIZE = struct.Struct(">i")

#: longest command line accepted, ``\n`` included (bytes). Go's nsqlookupd
#: reads lines with ``bufio.NewReader`` (4096-byte buffer) and
#: ``ReadString('\n')``, which grows past the buffer without a bound; the
#: longest legal line is ``UNREGISTER`` with a 64-byte topic and a 64-byte
#: channel (141 bytes), so Go's buffer size is a generous bound that keeps
#: what one connection can make lookupd hold to 4 KiB. A longer line is
#: answered ``E_INVALID`` and closed before its newline arrives.
MAX_LINE = 4096
#: largest IDENTIFY body accepted (bytes). Go's nsqlookupd allocates whatever
#: size the client declares (``make([]byte, bodyLen)``, and panics on a
#: negative one); the IDENTIFY nsqd sends (nsqd/lookup.go
#: ``connectCallback``) is a JSON object of about 150 bytes (addresses,
#: ports, version), so 64 KiB is generous. Larger and negative sizes are
#: answered ``E_BAD_BODY IDENTIFY failed to read body``, the text Go gives
#: when it cannot read the body, before any of the body is buffered.
MAX_IDENTIFY_BODY = 64 * 1024

CMD_IDENTIFY = "IDENTIFY"
CMD_REGISTER = "REGISTER"
CMD_UNREGISTER = "UNREGISTER"
CMD_PING = "PING"


@dataclass
class PeerInfo:
    """What an nsqd says about itself in IDENTIFY (and lookupd's ``/lookup`` shows).

    Attributes:
        remote_address: ``ip:port`` of the nsqd's connection, set by lookupd.
        hostname: the nsqd's OS hostname.
        broadcast_address: address consumers should connect to.
        tcp_port, http_port: the nsqd's (broadcast) ports.
        version: nsqd version string.
    """

    remote_address: str = ""
    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON object lookupd's HTTP API shows for a producer."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


_STR_FIELDS = ("hostname", "broadcast_address", "version", "remote_address")
_INT_FIELDS = ("tcp_port", "http_port")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# one decoder for every IDENTIFY: json.loads with a keyword builds a new one
# per call, and a decoder is a reference cycle (its scanner refers back to
# it) that only the cycle collector frees
_PEER_INFO_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _bad_json() -> ClientError:
    # a new error per raise, never one held in a local: an exception bound
    # in the frame its traceback refers to is a reference cycle
    # (error -> traceback -> frame -> error) that keeps the frame, and the
    # connection its callers hold, until a full collection, which a daemon's
    # tuned collector (nsq.server.gctune) runs rarely
    return ClientError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")


def decode_peer_info(body: bytes) -> PeerInfo:
    """Decode an IDENTIFY body the way Go's ``json.Unmarshal`` into PeerInfo does.

    Unknown keys and JSON nulls are ignored; a value of the wrong type is
    an error; all of broadcast_address, tcp_port, http_port and version
    must be set.

    Raises:
        ClientError: ``E_BAD_BODY IDENTIFY failed to decode JSON body`` or
            ``E_BAD_BODY IDENTIFY missing fields``.
    """
    try:
        # as Go: UTF-8 only (no UTF-16/32 sniffing), invalid bytes become
        # U+FFFD, and NaN / Infinity are not JSON
        data = _PEER_INFO_DECODER.decode(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        raise _bad_json() from None
    info = PeerInfo()
    if data is not None:
        if not isinstance(data, dict):
            raise _bad_json()
        for key in _STR_FIELDS:
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise _bad_json()
            setattr(info, key, value)
        for key in _INT_FIELDS:
            value = data.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
                raise _bad_json()
            setattr(info, key, value)
    if not info.broadcast_address or not info.tcp_port or not info.http_port or not info.version:
        raise ClientError(E_BAD_BODY, "IDENTIFY missing fields")
    return info


def _topic_channel(command: str, params: list[str]) -> tuple[str, str]:
    """Go's getTopicChan: checks and texts of REGISTER / UNREGISTER."""
    if not params:
        raise ClientError(E_INVALID, f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else ""
    if not is_valid_topic_name(topic):
        raise ClientError(E_BAD_TOPIC, f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_channel_name(channel):
        raise ClientError(E_BAD_CHANNEL, f"{command} channel name '{channel}' is not valid")
    return topic, channel


class V1ServerParser:
    """lookupd's side of a V1 connection.

    Feed bytes with :meth:`feed`; call :meth:`next_command` until it
    returns None. Commands::

        ("IDENTIFY", PeerInfo)         # remote_address left for the caller
        ("REGISTER", topic, channel)   # channel "" for a topic
        ("UNREGISTER", topic, channel)
        ("PING",)

    Every :class:`ClientError` raised is fatal (answer it, then close).
    The first error for a bad magic is ``E_BAD_PROTOCOL``. The parser
    tracks IDENTIFY itself: a command needing it before it is an error,
    and so is a second IDENTIFY.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._magic_seen = False
        self.identified = False

    def feed(self, data: bytes) -> None:
        """Append bytes received from the connection."""
        self._buf += data

    def next_command(self) -> tuple[Any, ...] | None:
        """The next complete command, or None if more bytes are needed.

        Raises:
            ClientError: always fatal; the text is what Go's nsqlookupd answers.
        """
        buf = self._buf
        if not self._magic_seen:
            if len(buf) < 4:
                return None
            if bytes(buf[:4]) != MAGIC_V1:
                raise ClientError(E_BAD_PROTOCOL, "")
            del buf[:4]
            self._magic_seen = True
        nl = buf.find(b"\n", 0, MAX_LINE)
        if nl < 0:
            # the verdict does not depend on how the line arrives
            if len(buf) >= MAX_LINE:
                raise ClientError(E_INVALID, f"command line longer than {MAX_LINE} bytes")
            return None
        line = bytes(buf[:nl]).decode("utf-8", "replace").strip()
        params = line.split(" ")
        name = params[0]
        if name == CMD_PING:
            del buf[: nl + 1]
            return (CMD_PING,)
        if name == CMD_IDENTIFY:
            if self.identified:
                raise ClientError(E_INVALID, "cannot IDENTIFY again")
            if len(buf) < nl + 5:
                return None
            size = _SIZE.unpack_from(buf, nl + 1)[0]
            if size < 0 or size > MAX_IDENTIFY_BODY:
                raise ClientError(E_BAD_BODY, "IDENTIFY failed to read body")
            end = nl + 5 + size
            if len(buf) < end:
                return None
            body = bytes(buf[nl + 5 : end])
            del buf[:end]
            info = decode_peer_info(body)
            self.identified = True
            return (CMD_IDENTIFY, info)
        if name in (CMD_REGISTER, CMD_UNREGISTER):
            del buf[: nl + 1]
            if not self.identified:
                raise ClientError(E_INVALID, "client must IDENTIFY")
            topic, channel = _topic_channel(name, params[1:])
            return (name, topic, channel)
        raise ClientError(E_INVALID, f"invalid command {name}")


def encode_response(data: bytes) -> bytes:
    """``[int32 size][data]``: an answer or an error text."""
    return _SIZE.pack(len(data)) + data


def encode_identify(info: dict[str, Any]) -> bytes:
    """``IDENTIFY\\n[int32 len][JSON]`` for the nsqd side."""
    body = json.dumps(info, separators=(",", ":")).encode()
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def encode_register(topic: str, channel: str = "") -> bytes:
    """``REGISTER topic [channel]\\n``."""
    return (f"REGISTER {topic} {channel}\n" if channel else f"REGISTER {topic}\n").encode()


def encode_unregister(topic: str, channel: str = "") -> bytes:
    """``UNREGISTER topic [channel]\\n``."""
    return (f"UNREGISTER {topic} {channel}\n" if channel else f"UNREGISTER {topic}\n").encode()


def encode_ping() -> bytes:
    """``PING\\n``."""
    return b"PING\n"


class V1ClientParser:
    """nsqd's side: splits the lookupd's ``[int32 size][data]`` answers.

    Args:
        max_size: largest answer accepted (bytes); Go's nsqd uses its
            --max-body-size.
    """

    def __init__(self, max_size: int = 5 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes) -> None:
        """Append bytes received from the lookupd."""
        self._buf += data

    def next_response(self) -> bytes | None:
        """The next complete answer, or None if more bytes are needed.

        Raises:
            ClientError: ``E_BAD_BODY`` for a negative or oversized size.
        """
        buf = self._buf
        if len(buf) < 4:
            return None
        size = _SIZE.unpack_from(buf, 0)[0]
        if size < 0 or size > self.max_size:
            raise ClientError(E_BAD_BODY, f"response of invalid size {size}")
        if len(buf) < 4 + size:
            return None
        data = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        return data
