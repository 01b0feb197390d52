"""nsqlookupd options: Go flag names, config keys and defaults (Go: apps/nsqlookupd/options.go;
https://nsq.io/components/nsqlookupd.html#command-line-options). Durations are seconds (float)."""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass, field
from typing import Any

from nsq.server.options import ConfigError, OptionSpec
from nsq.server.options import load_config as _load_config

__all__ = ["OPTION_SPECS", "SPEC_BY_CFG", "ConfigError", "LookupdOptions", "load_config"]


@dataclass
class LookupdOptions:
    """Every nsqlookupd option, named as Go's config-file keys.

    Durations are in seconds. Defaults are Go nsqlookupd v1.2's.
    """

    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    inactive_producer_timeout: float = 300.0
    tombstone_lifetime: float = 45.0
    #: timeouts of the HTTP calls that carry /topic/delete and /channel/delete to nsqds (s)
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0

    def copy(self, **changes: Any) -> LookupdOptions:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("broadcast-address", "broadcast_address", "str",
               "address of this lookupd node"),
    OptionSpec("http-address", "http_address", "str", "<addr>:<port> to listen on for HTTP clients"),
    OptionSpec("http-client-connect-timeout", "http_client_connect_timeout", "duration",
               "timeout for HTTP connect (deleting topics/channels on nsqds)"),
    OptionSpec("http-client-request-timeout", "http_client_request_timeout", "duration",
               "timeout for HTTP request (deleting topics/channels on nsqds)"),
    OptionSpec("inactive-producer-timeout", "inactive_producer_timeout", "duration",
               "duration of time a producer will remain in the active list since its last ping"),
    OptionSpec("log-level", "log_level", "str", "set log verbosity: debug, info, warn, error, or fatal"),
    OptionSpec("log-prefix", "log_prefix", "str", "log message prefix"),
    OptionSpec("tcp-address", "tcp_address", "str", "<addr>:<port> to listen on for TCP clients"),
    OptionSpec("tombstone-lifetime", "tombstone_lifetime", "duration",
               "duration of time a producer will remain tombstoned if registration remains"),
)

SPEC_BY_CFG = {spec.cfg: spec for spec in OPTION_SPECS}


def load_config(path: str) -> dict[str, Any]:
    """Read a Go-nsqlookupd-style TOML config file into ``{field: value}``.

    Raises:
        ConfigError: unreadable file, bad TOML or a bad value.
    """
    return _load_config(path, SPEC_BY_CFG)
