"""``nsq to-nsq``: consume topics and republish them to other nsqds (nsq_to_nsq).

Flags, defaults and checks as Go NSQ v1.2's ``apps/nsq_to_nsq/nsq_to_nsq.go``
(https://nsq.io/components/utilities.html); the work, and the behaviour in detail (destination choice
by ``--mode``, FIN only after the destination's ``OK``, the
``--require-json-field``/``--require-json-value``/``--whitelist-json-field``
filters, ``--status-every`` lines), is
:class:`nsq.apps.to_nsq.NSQForwarder`. SIGINT/SIGTERM stop consuming, wait
(bounded) for the publishes in flight, close consumers and producers, and
exit 0.
"""

from __future__ import annotations


import click

from nsq.commands._consumer import (check_sources, consumer_flags, consumer_settings, producer_settings,
                                    run_forwarder)
from nsq.commands._go import GoCommand, ShownRequired, fail

__all__ = ["to_nsq"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_to_nsq", "nsq_to_nsq", topic_required=True)
@click.option("--destination-nsqd-tcp-address", "destinations", multiple=True, cls=ShownRequired,
              help="destination nsqd TCP address (may be given multiple times)")
@click.option("--destination-topic", default="",
              help="use this destination topic for all consumed topics (default is consumed topic name)")
@click.option("--producer-opt", "producer_opts", multiple=True,
              help="option to passthrough to the Producer, go-nsq Config names as key,value "
                   "(may be given multiple times)")
@click.option("--mode", default="hostpool",
              help="the upstream request mode options: round-robin, hostpool (default), epsilon-greedy")
@click.option("--require-json-field", default="",
              help="for JSON messages: only pass messages that contain this field")
@click.option("--require-json-value", default="",
              help="for JSON messages: only pass messages in which the required field has this value")
@click.option("--whitelist-json-field", "whitelist", multiple=True,
              help="for JSON messages: pass this field (may be given multiple times)")
@click.option("--status-every", type=int, default=250,
              help="the # of requests between logging status (per destination), 0 disables (default 250)")
def to_nsq(topics: tuple[str, ...], channel: str, addresses: tuple[str, ...], lookupd: tuple[str, ...],
           max_in_flight: int, consumer_opts: tuple[str, ...], http_connect_timeout: float,
           http_request_timeout: float, destinations: tuple[str, ...], destination_topic: str,
           producer_opts: tuple[str, ...], mode: str, require_json_field: str, require_json_value: str,
           whitelist: tuple[str, ...], status_every: int) -> None:
    """Consume TOPIC(s) on CHANNEL and republish every message to destination nsqds.

    Checks and messages are Go v1.2's (exit 1 with one line on stderr).
    """
    from nsq.apps.to_nsq import JSONFilter, NSQForwarder
    from nsq.client.hostpool import MODES
    from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

    if not topics or not channel:
        fail("--topic and --channel are required")
    for t in topics:
        if not is_valid_topic_name(t):
            fail("--topic is invalid")
    if destination_topic and not is_valid_topic_name(destination_topic):
        fail("--destination-topic is invalid")
    if not is_valid_channel_name(channel):
        fail("--channel is invalid")
    check_sources(topics, channel, addresses, lookupd)
    if not destinations:
        fail("--destination-nsqd-tcp-address required")
    if mode not in MODES:
        # Go falls back to round-robin silently; an unknown mode is a typo
        fail(f"invalid --mode {mode!r} (round-robin, hostpool, epsilon-greedy)")
    if require_json_value and not require_json_field:
        # Go ignores the value then; say so instead
        fail("--require-json-value requires --require-json-field")
    c_identify, c_kwargs = consumer_settings("nsq_to_nsq", consumer_opts, max_in_flight)
    p_identify, p_kwargs = producer_settings("nsq_to_nsq", producer_opts)
    from nsq._internal.logs import setup_logging

    setup_logging("", "info")
    try:
        forwarder = NSQForwarder(topics, channel, destinations, nsqd_tcp_addresses=addresses,
                                 lookupd_http_addresses=lookupd, destination_topic=destination_topic, mode=mode,
                                 json_filter=JSONFilter(require_json_field, require_json_value, whitelist),
                                 status_every=status_every, identify=c_identify, consumer_args=c_kwargs,
                                 producer_identify=p_identify, producer_args=p_kwargs,
                                 http_connect_timeout=http_connect_timeout, http_request_timeout=http_request_timeout)
    except ValueError as exc:
        fail(str(exc))
    run_forwarder(forwarder)

