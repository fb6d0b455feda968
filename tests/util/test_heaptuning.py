"""HeapKeepService: glibc keeps freed heap instead of trimming and regrowing it."""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from rocketpy.util.heaptuning import HeapKeepService, glibc_mallopt, keep_freed_heap

#: 50 bursts of 2 MiB of 64 KiB buffers, each freed: the page faults of the last 50
BURSTS = """
import resource, sys
from rocketpy.util.heaptuning import keep_freed_heap
if sys.argv[1] == "keep":
    assert keep_freed_heap(8 << 20)
def burst():
    held = [b"x" * 65536 for _ in range(32)]
    del held
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    burst()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


class KeepFreedHeapTests(SynchronousTestCase):

    def test_settings(self) -> None:
        """The mmap threshold goes to half of ``keep`` (at most glibc's 32 MiB), the trim
        threshold to ``keep``; 0 sets nothing."""
        calls: list[tuple[int, int]] = []

        def mallopt(param: int, value: int) -> int:
            calls.append((param, value))
            return 1

        self.assertTrue(keep_freed_heap(8 << 20, mallopt))
        self.assertTrue(keep_freed_heap(1 << 30, mallopt))
        self.assertFalse(keep_freed_heap(0, mallopt))
        self.assertEqual(calls, [(-3, 4 << 20), (-1, 8 << 20), (-3, 32 << 20), (-1, 1 << 30)])
        self.assertFalse(keep_freed_heap(8 << 20, lambda param, value: 0))

    def test_regrowth_stops_faulting(self) -> None:
        """Buffers allocated and freed in bursts fault their pages in again each burst with glibc's
        defaults (the freed top of the heap went back to the kernel), and not when it is kept."""
        if glibc_mallopt() is None:
            raise SkipTest("not glibc")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        faults = {how: int(subprocess.run([sys.executable, "-c", BURSTS, how], env=env, check=True,
                                          capture_output=True, text=True).stdout)
                  for how in ("default", "keep")}
        self.assertGreater(faults["default"], 50 * 256)  # ≥ half of each burst's 512 pages
        self.assertLess(faults["keep"], 500)

    def test_service(self) -> None:
        """The service applies ``keep`` when started; 0 leaves glibc alone."""
        off = HeapKeepService(0)
        off.startService()
        self.assertFalse(off.applied)
        on = HeapKeepService()
        on.startService()
        self.assertEqual(on.applied, glibc_mallopt() is not None)
        on.stopService()
        off.stopService()
