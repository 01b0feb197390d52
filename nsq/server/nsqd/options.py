"""nsqd options: Go flag names, config-file names, defaults and coercion.

:data:`OPTION_SPECS` is the single table the ``nsq nsqd`` command builds its
flags from and :func:`load_config` reads TOML with (Go: apps/nsqd/options.go, nsqd/options.go;
https://nsq.io/components/nsqd.html#command-line-options). Durations are seconds (float) in :class:`NSQDOptions`.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass, field
from typing import Any

from nsq.protocol.message import default_node_id
from nsq._internal.durations import format_duration
from nsq.server.options import ConfigError, OptionSpec, coerce
from nsq.server.options import load_config as _load_config

__all__ = ["NSQDOptions", "OptionSpec", "OPTION_SPECS", "load_config", "coerce", "ConfigError"]


@dataclass
class NSQDOptions:
    """Every nsqd option, named as Go's config-file keys (snake case).

    Durations are in seconds. Defaults are Go nsqd v1.2's.
    """

    # basic
    node_id: int = field(default_factory=default_node_id)
    log_level: str = "info"
    log_prefix: str = "[nsqd] "
    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    nsqlookupd_tcp_addresses: list[str] = field(default_factory=list)
    auth_http_addresses: list[str] = field(default_factory=list)
    # beyond Go: AUTH on the HTTP(S) API too (False = Go's open HTTP API)
    http_auth_required: bool = False
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    # disk queue
    data_path: str = ""
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 104857600
    sync_every: int = 2500
    sync_timeout: float = 2.0
    # beyond Go: "diskqueue" (Go's format: a disk queue per topic and per
    # channel) or "wal" (one log per topic, channels as cursors:
    # nsq/server/nsqd/storage/topiclog.py)
    storage: str = "diskqueue"
    # --storage=wal only: keep messages every channel has finished this long
    # after they were published (s) / up to this many bytes per topic (0: off)
    retention_time: float = 0.0
    retention_bytes: int = 0
    # beyond Go, --storage=wal only (docs/operations/replication.md): follow
    # the leader at this HTTP address ("": a leader); a leader answers a
    # publish only once this many replicas wrote it, within replica_timeout (s)
    replica_of: str = ""
    replica_acks: int = 0
    replica_timeout: float = 5.0
    # messages
    msg_timeout: float = 60.0
    max_msg_timeout: float = 900.0
    max_msg_size: int = 1048576
    max_body_size: int = 5242880
    max_req_timeout: float = 3600.0
    client_timeout: float = 60.0
    # clients
    max_heartbeat_interval: float = 60.0
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65536
    max_output_buffer_timeout: float = 30.0
    min_output_buffer_timeout: float = 0.025
    output_buffer_timeout: float = 0.25
    max_channel_consumers: int = 0
    # beyond Go: graceful drain before shutdown (0 = Go's shutdown)
    drain_timeout: float = 0.0
    # beyond Go: keep the event loop polling this long after each read
    # instead of sleeping (s; 0: off, nsq/server/spin.py)
    spin_before_sleep: float = 0.0
    # beyond Go: without --spin-before-sleep, a lone producer's PUB keeps
    # the loop polling this long (s; 0: off, nsq/server/spin.py)
    spin_after_lone_pub: float = 10e-6
    # beyond Go: server-side give-up (0 = off, as Go)
    max_attempts: int = 0
    dead_letter_topic: str = "{topic}.{channel}.dead"
    # statsd
    statsd_address: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_interval: float = 60.0
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    # e2e latency
    e2e_processing_latency_window_time: float = 600.0
    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)
    # tls
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: str = "false"
    tls_min_version: str = "tls1.0"
    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True

    def copy(self, **changes: Any) -> NSQDOptions:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)



OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("auth-http-address", "auth_http_addresses", "list",
               "<addr>:<port> to query auth server (may be given multiple times)"),
    OptionSpec("http-auth-required", "http_auth_required", "bool",
               "require 'Authorization: Bearer <secret>' on every HTTP(S) API request but /ping, /info and "
               "/metrics, checked with the --auth-http-address servers as AUTH is (default false: open, as Go nsqd)"),
    OptionSpec("broadcast-address", "broadcast_address", "str",
               "address that will be registered with lookupd (defaults to the OS hostname)"),
    OptionSpec("broadcast-http-port", "broadcast_http_port", "int",
               "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening to)"),
    OptionSpec("broadcast-tcp-port", "broadcast_tcp_port", "int",
               "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening to)"),
    OptionSpec("data-path", "data_path", "str", "path to store disk-backed messages (default: the current directory)"),
    OptionSpec("deflate", "deflate", "bool",
               "enable deflate feature negotiation (client compression)"),
    OptionSpec("e2e-processing-latency-percentile", "e2e_processing_latency_percentiles", "floatlist",
               "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)"),
    OptionSpec("e2e-processing-latency-window-time", "e2e_processing_latency_window_time", "duration",
               "calculate end to end latency quantiles for this duration of time "
               "(ie: 60s would only show quantile calculations from the past 60 seconds)"),
    OptionSpec("http-address", "http_address", "str", "<addr>:<port> to listen on for HTTP clients"),
    OptionSpec("http-client-connect-timeout", "http_client_connect_timeout", "duration", "timeout for HTTP connect"),
    OptionSpec("http-client-request-timeout", "http_client_request_timeout", "duration", "timeout for HTTP request"),
    OptionSpec("https-address", "https_address", "str",
               "<addr>:<port> to listen on for HTTPS clients"),
    OptionSpec("log-level", "log_level", "str", "set log verbosity: debug, info, warn, error, or fatal"),
    OptionSpec("log-prefix", "log_prefix", "str", "log message prefix"),
    OptionSpec("lookupd-tcp-address", "nsqlookupd_tcp_addresses", "list",
               "lookupd TCP address (may be given multiple times)"),
    OptionSpec("max-body-size", "max_body_size", "int", "maximum size of a single command body"),
    OptionSpec("storage", "storage", "str",
               "how durable topics keep messages on disk: 'diskqueue' (Go nsqd's format: a disk queue per topic "
               "and per channel, for messages past --mem-queue-size) or 'wal' (one log per topic written once per "
               "message, every message; channels are cursors into it; --max-bytes-per-file sizes its segments)"),
    OptionSpec("retention-time", "retention_time", "duration",
               "with --storage=wal: keep messages every channel has finished for this long after they were "
               "published, for replay (POST /channel/rewind), whole log segments, oldest first (default 0s: "
               "delete a segment once every channel is past it); per topic: POST /topic/config"),
    OptionSpec("retention-bytes", "retention_bytes", "int",
               "with --storage=wal: keep up to this many bytes of finished messages per topic, for replay "
               "(default 0: no size cap; with --retention-time too, a segment goes when either says so)"),
    OptionSpec("replica-of", "replica_of", "str",
               "with --storage=wal: be a replica of the nsqd at this HTTP address (host:port): copy its durable "
               "topics' logs, channels and positions, refuse publishes and subscriptions until "
               "POST /replica/promote (docs/operations/replication.md)"),
    OptionSpec("replica-acks", "replica_acks", "int",
               "on a leader: answer a PUB, MPUB or DPUB only once this many replicas have written it (default 0: "
               "replicas follow asynchronously); fewer within --replica-timeout fails the publish"),
    OptionSpec("replica-timeout", "replica_timeout", "duration",
               "how long a publish waits for --replica-acks replicas before it fails (E_PUB_FAILED, HTTP 503)"),
    OptionSpec("max-bytes-per-file", "max_bytes_per_file", "int",
               "number of bytes per diskqueue file before rolling"),
    OptionSpec("spin-before-sleep", "spin_before_sleep", "duration",
               "keep polling the network this long after each read (a client's, or a replication page or ack) "
               "instead of sleeping, so a request that "
               "follows within it is answered without the kernel's wake-up (e.g. 50us: lower latency for "
               "request/response producers, at the cost of CPU: a daemon busier than once per window keeps a "
               "core spinning, but only while a core is idle: fewer runnable tasks than CPUs in /proc/loadavg); "
               "default 0s: off, as Go nsqd"),
    OptionSpec("spin-after-lone-pub", "spin_after_lone_pub", "duration",
               "without --spin-before-sleep: keep polling this long after a PUB from a producer that is the "
               "only one publishing (no other connection's PUB within the last 1ms), so its next PUB is read "
               "without the kernel's wake-up (a PUB read whole on a connection without TLS, compression or "
               "AUTH); only while a core is idle, as --spin-before-sleep, the producer waiting for its OK not "
               "counted as busy (0s: off)"),
    OptionSpec("drain-timeout", "drain_timeout", "duration",
               "on SIGTERM/SIGINT or POST /drain: unregister from lookupd, stop accepting connections and "
               "publishes, stop delivering, and wait up to this long for messages in flight to be finished "
               "or requeued before shutting down; 0s: shut down at once, as Go nsqd"),
    OptionSpec("max-attempts", "max_attempts", "int",
               "deliveries of a message on a channel before nsqd moves it to the channel's dead-letter topic "
               "instead of delivering it again; 0: never, as Go nsqd"),
    OptionSpec("dead-letter-topic", "dead_letter_topic", "str",
               "dead-letter topic name for --max-attempts; {topic} and {channel} are replaced"),
    OptionSpec("max-channel-consumers", "max_channel_consumers", "int",
               "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)"),
    OptionSpec("max-deflate-level", "max_deflate_level", "int",
               "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)"),
    OptionSpec("max-heartbeat-interval", "max_heartbeat_interval", "duration",
               "maximum client configurable duration of time between client heartbeats"),
    OptionSpec("max-msg-size", "max_msg_size", "int", "maximum size of a single message in bytes"),
    OptionSpec("max-msg-timeout", "max_msg_timeout", "duration", "maximum duration before a message will timeout"),
    OptionSpec("max-output-buffer-size", "max_output_buffer_size", "int",
               "maximum client configurable size (in bytes) for a client output buffer"),
    OptionSpec("max-output-buffer-timeout", "max_output_buffer_timeout", "duration",
               "maximum client configurable duration of time between flushing to a client"),
    OptionSpec("max-rdy-count", "max_rdy_count", "int", "maximum RDY count for a client"),
    OptionSpec("max-req-timeout", "max_req_timeout", "duration", "maximum requeuing timeout for a message"),
    OptionSpec("mem-queue-size", "mem_queue_size", "int",
               "number of messages to keep in memory (per topic/channel)"),
    OptionSpec("min-output-buffer-timeout", "min_output_buffer_timeout", "duration",
               "minimum client configurable duration of time between flushing to a client"),
    OptionSpec("msg-timeout", "msg_timeout", "duration", "default duration to wait before auto-requeing a message"),
    OptionSpec("node-id", "node_id", "int",
               "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)"),
    OptionSpec("output-buffer-timeout", "output_buffer_timeout", "duration",
               "default duration of time between flushing data to clients"),
    OptionSpec("snappy", "snappy", "bool", "enable snappy feature negotiation (client compression)"),
    OptionSpec("statsd-address", "statsd_address", "str",
               "UDP <addr>:<port> of a statsd daemon for pushing stats"),
    OptionSpec("statsd-interval", "statsd_interval", "duration", "duration between pushing to statsd"),
    OptionSpec("statsd-mem-stats", "statsd_mem_stats", "bool",
               "toggle sending memory and GC stats to statsd"),
    OptionSpec("statsd-prefix", "statsd_prefix", "str",
               "prefix used for keys sent to statsd (%s for host replacement)"),
    OptionSpec("statsd-udp-packet-size", "statsd_udp_packet_size", "int",
               "the size in bytes of statsd UDP packets"),
    OptionSpec("sync-every", "sync_every", "int", "number of messages per diskqueue fsync"),
    OptionSpec("sync-timeout", "sync_timeout", "duration", "duration of time per diskqueue fsync"),
    OptionSpec("tcp-address", "tcp_address", "str", "<addr>:<port> to listen on for TCP clients"),
    OptionSpec("tls-cert", "tls_cert", "str", "path to certificate file"),
    OptionSpec("tls-client-auth-policy", "tls_client_auth_policy", "str",
               "client certificate auth policy ('require' or 'require-verify')"),
    OptionSpec("tls-key", "tls_key", "str", "path to key file"),
    OptionSpec("tls-min-version", "tls_min_version", "str",
               "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', or 'tls1.2')"),
    OptionSpec("tls-required", "tls_required", "tls_required",
               "require TLS for client connections (true, false, tcp-https)"),
    OptionSpec("tls-root-ca-file", "tls_root_ca_file", "str", "path to certificate authority file"),
)

SPEC_BY_CFG = {spec.cfg: spec for spec in OPTION_SPECS}
# Go's config loader also knows these deprecated / alternate names
_CFG_ALIASES = {"id": "node_id", "worker_id": "node_id", "lookupd_tcp_address": "nsqlookupd_tcp_addresses"}



def load_config(path: str) -> dict[str, Any]:
    """Read a Go-nsqd-style TOML config file into ``{field: value}``.

    Go's ``nsqlookupd_tcp_addresses`` and ``id`` keys are understood.

    Raises:
        ConfigError: unreadable file, bad TOML or a bad value.
    """
    return _load_config(path, SPEC_BY_CFG, _CFG_ALIASES)


def _go_float(v: float) -> str:
    # Go's %v of a float64: 2 not 2.0
    text = repr(v)
    return text[:-2] if text.endswith(".0") else text


#: the values of --storage
STORAGE_ENGINES = ("diskqueue", "wal")


def validate(opts: NSQDOptions) -> None:
    """Check the statsd and e2e options as Go nsqd's ``New`` does, and put the
    percentiles in Go's order (descending, as its flag type sorts them).

    Raises:
        ConfigError: ``invalid E2E processing latency percentile: 1.5`` (Go's
            text) for a percentile outside (0, 1]; a window time, statsd
            interval or packet size that is not positive (Go would hang,
            panic or silently use 4096 bytes).
            ``--http-auth-required needs --auth-http-address`` when HTTP
            AUTH is asked for without an auth server.
    """
    percentiles = opts.e2e_processing_latency_percentiles
    for v in percentiles:
        if not 0 < v <= 1:  # also refuses NaN, which Go lets through
            raise ConfigError(f"invalid E2E processing latency percentile: {_go_float(v)}")
    if percentiles:
        opts.e2e_processing_latency_percentiles = sorted(percentiles, reverse=True)
        if not opts.e2e_processing_latency_window_time > 0:
            raise ConfigError("--e2e-processing-latency-window-time must be positive")
    if opts.http_auth_required and not opts.auth_http_addresses:
        raise ConfigError("--http-auth-required needs --auth-http-address")
    if opts.storage not in STORAGE_ENGINES:
        raise ConfigError(f"--storage must be one of {', '.join(STORAGE_ENGINES)}, got {opts.storage!r}")
    if opts.retention_time < 0 or opts.retention_bytes < 0:
        raise ConfigError("--retention-time and --retention-bytes must not be negative")
    if opts.replica_of and opts.storage != "wal":
        raise ConfigError("--replica-of needs --storage=wal (a replica copies topic logs)")
    if opts.replica_acks < 0:
        raise ConfigError(f"--replica-acks must not be negative, got {opts.replica_acks}")
    if opts.replica_acks and opts.storage != "wal":
        raise ConfigError("--replica-acks needs --storage=wal (replicas copy topic logs)")
    if not opts.replica_timeout > 0:
        raise ConfigError("--replica-timeout must be positive")
    if not 0 <= opts.spin_before_sleep <= 1:
        raise ConfigError(f"--spin-before-sleep must be in [0s, 1s], got {opts.spin_before_sleep}s")
    if not 0 <= opts.spin_after_lone_pub <= 1:
        raise ConfigError(f"--spin-after-lone-pub must be in [0s, 1s], got {opts.spin_after_lone_pub}s")
    if opts.max_attempts < 0 or opts.max_attempts > 65535:
        raise ConfigError(f"--max-attempts must be in [0, 65535], got {opts.max_attempts}")
    if opts.statsd_address:
        if not opts.statsd_interval > 0:
            raise ConfigError("--statsd-interval must be positive")
        if opts.statsd_udp_packet_size < 1:
            raise ConfigError("--statsd-udp-packet-size must be positive")


def describe(opts: NSQDOptions, cfg: str) -> Any:
    """The JSON value of option ``cfg`` for ``GET /config/<cfg>``."""
    value = getattr(opts, cfg)
    spec = SPEC_BY_CFG.get(cfg)
    if spec is not None and spec.kind == "duration":
        return int(value * 1e9)  # Go encodes time.Duration as nanoseconds
    return value


__all__ += ["describe", "validate", "SPEC_BY_CFG", "format_duration"]
