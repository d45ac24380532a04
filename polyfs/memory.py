"""The daemon's malloc policy: large buffers reused, freed memory given back.

Every FUSE write arrives as a fresh 1 MiB buffer and the overlay keeps 256 KiB
pages: with glibc's small default mmap threshold each of them is a new mapping
whose pages fault in on first touch and are unmapped on free, which cost the
write path half its CPU. A fixed threshold of 4 MiB (fixed also stops glibc
from raising it as large blocks are freed) serves them from two heap arenas
and reuses the memory; :func:`trim` hands what is free back to the system
once files are stored (at most every 5 s: memory given back is faulted in
again, which cost a stream of writes half its page faults at 0.5 s), so the
resident size follows what is in use.
The automatic trim threshold equals the mmap threshold: below it, the heap keeps
a freed read reply (up to 1 MiB each, one per FUSE read) for the next one; at
1 MiB every reply faulted its pages in afresh, which halved cold reads.
"""
from __future__ import annotations

import ctypes
import threading
import time

MMAP_THRESHOLD = 4 << 20
ARENAS = 2
TRIM_THRESHOLD = MMAP_THRESHOLD  # free memory at the top of a heap beyond this goes back at once
TRIM_EVERY = 5.0  # seconds: at most this often

_libc: ctypes.CDLL | None = None
_last = 0.0
_pending: threading.Timer | None = None
_guard = threading.Lock()


def tune_malloc() -> None:
    """Set the policy (glibc only; elsewhere nothing to tune)."""
    global _libc
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8
    libc.mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    libc.mallopt(m_trim_threshold, TRIM_THRESHOLD)
    libc.mallopt(m_arena_max, ARENAS)
    _libc = libc


def trim() -> None:
    """Give free heap memory back to the system: at most every TRIM_EVERY seconds (memory
    given back is faulted in again by the next file's pages, so a burst of writes trims
    once); a call inside the window schedules one at its end, so memory freed by the last
    file of a burst goes back too."""
    global _last, _pending
    if _libc is None:
        return
    now = time.monotonic()
    with _guard:
        wait = _last + TRIM_EVERY - now
        if wait > 0:
            if _pending is None:
                _pending = threading.Timer(wait, _deferred)
                _pending.daemon = True
                _pending.start()
            return
        _last = now
    _libc.malloc_trim(0)


def _deferred() -> None:
    global _pending
    with _guard:
        _pending = None
    trim()
