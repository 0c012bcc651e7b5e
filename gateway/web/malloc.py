"""Large freed blocks go back to the system at once (glibc's ``malloc``).

glibc serves a block of 128 KiB or more with its own ``mmap`` and unmaps it when freed,
but after the first such free it raises that threshold to the size freed (up to 32 MiB):
from then on the bodies of large requests come from the heap, which keeps what was freed.
A process that parsed a few 30 MB requests would then stay that much larger, and the
next large request would add to it rather than reuse it at the same moment. Fixing the
threshold (``mallopt(M_MMAP_THRESHOLD)``) turns that adjustment off: a block of
:data:`THRESHOLD` or more is always mapped, and returned when freed. Smaller blocks, all
that an ordinary request allocates, are served as before.

An operator's own ``MALLOC_MMAP_THRESHOLD_`` wins; a C library without ``mallopt``
(musl, macOS) keeps its own rules.
"""

from __future__ import annotations

import os

__all__ = ["THRESHOLD", "return_large_blocks"]

#: Blocks of this many bytes or more are mapped on their own (and unmapped when freed).
THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def return_large_blocks() -> bool:
    """Fix the threshold at :data:`THRESHOLD`, once per process before serving (forked
    workers inherit it); whether it was set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD))
