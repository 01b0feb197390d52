"""The nsqd daemon: ``NSQD(NSQDOptions(...))``."""

from nsq.server.nsqd.nsqd import NSQD
from nsq.server.nsqd.options import NSQDOptions

__all__ = ["NSQD", "NSQDOptions"]
