"""IDENTIFY negotiation as a pure function (Go nsqd/protocol_v2.go IDENTIFY)."""

from __future__ import annotations

import pytest

from nsq.protocol.errors import ClientError
from nsq.server.nsqd.tcp.identify import Negotiated, initial, negotiate
from nsq.server.nsqd.options import NSQDOptions

NOW = Negotiated(client_id="10.0.0.1", hostname="10.0.0.1", user_agent="", heartbeat_interval=30.0,
                 output_buffer_timeout=0.25, output_buffer_size=16384, sample_rate=0, msg_timeout=60.0)


def test_initial_settings_are_go_defaults():
    assert initial(NSQDOptions(), "10.0.0.1") == NOW


def test_plain_identify_keeps_defaults_and_answers_ok():
    got = negotiate({"client_id": "c", "hostname": "h"}, NSQDOptions(), NOW, tls_available=False)
    assert got.response is None
    assert got.settings == Negotiated("c", "h", "", 30.0, 0.25, 16384, 0, 60.0)


def test_feature_negotiation_answer_and_upgrades():
    opts = NSQDOptions(max_deflate_level=4)
    got = negotiate({"feature_negotiation": True, "deflate": True, "deflate_level": 9, "heartbeat_interval": -1,
                     "output_buffer_size": -1, "msg_timeout": 5000, "tls_v1": True}, opts, NOW, tls_available=False)
    assert got.deflate and not got.snappy and not got.tls and got.deflate_level == 4
    settings = got.settings
    assert settings.heartbeat_interval == 0.0 and settings.output_buffer_size == 1
    assert settings.output_buffer_timeout == 0.0 and settings.msg_timeout == 5.0
    assert got.response is not None and got.response["msg_timeout"] == 5000 and got.response["deflate_level"] == 4
    assert got.response["tls_v1"] is False and got.response["output_buffer_timeout"] == 0


@pytest.mark.parametrize("data, text", [
    ({"heartbeat_interval": 999}, "IDENTIFY heartbeat interval (999) is invalid"),
    ({"output_buffer_size": 63}, "IDENTIFY output buffer size (63) is invalid"),
    ({"sample_rate": 100}, "IDENTIFY sample rate (100) is invalid"),
    ({"msg_timeout": 999}, "IDENTIFY msg timeout (999) is invalid"),
    ({"heartbeat_interval": "1000"}, "IDENTIFY failed to decode JSON body"),
    ({"tls_v1": 1}, "IDENTIFY failed to decode JSON body"),
    ({"feature_negotiation": True, "snappy": True, "deflate": True},
     "cannot enable both deflate and snappy compression"),
])
def test_go_errors(data, text):
    with pytest.raises(ClientError) as err:
        negotiate(data, NSQDOptions(), NOW, tls_available=True)
    assert err.value.description == text


def test_second_identify_on_a_compressed_connection_changes_no_codec():
    got = negotiate({"feature_negotiation": True, "snappy": True, "tls_v1": True}, NSQDOptions(), NOW,
                    tls_available=True, tls=True, compressed=True)
    assert not (got.snappy or got.deflate or got.tls)
