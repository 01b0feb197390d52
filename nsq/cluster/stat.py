"""One channel's figures summed over the nsqds that have its topic: what
``nsq stat`` prints (:mod:`nsq.apps.stat`) and shows live
(:mod:`nsq.tui.stat`), so that both always agree.

As Go's nsq_stat (nsqio/nsq ``apps/nsq_stat/nsq_stat.go``, ``statLoop``;
https://nsq.io/components/utilities.html#nsq_stat): each poll finds the
topic's producers (``/lookup`` on every lookupd, or the nsqds given), reads
their ``/stats`` for the channel and sums the counters of :data:`FIELDS`;
the ingress and egress rates (messages/s) come from two successive polls,
divided by the time measured between them (not the nominal interval: a
slow answer or a paused loop would skew the rates). :class:`PlainWriter` prints nsq_stat's lines.

Beyond Go, for nsqds with replication (docs/operations/replication.md):
each nsqd's ``/stats`` ``replication`` object is kept in its
:class:`NodeReport`; :func:`replication_line` words it, printed before the
header and row of each interval only by an nsqd that is a replica or a
leader with replicas (or ``--replica-acks``), so the lines stay Go's
otherwise. A replica's counters are a copy of its leader's: they are left
out of the totals unless only replicas have the channel.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import IO, Any

from nsq import __version__
from nsq.client.lookupd import HTTPAPIError, LookupdHTTPClient, LookupdQueryError, topic_producers
from nsq.cluster.nsqd import NSQDHTTPClient

__all__ = ["FIELDS", "NodeReport", "PlainWriter", "StatPoller", "StatReport", "replication_line"]

#: the channel counters of nsqd's ``/stats`` that nsq_stat sums
FIELDS = ("depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
          "timeout_count", "message_count", "client_count")


@dataclass
class NodeReport:
    """One nsqd's part of a :class:`StatReport`.

    Attributes:
        address: the nsqd's HTTP ``host:port``.
        counters: the channel's :data:`FIELDS` on this nsqd; None when the
            nsqd could not be read or does not have the channel.
        ingress, egress: messages/s since the previous poll of this nsqd;
            None on its first good poll.
        error: why ``counters`` is None (unreachable, bad answer, no channel).
        missing: True when the nsqd answered but has no such channel (the
            other nsqds are still summed, as Go does).
        replication: the nsqd's ``/stats`` ``replication`` object (beyond
            Go, ``--storage=wal``); None without one (a Go nsqd, an error).
        summed: True when ``counters`` are in the report's totals (False
            for a replica's copy beside a leader's channel).
    """

    address: str
    counters: dict[str, int] | None = None
    ingress: int | None = None
    egress: int | None = None
    error: str | None = None
    missing: bool = False
    replication: dict[str, Any] | None = None
    summed: bool = False

    @property
    def is_replica(self) -> bool:
        """True when the nsqd said it is a replica (``--replica-of``)."""
        return self.replication is not None and self.replication.get("role") == "replica"


def _lag(figures: Any) -> str:
    """``lag N msgs S.SSs`` from a ``lag_messages`` / ``lag_seconds`` object."""
    figures = figures if isinstance(figures, dict) else {}
    return f"lag {int(figures.get('lag_messages') or 0)} msgs {float(figures.get('lag_seconds') or 0):.2f}s"


def replication_line(node: NodeReport, topic: str) -> str | None:
    """The plain report's ``replication:`` line for one nsqd (no newline),
    or None when it replicates nothing (no ``replication`` object, or a
    leader with no replica and ``--replica-acks=0``).

    - a replica: ``replication: ADDR replica of LEADER epoch E lag N msgs
      S.SSs`` (its lag for ``topic``, over every topic when it has no
      figure for it), ``(not connected)`` after the leader while it is cut
      off;
    - a leader: ``replication: ADDR leader epoch E acks A, replica R lag N
      msgs S.SSs, ...`` with each replica's lag for ``topic`` (its lag
      over every topic when the topic has no log there), or ``no
      replica``.
    """
    rep = node.replication
    try:
        if rep is None:
            return None
        epoch = int(rep.get("epoch") or 0)
        if rep.get("role") == "replica":
            cut = "" if rep.get("connected") else " (not connected)"
            own = (rep.get("topics") or {}).get(topic) or rep
            return f"replication: {node.address} replica of {rep.get('leader')}{cut} epoch {epoch} {_lag(own)}"
        replicas = [r for r in rep.get("replicas") or [] if isinstance(r, dict)]
        acks = int(rep.get("replica_acks") or 0)
        if rep.get("role") != "leader" or not (replicas or acks):
            return None
        parts = [f"replica {r.get('address')} {_lag((r.get('topics') or {}).get(topic) or r)}" for r in replicas]
        return f"replication: {node.address} leader epoch {epoch} acks {acks}, " + (", ".join(parts) or "no replica")
    except (AttributeError, TypeError, ValueError):  # not nsqd's shape: say nothing rather than fail the report
        return None


@dataclass
class StatReport:
    """One poll of every nsqd with the topic.

    Attributes:
        number: 1 for the first poll, then 2, 3, ...
        time: wall-clock time of the poll (seconds since the epoch).
        totals: the channel's :data:`FIELDS` summed over the nsqds that have
            it; None when no nsqd has it (see ``error``).
        ingress, egress: cluster-wide messages/s since the previous good
            poll (nsq_stat's formula over the measured time); None on
            the first good poll.
        nodes: per nsqd, sorted by address.
        error: a poll-wide failure (every lookupd failed, the channel is on
            no nsqd), as nsq_stat words it; None if there is none.
        topic: the topic watched (for the replicas' lag in :func:`replication_line`).
    """

    number: int
    time: float
    totals: dict[str, int] | None = None
    ingress: int | None = None
    egress: int | None = None
    nodes: list[NodeReport] = field(default_factory=list)
    error: str | None = None
    topic: str = ""

    @property
    def first_error(self) -> str | None:
        """The error that ends the plain report: poll-wide first, then the
        first failing nsqd's (not "no channel" on one nsqd: Go sums the others)."""
        if self.error:
            return self.error
        for node in self.nodes:
            if node.error and not node.missing:
                return f"failed to get nsqd stats - {node.error}"
        return None


def _rates(previous: dict[str, int], current: dict[str, int], interval: float) -> tuple[int, int]:
    """(ingress, egress) in messages/s as Go nsq_stat computes them (truncated),
    over ``interval`` seconds (the measured time between the two samples)."""
    interval = max(interval, 1e-6)
    messages = current["message_count"] - previous["message_count"]
    ingress = int(messages / interval)
    egress = int((messages - (current["depth"] - previous["depth"])) / interval)
    return ingress, egress


class StatPoller:
    """Polls ``/stats`` of every nsqd that has ``topic`` for ``channel``.

    Args:
        topic, channel: what to watch.
        lookupd: lookupd HTTP addresses to find the topic's producers
            (each poll, :func:`~nsq.client.lookupd.topic_producers`), or
        nsqd: nsqd HTTP addresses to ask directly (one of the two).
        interval: seconds between polls (the rates divide by the time
            measured between two samples).
        connect_timeout, request_timeout: seconds, per HTTP request.
        auth_secret: sent to the nsqds as ``Authorization: Bearer <secret>``
            (nsqd's ``--http-auth-required``); "" sends none.

    HTTP sessions are opened by the first :meth:`poll` (in the running
    loop) and closed by :meth:`close`.
    """

    def __init__(self, topic: str, channel: str, *, lookupd: list[str] | None = None,
                 nsqd: list[str] | None = None, interval: float = 2.0, connect_timeout: float = 2.0,
                 request_timeout: float = 5.0, auth_secret: str = "") -> None:
        self.topic = topic
        self.channel = channel
        self.lookupd = list(lookupd or [])
        self.nsqd = list(nsqd or [])
        self.interval = interval
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.auth_secret = auth_secret
        self._nsqd_client: NSQDHTTPClient | None = None
        self._lookupd_client: LookupdHTTPClient | None = None
        self._number = 0
        self._previous: dict[str, int] | None = None
        self._previous_at = 0.0
        self._previous_nodes: dict[str, tuple[float, dict[str, int]]] = {}

    @property
    def source(self) -> str:
        """Where the producers come from, for display (``lookupd a,b`` / ``nsqd a``)."""
        return ("lookupd " + ",".join(self.lookupd)) if self.lookupd else ("nsqd " + ",".join(self.nsqd))

    async def close(self) -> None:
        """Close the HTTP sessions (the poller can poll again afterwards)."""
        if self._nsqd_client is not None:
            await self._nsqd_client.close()
            self._nsqd_client = None
        if self._lookupd_client is not None:
            await self._lookupd_client.close()
            self._lookupd_client = None

    async def _producers(self) -> tuple[list[str], str | None]:
        """(HTTP addresses of the nsqds to read, sorted; a poll-wide error)."""
        if not self.lookupd:
            return list(self.nsqd), None
        if self._lookupd_client is None:
            self._lookupd_client = LookupdHTTPClient(self.connect_timeout, self.request_timeout,
                                                     user_agent=f"nsq_stat/{__version__}")
        try:
            producers = await topic_producers(self.lookupd, self.topic, client=self._lookupd_client)
        except LookupdQueryError as exc:
            return [], f"failed to get topic producers - {exc}"
        return sorted({p.http_address for p in producers}), None

    async def _fetch(self, client: NSQDHTTPClient, addr: str) -> NodeReport:
        try:
            data = await client.stats(addr, topic=self.topic, channel=self.channel, include_clients=False)
        except HTTPAPIError as exc:
            return NodeReport(addr, error=f"{addr}: {exc.reason}")
        rep = data.get("replication")
        rep = rep if isinstance(rep, dict) else None
        counters = None
        for t in data.get("topics") or []:
            if t.get("topic_name") != self.topic:
                continue
            for c in t.get("channels") or []:
                if c.get("channel_name") != self.channel:
                    continue
                counters = counters or dict.fromkeys(FIELDS, 0)
                for key in FIELDS:
                    counters[key] += int(c.get(key) or 0)
        if counters is None:
            return NodeReport(addr, error=f"no channel({self.channel}) for topic({self.topic})", missing=True,
                              replication=rep)
        return NodeReport(addr, counters, replication=rep)

    async def poll(self) -> StatReport:
        """Ask every producer once; never raises for a network or nsqd
        failure (they are in the report)."""
        if self._nsqd_client is None:
            self._nsqd_client = NSQDHTTPClient(self.connect_timeout, self.request_timeout,
                                               user_agent=f"nsq_stat/{__version__}", auth_secret=self.auth_secret)
        client = self._nsqd_client
        self._number += 1
        report = StatReport(self._number, time.time(), topic=self.topic)
        addrs, report.error = await self._producers()
        if report.error:
            return report
        report.nodes = list(await asyncio.gather(*(self._fetch(client, a) for a in addrs)))
        now = time.monotonic()
        totals = None
        previous_nodes: dict[str, tuple[float, dict[str, int]]] = {}
        for node in report.nodes:
            if node.counters is None:
                continue
            before = self._previous_nodes.get(node.address)
            if before is not None:
                node.ingress, node.egress = _rates(before[1], node.counters, now - before[0])
            previous_nodes[node.address] = (now, node.counters)
        self._previous_nodes = previous_nodes
        # a replica's channel is a copy of its leader's: not summed beside a leader's
        have = [node for node in report.nodes if node.counters is not None]
        for node in [node for node in have if not node.is_replica] or have:
            assert node.counters is not None
            node.summed = True
            totals = totals or dict.fromkeys(FIELDS, 0)
            for key in FIELDS:
                totals[key] += node.counters[key]
        if totals is None:
            failed = [node for node in report.nodes if node.error and not node.missing]
            if failed:  # an unreachable nsqd: say so, not "no channel"
                report.error = f"failed to get nsqd stats - {failed[0].error}"
            else:
                report.error = (f"failed to find channel({self.channel}) in stats metadata"
                                f" for topic({self.topic})")
            return report
        report.totals = totals
        if self._previous is not None:
            report.ingress, report.egress = _rates(self._previous, totals, now - self._previous_at)
        self._previous = totals
        self._previous_at = now
        return report


class PlainWriter:
    """Writes Go nsq_stat's lines for successive reports.

    Args:
        out: a text stream.

    :meth:`write` prints a row for every report that has rates (not the
    first, which only sets their base) and the two-line header before the
    1st, 26th, ... row, as Go's ``i%25 == 1``; before them, the
    :func:`replication_line` of each nsqd that replicates (beyond Go: none
    when no nsqd has replication, so the lines are Go's).
    """

    HEADER = ("------rate------+----------------depth----------------+"
              "--------------metadata---------------\n"
              + "%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n" % (
                  "ingress", "egress", "total", "mem", "disk", "inflt", "def",
                  "req", "t-o", "msgs", "clients"))

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._i = 0

    @staticmethod
    def row(report: StatReport) -> str:
        """One report's row (``\\n``-terminated); needs totals and rates."""
        c = report.totals
        assert c is not None and report.ingress is not None and report.egress is not None
        return "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n" % (
            report.ingress, report.egress, c["depth"], c["depth"] - c["backend_depth"], c["backend_depth"],
            c["in_flight_count"], c["deferred_count"], c["requeue_count"], c["timeout_count"],
            c["message_count"], c["client_count"])

    def write(self, report: StatReport) -> None:
        """Write the replication lines, the header when due and the report's
        row (all only if it has rates)."""
        if report.ingress is None:
            return
        for node in report.nodes:
            line = replication_line(node, report.topic)
            if line is not None:
                self.out.write(line + "\n")
        if self._i % 25 == 0:
            self.out.write(self.HEADER)
        self.out.write(self.row(report))
        self._i += 1
