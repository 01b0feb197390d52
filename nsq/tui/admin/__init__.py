"""``nsq admin``: Go nsqadmin's pages as a Textual app.

Screens (each refreshed at every poll, every ``refresh_interval`` seconds):

- Topics (:mod:`.topics`): every topic with depth, memory + disk, in
  flight, deferred, messages, In/s and Out/s (messages published, and
  taken from its channels' queues), channels and producers, cluster totals
  and an ingress sparkline on top; sort and filter.
- Topic (:mod:`.topic`): per nsqd and per channel figures (e2e percentiles
  when nsqd records them), sparklines of the queued messages, In/s and Out/s;
  on ``--storage=wal`` nsqds the window their topic log retains (:mod:`.retention`).
- Channel (:mod:`.channel`): per nsqd figures (dead-lettered messages
  and max attempts too, from this project's nsqd; its offset in the topic
  log) and every consumer connection; ``R`` rewinds it to a time.
- Peek (:mod:`.peek`): the next messages of a channel (or of a topic
  without channels) on each nsqd, merged oldest first; changes nothing.
- Nodes (:mod:`.nodes`): the nsqds (version, ports, lookupd connections,
  topics and tombstones) and the lookupds.
- Node (:mod:`.node`): one nsqd's topics, channels and clients (enter on
  an nsqd row of the Nodes, Topic or Channel screen).
- Counter (:mod:`.counter`): the messages processed over the cluster, in
  large digits, and their rate.
- Lookup (:mod:`.lookup`): the lookupds, and every topic and channel as a
  tree, those no nsqd has yet marked; create and delete.

A screen opens another by posting a message of :mod:`.navigation`
(``ShowTopic``, ``ShowChannel``, ``ShowNode``, ``ShowPeek``); the app
handles it and pushes the screen, so no screen module imports another.
The modal dialogs (confirmation, create form, keys) are in :mod:`.dialogs`.

Admin actions (create, pause/unpause, empty, delete, tombstone, drain,
rewind) ask for a confirmation, run through :class:`~nsq.cluster.actions.Admin` and report in
a toast; a read-only app shows and binds none of them. The data comes from
a *source*: anything with ``description`` and ``async poll() ->
ClusterSnapshot`` (:class:`~nsq.cluster.poller.Cluster`, or
:class:`FixedSource` for screenshots and tests). The keys are
:data:`~.keys.KEYS`; :func:`run_admin_app` runs the app on a cluster.

CSS is inline (not a ``.tcss`` file) so the app runs from the zipapp
without package data.
"""

from __future__ import annotations

from nsq.tui.admin.app import AdminApp, FixedSource, run_admin_app
from nsq.tui.admin.base import AdminScreen
from nsq.tui.admin.channel import ChannelScreen
from nsq.tui.admin.counter import CounterScreen
from nsq.tui.admin.keys import KEYS, REFRESH_INTERVALS
from nsq.tui.admin.lookup import LookupScreen
from nsq.tui.admin.node import NodeScreen
from nsq.tui.admin.nodes import NodesScreen
from nsq.tui.admin.peek import PeekScreen
from nsq.tui.admin.topic import TopicScreen
from nsq.tui.admin.topics import TopicsScreen

__all__ = ["KEYS", "REFRESH_INTERVALS", "AdminApp", "AdminScreen", "ChannelScreen", "CounterScreen", "FixedSource", "LookupScreen", "NodeScreen", "NodesScreen",
           "PeekScreen", "TopicScreen", "TopicsScreen", "run_admin_app"]
