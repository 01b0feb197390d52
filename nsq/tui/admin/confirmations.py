"""The confirmations in front of the topic actions that several screens
offer (Topics, Topic, Lookup): each asks through
:meth:`~nsq.tui.admin.base.AdminScreen.confirm`, then runs the
:class:`~nsq.cluster.actions.Admin` call."""

from __future__ import annotations

from collections.abc import Callable

from nsq.cluster.model import TopicStats
from nsq.tui import fmt
from nsq.tui.admin.base import AdminScreen

__all__ = ["confirm_delete_topic", "confirm_empty_topic", "confirm_pause_topic"]


def confirm_pause_topic(screen: AdminScreen, topic: TopicStats) -> None:
    """Ask, then pause (or unpause) ``topic`` on its nsqds."""
    name = topic.name
    if topic.paused:
        screen.confirm(f"Unpause topic {name} on {topic.producers} nsqd? Messages flow to its channels again.",
                       "Unpause", lambda a: a.unpause_topic(name), destructive=False)
    else:
        screen.confirm(f"Pause topic {name} on {topic.producers} nsqd? Messages stay in the topic and stop "
                       "flowing to its channels.", "Pause", lambda a: a.pause_topic(name), destructive=False)


def confirm_empty_topic(screen: AdminScreen, topic: TopicStats) -> None:
    """Ask, then empty ``topic``'s own queue on its nsqds."""
    name = topic.name
    screen.confirm(f"Empty topic {name}? The {fmt.plural(topic.depth, 'message')} queued in the topic itself "
                   f"(not in its channels) on {topic.producers} nsqd {'is' if topic.depth == 1 else 'are'} lost.", "Empty",
                   lambda a: a.empty_topic(name))


def confirm_delete_topic(screen: AdminScreen, topic: TopicStats, after: Callable[[], None] | None = None) -> None:
    """Ask, then delete ``topic`` everywhere (then ``after``)."""
    name = topic.name
    screen.confirm(f"Delete topic {name} with its {fmt.plural(len(topic.channels), 'channel')} from the lookupds and "
                   f"{topic.producers} nsqd? Every queued message is lost.", "Delete",
                   lambda a: a.delete_topic(name), after=after)
