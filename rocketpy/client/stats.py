"""Pull and consume statistics of a push consumer (Java's ``ConsumerStatsManager``).

Per topic: pull round trips and pulled messages, listener time, messages
consumed and failed. :meth:`ConsumerStats.status` gives the Java
``ConsumeStatus`` of the last minute (and failed messages of the last hour),
which GET_CONSUMER_RUNNING_INFO reports in ``statusTable``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.interfaces import IReactorTime

MINUTE = 60.0
HOUR = 3600.0


class Window:
    """Sums and sample counts of the last ``span`` seconds, in buckets of ``bucket`` seconds."""

    def __init__(self, span: float, bucket: float) -> None:
        self.span = span
        self.bucket = bucket
        self._buckets: deque[list[float]] = deque()  # [bucket index, sum, samples], oldest first

    def add(self, value: float, now: float) -> None:
        index = now // self.bucket
        if self._buckets and self._buckets[-1][0] == index:
            last = self._buckets[-1]
            last[1] += value
            last[2] += 1
        else:
            self._buckets.append([index, value, 1])
        self._trim(now)

    def totals(self, now: float) -> tuple[float, int]:
        """``(sum, samples)`` of the values added in the last ``span`` seconds."""
        self._trim(now)
        return sum(b[1] for b in self._buckets), int(sum(b[2] for b in self._buckets))

    def _trim(self, now: float) -> None:
        oldest = (now - self.span) // self.bucket
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()


@dataclass
class TopicStats:
    """The windows kept for one topic."""

    pull_rt: Window = field(default_factory=lambda: Window(MINUTE, 1.0))
    pulled: Window = field(default_factory=lambda: Window(MINUTE, 1.0))
    consume_rt: Window = field(default_factory=lambda: Window(MINUTE, 1.0))
    consumed_ok: Window = field(default_factory=lambda: Window(MINUTE, 1.0))
    consumed_failed: Window = field(default_factory=lambda: Window(MINUTE, 1.0))
    failed_in_hour: Window = field(default_factory=lambda: Window(HOUR, MINUTE))


def _average(totals: tuple[float, int]) -> float:
    total, samples = totals
    return total / samples if samples else 0.0


class ConsumerStats:
    """Statistics per topic on ``clock`` (times in milliseconds, rates per second)."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._topics: dict[str, TopicStats] = {}

    def _of(self, topic: str) -> TopicStats:
        stats = self._topics.get(topic)
        if stats is None:
            stats = self._topics[topic] = TopicStats()
        return stats

    def pulled(self, topic: str, messages: int, rt_ms: float) -> None:
        """One PULL_MESSAGE round trip that brought ``messages`` messages."""
        now, stats = self._clock.seconds(), self._of(topic)
        stats.pull_rt.add(rt_ms, now)
        stats.pulled.add(messages, now)

    def consume_time(self, topic: str, rt_ms: float) -> None:
        """One listener call that took ``rt_ms``."""
        self._of(topic).consume_rt.add(rt_ms, self._clock.seconds())

    def consumed(self, topic: str, ok: int, failed: int) -> None:
        """The outcome of one batch: ``ok`` messages consumed, ``failed`` to consume again."""
        now, stats = self._clock.seconds(), self._of(topic)
        stats.consumed_ok.add(ok, now)
        stats.consumed_failed.add(failed, now)
        stats.failed_in_hour.add(failed, now)

    def status(self, topic: str) -> dict[str, Any]:
        """Java's ``ConsumeStatus`` JSON for ``topic``: averages and rates of the last minute."""
        now, stats = self._clock.seconds(), self._topics.get(topic) or TopicStats()
        return {
            "consumeFailedMsgs": int(stats.failed_in_hour.totals(now)[0]),
            "consumeFailedTPS": stats.consumed_failed.totals(now)[0] / MINUTE,
            "consumeOKTPS": stats.consumed_ok.totals(now)[0] / MINUTE,
            "consumeRT": _average(stats.consume_rt.totals(now)),
            "pullRT": _average(stats.pull_rt.totals(now)),
            "pullTPS": stats.pulled.totals(now)[0] / MINUTE,
        }
