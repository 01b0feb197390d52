"""Input bounds of the sans-IO server parsers (V2 for nsqd, V1 for nsqlookupd).

A parser must refuse what can never become a legal command as soon as it
can tell -- from a line with no newline in sight, or from a size field --
without waiting for (and holding) the rest; and hostile JSON must come out
as a ClientError, never as RecursionError or another exception.
"""

from __future__ import annotations

import gc
import struct
import tracemalloc

import pytest

from nsq.protocol import commands as c
from nsq.protocol.compression import DeflateCodec, SnappyCodec
from nsq.protocol.errors import ClientError, ReadError
from nsq.protocol.frames import MAGIC_V2
from nsq.protocol.lookupd import MAGIC_V1, MAX_IDENTIFY_BODY, MAX_LINE, V1ServerParser
from nsq.protocol.v2 import CMD_MPUB, LINE_TOO_LONG, MAX_LINE_LENGTH, Limits, V2ServerParser

NESTED = [b"[" * 100_000, b'{"a":' * 100_000, b'[{"a":' * 50_000, b"[" * 5000 + b"]" * 5000,
          b'{"client_id":' + b"[" * 100_000]
NESTED_IDS = ["arrays", "objects", "mixed", "balanced-5000", "nested-field"]


def v2_error(data: bytes, limits: Limits | None = None) -> ClientError:
    parser = V2ServerParser(limits)
    parser.feed(MAGIC_V2 + data)
    with pytest.raises(ClientError) as info:
        while parser.next_command() is not None:
            pass
    return info.value


# -- V2: lines ----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [b"", b"PUB ", b"IDENTIFY", b"FIN "])
def test_v2_overlong_line_is_refused_without_its_end(prefix):
    parser = V2ServerParser()
    parser.feed(MAGIC_V2 + prefix + b"x" * (MAX_LINE_LENGTH - len(prefix) - 1))
    assert parser.next_command() is None
    parser.feed(b"x")  # the buffer now holds 16 KiB without a newline
    with pytest.raises(ReadError) as info:
        parser.next_command()
    assert info.value.wire_text() == f"E_BAD_PROTOCOL {LINE_TOO_LONG}"
    assert info.value.fatal and not info.value.answer


def test_v2_megabytes_without_newline_are_refused_at_once():
    parser = V2ServerParser()
    parser.feed(MAGIC_V2 + b"\0" * (4 * 1024 * 1024))
    with pytest.raises(ReadError):
        parser.next_command()


def test_v2_long_line_after_valid_commands():
    parser = V2ServerParser()
    parser.feed(MAGIC_V2 + c.nop() + c.pub("t", b"body") + b"y" * MAX_LINE_LENGTH)
    assert parser.next_command() is not None
    assert parser.next_command() is not None
    with pytest.raises(ReadError):
        parser.next_command()


# -- V2: sizes ------------------------------------------------------------------------


@pytest.mark.parametrize("limits", [Limits(), Limits(max_msg_size=10 * 1024 * 1024, max_body_size=1024)],
                         ids=["defaults", "msg-bigger-than-body"])
def test_v2_max_command_size(limits):
    parser = V2ServerParser(limits)
    assert parser.max_line_length == MAX_LINE_LENGTH
    assert parser.max_command_size == MAX_LINE_LENGTH + 4 + max(limits.max_body_size, limits.max_msg_size)


def test_v2_largest_mpub_fits_in_max_command_size():
    """An MPUB with the longest topic and a body of exactly --max-body-size
    bytes, arriving 4 KiB at a time, is buffered below max_command_size
    until it is complete."""
    limits = Limits(max_msg_size=1024, max_body_size=64 * 1024)
    bodies = []
    left = limits.max_body_size - 4  # after the message count
    while left:
        take = min(left, 4 + limits.max_msg_size)
        bodies.append(b"m" * (take - 4))
        left -= take
    cmd = c.mpub("t" * 64, bodies)
    assert len(cmd) == len(b"MPUB \n") + 64 + 4 + limits.max_body_size
    parser = V2ServerParser(limits)
    parser.feed(MAGIC_V2)
    for i in range(0, len(cmd), 4096):
        parser.feed(cmd[i:i + 4096])
        if i + 4096 < len(cmd):
            assert parser.next_command() is None
            assert parser.buffered < parser.max_command_size
    got = parser.next_command()
    assert got is not None and got[0] == CMD_MPUB and got[2] == bodies


@pytest.mark.parametrize("line,size,code", [
    (b"PUB t\n", -1, "E_BAD_MESSAGE"),
    (b"PUB t\n", 1048577, "E_BAD_MESSAGE"),
    (b"MPUB t\n", -(2**31), "E_BAD_BODY"),
    (b"MPUB t\n", 2**31 - 1, "E_BAD_BODY"),
    (b"IDENTIFY\n", 5242881, "E_BAD_BODY"),
    (b"AUTH\n", -5, "E_BAD_BODY"),
    (b"DPUB t 10\n", 0, "E_BAD_MESSAGE"),
])
def test_v2_bad_sizes_are_refused_before_the_body(line, size, code):
    """Only the 4-byte size is sent: the verdict needs nothing more."""
    err = v2_error(line + struct.pack(">i", size))
    assert err.code == code and err.fatal


# -- V2: IDENTIFY JSON ----------------------------------------------------------------------


@pytest.mark.parametrize("body", NESTED, ids=NESTED_IDS)
def test_v2_nested_identify_json_is_E_BAD_BODY(body):
    err = v2_error(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert err.wire_text() == "E_BAD_BODY IDENTIFY failed to decode JSON body"


@pytest.mark.parametrize("body", [b"1" * 5000, b'{"a":' + b"9" * 100_000 + b"}", b"\xff\xfe{}", b"{" * 3,
                                  b'{"a":"\\ud800"}' + b"x"])
def test_v2_hostile_identify_json_is_a_client_error(body):
    err = v2_error(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert err.code == "E_BAD_BODY"


# -- V1 (nsqlookupd) ------------------------------------------------------------------------


def v1_error(data: bytes) -> ClientError:
    parser = V1ServerParser()
    parser.feed(MAGIC_V1 + data)
    with pytest.raises(ClientError) as info:
        while parser.next_command() is not None:
            pass
    return info.value


def test_v1_overlong_line_is_refused_without_its_end():
    parser = V1ServerParser()
    parser.feed(MAGIC_V1 + b"REGISTER " + b"t" * (MAX_LINE - 10))
    assert parser.next_command() is None
    parser.feed(b"t")
    with pytest.raises(ClientError) as info:
        parser.next_command()
    assert info.value.code == "E_INVALID" and info.value.fatal


def test_v1_100k_line_is_refused_even_when_complete():
    err = v1_error(b"REGISTER " + b"t" * 100_000 + b"\n")
    assert err.wire_text() == f"E_INVALID command line longer than {MAX_LINE} bytes"


@pytest.mark.parametrize("size", [-1, -(2**31), MAX_IDENTIFY_BODY + 1, 200_000, 2**31 - 1])
def test_v1_identify_size_is_refused_before_the_body(size):
    err = v1_error(b"IDENTIFY\n" + struct.pack(">i", size))
    assert err.wire_text() == "E_BAD_BODY IDENTIFY failed to read body"


@pytest.mark.parametrize("body", NESTED[:3] + [b"[" * 60_000], ids=NESTED_IDS[:3] + ["arrays-60000"])
def test_v1_nested_identify_json_is_E_BAD_BODY(body):
    body = body[:MAX_IDENTIFY_BODY]
    err = v1_error(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert err.wire_text() == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_v1_buffer_stays_bounded_while_waiting():
    """The most a V1 connection can make the parser hold: one line and one body."""
    parser = V1ServerParser()
    parser.feed(MAGIC_V1 + b"IDENTIFY\n" + struct.pack(">i", MAX_IDENTIFY_BODY) + b"{" * (MAX_IDENTIFY_BODY - 1))
    assert parser.next_command() is None
    assert len(parser._buf) <= MAX_LINE + 4 + MAX_IDENTIFY_BODY


# -- nothing lingers after a connection drops its parser ------------------------------------


def _freed_at_once(make_and_fill) -> int:
    """Bytes still allocated right after the object ``make_and_fill()``
    returns is dropped, with the cycle collector off (a reference cycle
    would keep a closed connection's buffer until the next full collection)."""
    make_and_fill()  # lazy imports and caches happen outside the measurement
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        obj = make_and_fill()
        del obj
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()


def test_v2_parser_buffer_is_freed_without_the_cycle_collector():
    def make():
        parser = V2ServerParser()
        parser.feed(MAGIC_V2 + b"MPUB t\n" + struct.pack(">i", 5 * 1024 * 1024) + bytes(4 * 1024 * 1024))
        assert parser.next_command() is None
        return parser

    assert _freed_at_once(make) < 64 * 1024


def test_v1_parser_and_codecs_are_freed_without_the_cycle_collector():
    def make():
        parser = V1ServerParser()
        parser.feed(MAGIC_V1 + b"IDENTIFY\n" + struct.pack(">i", MAX_IDENTIFY_BODY) + b"{" * 60_000)
        assert parser.next_command() is None
        deflate, snappy = DeflateCodec(), SnappyCodec()
        deflate.decode(DeflateCodec().encode(bytes(4 * 1024 * 1024)), 1024)
        snappy.decode(SnappyCodec().encode(bytes(1024 * 1024)), 1024)
        assert deflate.pending and snappy.pending
        return parser, deflate, snappy

    assert _freed_at_once(make) < 64 * 1024
