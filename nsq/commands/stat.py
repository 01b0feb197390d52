"""``nsq stat``: poll ``/stats`` of a topic's producers and print one channel's totals (nsq_stat).

Plain, pipe-friendly output as Go nsq_stat v1.2 prints it (seed 000
"nsq_stat"): a header every 25 reports, then per interval the ingress and
egress rates (messages/s) and the channel's depth (total, memory, disk),
in-flight, deferred, requeued, timed out, messages and clients, summed
over every nsqd that has the topic. The first poll only sets the base for
the rates, so ``--count N`` prints N-1 rows, as Go's does.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from nsq.commands._go import GoCommand, GoDuration, fail, run_async, stop_event

__all__ = ["stat"]

_FIELDS = ("depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
           "timeout_count", "message_count", "client_count")


@click.command(cls=GoCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", default="", help="NSQ topic")
@click.option("--channel", default="", help="NSQ channel")
@click.option("--count", "count", type=int, default=None, help="number of reports")
@click.option("--interval", type=GoDuration(), default=2.0,
              help="duration of time between polling/printing output (default 2s)")
@click.option("--lookupd-http-address", "lookupd", multiple=True,
              help="lookupd HTTP address (may be given multiple times)")
@click.option("--nsqd-http-address", "nsqd", multiple=True,
              help="nsqd HTTP address (may be given multiple times)")
@click.option("--http-client-connect-timeout", type=GoDuration(), default=2.0,
              help="timeout for HTTP connect (default 2s)")
@click.option("--http-client-request-timeout", type=GoDuration(), default=5.0,
              help="timeout for HTTP request (default 5s)")
def stat(topic: str, channel: str, count: int | None, interval: float, lookupd: tuple[str, ...],
         nsqd: tuple[str, ...], http_client_connect_timeout: float, http_client_request_timeout: float) -> None:
    """Poll /stats of every nsqd with TOPIC and print CHANNEL's totals each --interval."""
    if not topic or not channel:
        fail("--topic and --channel are required")
    if count is not None and count <= 0:
        fail("--count should be positive")
    if interval <= 0:
        fail("--interval should be positive")
    if not nsqd and not lookupd:
        fail("--nsqd-http-address or --lookupd-http-address required")
    if nsqd and lookupd:
        fail("use --nsqd-http-address or --lookupd-http-address not both")
    try:
        code = run_async(_loop(topic, channel, count, interval, list(lookupd), list(nsqd),
                               http_client_connect_timeout, http_client_request_timeout))
    except _StatError as exc:
        fail(str(exc))
    sys.exit(code)


class _StatError(Exception):
    pass


async def _channel_totals(session: Any, lookupd_client: Any, topic: str, channel: str,
                          lookupd: list[str], nsqd: list[str]) -> dict[str, int]:
    """Sum the channel's counters over every nsqd that has the topic."""
    import aiohttp

    from nsq.client.lookupd import LookupdError

    if lookupd:
        producers, errors = await lookupd_client.lookup_all(lookupd, topic)
        if errors and len(errors) == len(lookupd):
            raise _StatError(f"failed to get topic producers - {errors[0]}")
        addrs = []
        for p in producers:
            host = p.get("broadcast_address") or ""
            addrs.append(f"[{host}]:{p.get('http_port')}" if ":" in host else f"{host}:{p.get('http_port')}")
    else:
        addrs = nsqd

    async def fetch(addr: str) -> dict | None:
        url = f"http://{addr}/stats"
        params = {"format": "json", "topic": topic, "channel": channel, "include_clients": "false"}
        try:
            async with session.get(url, params=params) as resp:
                if resp.status != 200:
                    raise _StatError(f"failed to get nsqd stats - {addr} answered {resp.status}")
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            raise _StatError(f"failed to get nsqd stats - {addr}: {exc or type(exc).__name__}") from None

    totals = dict.fromkeys(_FIELDS, 0)
    found = False
    try:
        results = await asyncio.gather(*(fetch(a) for a in addrs))
    except LookupdError as exc:
        raise _StatError(str(exc)) from None
    for data in results:
        for t in (data or {}).get("topics") or []:
            if t.get("topic_name") != topic:
                continue
            for c in t.get("channels") or []:
                if c.get("channel_name") != channel:
                    continue
                found = True
                for key in _FIELDS:
                    totals[key] += int(c.get(key) or 0)
    if not found:
        raise _StatError(f"failed to find channel({channel}) in stats metadata for topic({topic})")
    return totals


async def _loop(topic: str, channel: str, count: int | None, interval: float, lookupd: list[str],
                nsqd: list[str], connect_timeout: float, request_timeout: float) -> int:
    import aiohttp

    from nsq.client.lookupd import LookupdHTTPClient

    stop = stop_event()
    timeout = aiohttp.ClientTimeout(total=request_timeout, connect=connect_timeout)
    out = sys.stdout
    previous: dict[str, int] | None = None
    async with aiohttp.ClientSession(timeout=timeout) as session, \
            LookupdHTTPClient(connect_timeout, request_timeout) as lookupd_client:
        i = 0
        while count is None or i < count:
            c = await _channel_totals(session, lookupd_client, topic, channel, lookupd, nsqd)
            if i % 25 == 0:
                out.write("------rate------+----------------depth----------------+"
                          "--------------metadata---------------\n")
                out.write("%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n" % (
                    "ingress", "egress", "total", "mem", "disk", "inflt", "def",
                    "req", "t-o", "msgs", "clients"))
            if previous is not None:
                ingress = int((c["message_count"] - previous["message_count"]) / interval)
                egress = int((c["message_count"] - previous["message_count"]
                              - (c["depth"] - previous["depth"])) / interval)
                out.write("%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n" % (
                    ingress, egress, c["depth"], c["depth"] - c["backend_depth"], c["backend_depth"],
                    c["in_flight_count"], c["deferred_count"], c["requeue_count"], c["timeout_count"],
                    c["message_count"], c["client_count"]))
            try:
                out.flush()
            except BrokenPipeError:
                return 0
            previous = c
            i += 1
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return 0
            except TimeoutError:
                pass
    return 0
