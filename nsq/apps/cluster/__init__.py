"""``nsq cluster`` as a library: one nsqlookupd and N nsqd processes on this
host, in the foreground.

One ``nsq nsqd`` is one asyncio event loop, so it keeps one core busy. The
NSQ way to use a many-core host, and the quickest local cluster to develop
against, is several nsqds, each with its own ports and data path, all
registered with one nsqlookupd (https://nsq.io/overview/design.html,
https://nsq.io/components/nsqlookupd.html): producers publish to one nsqd
each (or round robin), consumers find every nsqd through the lookupd's
HTTP address and read from all of them.

:func:`run` starts ``nsq lookupd`` (unless ``lookupd_tcp_addresses`` names
running ones) and then ``nsq nsqd`` N times, each a child process in its
own session (so a Ctrl-C on the terminal reaches only this process, which
stops the children in order), relays every line they log with the
daemon's name in front (``nsqd-1  | ...``), prints a table of the
addresses once every daemon answers ``/ping``, and on SIGINT or SIGTERM
stops the nsqds (SIGTERM: they unregister from lookupd and write their
queues to disk), then the lookupd. A second signal is passed on to the
daemons (it ends an nsqd's ``--drain-timeout`` wait), a third kills them.
If a daemon exits on its own the others are stopped and the exit status is
1. A child is also sent SIGTERM by the kernel when this process dies
(Linux ``prctl(PR_SET_PDEATHSIG)``), so ``kill -9`` of the parent leaves no
nsqd behind.

Ports (:func:`port_pairs`): nsqd ``i`` (from 1) listens on TCP
``base_port + 2(i-1)`` and HTTP the port after, skipping the pair that
holds the lookupd's ports (TCP ``lookupd_port``, HTTP the next; Go's
4160/4161 by default): with the defaults nsqd-1 has Go's 4150/4151, so the
tools' default addresses reach it, and 16 nsqds take 4150-4159 then
4162-4183. ``base_port=0`` picks free ports for every listener (the
lookupd's too, unless ``lookupd_port`` is given). No HTTPS listener (one
default port for all would collide); TLS on the TCP port works (pass
``--tls-cert``/``--tls-key`` as nsqd flags).

Data: nsqd ``i`` keeps its queues in ``<data_path>/nsqd-<i>``, created if
missing and kept at exit, so a restart with the same ``data_path`` and N
finds its messages again. Without a ``data_path`` the cluster runs in a
new temporary directory that is removed at exit. Each nsqd gets
``--node-id`` = (Go's default for this hostname + i - 1) mod 1024, so the
message IDs of the nsqds on one host differ.
"""

from nsq.apps.cluster.foreground import TableRow, format_table, parse_table, run
from nsq.apps.cluster.processes import Daemon, ProcessCluster
from nsq.apps.cluster.spec import (LOOKUPD_PORT, NSQD_BASE_PORT, ClusterError, ClusterSpec, connect_host,
                                   nsq_command, port_pairs)

__all__ = ["ClusterError", "ClusterSpec", "Daemon", "LOOKUPD_PORT", "NSQD_BASE_PORT", "ProcessCluster", "TableRow",
           "connect_host", "format_table", "nsq_command", "parse_table", "port_pairs", "run"]
