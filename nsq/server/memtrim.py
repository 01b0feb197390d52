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

__all__ = ["malloc_trim", "trim_periodically", "tune_malloc", "TRIM_INTERVAL"]

log = logging.getLogger("nsq")

#: s between trims
TRIM_INTERVAL = 10.0

#: blocks of this many bytes or more get their own mmap (:func:`tune_malloc`)
MMAP_THRESHOLD = 8 << 20
#: free bytes at the heap's top before ``free`` hands them back itself
TRIM_THRESHOLD = 16 << 20
_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_THRESHOLD = -3

try:  # glibc only; elsewhere (musl, macOS, Windows) there is nothing to call
    _libc: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
except OSError:
    _libc = None
_trim = getattr(_libc, "malloc_trim", None)
if _trim is not None:
    _trim.argtypes = [ctypes.c_size_t]
    _trim.restype = ctypes.c_int
_mallopt = getattr(_libc, "mallopt", None)
if _mallopt is not None:
    _mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _mallopt.restype = ctypes.c_int


def tune_malloc() -> bool:
    """Keep freed blocks for reuse between scavenges (:func:`trim_periodically`)
    instead of handing them to the OS at each ``free`` (glibc ``mallopt(3)``:
    ``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``). Returns True once both are
    set; False where ``mallopt`` is unavailable or refuses them. Raises nothing.

    glibc's defaults give a block of 128 KiB or more its own ``mmap`` (the
    threshold rises to the largest such block freed) and give the heap's top
    back once 128 KiB (then twice the threshold) is free there. A large MPUB
    (3.2 MB for 200 bodies of 16 KiB) is a few blocks of that size, made and
    freed per command, so every one was mapped, page-faulted and zeroed
    again: a third of nsqd's time publishing 16 KiB bodies. With blocks below
    :data:`MMAP_THRESHOLD` (8 MiB) from the heap and the top kept up to
    :data:`TRIM_THRESHOLD` (16 MiB), the same row went from 401-467 to
    678-729 MB/s (3 interleaved pairs; docs/benchmarks.md). What a burst
    leaves free is still handed back by the periodic ``malloc_trim``.
    """
    if _mallopt is None:
        return False
    return bool(_mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


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
