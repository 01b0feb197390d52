"""Moved to :mod:`nsq._internal.logs` (this name is kept until every importer moves)."""

from nsq._internal.logs import *  # noqa: F401,F403
from nsq._internal.logs import __all__  # noqa: F401
