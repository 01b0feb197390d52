"""``nsq to-http``: consume a topic/channel and make one HTTP request per message (nsq_to_http).

Flags, defaults and checks as Go nsq_to_http v1.2 (nsqio/nsq
``apps/nsq_to_http/nsq_to_http.go``; https://nsq.io/components/utilities.html);
the work, and the behaviour in detail, is
:class:`nsq.apps.to_http.HTTPForwarder`. ``--post URL``/``--get URL``
(repeatable; a GET URL has one ``%s``), ``--mode``, ``-n`` concurrent
requests, ``--sample``, ``--header 'Name: value'``, ``--status-every``.
SIGINT/SIGTERM: let the requests under way finish (bounded), hand back the
waiting messages, close, exit 0.

Deliberate differences from Go: an unknown ``--mode``, ``-n`` < 1, a
negative ``--status-every``, a URL that is not ``http(s)://host...`` or has
blanks/control characters, and a header name that is not an HTTP token are
clean errors at start. The nsqd connections identify as
``nsq_to_http/<version> nsq-python/<version>``.
"""

from __future__ import annotations


import click

from nsq.apps.to_http import DEFAULT_CONTENT_TYPE
from nsq.commands._consumer import check_sources, consumer_flags, consumer_settings, run_forwarder
from nsq.commands._go import GoCommand, fail

__all__ = ["to_http"]


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@consumer_flags("nsq_to_http", "nsq_to_http", request_timeout=20.0, topic_multiple=False, topic_required=True)
@click.option("--get", "get_addrs", multiple=True, metavar="URL",
              help="HTTP address to make a GET request to. '%s' will be printf replaced with data "
                   "(may be given multiple times)")
@click.option("--post", "post_addrs", multiple=True, metavar="URL",
              help="HTTP address to make a POST request to.  data will be in the body (may be given multiple times)")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="Custom header for HTTP requests (may be given multiple times)")
@click.option("--content-type", default=DEFAULT_CONTENT_TYPE,
              help=f'the Content-Type used for POST requests (default "{DEFAULT_CONTENT_TYPE}")')
@click.option("--mode", default="hostpool",
              help="the upstream request mode options: round-robin, hostpool (default), epsilon-greedy")
@click.option("-n", "publishers", type=int, default=100, help="number of concurrent publishers (default 100)")
@click.option("--sample", type=float, default=1.0, help="% of messages to publish (float b/w 0 -> 1) (default 1)")
@click.option("--status-every", type=int, default=250,
              help="the # of requests between logging status (per handler), 0 disables (default 250)")
def to_http(topic: str, channel: str, addresses: tuple[str, ...], lookupd: tuple[str, ...], max_in_flight: int,
            consumer_opts: tuple[str, ...], http_connect_timeout: float, http_request_timeout: float,
            get_addrs: tuple[str, ...], post_addrs: tuple[str, ...], headers: tuple[str, ...], content_type: str,
            mode: str, publishers: int, sample: float, status_every: int) -> None:
    """Consume TOPIC/CHANNEL and GET or POST each message to one of the URLs.

    Exits 1 with one "Error: ..." line on a bad flag combination or when no
    nsqd can be reached at start; 0 after SIGINT/SIGTERM.
    """
    from nsq.apps.to_http import HTTPForwarder, check_address, parse_headers
    from nsq.client.hostpool import MODES

    try:
        custom = parse_headers(headers)
    except ValueError as exc:
        fail(str(exc))
    if not topic or not channel:
        fail("--topic and --channel are required")
    if content_type != DEFAULT_CONTENT_TYPE:
        if not post_addrs:
            fail("--content-type only used with --post")
        if not content_type:
            fail("--content-type requires a value when used")
    check_sources([topic], channel, addresses, lookupd)
    if not get_addrs and not post_addrs:
        fail("--get or --post required")
    if get_addrs and post_addrs:
        fail("use --get or --post not both")
    for get in get_addrs:
        if get.count("%s") != 1:
            fail("invalid GET address - must be a printf string")
    if mode not in MODES:
        fail(f"invalid --mode {mode!r} (round-robin, hostpool, epsilon-greedy)")
    if not 0.0 <= sample <= 1.0:
        fail("--sample must be between 0.0 and 1.0")
    if publishers < 1:
        fail("-n must be >= 1")
    if status_every < 0:
        fail("--status-every must be >= 0")
    method, urls = ("POST", list(post_addrs)) if post_addrs else ("GET", list(get_addrs))
    for url in urls:
        try:
            check_address(url, "--post" if post_addrs else "--get")
        except ValueError as exc:
            fail(str(exc))
    identify, kwargs = consumer_settings("nsq_to_http", consumer_opts, max_in_flight)

    from nsq._internal.logs import setup_logging

    setup_logging("", "info")
    try:
        forwarder = HTTPForwarder(topic, channel, urls, method, nsqd_tcp_addresses=addresses,
                                  lookupd_http_addresses=lookupd, headers=custom, content_type=content_type,
                                  mode=mode, publishers=publishers, sample=sample, status_every=status_every,
                                  connect_timeout=http_connect_timeout, request_timeout=http_request_timeout,
                                  identify=identify, consumer_args=kwargs)
    except ValueError as exc:
        fail(str(exc))
    run_forwarder(forwarder)

