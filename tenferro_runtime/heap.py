"""Keep freed memory in the process heap (glibc), so arrays allocated afresh on every call
do not page-fault their memory in each time.

glibc serves a large allocation from fresh pages (mmap above a threshold, which it raises to
the largest block freed so far, or heap memory it has just returned to the system once more
than twice that threshold lies free at the heap's top). A compiled function that allocates
several arrays of a few MiB per call (a scan's stacked outputs and residuals, activations)
then pays a page fault per 4 KiB of each, every call: 3.5 of the 14 ms of the scan RNN
gradient in `bench/transformations.py` (docs/performance.md, "Transformations"). Arrays of
up to `MMAP_THRESHOLD` now come from the heap, and up to `TRIM_THRESHOLD` of free memory at
its top is kept, as a framework's caching allocator keeps freed blocks.

Applied once per process when the first runtime is built, only with glibc, and not where
the user tuned malloc (``MALLOC_*_`` environment variables) or set ``TENFERRO_HEAP=system``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_USER_TUNING = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")
_lock = threading.Lock()
_state: dict[str, bool] = {}


def keep_freed_memory() -> bool:
    """Apply the settings above (once per process); True where they are in effect."""
    with _lock:
        if "kept" not in _state:
            _state["kept"] = _apply()
        return _state["kept"]


def _apply() -> bool:
    if os.environ.get("TENFERRO_HEAP", "keep") != "keep" or not sys.platform.startswith("linux"):
        return False
    if any(k in os.environ for k in _USER_TUNING):
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: leave them alone
            return False
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in
               ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)))


__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]
