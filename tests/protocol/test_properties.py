"""Property tests for the sans-IO protocol package."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsq.protocol import commands as c
from nsq.protocol.errors import ClientError, ProtocolError
from nsq.protocol.frames import MAGIC_V2, FrameReader, encode_frame
from nsq.protocol.message import IDFactory, decode_message, encode_message
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
    Limits,
    V2ServerParser,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits()

# -- strategies ----------------------------------------------------------------

names = st.builds(
    lambda base, eph: base + ("#ephemeral" if eph else ""),
    st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=54),
    st.booleans(),
)
bodies = st.binary(min_size=1, max_size=300)
msg_ids = st.text("0123456789abcdef", min_size=16, max_size=16).map(str.encode)
json_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=20)
)
identify_data = st.dictionaries(st.text(max_size=10), json_values, max_size=4)

# each strategy yields (encoded bytes, expected command or None if ignored)
identify_cmd = identify_data.map(lambda d: (c.identify(d), (CMD_IDENTIFY, d)))
auth_cmd = st.binary(min_size=1, max_size=50).map(lambda s: (c.auth(s), (CMD_AUTH, s)))
pub_cmd = st.builds(lambda t, b: (c.pub(t, b), (CMD_PUB, t, b)), names, bodies)
mpub_cmd = st.builds(
    lambda t, bs: (c.mpub(t, bs), (CMD_MPUB, t, bs)), names, st.lists(bodies, min_size=1, max_size=5)
)
dpub_cmd = st.builds(
    lambda t, d, b: (c.dpub(t, d, b), (CMD_DPUB, t, d, b)),
    names,
    st.integers(0, LIMITS.max_req_timeout_ms),
    bodies,
)
nop_cmd = st.just((c.nop(), (CMD_NOP,)))
sub_cmd = st.builds(lambda t, ch: (c.sub(t, ch), (CMD_SUB, t, ch)), names, names)
rdy_cmd = st.integers(0, LIMITS.max_rdy_count).map(lambda n: (c.rdy(n), (CMD_RDY, n)))
fin_cmd = msg_ids.map(lambda i: (c.fin(i), (CMD_FIN, i)))
touch_cmd = msg_ids.map(lambda i: (c.touch(i), (CMD_TOUCH, i)))
req_cmd = st.builds(
    lambda i, t: (c.req(i, t), (CMD_REQ, i, min(t, LIMITS.max_req_timeout_ms))),
    msg_ids,
    st.integers(0, 2 * LIMITS.max_req_timeout_ms),
)
cls_cmd = st.just((c.cls(), (CMD_CLS,)))
ignored_rdy = st.integers(0, 10**6).map(lambda n: (c.rdy(n), None))

publish = st.one_of(pub_cmd, mpub_cmd, dpub_cmd)
init_phase = st.lists(st.one_of(identify_cmd, auth_cmd, publish, nop_cmd), max_size=6)
subscribed_phase = st.lists(
    st.one_of(rdy_cmd, fin_cmd, req_cmd, touch_cmd, nop_cmd, publish), max_size=8
)
closing_phase = st.lists(
    st.one_of(ignored_rdy, fin_cmd, req_cmd, touch_cmd, nop_cmd, pub_cmd), max_size=5
)


@st.composite
def sessions(draw):
    """A valid command sequence: init*, [SUB subscribed* [CLS closing*]]."""
    cmds = draw(init_phase)
    if draw(st.booleans()):
        cmds.append(draw(sub_cmd))
        cmds += draw(subscribed_phase)
        if draw(st.booleans()):
            cmds.append(draw(cls_cmd))
            cmds += draw(closing_phase)
    crlf = draw(st.lists(st.booleans(), min_size=len(cmds), max_size=len(cmds)))
    # the first newline of each encoded command ends its command line
    data = [d.replace(b"\n", b"\r\n", 1) if cr else d for (d, _), cr in zip(cmds, crlf)]
    return b"".join(data), [exp for _, exp in cmds if exp is not None]


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(min(x, len(data)) for x in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def split_points(max_size=30):
    return st.lists(st.integers(0, 10_000), max_size=max_size)


# -- (a) encode then parse -------------------------------------------------------

@SETTINGS
@given(session=sessions(), cuts=split_points(), bytewise=st.booleans())
def test_encoded_sessions_parse_back(session, cuts, bytewise):
    data, expected = session
    stream = MAGIC_V2 + data
    if bytewise and len(stream) < 3000:
        chunks = [stream[i:i + 1] for i in range(len(stream))]
    else:
        chunks = chunked(stream, cuts)
    parser = V2ServerParser(LIMITS)
    out = []
    for chunk in chunks:
        parser.feed(chunk)
        while (cmd := parser.next_command()) is not None:
            if cmd[0] == CMD_FIN_MANY:  # back-to-back FINs of one read, in order
                assert len(cmd[1]) > 1
                out += [(CMD_FIN, i) for i in cmd[1]]
            else:
                out.append(cmd)
    assert out == expected
    assert parser.buffered == 0


# -- (b) arbitrary bytes raise only ClientError ------------------------------------

# mostly command-shaped pieces so that fuzzing gets past the command name
words = st.sampled_from([
    b"IDENTIFY", b"AUTH", b"SUB", b"PUB", b"MPUB", b"DPUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"CLS",
    b"NOP", b"t", b"c", b"x!", b"a#ephemeral", b"", b"0", b"10", b"-1", b"2501", b"99999999999",
    b"0123456789abcdef", b"0123456789abcde", b"\xff", b"\r",
])
command_lines = st.lists(words, min_size=1, max_size=4).map(lambda ws: b" ".join(ws) + b"\n")
sized_bodies = st.binary(max_size=40).flatmap(
    lambda b: st.integers(-2, len(b) + 3).map(lambda n: struct.pack(">i", n) + b)
)
fragments = st.one_of(
    st.sampled_from([
        b"PUB t\n", b"MPUB t\n", b"DPUB t 10\n", b"SUB t c\n", b"IDENTIFY\n", b"AUTH\n",
        b"RDY 3\n", b"RDY\n", b"FIN 0123456789abcdef\n", b"REQ 0123456789abcdef 5\n",
        b"TOUCH 0123456789abcdef\n", b"CLS\n", b"NOP\n", b"\r\n", b"\n",
        b"{}", b"{\"a\": [1, 2]}", b"[[[[", b"\xff\xfe",
    ]),
    command_lines,
    sized_bodies,
    st.integers(-5, 40).map(lambda n: struct.pack(">i", n)),
    st.binary(max_size=8),
)


@st.composite
def mutated_sessions(draw):
    """A valid session with a few bytes flipped, inserted or deleted."""
    data = bytearray(draw(sessions())[0])
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = draw(st.sampled_from([0, 1, 0xFF, ord(" "), ord("\n"), ord("x"), ord("!")]))
        if kind == "insert" or pos == len(data):
            data[pos:pos] = bytes([byte])
        elif kind == "flip":
            data[pos] = byte
        else:
            del data[pos]
    return bytes(data)


garbage = st.one_of(
    st.binary(max_size=400), st.lists(fragments, max_size=30).map(b"".join), mutated_sessions()
)
small_limits = st.sampled_from([
    Limits(),
    Limits(max_msg_size=8, max_body_size=32, max_rdy_count=5, max_req_timeout_ms=10),
])


@SETTINGS
@given(data=garbage, with_magic=st.booleans(), cuts=split_points(), limits=small_limits)
def test_arbitrary_bytes_raise_only_client_error(data, with_magic, cuts, limits):
    stream = (MAGIC_V2 if with_magic else b"") + data
    parser = V2ServerParser(limits)
    try:
        for chunk in chunked(stream, cuts):
            parser.feed(chunk)
            while (cmd := parser.next_command()) is not None:
                assert isinstance(cmd, tuple)
    except ClientError as err:
        assert err.fatal is True
        assert err.wire_text().startswith(err.code)
        assert isinstance(err.wire_bytes(), bytes)


@SETTINGS
@given(data=garbage, cuts=split_points(), limits=small_limits)
# two FINs in one read are one FIN-many command, in two reads two FINs
@example(data=b"NOP\nSUB - -\n" + (b"FIN " + bytes(16) + b"\n") * 2, cuts=[37], limits=Limits())
def test_arbitrary_bytes_same_outcome_whatever_the_chunking(data, cuts, limits):
    stream = MAGIC_V2 + data
    assert parse_reads(chunked(stream, cuts), limits) == parse_reads([stream], limits)


def parse_reads(chunks: list[bytes], limits: Limits, take: bool = False) -> tuple[list[tuple], str | None]:
    """The commands (FIN-many as one FIN each) and the error a server gets
    from these reads; ``take``: each read tried with take_publish first."""
    parser = V2ServerParser(limits)
    out: list[tuple] = []
    try:
        for chunk in chunks:
            cmd = parser.take_publish(chunk) if take else None
            if cmd is not None:
                out.append(cmd)
                continue
            parser.feed(chunk)
            while (cmd := parser.next_command()) is not None:
                if cmd[0] == CMD_FIN_MANY:  # FINs that arrived together: the same as one each
                    out += [(CMD_FIN, i) for i in cmd[1]]
                else:
                    out.append(cmd)
    except ClientError as err:
        return out, err.wire_text()
    return out, None


@SETTINGS
@given(data=garbage, cuts=split_points(), limits=small_limits)
@example(data=c.pub("t", b"x") + c.mpub("t", [b"a"]) + c.mpub("t", [b"b", b"c"]), cuts=[11, 30, 53],
         limits=Limits())
@example(data=c.nop() + c.sub("t", "c") + b"RDY", cuts=[8], limits=Limits())  # a line, then 3 bytes
def test_take_publish_then_feed_is_the_general_path(data, cuts, limits):
    """A server that tries :meth:`take_publish` on each read before feeding
    it gets the same commands and the same error as one that only feeds."""
    chunks = list(chunked(MAGIC_V2 + data, cuts))
    assert parse_reads(chunks, limits, take=True) == parse_reads(chunks, limits)


# -- (c) FrameReader on arbitrary bytes ---------------------------------------------

@SETTINGS
@given(
    data=st.one_of(
        st.binary(max_size=400),
        st.lists(
            st.one_of(
                st.binary(max_size=12),
                st.builds(encode_frame, st.integers(0, 2), st.binary(max_size=30)),
                st.builds(struct.pack, st.just(">ii"), st.integers(-(2**31), 2**31 - 1),
                          st.integers(-(2**31), 2**31 - 1)),
            ),
            max_size=20,
        ).map(b"".join),
    ),
    cuts=split_points(),
    max_frame_size=st.sampled_from([1 << 30, 64]),
)
def test_frame_reader_raises_only_protocol_error(data, cuts, max_frame_size):
    reader = FrameReader(max_frame_size)
    try:
        for chunk in chunked(data, cuts):
            reader.feed(chunk)
            for frame_type, payload in reader.frames():
                assert frame_type in (0, 1, 2)
                assert isinstance(payload, bytes)
    except ProtocolError as err:
        assert err.code == "E_BAD_PROTOCOL"


@SETTINGS
@given(
    frames=st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=200)), max_size=20),
    cuts=split_points(),
)
def test_frame_round_trip_any_chunking(frames, cuts):
    stream = b"".join(encode_frame(t, d) for t, d in frames)
    reader = FrameReader()
    out = []
    for chunk in chunked(stream, cuts):
        reader.feed(chunk)
        out += reader.frames()
    assert out == frames


# -- (d) messages --------------------------------------------------------------------

@SETTINGS
@given(
    timestamp=st.integers(-(2**63), 2**63 - 1),
    attempts=st.integers(0, 2**16 - 1),
    msg_id=st.binary(min_size=16, max_size=16),
    body=st.binary(max_size=500),
)
def test_message_round_trip(timestamp, attempts, msg_id, body):
    msg = decode_message(encode_message(timestamp, attempts, msg_id, body))
    assert msg == (timestamp, attempts, msg_id, body)


@SETTINGS
@given(
    node=st.integers(0, 1023),
    steps=st.lists(st.tuples(st.integers(0, 3 << 20), st.integers(0, 5000)), min_size=1, max_size=20),
)
def test_ids_unique_and_increasing_for_any_clock(node, steps):
    factory = IDFactory(node)
    now = 1_700_000_000_000_000_000
    ids = []
    for advance, count in steps:
        now += advance
        got = factory.new_ids(now, count)
        assert len(got) <= count
        ids += got
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(len(i) == 16 and int(i, 16) >> 12 & 0x3FF == node for i in ids)
