"""Server side of the V2 TCP protocol, sans-IO
(https://nsq.io/clients/tcp_protocol_spec.html; Go: nsqd/protocol_v2.go).

:class:`V2ServerParser` takes the bytes a client sends and returns one parsed
command at a time, checking what nsqd v1.2 checks, in the same order, with
the same error codes and texts. It tracks the connection state (init ->
subscribed -> closing) because validity depends on it. It never touches a
socket or a clock.

Every input is bounded: a command line must fit in :data:`MAX_LINE_LENGTH`
bytes (Go's 16 KiB ``bufio.Reader``) and is refused as soon as that many
bytes are buffered without its newline; bodies are refused from their size
field before they arrive. :attr:`V2ServerParser.max_command_size` is the
largest command that can be legal, for a server that sizes its reads (or
its decompression) by it.

Commands are tuples whose first item is one of the ``CMD_*`` constants::

    (CMD_IDENTIFY, data: dict)
    (CMD_AUTH, secret: bytes)
    (CMD_SUB, topic: str, channel: str)
    (CMD_PUB, topic: str, body: bytes)
    (CMD_MPUB, topic: str, bodies: list[bytes])
    (CMD_DPUB, topic: str, defer_ms: int, body: bytes)
    (CMD_RDY, count: int)
    (CMD_FIN, msg_id: bytes)
    (CMD_FIN_MANY, msg_ids: list[bytes])       # consecutive FINs of one read
    (CMD_REQ, msg_id: bytes, timeout_ms: int)   # clamped to 0..max_req_timeout
    (CMD_TOUCH, msg_id: bytes)
    (CMD_CLS,)
    (CMD_NOP,)
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any

from nsq.protocol.errors import (
    E_BAD_BODY,
    E_BAD_CHANNEL,
    E_BAD_MESSAGE,
    E_BAD_PROTOCOL,
    E_BAD_TOPIC,
    E_INVALID,
    ClientError,
    ProtocolError,
    ReadError,
)
from nsq.protocol.frames import MAGIC_V2
from nsq.protocol.message import MSG_ID_LENGTH
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

#: what a command handler returns: (command, bytes consumed after the
#: newline), or (None, bytes needed) while the body is incomplete
_Handled = tuple[tuple[Any, ...] | None, int]

__all__ = [
    "Limits", "V2ServerParser", "MAX_LINE_LENGTH", "LINE_TOO_LONG", "go_quote",
    "STATE_INIT", "STATE_SUBSCRIBED", "STATE_CLOSING",
    "CMD_IDENTIFY", "CMD_AUTH", "CMD_SUB", "CMD_PUB", "CMD_MPUB", "CMD_DPUB", "CMD_RDY", "CMD_FIN",
    "CMD_FIN_MANY", "CMD_REQ", "CMD_TOUCH", "CMD_CLS", "CMD_NOP",
]

# client states, numbered as Go's clientV2 states (shown in /stats "state")
STATE_INIT = 0
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

CMD_IDENTIFY = 1
CMD_AUTH = 2
CMD_SUB = 3
CMD_PUB = 4
CMD_MPUB = 5
CMD_DPUB = 6
CMD_RDY = 7
CMD_FIN = 8
CMD_REQ = 9
CMD_TOUCH = 10
CMD_CLS = 11
CMD_NOP = 12
CMD_FIN_MANY = 13

#: longest command line accepted, its ``\n`` included (bytes): Go reads lines
#: with ``ReadSlice('\n')`` from a ``bufio.Reader`` of ``defaultBufferSize``
#: = 16 KiB (nsqd/client_v2.go), which fails once the buffer is full
MAX_LINE_LENGTH = 16 * 1024
#: what Go's IOLoop reports for a longer line (nsqd/protocol_v2.go); no frame
#: is sent, the connection just closes
LINE_TOO_LONG = "failed to read command - bufio: buffer full"

_LEN = struct.Struct(">i")
#: an MPUB body's message count and its first message's size
_ONE_MESSAGE = struct.Struct(">ii")
#: back-to-back ``FIN <16-byte id>\n`` commands (an id never holds a newline)
_FIN_RUN = re.compile(rb"(?:FIN [^\n]{16}\n)+")
_MAGIC_PENDING = -1


@dataclass(frozen=True, slots=True)
class Limits:
    """The nsqd options the parser enforces.

    Attributes:
        max_msg_size: bytes, ``--max-msg-size``.
        max_body_size: bytes, ``--max-body-size``.
        max_rdy_count: ``--max-rdy-count``.
        max_req_timeout_ms: ms, ``--max-req-timeout``.
    """

    max_msg_size: int = 1048576
    max_body_size: int = 5242880
    max_rdy_count: int = 2500
    max_req_timeout_ms: int = 3600_000


def go_quote(value: str) -> str:
    """Quote a string the way Go's ``%q`` does (close enough for error text)."""
    return json.dumps(value, ensure_ascii=False)


def _base10(b: bytes) -> int | None:
    """Go's ``protocol.ByteToBase10``: digits only, empty is 0; else None."""
    if not b:
        return 0
    if not b.isdigit() or not b.isascii():
        return None
    return int(b)


#: topic names already checked, as sent -> decoded: a producer names the
#: same few topics in every PUB (bounded; cleared when full)
_VALID_TOPICS: dict[bytes, str] = {}
_VALID_TOPICS_MAX = 4096


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


class V2ServerParser:
    """Incremental parser of a client's V2 byte stream.

    Args:
        limits: size and range limits from the nsqd options.
        expect_magic: whether the stream starts with the ``"  V2"`` magic.

    Attributes:
        state: ``STATE_INIT``, ``STATE_SUBSCRIBED`` or ``STATE_CLOSING``.
        heartbeats_enabled: set False by the server when IDENTIFY disabled
            heartbeats (SUB is then refused, as in Go).

    :meth:`next_command` raises :class:`ClientError` (always fatal) for an
    invalid command; after that the parser must not be used again. A line
    that does not fit in :data:`MAX_LINE_LENGTH` bytes raises
    :class:`ReadError` (``E_BAD_PROTOCOL failed to read command - bufio:
    buffer full``, ``answer`` False): Go nsqd sends no error frame for it,
    its IOLoop just ends and the connection closes.
    """

    __slots__ = ("limits", "state", "heartbeats_enabled", "drained", "_buf", "_pos", "_need")

    def __init__(self, limits: Limits | None = None, expect_magic: bool = True) -> None:
        self.limits = limits or Limits()
        self.state = STATE_INIT
        self.heartbeats_enabled = True
        #: the last command :meth:`next_command` returned took every byte
        #: buffered: the next call would return None (a server's loop can
        #: stop without making it); False again after :meth:`feed`
        self.drained = False
        #: bytes received, parsed from ``_pos`` on: the bytes object of one
        #: read fed into an empty buffer, else a bytearray that accumulates
        self._buf: bytes | bytearray = bytearray()
        self._pos = 0
        # bytes needed (from _pos) before parsing can progress; -1: magic pending
        self._need = _MAGIC_PENDING if expect_magic else 0

    # -- buffer ----------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Append bytes received from the client."""
        pos = self._pos
        buf = self._buf
        if pos == len(buf) and type(data) is bytes:
            # everything before was parsed (the usual case): parse ``data``
            # itself, slices of it are the commands' bytes (no copy into a
            # buffer first)
            self._buf = data
        elif isinstance(buf, bytes):
            # a partial command left in the last read's bytes: accumulate
            rest = bytearray(buf[pos:])
            rest += data
            self._buf = rest
        else:
            if pos:
                del buf[:pos]
            buf += data
        self._pos = 0
        self.drained = False

    @property
    def buffered(self) -> int:
        """Bytes received and not yet parsed."""
        return len(self._buf) - self._pos

    def clear(self) -> None:
        """Drop every byte buffered (the connection is gone); up to
        :attr:`max_command_size` bytes are freed at once."""
        self._buf = bytearray()
        self._pos = 0

    @property
    def max_line_length(self) -> int:
        """Longest command line accepted, ``\\n`` included (bytes)."""
        return MAX_LINE_LENGTH

    @property
    def max_command_size(self) -> int:
        """Largest command that can be legal (bytes): a full line, the
        4-byte size and the largest body (``max_body_size`` for IDENTIFY,
        AUTH and MPUB; ``max_msg_size`` for PUB and DPUB).

        While :meth:`next_command` returns None, :attr:`buffered` is below
        this; a server reading through a decompressor can take up to
        ``max_command_size - buffered`` more stream bytes without holding
        more than one legal command.
        """
        limits = self.limits
        return MAX_LINE_LENGTH + 4 + max(limits.max_body_size, limits.max_msg_size)

    def next_command(self) -> tuple[Any, ...] | None:
        """Return the next complete command, or None if more bytes are needed.

        Raises:
            ClientError: the command is invalid (the connection must close).
        """
        buf = self._buf
        if self._pos == len(buf):
            return None  # nothing buffered: the usual end of a read
        while True:
            avail = len(buf) - self._pos
            if self._need:
                if self._need == _MAGIC_PENDING:
                    if avail < 4:
                        return None
                    if bytes(buf[self._pos:self._pos + 4]) != MAGIC_V2:
                        raise ProtocolError(E_BAD_PROTOCOL)
                    self._pos += 4
                    self._need = 0
                    continue
                if avail < self._need:
                    return None
            pos = self._pos
            nl = buf.find(b"\n", pos, pos + MAX_LINE_LENGTH)  # a line never needs a longer scan
            if nl - pos == 20 and buf.startswith(b"FIN ", pos) and self.state != STATE_INIT:
                # fast path for the most frequent command, "FIN <16-byte id>\n";
                # a consumer's FINs arrive back to back, so take every one
                # that follows as well: (CMD_FIN_MANY, [id, ...])
                self._need = 0
                p = nl + 1
                if len(buf) - p < 21 or not buf.startswith(b"FIN ", p):
                    self._pos = p
                    self.drained = p == len(buf)
                    return (CMD_FIN, bytes(buf[pos + 4:nl]))
                end = _FIN_RUN.match(buf, pos).end()  # type: ignore[union-attr]  # matches: line checked
                self._pos = end
                self.drained = end == len(buf)
                ids = bytes(buf[pos + 4:end - 1]).split(b"\nFIN ")
                if len(ids) == 1:
                    return (CMD_FIN, ids[0])
                return (CMD_FIN_MANY, ids)
            if nl > 0 and buf.startswith(b"PUB ", pos):
                # fast path for a complete PUB to a topic seen before (one
                # producer's request/response traffic); anything else (a new
                # or bad name, a short or bad body) goes the general way
                topic = _VALID_TOPICS.get(bytes(buf[pos + 4:nl]))
                start = nl + 1
                if topic is not None and len(buf) - start >= 4:
                    size = _LEN.unpack_from(buf, start)[0]
                    end = start + 4 + size
                    if 0 < size <= self.limits.max_msg_size and end <= len(buf):
                        self._need = 0
                        self._pos = end
                        self.drained = end == len(buf)
                        return (CMD_PUB, topic, bytes(buf[start + 4:end]))
            if nl < 0:
                if avail >= MAX_LINE_LENGTH:
                    # Go's bufio buffer is full and holds no newline
                    raise ReadError(E_BAD_PROTOCOL, LINE_TOO_LONG)
                return None
            if nl - pos >= MAX_LINE_LENGTH:
                # same verdict whether or not the newline arrived in this chunk
                raise ReadError(E_BAD_PROTOCOL, LINE_TOO_LONG)
            end = nl
            if end > self._pos and buf[end - 1] == 13:  # optional \r
                end -= 1
            params = bytes(buf[self._pos:end]).split(b" ")
            handler = _DISPATCH.get(params[0])
            if handler is None:
                raise ClientError(E_INVALID, f"invalid command {_text(params[0])}")
            # handlers return (command, bytes consumed after the newline) or
            # (None, needed) when the body is incomplete
            cmd, n = handler(self, params, nl + 1)
            if cmd is None and n > 0:
                self._need = nl + 1 - self._pos + n
                return None
            self._need = 0
            self._pos = nl + 1 + n
            if cmd is not None:
                self.drained = self._pos == len(buf)
                return cmd
            # an ignored command (RDY while closing): go on

    def take_publish(self, data: bytes) -> tuple[Any, ...] | None:
        """The command ``data`` holds, when ``data`` is one read holding
        exactly one whole PUB or MPUB to a topic name seen before and
        nothing is buffered (a producer waiting for each ``OK``, the
        request/response case); else None, and ``data`` is to be
        :meth:`feed`-ed as usual. Same commands and errors as
        :meth:`feed` + :meth:`next_command`, without buffering.

        Raises:
            ClientError: E_BAD_BODY / E_BAD_MESSAGE, an MPUB's bad count
                or message (fatal, as from :meth:`next_command`).
        """
        if not self.drained or type(data) is not bytes:
            return None  # bytes buffered, or the magic still expected
        nl = data.find(b"\n", 0, 128)  # a valid line is at most 70 bytes (a 64-byte name)
        start = nl + 5  # the body, after its 4-byte size
        end = len(data)
        if nl < 4 or start > end or start + _LEN.unpack_from(data, nl + 1)[0] != end:
            return None  # not one whole command with a body, or more than one
        size = end - start
        if data.startswith(b"MPUB "):
            topic = _VALID_TOPICS.get(data[5:nl])
            if topic is None or size < 4 or size > self.limits.max_body_size:
                return None
            if size > 8 and _ONE_MESSAGE.unpack_from(data, start) == (1, size - 8) \
                    and size - 8 <= self.limits.max_msg_size:
                return (CMD_MPUB, topic, [data[start + 8:]])  # an MPUB of one message
            return (CMD_MPUB, topic, self._mpub_bodies(data, start, size))
        if data.startswith(b"PUB "):
            topic = _VALID_TOPICS.get(data[4:nl])
            if topic is None or not 0 < size <= self.limits.max_msg_size:
                return None
            return (CMD_PUB, topic, data[start:])
        return None

    # -- body helpers ----------------------------------------------------

    def _body_len(self, start: int) -> int | None:
        if len(self._buf) - start < 4:
            return None
        size: int = _LEN.unpack_from(self._buf, start)[0]
        return size

    def _check_state(self, allowed: tuple[int, ...], name: str) -> None:
        if self.state not in allowed:
            raise ClientError(E_INVALID, f"cannot {name} in current state")

    def _msg_id(self, params: list[bytes], name: str) -> bytes:
        if len(params) < 2:
            raise ClientError(E_INVALID, f"{name} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != MSG_ID_LENGTH:
            raise ClientError(E_INVALID, "Invalid Message ID")
        return msg_id

    def _topic(self, params: list[bytes], name: str, min_params: int, code_prefix: str = "") -> str:
        if len(params) < min_params:
            raise ClientError(E_INVALID, f"{name} insufficient number of parameters")
        raw = params[1]
        topic = _VALID_TOPICS.get(raw)
        if topic is None:
            topic = _text(raw)
            if not is_valid_topic_name(topic):
                raise ClientError(E_BAD_TOPIC, f"{code_prefix}{name} topic name {go_quote(topic)} is not valid")
            if len(_VALID_TOPICS) >= _VALID_TOPICS_MAX:
                _VALID_TOPICS.clear()
            _VALID_TOPICS[raw] = topic
        return topic

    # -- commands ----------------------------------------------------------

    def _identify(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_INIT,), "IDENTIFY")
        size = self._body_len(start)
        if size is None:
            return None, 4
        if size > self.limits.max_body_size:
            raise ClientError(E_BAD_BODY, f"IDENTIFY body too big {size} > {self.limits.max_body_size}")
        if size <= 0:
            raise ClientError(E_BAD_BODY, f"IDENTIFY invalid body size {size}")
        if len(self._buf) - start < 4 + size:
            return None, 4 + size
        body = bytes(self._buf[start + 4:start + 4 + size])
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deep nesting
            data = None
        if not isinstance(data, dict):
            raise ClientError(E_BAD_BODY, "IDENTIFY failed to decode JSON body")
        return (CMD_IDENTIFY, data), 4 + size

    def _auth(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_INIT,), "AUTH")
        if len(params) != 1:
            raise ClientError(E_INVALID, "AUTH invalid number of parameters")
        size = self._body_len(start)
        if size is None:
            return None, 4
        if size > self.limits.max_body_size:
            raise ClientError(E_BAD_BODY, f"AUTH body too big {size} > {self.limits.max_body_size}")
        if size <= 0:
            raise ClientError(E_BAD_BODY, f"AUTH invalid body size {size}")
        if len(self._buf) - start < 4 + size:
            return None, 4 + size
        return (CMD_AUTH, bytes(self._buf[start + 4:start + 4 + size])), 4 + size

    def _sub(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_INIT,), "SUB")
        if not self.heartbeats_enabled:
            raise ClientError(E_INVALID, "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise ClientError(E_INVALID, "SUB insufficient number of parameters")
        topic = _text(params[1])
        if not is_valid_topic_name(topic):
            raise ClientError(E_BAD_TOPIC, f"SUB topic name {go_quote(topic)} is not valid")
        channel = _text(params[2])
        if not is_valid_channel_name(channel):
            raise ClientError(E_BAD_CHANNEL, f"SUB channel name {go_quote(channel)} is not valid")
        self.state = STATE_SUBSCRIBED
        return (CMD_SUB, topic, channel), 0

    def _message_body(self, name: str, start: int) -> tuple[bytes | None, int]:
        """Read ``[size][body]`` of PUB/DPUB; returns (body|None, consumed|needed)."""
        buf = self._buf
        if len(buf) - start < 4:
            return None, 4
        size: int = _LEN.unpack_from(buf, start)[0]
        if size <= 0:
            raise ClientError(E_BAD_MESSAGE, f"{name} invalid message body size {size}")
        if size > self.limits.max_msg_size:
            raise ClientError(E_BAD_MESSAGE, f"{name} message too big {size} > {self.limits.max_msg_size}")
        if len(buf) - start < 4 + size:
            return None, 4 + size
        return bytes(buf[start + 4:start + 4 + size]), 4 + size

    def _pub(self, params: list[bytes], start: int) -> _Handled:
        topic = self._topic(params, "PUB", 2)
        body, n = self._message_body("PUB", start)
        if body is None:
            return None, n
        return (CMD_PUB, topic, body), n

    def _dpub(self, params: list[bytes], start: int) -> _Handled:
        topic = self._topic(params, "DPUB", 3)
        defer_ms = _base10(params[2])
        if defer_ms is None:
            raise ClientError(E_INVALID, f"DPUB could not parse timeout {_text(params[2])}")
        if defer_ms > self.limits.max_req_timeout_ms:
            raise ClientError(
                E_INVALID, f"DPUB timeout {defer_ms} out of range 0-{self.limits.max_req_timeout_ms}"
            )
        body, n = self._message_body("DPUB", start)
        if body is None:
            return None, n
        return (CMD_DPUB, topic, defer_ms, body), n

    def _mpub(self, params: list[bytes], start: int) -> _Handled:
        topic = self._topic(params, "MPUB", 2, code_prefix="E_BAD_TOPIC ")
        size = self._body_len(start)
        if size is None:
            return None, 4
        limits = self.limits
        if size <= 0:
            raise ClientError(E_BAD_BODY, f"MPUB invalid body size {size}")
        if size > limits.max_body_size:
            raise ClientError(E_BAD_BODY, f"MPUB body too big {size} > {limits.max_body_size}")
        buf = self._buf
        if len(buf) - start < 4 + size:
            return None, 4 + size
        if size < 4:
            raise ClientError(E_BAD_BODY, "MPUB failed to read message count")
        if isinstance(buf, bytes):  # one read's bytes: slices copy once
            bodies = self._mpub_bodies(buf, start + 4, size)
        else:  # a bytearray slice would copy each body twice: copy the whole once
            bodies = self._mpub_bodies(bytes(memoryview(buf)[start + 4:start + 4 + size]), 0, size)
        return (CMD_MPUB, topic, bodies), 4 + size

    def _mpub_bodies(self, data: bytes, pos: int, size: int) -> list[bytes]:
        """The message bodies of an MPUB body of ``size`` bytes (at least
        4) at ``data[pos:]``: ``[count][size][body]...``.

        Raises:
            ClientError: E_BAD_BODY (count) or E_BAD_MESSAGE (a message's size or body).
        """
        limits = self.limits
        end = pos + size
        count = _LEN.unpack_from(data, pos)[0]
        pos += 4
        if count <= 0 or count > (limits.max_body_size - 4) // 5:
            raise ClientError(E_BAD_BODY, f"MPUB invalid message count {count}")
        max_msg = limits.max_msg_size
        unpack = _LEN.unpack_from
        bodies: list[bytes] = []
        append = bodies.append
        for i in range(count):
            if end - pos < 4:
                raise ClientError(E_BAD_MESSAGE, f"MPUB failed to read message({i}) body size")
            msize = unpack(data, pos)[0]
            if msize <= 0:
                raise ClientError(E_BAD_MESSAGE, f"MPUB invalid message({i}) body size {msize}")
            if msize > max_msg:
                raise ClientError(E_BAD_MESSAGE, f"MPUB message too big {msize} > {max_msg}")
            pos += 4
            if end - pos < msize:
                raise ClientError(E_BAD_MESSAGE, "MPUB failed to read message body")
            append(data[pos:pos + msize])
            pos += msize
        return bodies

    def _rdy(self, params: list[bytes], start: int) -> _Handled:
        if self.state == STATE_CLOSING:
            return None, 0  # ignored after CLS, as in Go
        self._check_state((STATE_SUBSCRIBED,), "RDY")
        count = 1
        if len(params) > 1:
            parsed = _base10(params[1])
            if parsed is None:
                raise ClientError(E_INVALID, f"RDY could not parse count {_text(params[1])}")
            count = parsed
        if count > self.limits.max_rdy_count:
            raise ClientError(E_INVALID, f"RDY count {count} out of range 0-{self.limits.max_rdy_count}")
        return (CMD_RDY, count), 0

    def _fin(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_SUBSCRIBED, STATE_CLOSING), "FIN")
        return (CMD_FIN, self._msg_id(params, "FIN")), 0

    def _req(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_SUBSCRIBED, STATE_CLOSING), "REQ")
        if len(params) < 3:
            raise ClientError(E_INVALID, "REQ insufficient number of params")
        msg_id = self._msg_id(params, "REQ")
        timeout = _base10(params[2])
        if timeout is None:
            raise ClientError(E_INVALID, f"REQ could not parse timeout {_text(params[2])}")
        timeout = min(timeout, self.limits.max_req_timeout_ms)
        return (CMD_REQ, msg_id, timeout), 0

    def _touch(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_SUBSCRIBED, STATE_CLOSING), "TOUCH")
        return (CMD_TOUCH, self._msg_id(params, "TOUCH")), 0

    def _cls(self, params: list[bytes], start: int) -> _Handled:
        self._check_state((STATE_SUBSCRIBED,), "CLS")
        self.state = STATE_CLOSING
        return (CMD_CLS,), 0

    def _nop(self, params: list[bytes], start: int) -> _Handled:
        return (CMD_NOP,), 0


# command name -> handler, kept outside the instances: a parser that held
# its own bound methods would be a reference cycle, and its buffer (up to
# max_command_size bytes) would outlive its connection until the cycle
# collector ran
_DISPATCH = {
    b"FIN": V2ServerParser._fin,
    b"RDY": V2ServerParser._rdy,
    b"REQ": V2ServerParser._req,
    b"PUB": V2ServerParser._pub,
    b"MPUB": V2ServerParser._mpub,
    b"DPUB": V2ServerParser._dpub,
    b"NOP": V2ServerParser._nop,
    b"TOUCH": V2ServerParser._touch,
    b"SUB": V2ServerParser._sub,
    b"CLS": V2ServerParser._cls,
    b"AUTH": V2ServerParser._auth,
    b"IDENTIFY": V2ServerParser._identify,
}
