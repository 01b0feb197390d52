"""Moved to :mod:`nsq._internal.addresses` (this name is kept until every importer moves)."""

from nsq._internal.addresses import *  # noqa: F401,F403
from nsq._internal.addresses import __all__  # noqa: F401
