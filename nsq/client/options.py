"""``--consumer-opt`` / ``--producer-opt`` ``key,value`` pairs (go-nsq Config names)."""

from __future__ import annotations

from typing import Any

from nsq.client.errors import ClientConfigError
from nsq.server.durations import parse_duration

__all__ = ["parse_opts"]

# go-nsq Config key -> (where it goes, kind). "identify" keys go into IDENTIFY
# (durations as ms); "consumer" keys are Consumer arguments.
_KNOWN: dict[str, tuple[str, str]] = {
    "client_id": ("identify", "str"),
    "hostname": ("identify", "str"),
    "user_agent": ("identify", "str"),
    "heartbeat_interval": ("identify", "ms"),
    "msg_timeout": ("identify", "ms"),
    "output_buffer_size": ("identify", "int"),
    "output_buffer_timeout": ("identify", "ms"),
    "sample_rate": ("identify", "int"),
    "max_in_flight": ("consumer", "int"),
    "max_attempts": ("consumer", "int"),
    "default_requeue_delay": ("consumer", "ms"),
    "max_requeue_delay": ("consumer", "ms"),
    "lookupd_poll_interval": ("consumer", "s"),
    "lookupd_poll_jitter": ("consumer", "float"),
    "backoff_multiplier": ("consumer", "s"),
    "max_backoff_duration": ("consumer", "s"),
    "low_rdy_idle_timeout": ("consumer", "s"),
}
_CONSUMER_ARGS = {
    "max_in_flight": "max_in_flight",
    "max_attempts": "max_attempts",
    "default_requeue_delay": "requeue_delay_ms",
    "max_requeue_delay": "max_requeue_delay_ms",
    "lookupd_poll_interval": "lookupd_poll_interval",
    "lookupd_poll_jitter": "lookupd_poll_jitter",
    "backoff_multiplier": "backoff_multiplier",
    "max_backoff_duration": "max_backoff_duration",
    "low_rdy_idle_timeout": "low_rdy_idle_timeout",
}
_LATER = {"tls_v1", "snappy", "deflate", "deflate_level", "auth_secret",
          "backoff_strategy", "tls_root_ca_file", "tls_insecure_skip_verify",
          "tls_cert", "tls_key", "tls_min_version"}


def _ms(value: str) -> int:
    value = value.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    return int(parse_duration(value) * 1000)


def parse_opts(pairs: tuple[str, ...] | list[str], consumer: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse ``key,value`` options.

    Returns:
        (IDENTIFY fields, Consumer keyword arguments).

    Raises:
        ClientConfigError: malformed pair, unknown key or bad value.
    """
    identify: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition(",")
        key = key.strip()
        if not sep:
            raise ClientConfigError(f"invalid option {pair!r}: expected key,value")
        if key in _LATER:
            raise ClientConfigError(f"option {key!r} is not supported yet by this release")
        spec = _KNOWN.get(key)
        if spec is None or (spec[0] == "consumer" and not consumer):
            raise ClientConfigError(f"unknown option {key!r}")
        where, kind = spec
        try:
            if kind == "str":
                parsed: Any = value
            elif kind == "ms":
                parsed = _ms(value)
            elif kind == "s":
                parsed = _ms(value) / 1000.0
            elif kind == "float":
                parsed = float(value)
            else:
                parsed = int(value)
        except ValueError:
            raise ClientConfigError(f"invalid value {value!r} for option {key!r}") from None
        if where == "identify":
            identify[key] = parsed
        else:
            kwargs[_CONSUMER_ARGS[key]] = parsed
    return identify, kwargs
