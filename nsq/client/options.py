"""``--consumer-opt`` / ``--producer-opt`` ``key,value`` pairs, by go-nsq Config name.

The Go utilities pass these to ``nsq.Config.Set`` (go-nsq ``ConfigFlag``):
``key,value`` sets a key and a bare ``key`` means ``true``. Every go-nsq
v1.1 Config name is known here; each maps to an IDENTIFY field, a Consumer
keyword argument, a connection setting, or (for keys whose effect go-nsq
has and ours does not need: ``read_timeout``, ``write_timeout``,
``local_addr``, ``low_rdy_timeout``, ``rdy_redistribute_interval``) is
checked and then accepted without effect. The same Config serves producers
and consumers in go-nsq, so consumer-only keys are accepted and ignored by
producers, as Go's ``--producer-opt`` does.
"""

from __future__ import annotations

from typing import Any

from nsq.client.errors import ClientConfigError
from nsq._internal.durations import parse_duration

__all__ = ["parse_opts", "GO_NSQ_OPTIONS"]

# go-nsq Config key -> (where it goes, kind, our name). "identify" keys go into
# IDENTIFY (durations as ms); "consumer" keys are Consumer arguments;
# "connection" keys are arguments of both Consumer and Producer; "accepted"
# keys are validated and have no effect.
GO_NSQ_OPTIONS: dict[str, tuple[str, str, str]] = {
    "client_id": ("identify", "str", "client_id"),
    "hostname": ("identify", "str", "hostname"),
    "user_agent": ("identify", "str", "user_agent"),
    "heartbeat_interval": ("identify", "ms", "heartbeat_interval"),
    "msg_timeout": ("identify", "ms", "msg_timeout"),
    "output_buffer_size": ("identify", "int", "output_buffer_size"),
    "output_buffer_timeout": ("identify", "ms", "output_buffer_timeout"),
    "sample_rate": ("identify", "int", "sample_rate"),
    "dial_timeout": ("connection", "s", "connect_timeout"),
    "tls_v1": ("identify", "bool", "tls_v1"),
    "snappy": ("identify", "bool", "snappy"),
    "deflate": ("identify", "bool", "deflate"),
    "deflate_level": ("identify", "int", "deflate_level"),
    "auth_secret": ("connection", "str", "auth_secret"),
    "tls_root_ca_file": ("tls", "str", "root_ca_file"),
    "tls_insecure_skip_verify": ("tls", "bool", "insecure_skip_verify"),
    "tls_cert": ("tls", "str", "cert"),
    "tls_key": ("tls", "str", "key"),
    "tls_min_version": ("tls", "str", "min_version"),
    "max_in_flight": ("consumer", "int", "max_in_flight"),
    "max_attempts": ("consumer", "int", "max_attempts"),
    "default_requeue_delay": ("consumer", "ms", "requeue_delay_ms"),
    "max_requeue_delay": ("consumer", "ms", "max_requeue_delay_ms"),
    "lookupd_poll_interval": ("consumer", "s", "lookupd_poll_interval"),
    "lookupd_poll_jitter": ("consumer", "float", "lookupd_poll_jitter"),
    "backoff_multiplier": ("consumer", "s", "backoff_multiplier"),
    "max_backoff_duration": ("consumer", "s", "max_backoff_duration"),
    "low_rdy_idle_timeout": ("consumer", "s", "low_rdy_idle_timeout"),
    "read_timeout": ("accepted", "s", ""),
    "write_timeout": ("accepted", "s", ""),
    "local_addr": ("accepted", "str", ""),
    "low_rdy_timeout": ("accepted", "s", ""),
    "rdy_redistribute_interval": ("accepted", "s", ""),
    "rdy_redistribute_on_idle": ("accepted", "bool", ""),
    "backoff_strategy": ("accepted", "strategy", ""),
}
# go-nsq's range checks (min, max), in the unit the value is parsed to (ms or s)
_RANGES: dict[str, tuple[float, float]] = {
    "max_in_flight": (0, float("inf")),
    "max_attempts": (0, 65535),
    "sample_rate": (0, 99),
    "deflate_level": (1, 9),
    "lookupd_poll_jitter": (0, 1),
    "heartbeat_interval": (-1, float("inf")),
    "default_requeue_delay": (0, 60 * 60_000),
    "max_requeue_delay": (0, 60 * 60_000),
    "lookupd_poll_interval": (0.010, 5 * 60),
    "max_backoff_duration": (0, 60 * 60),
    "backoff_multiplier": (0, 60 * 60),
    "low_rdy_idle_timeout": (1, 5 * 60),
    "output_buffer_size": (-1, float("inf")),
    "msg_timeout": (0, float("inf")),
}
_TRUE = {"true", "1", "t", "yes", "y", "on"}
_FALSE = {"false", "0", "f", "no", "n", "off"}


def _ms(value: str) -> int:
    value = value.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    return int(parse_duration(value) * 1000)


def _parse(kind: str, value: str) -> Any:
    if kind == "str":
        return value
    if kind == "ms":
        return _ms(value)
    if kind == "s":
        return _ms(value) / 1000.0
    if kind == "float":
        return float(value)
    if kind == "bool":
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(value)
    if kind == "strategy":
        if value not in ("exponential", "full_jitter"):
            raise ValueError(value)
        return value
    return int(value)


def parse_opts(pairs: tuple[str, ...] | list[str], consumer: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse go-nsq ``key,value`` options (a bare ``key`` means ``true``).

    Args:
        pairs: the ``--consumer-opt``/``--producer-opt`` values.
        consumer: False for a producer: consumer-only keys are then accepted
            and ignored, as go-nsq's shared Config does.

    Returns:
        (IDENTIFY fields, keyword arguments for Consumer, or for Producer:
        ``connect_timeout``, ``auth_secret``, ``tls_context`` (an
        SSLContext built from the ``tls_*`` options)).

    Raises:
        ClientConfigError: unknown key, a value that does not parse, a
            value out of go-nsq's range, unreadable TLS files.
    """
    identify: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    tls: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition(",")
        key = key.strip()
        if not sep:
            value = "true"
        spec = GO_NSQ_OPTIONS.get(key)
        if spec is None:
            raise ClientConfigError(f"unknown option {key!r} (go-nsq Config names, e.g. max_in_flight,100)")
        where, kind, name = spec
        try:
            parsed = _parse(kind, value)
        except ValueError:
            raise ClientConfigError(f"invalid value {value!r} for option {key!r}") from None
        bounds = _RANGES.get(key)
        if bounds is not None and not bounds[0] <= parsed <= bounds[1]:
            raise ClientConfigError(f"invalid value {value!r} for option {key!r}: out of range")
        if where == "identify":
            identify[key] = parsed
        elif where == "connection":
            kwargs[name] = parsed
        elif where == "tls":
            tls[name] = parsed
        elif where == "consumer" and consumer:
            kwargs[name] = parsed
    if tls:
        from nsq.client.tls import client_context

        kwargs["tls_context"] = client_context(**tls)
    return identify, kwargs
