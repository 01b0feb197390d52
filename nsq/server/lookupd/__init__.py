"""nsqlookupd: the discovery daemon (seed 000 "nsqlookupd")."""

from nsq.server.lookupd.lookupd import NSQLookupd
from nsq.server.lookupd.options import LookupdOptions

__all__ = ["LookupdOptions", "NSQLookupd"]
