"""Message rates for ``nsq admin``: the ingress ``rate`` and the ``egress``
(messages/s) of every topic, channel and per-nsqd row of a
:class:`~nsq.cluster.model.ClusterSnapshot`, and the short histories its
sparklines draw.

A rate comes from two successive polls (:func:`apply_rates`, remembering
the previous one in a :class:`History`): the ingress ``rate`` is the growth
of the message count (messages put into the topic or channel) over the
time between the polls, the ``egress`` (messages taken from a channel's
queue) that growth minus the depth's, as Go's nsq_stat computes it (nsqio/nsq
``apps/nsq_stat/nsq_stat.go``; https://nsq.io/components/utilities.html#nsq_stat).
nsqadmin itself only shows rates with graphite.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsq.cluster.model import ClusterSnapshot

__all__ = ["History", "apply_rates"]


class History:
    """Per-topic and per-channel counters of the previous poll and the last
    ``size`` depth, rate and egress values, for :func:`apply_rates`."""

    def __init__(self, size: int = 120) -> None:
        self.size = size
        self.previous_at: float | None = None
        self.previous: dict[tuple[str, ...], int] = {}
        self.series: dict[tuple[str, ...], tuple[deque[float], deque[float], deque[float]]] = {}
        self.cluster_rates: deque[float] = deque(maxlen=size)

    def _series(self, key: tuple[str, ...]) -> tuple[deque[float], deque[float], deque[float]]:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = (deque(maxlen=self.size), deque(maxlen=self.size), deque(maxlen=self.size))
        return s


def _rate(history: History, key: tuple[str, ...], messages: int, counters: dict[tuple[str, ...], int],
          dt: float | None) -> float | None:
    counters[key] = messages
    if dt is None or dt <= 0:
        return None
    before = history.previous.get(key)
    if before is None or messages < before:
        return None  # new here, or the nsqd restarted (counter reset)
    return (messages - before) / dt


def _egress(history: History, key: tuple[str, ...], ingress: float | None, depth: int,
            counters: dict[tuple[str, ...], int], dt: float | None) -> float | None:
    """Messages/s taken from a queue: ingress minus the depth's growth
    (nsq_stat's egress), at least 0; None when the ingress is unknown."""
    dkey = ("depth",) + key
    counters[dkey] = depth
    before = history.previous.get(dkey)
    if ingress is None or before is None or not dt or dt <= 0:
        return None
    return max(0.0, ingress - (depth - before) / dt)


def _remember(history: History, key: tuple[str, ...], depth: float, rate: float | None,
              egress: float | None) -> tuple[list[float], list[float], list[float]]:
    depths, rates, egresses = history._series(key)
    depths.append(depth)
    if rate is not None:
        rates.append(rate)
    if egress is not None:
        egresses.append(egress)
    return list(depths), list(rates), list(egresses)


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def apply_rates(snapshot: ClusterSnapshot, history: History) -> ClusterSnapshot:
    """Fill ``rate`` (messages/s in since the previous poll, summed over the
    nsqds seen both times), ``egress`` (messages/s out of the channels'
    queues) and the depth/rate/egress histories of every topic, channel and
    per-nsqd row, and the cluster's rate history; then remember this poll in
    ``history``. Returns ``snapshot``."""
    dt = None if history.previous_at is None else snapshot.taken_at - history.previous_at
    counters: dict[tuple[str, ...], int] = {}
    live: set[tuple[str, ...]] = set()
    for topic in snapshot.topics:
        for n in topic.nodes:
            n.rate = _rate(history, ("t", topic.name, n.node), n.messages, counters, dt)
        topic.rate = _sum([n.rate for n in topic.nodes])
        if topic.rate is None and dt and not topic.nodes:
            topic.rate = 0.0
        for ch in topic.channels:
            for cn in ch.nodes:
                key: tuple[str, ...] = ("c", topic.name, ch.name, cn.node)
                cn.rate = _rate(history, key, cn.messages, counters, dt)
                cn.egress = _egress(history, key, cn.rate, cn.depth, counters, dt)
            ch.rate = _sum([cn.rate for cn in ch.nodes])
            ch.egress = _sum([cn.egress for cn in ch.nodes])
            key = ("c", topic.name, ch.name)
            live.add(key)
            ch.depth_history, ch.rate_history, ch.egress_history = _remember(
                history, key, float(ch.depth), ch.rate, ch.egress)
        # per nsqd, the egress of its channels there (the same objects as the channels' nodes)
        for n in topic.nodes:
            n.egress = _sum([c.egress for c in n.channels]) if n.channels else (0.0 if n.rate is not None else None)
        topic.egress = _sum([c.egress for c in topic.channels]) if topic.channels else (
            0.0 if topic.rate is not None else None)
        key = ("t", topic.name)
        live.add(key)
        topic.depth_history, topic.rate_history, topic.egress_history = _remember(
            history, key, float(topic.depth + sum(c.depth for c in topic.channels)), topic.rate, topic.egress)
    total = snapshot.totals.rate
    if total is not None:
        history.cluster_rates.append(total)
    snapshot.rate_history = list(history.cluster_rates)
    for key in list(history.series):
        if key not in live:
            del history.series[key]
    history.previous = counters
    history.previous_at = snapshot.taken_at
    return snapshot
