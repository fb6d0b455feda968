"""glibc's heap kept, not handed back to the kernel after each burst, while a service runs.

glibc returns the free top of its heap to the kernel once it exceeds ``M_TRIM_THRESHOLD``
(128 KiB, raised only when a chunk above the mmap threshold is freed). A broker's buffers (64
KiB reads, a batch's encoded records) are allocated and freed all the time below that size, so
the heap top is trimmed and grown again, and every regrown page faults on the reactor thread; on
a VM whose balloon reports free pages to the host that is a host fault each (doc/benchmarks.md,
"Thirty-eighth pass": 0.02 → 0.001 reactor faults per batched message). Setting the thresholds
fixes them for the process (glibc stops adjusting them), which is why it is done by the
``twistd rocketpy`` service only, never on import.
"""

from __future__ import annotations

import ctypes
import platform
from typing import Callable

from twisted.application.service import Service

from rocketpy.util.libc import libc_function

#: bytes of freed heap glibc keeps (``--heap-keep``); allocations below half of it come from the heap
DEFAULT_HEAP_KEEP = 8 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's limit on 64-bit


def glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None on another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    return libc_function("mallopt", ctypes.c_int, ctypes.c_int)


def keep_freed_heap(keep: int, mallopt: Callable[[int, int], int] | None = None) -> bool:
    """Have glibc keep up to ``keep`` bytes of freed heap and serve allocations below half of
    it from the heap; True when glibc took both settings."""
    mallopt = glibc_mallopt() if mallopt is None else mallopt
    if mallopt is None or keep <= 0:
        return False
    mmap_threshold = min(keep // 2, _MMAP_THRESHOLD_MAX)
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, keep))


class HeapKeepService(Service):
    """:func:`keep_freed_heap` when started (glibc cannot go back to its adaptive thresholds, so
    stopping leaves them).

    :param keep: bytes of freed heap kept; 0 leaves glibc's defaults.
    """

    def __init__(self, keep: int = DEFAULT_HEAP_KEEP) -> None:
        self.keep = keep
        self.applied = False

    def startService(self) -> None:
        super().startService()
        if self.keep > 0 and not self.applied:
            self.applied = keep_freed_heap(self.keep)
