"""nsq: NSQ in Python, wire-compatible with Go NSQ v1.2.

The package is layered (see ../shared/GUIDE.md):

- :mod:`nsq.protocol` sans-IO wire formats (no sockets, no clocks);
- :mod:`nsq.server` asyncio daemons (``NSQD``);
- :mod:`nsq.client` asyncio client (``Producer``, ``Consumer``);
- :mod:`nsq.commands` the thin ``nsq`` CLI subcommands.
"""

__version__ = "0.1.0"

#: The NSQ version this implementation speaks and reports on the wire
#: (IDENTIFY ``version``, ``/info``, ``/stats``); tools such as nsqadmin
#: compare it to decide which API to use.
NSQ_VERSION = "1.2.1"

__all__ = ["__version__", "NSQ_VERSION"]
