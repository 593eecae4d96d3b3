"""glibc's allocator asked to keep freed memory between the runs of a sweep.

A sweep runs many sessions one after another in each worker. Between two runs glibc
hands the freed GP cache (T x n floats: 4 MB at table1's scale) back to the system, and
every step of the next run faults the pages of its new row in again: ~1,100 minor page
faults a run, which made kernel columns ~2x slower (docs/performance.md, Sweeps).
Raising the trim threshold to 64 MB and serving blocks under 32 MB from the heap keeps
at most that much freed memory mapped for the next run; larger blocks (a cache at
n = 1e7) are still mapped and unmapped on their own.
"""
from __future__ import annotations

import ctypes

TRIM_BYTES = 64 << 20
MMAP_BYTES = 32 << 20
# the same settings for a process about to start (glibc reads them at start-up)
KEEP_ENV = {"MALLOC_TRIM_THRESHOLD_": str(TRIM_BYTES), "MALLOC_MMAP_THRESHOLD_": str(MMAP_BYTES)}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def keep_freed_memory() -> bool:
    """Set this process's allocator to keep freed memory (see the module): True where the
    C library is glibc and took both settings, False elsewhere (nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # this process's own C library, if it has one
    except (OSError, AttributeError, TypeError):  # no mallopt (macOS, Windows)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)) and \
        bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES))
