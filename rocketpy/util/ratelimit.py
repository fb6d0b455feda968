"""Rate-limited log lines: a flood of one event (refused puts while the disk is full) logs one
line every few seconds, saying how many it stands for."""

from __future__ import annotations

from collections.abc import Hashable

from twisted.internet.interfaces import IReactorTime


class EveryFewSeconds:
    """Lets one occurrence of each key through per ``interval`` seconds and counts the rest.

    :param clock: None lets every occurrence through (no clock to measure the interval with).
    """

    def __init__(self, clock: IReactorTime | None, interval: float = 10.0) -> None:
        self._clock = clock
        self._interval = interval
        self._next: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def admit(self, key: Hashable) -> int | None:
        """None to stay quiet; otherwise how many occurrences were held back since the last one let through."""
        if self._clock is None:
            return 0
        now = self._clock.seconds()
        if now < self._next.get(key, now):
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._next[key] = now + self._interval
        return self._held.pop(key, 0)
