"""V2ServerParser: commands, incremental input, state machine, exact errors.

Error texts follow Go nsqd v1.2.1's nsqd/protocol_v2.go.
"""

from __future__ import annotations

import struct

import pytest

from nsq.protocol import commands as c
from nsq.protocol.errors import ClientError, ProtocolError, ReadError
from nsq.protocol.frames import MAGIC_V2
from nsq.protocol.v2 import (
    CMD_AUTH,
    CMD_CLS,
    CMD_DPUB,
    CMD_FIN,
    CMD_FIN_MANY,
    CMD_IDENTIFY,
    CMD_MPUB,
    CMD_NOP,
    CMD_PUB,
    CMD_RDY,
    CMD_REQ,
    CMD_SUB,
    CMD_TOUCH,
    LINE_TOO_LONG,
    MAX_LINE_LENGTH,
    STATE_CLOSING,
    STATE_INIT,
    STATE_SUBSCRIBED,
    Limits,
    V2ServerParser,
)

MSG_ID = b"0123456789abcdef"
SUB = c.sub("topic", "chan")


def drain(parser: V2ServerParser) -> list[tuple]:
    out = []
    while (cmd := parser.next_command()) is not None:
        out.append(cmd)
    return out


def parse_all(data: bytes, limits: Limits | None = None, magic: bool = True) -> list[tuple]:
    parser = V2ServerParser(limits)
    parser.feed((MAGIC_V2 if magic else b"") + data)
    return drain(parser)


def parse_bytewise(data: bytes, limits: Limits | None = None) -> list[tuple]:
    parser = V2ServerParser(limits)
    out = []
    for i in range(len(MAGIC_V2 + data)):
        parser.feed((MAGIC_V2 + data)[i:i + 1])
        out.extend(drain(parser))
    return out


def parse_error(data: bytes, limits: Limits | None = None, *, heartbeats: bool = True) -> ClientError:
    """Parse ``data`` (after the magic) and return the ClientError it raises."""
    parser = V2ServerParser(limits)
    parser.heartbeats_enabled = heartbeats
    parser.feed(MAGIC_V2 + data)
    with pytest.raises(ClientError) as info:
        drain(parser)
    return info.value


# -- every command ---------------------------------------------------------

COMMANDS = [
    pytest.param(b"", c.identify({"client_id": "x", "feature_negotiation": True}),
                 (CMD_IDENTIFY, {"client_id": "x", "feature_negotiation": True}), id="IDENTIFY"),
    pytest.param(b"", c.auth("s3cret"), (CMD_AUTH, b"s3cret"), id="AUTH"),
    pytest.param(b"", c.sub("t.1_a-b", "c#ephemeral"), (CMD_SUB, "t.1_a-b", "c#ephemeral"), id="SUB"),
    pytest.param(b"", c.pub("t", b"hello\nworld"), (CMD_PUB, "t", b"hello\nworld"), id="PUB"),
    pytest.param(b"", c.mpub("t", [b"a", b"bc", b"\x00\n"]), (CMD_MPUB, "t", [b"a", b"bc", b"\x00\n"]),
                 id="MPUB"),
    pytest.param(b"", c.dpub("t", 1500, b"later"), (CMD_DPUB, "t", 1500, b"later"), id="DPUB"),
    pytest.param(SUB, c.rdy(10), (CMD_RDY, 10), id="RDY"),
    pytest.param(SUB, c.fin(MSG_ID), (CMD_FIN, MSG_ID), id="FIN"),
    pytest.param(SUB, c.req(MSG_ID, 500), (CMD_REQ, MSG_ID, 500), id="REQ"),
    pytest.param(SUB, c.touch(MSG_ID), (CMD_TOUCH, MSG_ID), id="TOUCH"),
    pytest.param(SUB, c.cls(), (CMD_CLS,), id="CLS"),
    pytest.param(b"", c.nop(), (CMD_NOP,), id="NOP"),
]


@pytest.mark.parametrize("prefix, data, expected", COMMANDS)
def test_every_command_parses(prefix, data, expected):
    cmds = parse_all(prefix + data)
    assert cmds[-1] == expected
    assert len(cmds) == (2 if prefix else 1)


@pytest.mark.parametrize("prefix, data, expected", COMMANDS)
def test_every_command_bytewise(prefix, data, expected):
    assert parse_bytewise(prefix + data) == parse_all(prefix + data)


def test_command_stream_all_at_once_equals_bytewise():
    stream = b"".join([
        c.identify({"client_id": "c", "heartbeat_interval": 30000}),
        c.auth(b"secret"),
        c.pub("t", b"x" * 100),
        c.mpub("t", [b"1", b"22", b"333"]),
        c.dpub("t", 0, b"d"),
        c.nop(),
        c.sub("t", "ch"),
        c.rdy(5),
        c.fin(MSG_ID),
        c.req(MSG_ID, 0),
        c.touch(MSG_ID),
        c.pub("t2", b"after sub"),
        c.cls(),
        c.rdy(7),  # ignored after CLS
        c.fin(MSG_ID),
        c.nop(),
    ])
    expected = [
        (CMD_IDENTIFY, {"client_id": "c", "heartbeat_interval": 30000}),
        (CMD_AUTH, b"secret"),
        (CMD_PUB, "t", b"x" * 100),
        (CMD_MPUB, "t", [b"1", b"22", b"333"]),
        (CMD_DPUB, "t", 0, b"d"),
        (CMD_NOP,),
        (CMD_SUB, "t", "ch"),
        (CMD_RDY, 5),
        (CMD_FIN, MSG_ID),
        (CMD_REQ, MSG_ID, 0),
        (CMD_TOUCH, MSG_ID),
        (CMD_PUB, "t2", b"after sub"),
        (CMD_CLS,),
        (CMD_FIN, MSG_ID),
        (CMD_NOP,),
    ]
    assert parse_all(stream) == expected
    assert parse_bytewise(stream) == expected


def test_partial_command_returns_none_and_keeps_bytes():
    parser = V2ServerParser()
    parser.feed(MAGIC_V2 + b"PUB t\n\x00\x00")
    assert parser.next_command() is None
    assert parser.buffered == len(b"PUB t\n\x00\x00")
    parser.feed(b"\x00\x03ab")
    assert parser.next_command() is None
    parser.feed(b"cNOP\n")
    assert parser.next_command() == (CMD_PUB, "t", b"abc")
    assert parser.next_command() == (CMD_NOP,)
    assert parser.next_command() is None
    assert parser.buffered == 0


def test_magic_split_across_feeds():
    parser = V2ServerParser()
    parser.feed(b"  ")
    assert parser.next_command() is None
    parser.feed(b"V")
    assert parser.next_command() is None
    parser.feed(b"2NOP")
    assert parser.next_command() is None
    parser.feed(b"\n")
    assert parser.next_command() == (CMD_NOP,)


def test_no_magic_expected():
    parser = V2ServerParser(expect_magic=False)
    parser.feed(c.nop())
    assert parser.next_command() == (CMD_NOP,)


def test_crlf_line_endings():
    stream = (
        b"IDENTIFY\r\n" + struct.pack(">i", 2) + b"{}"
        + b"PUB t\r\n" + struct.pack(">i", 3) + b"abc"
        + b"MPUB t\r\n" + struct.pack(">i", 9) + struct.pack(">i", 1) + struct.pack(">i", 1) + b"z"
        + b"DPUB t 10\r\n" + struct.pack(">i", 1) + b"d"
        + b"SUB t c\r\n"
        + b"RDY 3\r\n"
        + b"FIN " + MSG_ID + b"\r\n"
        + b"REQ " + MSG_ID + b" 20\r\n"
        + b"TOUCH " + MSG_ID + b"\r\n"
        + b"NOP\r\n"
        + b"CLS\r\n"
    )
    expected = [
        (CMD_IDENTIFY, {}),
        (CMD_PUB, "t", b"abc"),
        (CMD_MPUB, "t", [b"z"]),
        (CMD_DPUB, "t", 10, b"d"),
        (CMD_SUB, "t", "c"),
        (CMD_RDY, 3),
        (CMD_FIN, MSG_ID),
        (CMD_REQ, MSG_ID, 20),
        (CMD_TOUCH, MSG_ID),
        (CMD_NOP,),
        (CMD_CLS,),
    ]
    assert parse_all(stream) == expected
    assert parse_bytewise(stream) == expected


def test_state_transitions():
    parser = V2ServerParser()
    assert parser.state == STATE_INIT
    parser.feed(MAGIC_V2 + SUB)
    drain(parser)
    assert parser.state == STATE_SUBSCRIBED
    parser.feed(c.cls())
    drain(parser)
    assert parser.state == STATE_CLOSING


def test_identify_twice_before_sub_is_allowed():
    data = c.identify({"a": 1}) + c.identify({"b": 2})
    assert parse_all(data) == [(CMD_IDENTIFY, {"a": 1}), (CMD_IDENTIFY, {"b": 2})]


def test_rdy_defaults_to_one_and_accepts_bounds():
    assert parse_all(SUB + b"RDY\n")[-1] == (CMD_RDY, 1)
    assert parse_all(SUB + c.rdy(0))[-1] == (CMD_RDY, 0)
    assert parse_all(SUB + c.rdy(2500))[-1] == (CMD_RDY, 2500)


def test_rdy_ignored_after_cls():
    cmds = parse_all(SUB + c.cls() + c.rdy(5) + c.rdy(99999) + c.nop())
    assert cmds == [(CMD_SUB, "topic", "chan"), (CMD_CLS,), (CMD_NOP,)]


def test_fin_req_touch_allowed_after_cls():
    cmds = parse_all(SUB + c.cls() + c.fin(MSG_ID) + c.req(MSG_ID, 1) + c.touch(MSG_ID))
    assert cmds[2:] == [(CMD_FIN, MSG_ID), (CMD_REQ, MSG_ID, 1), (CMD_TOUCH, MSG_ID)]


def test_req_timeout_clamped_to_max():
    limits = Limits(max_req_timeout_ms=1000)
    assert parse_all(SUB + c.req(MSG_ID, 5000), limits)[-1] == (CMD_REQ, MSG_ID, 1000)
    assert parse_all(SUB + c.req(MSG_ID, 1000), limits)[-1] == (CMD_REQ, MSG_ID, 1000)
    assert parse_all(SUB + c.req(MSG_ID, 999), limits)[-1] == (CMD_REQ, MSG_ID, 999)


def test_dpub_timeout_at_max_is_allowed():
    limits = Limits(max_req_timeout_ms=1000)
    assert parse_all(c.dpub("t", 1000, b"x"), limits) == [(CMD_DPUB, "t", 1000, b"x")]


def test_pub_at_max_size_is_allowed():
    limits = Limits(max_msg_size=1024)
    assert parse_all(c.pub("t", b"x" * 1024), limits) == [(CMD_PUB, "t", b"x" * 1024)]


def test_pub_after_sub_and_nop_extra_params():
    assert parse_all(SUB + c.pub("t", b"b") + b"NOP extra\n")[1:] == [(CMD_PUB, "t", b"b"), (CMD_NOP,)]


# -- bad magic ---------------------------------------------------------------

@pytest.mark.parametrize("magic", [b"  V1", b"GET ", b"V2  ", b"\x00\x00\x00\x00"])
def test_bad_magic(magic):
    parser = V2ServerParser()
    parser.feed(magic + c.nop())
    with pytest.raises(ProtocolError) as info:
        parser.next_command()
    err = info.value
    assert err.wire_text() == "E_BAD_PROTOCOL"
    assert err.wire_bytes() == b"E_BAD_PROTOCOL"
    assert err.code == "E_BAD_PROTOCOL"
    assert err.fatal is True


def test_bad_magic_detected_only_after_four_bytes():
    parser = V2ServerParser()
    parser.feed(b"  V")
    assert parser.next_command() is None
    parser.feed(b"1")
    with pytest.raises(ProtocolError):
        parser.next_command()


# -- exact errors --------------------------------------------------------------

ERRORS = [
    pytest.param(b"BOGUS\n", None, "E_INVALID", "E_INVALID invalid command BOGUS", id="unknown-command"),
    pytest.param(b"\n", None, "E_INVALID", "E_INVALID invalid command ", id="empty-line"),
    pytest.param(b"nop\n", None, "E_INVALID", "E_INVALID invalid command nop", id="lowercase"),
    pytest.param(SUB + b"FIN 0123456789abcde\n", None, "E_INVALID", "E_INVALID Invalid Message ID",
                 id="fin-15-byte-id"),
    pytest.param(SUB + b"FIN 0123456789abcdef0\n", None, "E_INVALID", "E_INVALID Invalid Message ID",
                 id="fin-17-byte-id"),
    pytest.param(SUB + b"FIN\n", None, "E_INVALID", "E_INVALID FIN insufficient number of params",
                 id="fin-no-id"),
    pytest.param(c.fin(MSG_ID), None, "E_INVALID", "E_INVALID cannot FIN in current state",
                 id="fin-before-sub"),
    pytest.param(c.req(MSG_ID, 1), None, "E_INVALID", "E_INVALID cannot REQ in current state",
                 id="req-before-sub"),
    pytest.param(c.touch(MSG_ID), None, "E_INVALID", "E_INVALID cannot TOUCH in current state",
                 id="touch-before-sub"),
    pytest.param(c.rdy(1), None, "E_INVALID", "E_INVALID cannot RDY in current state",
                 id="rdy-before-sub"),
    pytest.param(c.cls(), None, "E_INVALID", "E_INVALID cannot CLS in current state",
                 id="cls-before-sub"),
    pytest.param(SUB + c.cls() + c.cls(), None, "E_INVALID", "E_INVALID cannot CLS in current state",
                 id="cls-twice"),
    pytest.param(SUB + c.rdy(2501), None, "E_INVALID", "E_INVALID RDY count 2501 out of range 0-2500",
                 id="rdy-over-max"),
    pytest.param(SUB + b"RDY x\n", None, "E_INVALID", "E_INVALID RDY could not parse count x",
                 id="rdy-not-a-number"),
    pytest.param(SUB + b"RDY -1\n", None, "E_INVALID", "E_INVALID RDY could not parse count -1",
                 id="rdy-negative"),
    pytest.param(SUB + b"REQ " + MSG_ID + b"\n", None, "E_INVALID",
                 "E_INVALID REQ insufficient number of params", id="req-no-timeout"),
    pytest.param(SUB + b"REQ " + MSG_ID + b" 1s\n", None, "E_INVALID",
                 "E_INVALID REQ could not parse timeout 1s", id="req-bad-timeout"),
    pytest.param(SUB + b"REQ abc 10\n", None, "E_INVALID", "E_INVALID Invalid Message ID",
                 id="req-bad-id"),
    pytest.param(SUB + b"TOUCH abc\n", None, "E_INVALID", "E_INVALID Invalid Message ID",
                 id="touch-bad-id"),
    pytest.param(c.pub("t", b"x" * 2000), Limits(max_msg_size=1024), "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE PUB message too big 2000 > 1024", id="pub-too-big"),
    pytest.param(c.pub("t", b""), None, "E_BAD_MESSAGE", "E_BAD_MESSAGE PUB invalid message body size 0",
                 id="pub-empty-body"),
    pytest.param(b"PUB t\n" + struct.pack(">i", -5), None, "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE PUB invalid message body size -5", id="pub-negative-size"),
    pytest.param(c.pub("a!b", b"x"), None, "E_BAD_TOPIC", 'E_BAD_TOPIC PUB topic name "a!b" is not valid',
                 id="pub-bad-topic"),
    pytest.param(b"PUB\n", None, "E_INVALID", "E_INVALID PUB insufficient number of parameters",
                 id="pub-no-topic"),
    pytest.param(c.mpub("x!", [b"a"]), None, "E_BAD_TOPIC",
                 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "x!" is not valid', id="mpub-bad-topic"),
    pytest.param(c.mpub("t", []), None, "E_BAD_BODY", "E_BAD_BODY MPUB invalid message count 0",
                 id="mpub-count-0"),
    pytest.param(c.mpub("t", [b"a", b""]), None, "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE MPUB invalid message(1) body size 0", id="mpub-empty-message"),
    pytest.param(c.mpub("t", [b"a" * 2000]), Limits(max_msg_size=1024), "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE MPUB message too big 2000 > 1024", id="mpub-message-too-big"),
    pytest.param(c.mpub("t", [b"a" * 2000]), Limits(max_body_size=1024), "E_BAD_BODY",
                 "E_BAD_BODY MPUB body too big 2008 > 1024", id="mpub-body-too-big"),
    pytest.param(b"MPUB t\n" + struct.pack(">i", 0), None, "E_BAD_BODY", "E_BAD_BODY MPUB invalid body size 0",
                 id="mpub-empty-body"),
    pytest.param(b"MPUB t\n" + struct.pack(">ii", 8, 2) + struct.pack(">i", 0), None, "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE MPUB invalid message(0) body size 0", id="mpub-zero-message"),
    pytest.param(b"MPUB t\n" + struct.pack(">iii", 12, 2, 1) + b"a" + b"xyz", None, "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE MPUB failed to read message(1) body size", id="mpub-truncated-count"),
    pytest.param(b"MPUB t\n" + struct.pack(">iii", 10, 1, 5) + b"ab", None, "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE MPUB failed to read message body", id="mpub-truncated-body"),
    pytest.param(c.dpub("t", 3600001, b"x"), None, "E_INVALID",
                 "E_INVALID DPUB timeout 3600001 out of range 0-3600000", id="dpub-timeout-over-max"),
    pytest.param(c.dpub("t", 1001, b"x"), Limits(max_req_timeout_ms=1000), "E_INVALID",
                 "E_INVALID DPUB timeout 1001 out of range 0-1000", id="dpub-timeout-over-custom-max"),
    pytest.param(b"DPUB t x\n", None, "E_INVALID", "E_INVALID DPUB could not parse timeout x",
                 id="dpub-bad-timeout"),
    pytest.param(b"DPUB t\n", None, "E_INVALID", "E_INVALID DPUB insufficient number of parameters",
                 id="dpub-no-timeout"),
    pytest.param(c.dpub("t", 5, b""), None, "E_BAD_MESSAGE", "E_BAD_MESSAGE DPUB invalid message body size 0",
                 id="dpub-empty-body"),
    pytest.param(c.dpub("t", 5, b"x" * 2000), Limits(max_msg_size=1024), "E_BAD_MESSAGE",
                 "E_BAD_MESSAGE DPUB message too big 2000 > 1024", id="dpub-too-big"),
    pytest.param(SUB + SUB, None, "E_INVALID", "E_INVALID cannot SUB in current state", id="sub-twice"),
    pytest.param(SUB + c.cls() + SUB, None, "E_INVALID", "E_INVALID cannot SUB in current state",
                 id="sub-after-cls"),
    pytest.param(b"SUB t\n", None, "E_INVALID", "E_INVALID SUB insufficient number of parameters",
                 id="sub-no-channel"),
    pytest.param(c.sub("t?", "c"), None, "E_BAD_TOPIC", 'E_BAD_TOPIC SUB topic name "t?" is not valid',
                 id="sub-bad-topic"),
    pytest.param(c.sub("t", "c" * 65), None, "E_BAD_CHANNEL",
                 'E_BAD_CHANNEL SUB channel name "' + "c" * 65 + '" is not valid', id="sub-bad-channel"),
    pytest.param(SUB + c.identify({}), None, "E_INVALID", "E_INVALID cannot IDENTIFY in current state",
                 id="identify-after-sub"),
    pytest.param(b"IDENTIFY\n" + struct.pack(">i", 5) + b"hello", None, "E_BAD_BODY",
                 "E_BAD_BODY IDENTIFY failed to decode JSON body", id="identify-not-json"),
    pytest.param(b"IDENTIFY\n" + struct.pack(">i", 2) + b"[]", None, "E_BAD_BODY",
                 "E_BAD_BODY IDENTIFY failed to decode JSON body", id="identify-json-array"),
    pytest.param(b"IDENTIFY\n" + struct.pack(">i", 2) + b"\xff\xfe", None, "E_BAD_BODY",
                 "E_BAD_BODY IDENTIFY failed to decode JSON body", id="identify-not-utf8"),
    pytest.param(b"IDENTIFY\n" + struct.pack(">i", 0), None, "E_BAD_BODY",
                 "E_BAD_BODY IDENTIFY invalid body size 0", id="identify-empty"),
    pytest.param(c.identify({"a": "x" * 2000}), Limits(max_body_size=1024), "E_BAD_BODY",
                 "E_BAD_BODY IDENTIFY body too big 2009 > 1024", id="identify-too-big"),
    pytest.param(SUB + c.auth("s"), None, "E_INVALID", "E_INVALID cannot AUTH in current state",
                 id="auth-after-sub"),
    pytest.param(b"AUTH x\n" + struct.pack(">i", 1) + b"s", None, "E_INVALID",
                 "E_INVALID AUTH invalid number of parameters", id="auth-params"),
    pytest.param(c.auth(b""), None, "E_BAD_BODY", "E_BAD_BODY AUTH invalid body size 0", id="auth-empty"),
    pytest.param(c.auth(b"s" * 2000), Limits(max_body_size=1024), "E_BAD_BODY",
                 "E_BAD_BODY AUTH body too big 2000 > 1024", id="auth-too-big"),
]


@pytest.mark.parametrize("data, limits, code, text", ERRORS)
def test_exact_errors(data, limits, code, text):
    err = parse_error(data, limits)
    assert err.code == code
    assert err.wire_text() == text
    assert str(err) == text
    assert err.wire_bytes() == text.encode()
    assert err.fatal is True


@pytest.mark.parametrize("data, limits, code, text", ERRORS)
def test_exact_errors_bytewise(data, limits, code, text):
    parser = V2ServerParser(limits)
    stream = MAGIC_V2 + data
    with pytest.raises(ClientError) as info:
        for i in range(len(stream)):
            parser.feed(stream[i:i + 1])
            drain(parser)
    assert info.value.wire_text() == text
    assert info.value.fatal is True


def test_sub_with_heartbeats_disabled():
    err = parse_error(SUB, heartbeats=False)
    assert err.wire_text() == "E_INVALID cannot SUB with heartbeats disabled"
    assert err.fatal is True


def test_oversized_pub_rejected_before_body_arrives():
    parser = V2ServerParser(Limits(max_msg_size=1024))
    parser.feed(MAGIC_V2 + b"PUB t\n" + struct.pack(">i", 2000))
    with pytest.raises(ClientError) as info:
        parser.next_command()
    assert info.value.wire_text() == "E_BAD_MESSAGE PUB message too big 2000 > 1024"


def test_bad_topic_rejected_before_body_arrives():
    parser = V2ServerParser()
    parser.feed(MAGIC_V2 + b"MPUB x!\n")
    with pytest.raises(ClientError) as info:
        parser.next_command()
    assert info.value.code == "E_BAD_TOPIC"


def test_deeply_nested_identify_json_is_a_client_error():
    body = b"[" * 100_000
    err = parse_error(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert err.wire_text() == "E_BAD_BODY IDENTIFY failed to decode JSON body"
    assert err.fatal is True


# -- line length -----------------------------------------------------------------

def test_line_longer_than_max_without_newline():
    """Go's ReadSlice fails once its 16 KiB buffer is full without a newline."""
    parser = V2ServerParser()
    parser.feed(MAGIC_V2 + b"A" * (MAX_LINE_LENGTH - 1))
    assert parser.next_command() is None  # one byte left for the newline
    parser.feed(b"A")
    with pytest.raises(ReadError) as info:
        parser.next_command()
    assert info.value.fatal is True
    assert info.value.answer is False  # Go closes without an error frame
    assert info.value.wire_text() == "E_BAD_PROTOCOL " + LINE_TOO_LONG


def test_long_line_rejected_the_same_way_whatever_the_chunking():
    """A valid-looking but overlong line must not depend on how it arrives."""
    stream = MAGIC_V2 + b"NOP " + b"x" * MAX_LINE_LENGTH + b"\n"
    texts = []
    for chunk in (len(stream), 4096, 1):
        parser = V2ServerParser()
        with pytest.raises(ReadError) as info:
            for i in range(0, len(stream), chunk):
                parser.feed(stream[i:i + chunk])
                drain(parser)
        texts.append(info.value.wire_text())
    assert len(set(texts)) == 1


def test_line_of_max_length_is_accepted():
    """The longest line Go reads: 16383 bytes and the newline."""
    line = b"NOP " + b"x" * (MAX_LINE_LENGTH - 5) + b"\n"
    assert len(line) == MAX_LINE_LENGTH
    assert parse_all(line) == [(CMD_NOP,)]
    assert parse_bytewise(line) == [(CMD_NOP,)]
    with pytest.raises(ReadError):
        parse_all(b"NOP " + b"x" * (MAX_LINE_LENGTH - 4) + b"\n")


def test_back_to_back_fins_come_as_one_command():
    ids = [b"%016x" % i for i in range(3)]
    cmds = parse_all(SUB + b"".join(c.fin(i) for i in ids) + c.rdy(7) + c.fin(ids[0]))
    assert cmds[1:] == [(CMD_FIN_MANY, ids), (CMD_RDY, 7), (CMD_FIN, ids[0])]


def test_fin_batch_stops_at_an_incomplete_fin():
    p = V2ServerParser()
    p.feed(MAGIC_V2 + SUB)
    assert p.next_command()[0] != CMD_FIN
    data = c.fin(b"a" * 16) + c.fin(b"b" * 16)
    p.feed(data[:-5])
    assert p.next_command() == (CMD_FIN, b"a" * 16)
    assert p.next_command() is None
    p.feed(data[-5:])
    assert p.next_command() == (CMD_FIN, b"b" * 16)


def test_fin_batch_before_subscribe_is_still_refused():
    p = V2ServerParser()
    p.feed(MAGIC_V2 + c.fin(b"a" * 16) + c.fin(b"b" * 16))
    with pytest.raises(ClientError, match="cannot FIN in current state"):
        p.next_command()


def test_fin_batch_never_takes_a_newline_inside_an_id():
    """``FIN 0123\\n<11 bytes>\\n`` after a FIN is a line with a 4-byte id,
    as Go reads it (fatal E_INVALID), not a 16-byte id holding a newline."""
    p = V2ServerParser()
    p.feed(MAGIC_V2 + SUB + c.fin(b"a" * 16) + b"FIN 0123\n456789abcde\n")
    assert p.next_command()[0] != CMD_FIN
    assert p.next_command() == (CMD_FIN, b"a" * 16)
    with pytest.raises(ClientError) as info:
        p.next_command()
    assert info.value.wire_text() == "E_INVALID Invalid Message ID"


@pytest.mark.parametrize("data", [
    b"PUB known\n" + struct.pack(">i", 0),                      # empty body
    b"PUB known\n" + struct.pack(">i", -1),                     # negative size
    b"PUB known\n" + struct.pack(">i", 1025) + b"x" * 1025,     # over --max-msg-size
    b"PUB known\r\n" + struct.pack(">i", 1) + b"x",             # \r\n line end
    b"PUB known extra\n" + struct.pack(">i", 1) + b"x",         # a parameter too many
    b"PUB known\n" + struct.pack(">i", 3) + b"ab",              # body not complete yet
    b"PUB known\n" + struct.pack(">i", 2) + b"abFIN " + b"0" * 16 + b"\n",  # a command follows
])
def test_pub_of_a_topic_seen_before_parses_as_any_pub(data):
    """A PUB to a topic whose name was checked before takes a shorter path;
    every outcome (command, error, bytes still needed) is the same as for a
    name never seen."""
    import nsq.protocol.v2 as v2

    def outcome():
        p = V2ServerParser(Limits(max_msg_size=1024))
        p.feed(MAGIC_V2 + SUB + data)
        out = [p.next_command()]
        try:
            while (cmd := p.next_command()) is not None:
                out.append(cmd)
        except ClientError as exc:
            out.append(exc.wire_text())
        return out, p.buffered

    v2._VALID_TOPICS.clear()
    cold = outcome()
    parse_all(b"PUB known\n" + struct.pack(">i", 1) + b"x")  # the name is now known
    assert b"known" in v2._VALID_TOPICS
    assert outcome() == cold


# -- take_publish: one whole PUB/MPUB read, parsed in place ---------------------

def _primed(limits: Limits | None = None, topic: str = "t") -> V2ServerParser:
    """A parser past the magic, with ``topic`` seen and nothing buffered."""
    parser = V2ServerParser(limits)
    parser.feed(MAGIC_V2 + c.pub(topic, b"seen"))
    assert drain(parser) == [(CMD_PUB, topic, b"seen")]
    return parser


TAKEN = [
    pytest.param(c.pub("t", b"hello\nworld"), (CMD_PUB, "t", b"hello\nworld"), id="PUB"),
    pytest.param(c.mpub("t", [b"one"]), (CMD_MPUB, "t", [b"one"]), id="MPUB-of-1"),
    pytest.param(c.mpub("t", [b"a", b"bc", b"\x00\n"]), (CMD_MPUB, "t", [b"a", b"bc", b"\x00\n"]), id="MPUB-of-3"),
]


@pytest.mark.parametrize("data, expected", TAKEN)
def test_take_publish_takes_one_whole_publish(data, expected):
    parser = _primed()
    assert parser.take_publish(data) == expected
    assert parser.buffered == 0 and parser.drained
    # the stream goes on as usual afterwards
    parser.feed(c.nop())
    assert drain(parser) == [(CMD_NOP,)]


@pytest.mark.parametrize("data", [
    pytest.param(c.pub("t", b"x") + c.nop(), id="more-than-one-command"),
    pytest.param(c.pub("t", b"hello")[:-1], id="partial-body"),
    pytest.param(c.pub("new", b"x"), id="topic-not-seen"),
    pytest.param(b"PUB t\r\n" + struct.pack(">i", 1) + b"x", id="crlf"),
    pytest.param(c.dpub("t", 5, b"x"), id="DPUB"),
    pytest.param(c.nop(), id="NOP"),
    pytest.param(c.sub("t", "c"), id="SUB"),
    pytest.param(c.sub("t", "c") + b"RDY", id="a line and 3 bytes"),
    pytest.param(b"PUB t\n" + struct.pack(">i", 1)[:3], id="a line and part of a size"),
    pytest.param(b"PUB t\n" + struct.pack(">i", 0), id="empty-body"),
    pytest.param(b"MPUB t\n" + struct.pack(">i", 2) + b"ab", id="mpub-short-count"),
])
def test_take_publish_leaves_everything_else_to_the_buffer(data):
    parser = _primed()
    assert parser.take_publish(data) is None
    assert parser.buffered == 0


def test_take_publish_needs_an_empty_buffer():
    parser = _primed()
    parser.feed(c.pub("t", b"abc")[:3])  # a partial command buffered
    assert parser.take_publish(c.pub("t", b"x")) is None
    fresh = V2ServerParser()  # the magic not read yet
    assert fresh.take_publish(c.pub("t", b"x")) is None


def _general(data: bytes, limits: Limits | None) -> list[tuple] | str:
    parser = _primed(limits)
    parser.feed(data)
    try:
        return drain(parser)
    except ClientError as exc:
        return exc.wire_text()


@pytest.mark.parametrize("data, limits", [
    *[pytest.param(p.values[0], p.values[1], id=p.id) for p in ERRORS
      if p.values[0].startswith((b"PUB", b"MPUB"))],
    *[pytest.param(p.values[0], None, id="ok-" + p.id) for p in TAKEN],
    pytest.param(c.pub("t", b"x" * 1024), Limits(max_msg_size=1024), id="pub-at-max"),
    pytest.param(c.mpub("t", [b"x" * 1025]), Limits(max_msg_size=1024), id="mpub-of-1-too-big"),
    pytest.param(b"MPUB t\n" + struct.pack(">iii", 9, 1, 2) + b"a", None, id="mpub-of-1-short-body"),
    pytest.param(b"MPUB t\n" + struct.pack(">iii", 9, 2, 1) + b"a", None, id="mpub-count-2-of-1"),
    pytest.param(b"MPUB t\n" + struct.pack(">ii", 4, 1), None, id="mpub-count-only"),
])
def test_take_publish_answers_as_the_general_path(data, limits):
    """Same command, or same error, as feed + next_command, for every PUB and
    MPUB (the topic seen first, so the in-place parse is tried)."""
    parser = _primed(limits)
    try:
        taken = parser.take_publish(data)
    except ClientError as exc:
        assert exc.fatal
        assert exc.wire_text() == _general(data, limits)
        return
    if taken is not None:
        assert [taken] == _general(data, limits)
