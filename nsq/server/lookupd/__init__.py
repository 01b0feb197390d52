"""nsqlookupd: the discovery daemon (https://nsq.io/components/nsqlookupd.html)."""

from nsq.server.lookupd.lookupd import NSQLookupd
from nsq.server.lookupd.options import LookupdOptions

__all__ = ["LookupdOptions", "NSQLookupd"]
