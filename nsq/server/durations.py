"""Moved to :mod:`nsq._internal.durations` (this name is kept until every importer moves)."""

from nsq._internal.durations import *  # noqa: F401,F403
from nsq._internal.durations import __all__  # noqa: F401
