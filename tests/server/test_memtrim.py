"""The daemons' malloc policy (nsq/server/memtrim.py): large blocks from the
heap, kept for reuse until the periodic trim, instead of an mmap per block."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

from nsq.server.memtrim import MMAP_THRESHOLD

#: how many bytes a fresh 4 MiB bytearray adds to glibc's mmapped blocks (mallinfo2 ``hblkhd``)
PROBE = """
import ctypes, ctypes.util, sys
from nsq.server.memtrim import tune_malloc
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Info
if sys.argv[1] == "tuned":
    assert tune_malloc()
before = libc.mallinfo2().hblkhd
block = bytearray(4 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def _mmapped_growth(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or "libc" not in (ctypes.util.find_library("c") or "")
                    or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2"),
                    reason="glibc 2.33+ only (mallinfo2)")
def test_tuned_malloc_takes_a_large_block_from_the_heap_not_its_own_mmap() -> None:
    assert MMAP_THRESHOLD > 4 << 20
    assert _mmapped_growth("default") >= 4 << 20  # glibc's default: a block this large is mapped on its own
    assert _mmapped_growth("tuned") == 0
