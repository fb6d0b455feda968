"""Queue selection with latency fault tolerance: Java 4.9's ``MQFaultStrategy``
and ``LatencyFaultToleranceImpl`` (doc/wire.md §13).

A slow or failing broker is banned for a while, longer the slower it was;
with the strategy off (the default) selection only avoids the broker that
failed last.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from twisted.internet.interfaces import IReactorTime

from rocketpy.client.route import RoundRobinIndex, TopicPublishInfo
from rocketpy.common.route import MessageQueue

#: Latency thresholds (ms), scanned from the top ...
LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
#: ... to how long (ms) the broker is then considered unavailable.
NOT_AVAILABLE_DURATION = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: The latency a failed call counts as: bans for 600 000 ms.
ISOLATION_LATENCY = 30000


def not_available_duration(latency_ms: float) -> int:
    """Java's ``computeNotAvailableDuration``: the ban (ms) for a call that took ``latency_ms``."""
    for limit, duration in zip(reversed(LATENCY_MAX), reversed(NOT_AVAILABLE_DURATION)):
        if latency_ms >= limit:
            return duration
    return 0


@dataclass(slots=True)
class FaultItem:
    """A broker's last latency and the time (ms) from which it may be used again."""

    name: str
    latency: float
    start_ms: float


class LatencyFaultTolerance:
    """Which brokers are usable now, and which is the least bad otherwise."""

    def __init__(self, clock: IReactorTime, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._rng = rng or random.Random()
        self._items: dict[str, FaultItem] = {}
        self._worst_index = RoundRobinIndex(self._rng.randrange(0, 1 << 31))

    def _now_ms(self) -> float:
        return self._clock.seconds() * 1000

    def update(self, name: str, latency_ms: float, duration_ms: float) -> None:
        """Record a call to ``name``: it is unavailable for ``duration_ms`` from now."""
        self._items[name] = FaultItem(name, latency_ms, self._now_ms() + duration_ms)

    def is_available(self, name: str) -> bool:
        """True unless ``name`` is still banned."""
        item = self._items.get(name)
        return item is None or self._now_ms() >= item.start_ms

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """A broker among the better half: sorted by (available, latency, ban end), ties shuffled."""
        items = list(self._items.values())
        if not items:
            return None
        self._rng.shuffle(items)
        now = self._now_ms()
        items.sort(key=lambda i: (now < i.start_ms, i.latency, i.start_ms))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        return items[self._worst_index.next() % half].name


class MQFaultStrategy:
    """Chooses the queue of each send attempt and learns from its outcome.

    :param enabled: Java's ``sendLatencyFaultEnable`` (default off).
    """

    __slots__ = ("enabled", "tolerance")  # ``enabled`` read at its offset by rocketpy/_speedups_producer.h

    def __init__(self, clock: IReactorTime, enabled: bool = False, rng: random.Random | None = None) -> None:
        self.enabled = enabled
        self.tolerance = LatencyFaultTolerance(clock, rng)

    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue:
        """The queue for the next attempt, per Java 4.9."""
        if not self.enabled:
            return info.select_one(last_broker_name)
        queues = info.queues
        index = info.index.next()
        for i in range(len(queues)):
            mq = queues[((index + i) & 0x7FFFFFFF) % len(queues)]
            if self.tolerance.is_available(mq.broker_name):
                return mq
        broker = self.tolerance.pick_one_at_least()
        write_queues = info.write_queue_nums(broker)
        if broker is not None and write_queues > 0:
            info.select_one()  # Java draws (and discards) a round-robin queue here
            return MessageQueue(info.topic, broker, info.index.next() % write_queues)
        if broker is not None:
            self.tolerance.remove(broker)
        return info.select_one()

    def update_fault_item(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record how a call to ``broker_name`` went; a no-op unless enabled.

        :param isolation: the call failed: ban as if it took 30 s (600 000 ms).
        """
        if self.enabled:
            duration = not_available_duration(ISOLATION_LATENCY if isolation else latency_ms)
            self.tolerance.update(broker_name, latency_ms, duration)
