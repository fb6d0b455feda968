"""A larger first-generation threshold for the cyclic garbage collector while a service runs.

With Python's default (700 container allocations) a broker with a thousand requests in flight
collects every few sends, and each collection walks every request still alive; one in ten walks
the older generation too, and every full collection walks the whole heap (tens of ms).
``doc/benchmarks.md`` ("Garbage collector") measures it. Objects are still freed at once by
reference counting; only cycles wait longer (a few MB at most).
"""

from __future__ import annotations

import gc

from twisted.application.service import Service

#: the first-generation threshold ``twistd rocketpy`` runs with
DEFAULT_GEN0_THRESHOLD = 10_000


class GCThresholdService(Service):
    """Sets the first-generation threshold to ``gen0`` while running; restores the previous one on stop.

    :param gen0: container allocations (net of deallocations) between young collections;
        0 leaves the interpreter's setting alone.
    """

    def __init__(self, gen0: int = DEFAULT_GEN0_THRESHOLD) -> None:
        self.gen0 = gen0
        self._saved: tuple[int, int, int] | None = None

    def startService(self) -> None:
        super().startService()
        if self.gen0 > 0:
            self._saved = gc.get_threshold()
            gc.set_threshold(self.gen0, *self._saved[1:])

    def stopService(self) -> None:
        super().stopService()
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
