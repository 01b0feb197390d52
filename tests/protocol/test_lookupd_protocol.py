"""The nsqlookupd TCP protocol V1, sans-IO: V1ServerParser, V1ClientParser,
the encoders and decode_peer_info.

Error texts are Go nsqlookupd v1.2.1's (nsqlookupd/lookup_protocol_v1.go,
tcp.go). Every parse is also done one byte at a time and must give the same
commands and the same error.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsq.protocol.errors import E_BAD_BODY, E_BAD_PROTOCOL, E_INVALID, ClientError
from nsq.protocol.lookupd import (
    MAGIC_V1,
    MAX_IDENTIFY_BODY,
    MAX_LINE,
    PeerInfo,
    V1ClientParser,
    V1ServerParser,
    decode_peer_info,
    encode_identify,
    encode_ping,
    encode_register,
    encode_response,
    encode_unregister,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

IDENT = {"broadcast_address": "nsqd.example", "tcp_port": 4150, "http_port": 4151,
         "version": "1.2.1", "hostname": "box"}
IDENT_INFO = PeerInfo(remote_address="", hostname="box", broadcast_address="nsqd.example",
                      tcp_port=4150, http_port=4151, version="1.2.1")
IDENTIFY = encode_identify(IDENT)


def identify_raw(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


# -- running the parser ------------------------------------------------------------


def _drain(parser: V1ServerParser, out: list) -> None:
    while (cmd := parser.next_command()) is not None:
        out.append(cmd)


def _run(data: bytes, chunk: int | None) -> tuple[list[tuple], str | None, V1ServerParser]:
    parser = V1ServerParser()
    cmds: list[tuple] = []
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    try:
        for piece in pieces:
            parser.feed(piece)
            _drain(parser, cmds)
    except ClientError as exc:
        return cmds, exc.wire_text(), parser
    return cmds, None, parser


def parse(data: bytes, magic: bool = True) -> tuple[list[tuple], str | None]:
    """(commands, error text or None) for ``data``, fed whole and byte by byte."""
    data = (MAGIC_V1 if magic else b"") + data
    whole = _run(data, None)
    bytewise = _run(data, 1)
    assert whole[:2] == bytewise[:2], (whole[:2], bytewise[:2])
    return whole[0], whole[1]


def error_of(data: bytes, magic: bool = True) -> str:
    cmds, err = parse(data, magic)
    assert err is not None, f"no error; commands {cmds!r}"
    return err


# -- magic ---------------------------------------------------------------------------


def test_nothing_before_the_magic_is_complete():
    parser = V1ServerParser()
    for b in MAGIC_V1[:3]:
        parser.feed(bytes([b]))
        assert parser.next_command() is None
    parser.feed(MAGIC_V1[3:] + b"PIN")
    assert parser.next_command() is None
    parser.feed(b"G\n")
    assert parser.next_command() == ("PING",)
    assert parser.next_command() is None


@pytest.mark.parametrize("magic", [b"  V2", b"  v1", b"V1  ", b"PING", b"\x00\x00\x00\x00"])
def test_bad_magic_is_E_BAD_PROTOCOL_alone(magic):
    parser = V1ServerParser()
    parser.feed(magic + encode_ping())
    with pytest.raises(ClientError) as ei:
        parser.next_command()
    assert ei.value.code == E_BAD_PROTOCOL
    assert ei.value.wire_bytes() == b"E_BAD_PROTOCOL"
    assert ei.value.fatal
    assert error_of(magic + encode_ping(), magic=False) == "E_BAD_PROTOCOL"


# -- PING / IDENTIFY -----------------------------------------------------------------


def test_ping_before_identify():
    cmds, err = parse(encode_ping() + encode_ping())
    assert (cmds, err) == ([("PING",), ("PING",)], None)


def test_identify():
    cmds, err = parse(IDENTIFY + encode_ping())
    assert err is None
    assert cmds == [("IDENTIFY", IDENT_INFO), ("PING",)]


def test_identify_sets_identified_and_leaves_remote_address_to_caller():
    parser = V1ServerParser()
    parser.feed(MAGIC_V1)
    assert parser.next_command() is None
    assert parser.identified is False
    parser.feed(IDENTIFY)
    cmd = parser.next_command()
    assert cmd[0] == "IDENTIFY" and cmd[1].remote_address == ""
    assert parser.identified is True


def test_identify_waits_for_the_whole_body():
    parser = V1ServerParser()
    parser.feed(MAGIC_V1)
    for i in range(len(IDENTIFY) - 1):
        parser.feed(IDENTIFY[i : i + 1])
        assert parser.next_command() is None, i
    assert parser.identified is False
    parser.feed(IDENTIFY[-1:])
    assert parser.next_command() == ("IDENTIFY", IDENT_INFO)


def test_identify_ignores_unknown_keys_and_nulls():
    body = dict(IDENT, hostname=None, extra={"nested": [1, 2]}, remote_address="1.2.3.4:5")
    cmds, err = parse(encode_identify(body))
    assert err is None
    info = cmds[0][1]
    assert info.hostname == ""
    assert info.broadcast_address == "nsqd.example"
    assert (info.tcp_port, info.http_port, info.version) == (4150, 4151, "1.2.1")


def test_identify_invalid_utf8_in_a_string_is_replaced_as_go_does():
    body = json.dumps(dict(IDENT, hostname="HOST")).encode().replace(b"HOST", b"ho\xffst")
    cmds, err = parse(identify_raw(body))
    assert err is None
    assert cmds[0][1].hostname == "ho\ufffdst"


@pytest.mark.parametrize("missing", ["broadcast_address", "tcp_port", "http_port", "version"])
def test_identify_missing_field(missing):
    body = {k: v for k, v in IDENT.items() if k != missing}
    assert error_of(encode_identify(body)) == "E_BAD_BODY IDENTIFY missing fields"


@pytest.mark.parametrize("zeroed", [
    {"broadcast_address": ""}, {"tcp_port": 0}, {"http_port": 0}, {"version": ""},
    {"broadcast_address": None},
])
def test_identify_empty_field_counts_as_missing(zeroed):
    assert error_of(encode_identify(dict(IDENT, **zeroed))) == "E_BAD_BODY IDENTIFY missing fields"


def test_identify_null_or_empty_object_is_missing_fields():
    assert error_of(identify_raw(b"null")) == "E_BAD_BODY IDENTIFY missing fields"
    assert error_of(identify_raw(b"{}")) == "E_BAD_BODY IDENTIFY missing fields"


@pytest.mark.parametrize("body", [
    b"",
    b"{",
    b"not json",
    b"[]",
    b'"a string"',
    b"42",
    b"{}{}",
    json.dumps(dict(IDENT, tcp_port="4150")).encode(),
    json.dumps(dict(IDENT, tcp_port=4150.5)).encode(),
    json.dumps(dict(IDENT, http_port=True)).encode(),
    json.dumps(dict(IDENT, tcp_port=2**63)).encode(),
    json.dumps(dict(IDENT, hostname=5)).encode(),
    json.dumps(dict(IDENT, version=1.2)).encode(),
    json.dumps(dict(IDENT, broadcast_address=["a"])).encode(),
    json.dumps(dict(IDENT, remote_address={})).encode(),
    json.dumps(dict(IDENT)).encode()[:-1] + b',"x":NaN}',
    json.dumps(dict(IDENT)).encode()[:-1] + b',"x":-Infinity}',
    json.dumps(IDENT).encode("utf-16-le"),
    b"\xef\xbb\xbf" + json.dumps(IDENT).encode(),
], ids=lambda b: repr(b[:40]))
def test_identify_bad_json(body):
    assert error_of(identify_raw(body)) == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_identify_accepts_negative_and_large_int_ports_as_go_ints():
    cmds, err = parse(encode_identify(dict(IDENT, tcp_port=-1, http_port=2**63 - 1)))
    assert err is None
    assert (cmds[0][1].tcp_port, cmds[0][1].http_port) == (-1, 2**63 - 1)


@pytest.mark.parametrize("size", [-1, -(2**31), MAX_IDENTIFY_BODY + 1])
def test_identify_bad_body_size(size):
    err = error_of(b"IDENTIFY\n" + struct.pack(">i", size) + b"{}")
    assert err == "E_BAD_BODY IDENTIFY failed to read body"


def test_second_identify_is_refused_before_its_body_is_read():
    parser = V1ServerParser()
    parser.feed(MAGIC_V1 + IDENTIFY + b"IDENTIFY\n")  # no size, no body
    assert parser.next_command()[0] == "IDENTIFY"
    with pytest.raises(ClientError) as ei:
        parser.next_command()
    assert ei.value.wire_text() == "E_INVALID cannot IDENTIFY again"
    assert error_of(IDENTIFY + IDENTIFY) == "E_INVALID cannot IDENTIFY again"


# -- REGISTER / UNREGISTER -----------------------------------------------------------


@pytest.mark.parametrize("line", [
    b"REGISTER t\n", b"REGISTER t c\n", b"UNREGISTER t\n", b"UNREGISTER t c\n",
    b"REGISTER\n", b"UNREGISTER\n", b"REGISTER x!\n",
])
def test_register_before_identify(line):
    cmds, err = parse(encode_ping() + line)
    assert cmds == [("PING",)]
    assert err == "E_INVALID client must IDENTIFY"


def test_register_and_unregister():
    data = IDENTIFY + b"".join([
        encode_register("t"), encode_register("t", "c"), encode_unregister("t", "c"),
        encode_unregister("t"), encode_register("t#ephemeral", "c#ephemeral"), encode_ping(),
    ])
    cmds, err = parse(data)
    assert err is None
    assert cmds[1:] == [
        ("REGISTER", "t", ""),
        ("REGISTER", "t", "c"),
        ("UNREGISTER", "t", "c"),
        ("UNREGISTER", "t", ""),
        ("REGISTER", "t#ephemeral", "c#ephemeral"),
        ("PING",),
    ]


def test_extra_params_are_ignored_and_crlf_is_trimmed():
    cmds, err = parse(IDENTIFY + b"REGISTER t c extra\nREGISTER t2 c2\r\nPING\r\n  PING  \n")
    assert err is None
    assert cmds[1:] == [("REGISTER", "t", "c"), ("REGISTER", "t2", "c2"), ("PING",), ("PING",)]


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
@pytest.mark.parametrize("line", ["{}\n", "{} \n", "{}\r\n"])
def test_insufficient_params(command, line):
    err = error_of(IDENTIFY + line.format(command).encode())
    assert err == f"E_INVALID {command} insufficient number of params"


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
@pytest.mark.parametrize("topic", ["x!", "a" * 65, "t#ephemeralx", "t:c", "t#ephemeral#ephemeral"])
def test_bad_topic(command, topic):
    err = error_of(IDENTIFY + f"{command} {topic} good\n".encode())
    assert err == f"E_BAD_TOPIC {command} topic name '{topic}' is not valid"


def test_empty_topic_from_a_double_space():
    # Go splits on single spaces: "REGISTER  t" has an empty topic
    assert error_of(IDENTIFY + b"REGISTER  t\n") == "E_BAD_TOPIC REGISTER topic name '' is not valid"


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
@pytest.mark.parametrize("channel", ["c!", "c" * 65, "c#eph"])
def test_bad_channel(command, channel):
    err = error_of(IDENTIFY + f"{command} t {channel}\n".encode())
    assert err == f"E_BAD_CHANNEL {command} channel name '{channel}' is not valid"


def test_topic_is_checked_before_channel():
    assert error_of(IDENTIFY + b"REGISTER x! c!\n") == "E_BAD_TOPIC REGISTER topic name 'x!' is not valid"


def test_longest_valid_names():
    topic, channel = "t" * 54 + "#ephemeral", "c" * 64
    cmds, err = parse(IDENTIFY + encode_register(topic, channel))
    assert err is None and cmds[1] == ("REGISTER", topic, channel)


# -- unknown commands and framing ----------------------------------------------------


@pytest.mark.parametrize("line,name", [
    (b"FOO\n", "FOO"), (b"ping\n", "ping"), (b"FOO bar baz\n", "FOO"), (b"SUB t c\n", "SUB"),
])
@pytest.mark.parametrize("identified", [False, True])
def test_invalid_command(line, name, identified):
    err = error_of((IDENTIFY if identified else b"") + line)
    assert err == f"E_INVALID invalid command {name}"


def test_empty_line_is_an_invalid_empty_command():
    assert error_of(b"\n") == "E_INVALID invalid command "


def test_commands_after_an_error_are_not_parsed():
    cmds, err = parse(encode_ping() + b"FOO\n" + encode_ping())
    assert cmds == [("PING",)]
    assert err == "E_INVALID invalid command FOO"


def test_partial_line_waits():
    parser = V1ServerParser()
    parser.feed(MAGIC_V1 + b"PI")
    assert parser.next_command() is None
    parser.feed(b"NG")
    assert parser.next_command() is None
    parser.feed(b"\nPI")
    assert parser.next_command() == ("PING",)
    assert parser.next_command() is None


def test_overlong_line_is_refused():
    parser = V1ServerParser()
    parser.feed(MAGIC_V1 + b"R" * (MAX_LINE - 1))
    assert parser.next_command() is None  # MAX_LINE - 1 bytes may still end in a newline
    parser.feed(b"R")
    with pytest.raises(ClientError) as ei:
        parser.next_command()
    assert ei.value.code == E_INVALID and ei.value.fatal


@pytest.mark.parametrize("chunk", [None, 1000, 1])
def test_overlong_line_is_refused_however_it_arrives(chunk):
    """A complete line longer than MAX_LINE gets the verdict of a partial one."""
    cmds, err = _run(MAGIC_V1 + b"PING" + b" " * MAX_LINE + b"\n", chunk)[:2]
    assert cmds == []
    assert err == f"E_INVALID command line longer than {MAX_LINE} bytes"


def test_line_of_max_length_is_accepted():
    line = b"PING" + b" " * (MAX_LINE - 5) + b"\n"
    assert len(line) == MAX_LINE
    assert parse(line) == ([("PING",)], None)


# -- encoders and round trips --------------------------------------------------------


def test_encoders_bytes():
    assert encode_ping() == b"PING\n"
    assert encode_register("t") == b"REGISTER t\n"
    assert encode_register("t", "c") == b"REGISTER t c\n"
    assert encode_unregister("t") == b"UNREGISTER t\n"
    assert encode_unregister("t", "c") == b"UNREGISTER t c\n"
    assert encode_response(b"OK") == b"\x00\x00\x00\x02OK"
    assert encode_response(b"") == b"\x00\x00\x00\x00"
    body = json.dumps({"a": 1}, separators=(",", ":")).encode()
    assert encode_identify({"a": 1}) == b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def test_decode_peer_info_and_to_json():
    info = decode_peer_info(json.dumps(IDENT).encode())
    assert info == IDENT_INFO
    info.remote_address = "127.0.0.1:5555"
    assert info.to_json() == {
        "remote_address": "127.0.0.1:5555",
        "hostname": "box",
        "broadcast_address": "nsqd.example",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.2.1",
    }
    with pytest.raises(ClientError) as ei:
        decode_peer_info(b"{")
    assert ei.value.code == E_BAD_BODY


names = st.builds(
    lambda base, eph: base + ("#ephemeral" if eph else ""),
    st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=54),
    st.booleans(),
)
peer_infos = st.fixed_dictionaries({
    "broadcast_address": st.text(min_size=1, max_size=30),
    "tcp_port": st.integers(1, 65535),
    "http_port": st.integers(1, 65535),
    "version": st.text(min_size=1, max_size=10),
    "hostname": st.text(max_size=30),
})
register_cmds = st.builds(
    lambda reg, topic, channel: (
        (encode_register if reg else encode_unregister)(topic, channel),
        ("REGISTER" if reg else "UNREGISTER", topic, channel),
    ),
    st.booleans(), names, st.one_of(st.just(""), names),
)
client_cmds = st.one_of(register_cmds, st.just((encode_ping(), ("PING",))))


@SETTINGS
@given(info=peer_infos, cmds=st.lists(client_cmds, max_size=10), chunks=st.lists(st.integers(1, 20), min_size=1))
def test_client_encoders_round_trip_through_server_parser(info, cmds, chunks):
    data = MAGIC_V1 + encode_identify(info) + b"".join(enc for enc, _ in cmds)
    parser = V1ServerParser()
    got: list[tuple] = []
    pos = i = 0
    while pos < len(data):
        size = chunks[i % len(chunks)]
        parser.feed(data[pos : pos + size])
        pos += size
        i += 1
        _drain(parser, got)
    expected_info = PeerInfo(**info)
    assert got == [("IDENTIFY", expected_info)] + [cmd for _, cmd in cmds]


# -- V1ClientParser ------------------------------------------------------------------


def _split(data: bytes, chunk: int | None, parser: V1ClientParser | None = None) -> list[bytes]:
    parser = parser or V1ClientParser()
    out = []
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        parser.feed(piece)
        while (resp := parser.next_response()) is not None:
            out.append(resp)
    return out


def test_client_parser_splits_responses():
    answers = [b"OK", b'{"tcp_port":4160}', b"", b"E_INVALID invalid command FOO"]
    data = b"".join(encode_response(a) for a in answers)
    assert _split(data, None) == answers
    assert _split(data, 1) == answers


def test_client_parser_waits_for_header_and_body():
    parser = V1ClientParser()
    assert parser.next_response() is None
    parser.feed(b"\x00\x00\x00")
    assert parser.next_response() is None
    parser.feed(b"\x02O")
    assert parser.next_response() is None
    parser.feed(b"K\x00")
    assert parser.next_response() == b"OK"
    assert parser.next_response() is None


@pytest.mark.parametrize("size", [-1, 11])
def test_client_parser_refuses_bad_sizes(size):
    parser = V1ClientParser(max_size=10)
    parser.feed(struct.pack(">i", size) + b"x" * 20)
    with pytest.raises(ClientError) as ei:
        parser.next_response()
    assert ei.value.code == E_BAD_BODY


def test_client_parser_accepts_max_size():
    parser = V1ClientParser(max_size=10)
    parser.feed(encode_response(b"0123456789"))
    assert parser.next_response() == b"0123456789"


@SETTINGS
@given(answers=st.lists(st.binary(max_size=50), max_size=10), chunk=st.integers(1, 64))
def test_client_parser_round_trip(answers, chunk):
    data = b"".join(encode_response(a) for a in answers)
    assert _split(data, chunk) == answers


# -- robustness ----------------------------------------------------------------------

fragments = st.one_of(
    st.binary(max_size=20),
    st.sampled_from([
        encode_ping(), IDENTIFY, encode_register("t", "c"), encode_unregister("t"), b"REGISTER\n",
        b"IDENTIFY\n", b"IDENTIFY\n\xff\xff\xff\xff", b"IDENTIFY\n\x00\x00\x00\x05null ", b"\n", b" ",
        b"\r\n", b"REGISTER x! c\n", b"REGISTER t \xff\xfe\n", MAGIC_V1,
    ]),
    peer_infos.map(encode_identify),
    st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                    max_size=4).map(lambda d: identify_raw(json.dumps(d).encode())),
)
streams = st.one_of(
    st.binary(max_size=200),
    st.lists(fragments, max_size=12).map(lambda fs: MAGIC_V1 + b"".join(fs)),
    st.lists(fragments, max_size=12).map(lambda fs: MAGIC_V1 + IDENTIFY + b"".join(fs)),
)


@SETTINGS
@given(data=streams, chunks=st.lists(st.integers(1, 32), min_size=1, max_size=10))
def test_server_parser_raises_only_client_errors(data, chunks):
    parser = V1ServerParser()
    pos = i = 0
    try:
        while pos < len(data):
            size = chunks[i % len(chunks)]
            parser.feed(data[pos : pos + size])
            pos += size
            i += 1
            while (cmd := parser.next_command()) is not None:
                assert cmd[0] in ("IDENTIFY", "REGISTER", "UNREGISTER", "PING")
    except ClientError as exc:
        assert exc.fatal
        assert exc.wire_bytes()
