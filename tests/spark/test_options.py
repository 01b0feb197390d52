"""Option checks of the nsq data source (pure: no Spark, no pyspark needed)."""

from __future__ import annotations

import pytest

from nsq.client.errors import ClientConfigError
from nsq.spark.options import DEFAULT_CHANNEL, sink_settings, source_settings


def test_source_defaults_and_go_nsq_names():
    s = source_settings({"topic": "events", "lookupd_http_address": "a:4161, b:4161,a:4161",
                         "maxmessagespertrigger": "500", "msg_timeout": "30s", "tls_v1": "true",
                         "snappy": "true", "auth_secret": "s3cret", "max_in_flight": "300"})
    assert s.channel == DEFAULT_CHANNEL
    assert s.lookupd_http_addresses == ("a:4161", "b:4161")
    assert s.max_messages_per_trigger == 500
    assert s.max_in_flight == 300
    assert s.msg_timeout == 30.0
    identify, kwargs = s.consumer_config()
    assert identify == {"msg_timeout": 30_000, "tls_v1": True, "snappy": True}
    assert kwargs["auth_secret"] == "s3cret"
    assert kwargs["max_attempts"] == 0  # never give a message up
    assert "max_in_flight" not in kwargs  # the source spreads it over its connections


def test_source_durations():
    s = source_settings({"topic": "t", "nsqd_tcp_address": "x:1", "fetchwait": "100", "availablenowidle": "1.5s"})
    assert s.fetch_wait == 0.1
    assert s.available_now_idle == 1.5


@pytest.mark.parametrize("options, message", [
    ({"nsqd_tcp_address": "x:1"}, "topic is required"),
    ({"topic": "bad topic", "nsqd_tcp_address": "x:1"}, "not a valid topic"),
    ({"topic": "t", "channel": "c!", "nsqd_tcp_address": "x:1"}, "not a valid channel"),
    ({"topic": "t"}, "lookupd_http_address, nsqd_tcp_address or nsqd_http_address"),
    ({"topic": "t", "nsqd_tcp_address": "x:1", "maxmessagespertrigger": "0"}, "below 1"),
    ({"topic": "t", "nsqd_tcp_address": "x:1", "maxmessagespertrigger": "many"}, "not an integer"),
    ({"topic": "t", "nsqd_tcp_address": "x:1", "fetchwait": "soon"}, "not a duration"),
    ({"topic": "t", "nsqd_tcp_address": "x:1", "max_in_flght": "5"}, "unknown option"),
    ({"topic": "t", "nsqd_tcp_address": "x:1", "deflate_level": "12"}, "out of range"),
])
def test_source_errors(options, message):
    with pytest.raises(ClientConfigError, match=message):
        source_settings(options)


def test_sink_settings():
    s = sink_settings({"nsqd_tcp_address": "x:1,y:2", "batchsize": "100", "checkpointlocation": "/tmp/c",
                       "max_in_flight": "5"})  # a consumer option: accepted, no effect, as go-nsq
    assert s.topic is None and s.nsqd_tcp_addresses == ("x:1", "y:2") and s.batch_size == 100
    assert s.producer_config() == ({}, {})
    with pytest.raises(ClientConfigError, match="not a valid topic"):
        sink_settings({"topic": "a b", "nsqd_tcp_address": "x:1"})
    with pytest.raises(ClientConfigError, match="nsqd_tcp_address or lookupd_http_address"):
        sink_settings({"topic": "t"})
