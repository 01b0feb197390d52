"""nsq: NSQ in Python, wire-compatible with Go NSQ v1.2.

The package is layered, imports going one way (docs/architecture.md):

- :mod:`nsq.protocol` sans-IO wire formats (no sockets, no clocks);
- :mod:`nsq._internal` helpers every layer shares (durations, addresses, logs);
- :mod:`nsq.client` asyncio client (``Producer``, ``Consumer``);
- :mod:`nsq.cluster` what the tools share about a cluster (lookupd/nsqd HTTP);
- :mod:`nsq.server` asyncio daemons (``NSQD``, ``NSQLookupd``),
  :mod:`nsq.apps` the utilities as libraries, :mod:`nsq.tui` the Textual
  apps, :mod:`nsq.spark` the PySpark data sources;
- :mod:`nsq.commands` the thin ``nsq`` CLI subcommands, loaded by
  :mod:`nsq.cli`.
"""

__version__ = "0.1.0"

#: The NSQ version this implementation speaks and reports on the wire
#: (IDENTIFY ``version``, ``/info``, ``/stats``); tools such as nsqadmin
#: compare it to decide which API to use.
NSQ_VERSION = "1.2.1"

__all__ = ["__version__", "NSQ_VERSION"]
