"""Memory handed back to the system once work is done: a full garbage collection, then glibc's ``malloc_trim``.

A long-lived process (the app's server, a worker of ``capacity.runtime.pool``) frees the objects of a finished job,
but the C allocator keeps the freed pages for later allocations: glibc returns only the top of each heap, and a
server gives every session's thread a heap (an "arena") of its own. Its resident memory then stays at its peak
after the sessions have gone. ``release()`` collects what reference counting left (cycles), then asks glibc to
hand every arena's free pages back (``malloc_trim(0)``, which ``madvise``s them away). Elsewhere than glibc it
only collects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` where the C library is glibc, else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def rss_bytes() -> int | None:
    """This process's resident memory [bytes], from ``/proc/self/statm`` (None where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release() -> bool:
    """Collect garbage, then return free heap pages to the system; whether the allocator could be trimmed.

    Costs a full collection (milliseconds to tens of milliseconds, holding the GIL) and the trim (the GIL released:
    ctypes calls run without it); call it when work has ended, not on every request.
    """
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


__all__ = ["release", "rss_bytes"]
