"""Hand freed memory back to the OS, as Go's runtime scavenger does.

CPython frees objects into its own arenas and into glibc's heap; after a
burst (a fuzzing client, a drained backlog) most of those pages are free
but stay resident, so RSS keeps the burst's high-water mark although live
memory is back to where it was. glibc's ``malloc_trim(0)`` releases the
free pages of every heap arena (measured: 18 of 33 MB after 58k fuzzed
lookupd commands; 15-20 ms on an 875 MB heap). The daemon commands run
:func:`trim_periodically`; an application embedding the daemons keeps its
own allocator policy.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging

__all__ = ["malloc_trim", "trim_periodically", "TRIM_INTERVAL"]

log = logging.getLogger("nsq")

#: s between trims
TRIM_INTERVAL = 10.0

_trim = None
try:  # glibc only; elsewhere (musl, macOS, Windows) there is nothing to call
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _trim = _libc.malloc_trim
    _trim.argtypes = [ctypes.c_size_t]
    _trim.restype = ctypes.c_int
except (OSError, AttributeError):
    _trim = None


def malloc_trim() -> bool:
    """Release free heap pages to the OS now; False where unavailable.

    ctypes releases the GIL for the call, so other threads run meanwhile.
    """
    if _trim is None:
        return False
    _trim(0)
    return True


async def trim_periodically(interval: float = TRIM_INTERVAL) -> None:
    """Call :func:`malloc_trim` in a worker thread every ``interval`` s,
    until cancelled (a no-op loop exit where it is unavailable)."""
    if _trim is None:
        return
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(malloc_trim)
        except Exception:  # never let housekeeping stop the daemon
            log.exception("malloc_trim failed")
