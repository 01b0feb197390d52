"""go-nsq Config names for --consumer-opt / --producer-opt (nsq.client.options)."""

from __future__ import annotations

import pytest

from nsq.client.errors import ClientConfigError
from nsq.client.options import GO_NSQ_OPTIONS, parse_opts


def test_identify_and_consumer_keys():
    identify, kwargs = parse_opts(["max_in_flight,100", "msg_timeout,30s", "heartbeat_interval,5000",
                                   "backoff_multiplier,250ms", "max_attempts,0", "dial_timeout,2s",
                                   "user_agent,app/1", "lookupd_poll_jitter,0.5"], consumer=True)
    assert identify == {"msg_timeout": 30_000, "heartbeat_interval": 5000, "user_agent": "app/1"}
    assert kwargs == {"max_in_flight": 100, "backoff_multiplier": 0.25, "max_attempts": 0, "connect_timeout": 2.0,
                      "lookupd_poll_jitter": 0.5}


def test_bare_key_means_true_and_accepted_keys():
    _, kwargs = parse_opts(["rdy_redistribute_on_idle", "read_timeout,60s", "backoff_strategy,full_jitter"],
                           consumer=True)
    assert kwargs == {}


def test_producer_ignores_consumer_keys_as_go_nsq():
    identify, kwargs = parse_opts(["max_in_flight,10", "user_agent,x", "dial_timeout,1s"], consumer=False)
    assert identify == {"user_agent": "x"} and kwargs == {"connect_timeout": 1.0}


@pytest.mark.parametrize("pair,message", [
    ("bogus,1", "unknown option 'bogus'"),
    ("max_in_flight,many", "invalid value"),
    ("max_in_flight,-1", "out of range"),
    ("sample_rate,100", "out of range"),
    ("lookupd_poll_jitter,2", "out of range"),
    ("backoff_strategy,random", "invalid value"),
    ("rdy_redistribute_on_idle,maybe", "invalid value"),
    ("msg_timeout,soon", "invalid value"),
    ("deflate_level,10", "out of range"),
    ("tls_root_ca_file,/nonexistent/ca.pem", "TLS"),
])
def test_errors(pair, message):
    with pytest.raises(ClientConfigError, match=message):
        parse_opts([pair], consumer=True)


def test_every_go_nsq_v1_1_name_is_known():
    names = {"dial_timeout", "read_timeout", "write_timeout", "local_addr", "lookupd_poll_interval",
             "lookupd_poll_jitter", "max_requeue_delay", "default_requeue_delay", "backoff_strategy",
             "max_backoff_duration", "backoff_multiplier", "max_attempts", "low_rdy_idle_timeout",
             "low_rdy_timeout", "rdy_redistribute_interval", "client_id", "hostname", "user_agent",
             "heartbeat_interval", "sample_rate", "output_buffer_size", "output_buffer_timeout", "max_in_flight",
             "msg_timeout"}
    assert names <= set(GO_NSQ_OPTIONS)


def test_negotiated_features():
    identify, kwargs = parse_opts(["tls_v1", "snappy,true", "deflate_level,3", "auth_secret,s3cret",
                                   "tls_insecure_skip_verify,true"], consumer=True)
    assert identify == {"tls_v1": True, "snappy": True, "deflate_level": 3}
    assert kwargs["auth_secret"] == "s3cret"
    import ssl

    assert isinstance(kwargs["tls_context"], ssl.SSLContext) and kwargs["tls_context"].verify_mode == ssl.CERT_NONE
