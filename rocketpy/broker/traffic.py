"""A broker's message traffic: what consumers pulled, and per-second rates of every traffic
counter over the last minute (RocketMQ's ``BrokerStatsManager`` minute window, sampled every
10 s), for ``/metrics``, GET_CONSUME_STATS, GET_BROKER_RUNTIME_INFO and the dashboard.

Messages put per topic are not counted on the send path: they are the growth of the topic's
consume-queue offsets. Bytes put per topic are the store's ``StoreStats.topic_bytes``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

Counters = dict[Hashable, int]

#: Seconds between samples, and the span rates are averaged over (as RocketMQ's minute stats).
SAMPLE_INTERVAL = 10.0
RATE_WINDOW = 60.0
#: The broker totals' window: GET_BROKER_RUNTIME_INFO gives rates over 10 s, 1 min and 10 min.
TOTALS_WINDOW = 600.0


class GetCounts:
    """Messages and bytes pulled per ``(topic, group)``: one update per pull that found messages;
    and store reads for pulls that found messages (``found``) or none (``missed``)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, str], list[int]] = {}
        self.found = 0
        self.missed = 0

    def record(self, topic: str, group: str, messages: int, nbytes: int) -> None:
        self.found += 1
        counts = self.table.get((topic, group))
        if counts is None:
            counts = self.table[(topic, group)] = [0, 0]
        counts[0] += messages
        counts[1] += nbytes


class RateWindow:
    """Per-second growth of counters over the last ``window`` seconds.

    A sample of every counter is taken each ``interval`` seconds and kept for ``window``
    seconds; a rate is the growth from a sample to now, divided by the time between. A counter
    that shrank (a topic deleted) rates 0.

    :param clock: times the samples.
    :param counters: the current value of every counter, by key.
    """

    def __init__(self, clock: IReactorTime, counters: Callable[[], Counters],
                 interval: float = SAMPLE_INTERVAL, window: float = RATE_WINDOW) -> None:
        self._clock = clock
        self._counters = counters
        self._window = window
        self._samples: deque[tuple[float, Counters]] = deque()
        self._loop = LoopingCall(self.sample)
        self._loop.clock = clock
        self._interval = interval

    def start(self) -> None:
        """Take a sample now, then every interval."""
        self._loop.start(self._interval, now=True)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def sample(self) -> None:
        now = self._clock.seconds()
        self._samples.append((now, self._counters()))
        while len(self._samples) > 1 and self._samples[1][0] <= now - self._window:
            self._samples.popleft()

    def rates(self, span: float | None = None) -> dict[Hashable, float]:
        """Per counter, its growth per second since the newest sample at least ``span`` seconds
        old (default and at most the window; the oldest sample when none is); 0 for all before
        the first sample."""
        current = self._counters()
        if not self._samples:
            return dict.fromkeys(current, 0.0)
        now = self._clock.seconds()
        since = now - min(span or self._window, self._window)
        base_time, base = next(((t, c) for t, c in reversed(self._samples) if t <= since), self._samples[0])
        elapsed = now - base_time
        if elapsed <= 0:
            return dict.fromkeys(current, 0.0)
        return {key: max(0, value - base.get(key, 0)) / elapsed for key, value in current.items()}


def topic_offsets(topics: Any, store: Any) -> dict[str, int]:
    """Per topic of ``topics`` (the ``TopicConfigManager``), the sum of its write queues' max
    offsets in ``store``: messages stored there."""
    return {name: sum(store.get_max_offset_in_queue(name, q) for q in range(config.write_queue_nums))
            for name, config in topics.topics().items()}


class BrokerTraffic:
    """The broker's traffic counters and their rates.

    Keys of :meth:`counters` and :meth:`rates` (the last minute): ``("put", topic)``,
    ``("put_bytes", topic)``, ``("get", topic, group)``, ``("get_bytes", topic, group)``.
    Keys of :meth:`totals` and :meth:`total_rates` (any span up to 10 minutes): ``"put"``
    (records appended to the commit log), ``"get"`` (messages pulled), ``"get_found"`` and
    ``"get_miss"`` (pull reads that found messages, or none).

    :param topics: the broker's ``TopicConfigManager``.
    :param store: the ``StoreService``.
    """

    def __init__(self, clock: IReactorTime, topics: Any, store: Any, interval: float = SAMPLE_INTERVAL,
                 window: float = RATE_WINDOW) -> None:
        self._topics = topics
        self._store = store
        self.gets = GetCounts()
        self._window = RateWindow(clock, self.counters, interval, window)
        self._totals = RateWindow(clock, self.totals, interval, TOTALS_WINDOW)

    def start(self) -> None:
        """Sample now, then every interval (start once the store is loaded: the first sample holds its offsets)."""
        self._window.start()
        self._totals.start()

    def stop(self) -> None:
        self._window.stop()
        self._totals.stop()

    def counters(self) -> Counters:
        out: Counters = {}
        for topic, count in topic_offsets(self._topics, self._store).items():
            out[("put", topic)] = count
        stats = getattr(self._store, "stats", None)  # unit tests' fake stores have none
        if stats is not None:
            for topic, nbytes in dict(stats.topic_bytes).items():  # copied at once: the writer thread adds topics
                out[("put_bytes", topic)] = nbytes
        for (topic, group), (messages, nbytes) in self.gets.table.items():
            out[("get", topic, group)] = messages
            out[("get_bytes", topic, group)] = nbytes
        return out

    def totals(self) -> Counters:
        stats, gets = getattr(self._store, "stats", None), self.gets
        return {"put": 0 if stats is None else stats.records,
                "get": sum(messages for messages, _ in gets.table.values()),
                "get_found": gets.found, "get_miss": gets.missed}

    def rates(self) -> dict[Hashable, float]:
        """Every counter's rate over the last minute."""
        return self._window.rates()

    def total_rates(self, span: float = RATE_WINDOW) -> dict[Hashable, float]:
        """Messages put and got per second over the last ``span`` seconds (at most 600)."""
        return self._totals.rates(span)


#: VIEW_BROKER_STATS_DATA's statistics (RocketMQ's ``BrokerStatsManager`` names) kept per topic or
#: per ``topic@group`` → the traffic counter; the BROKER_* ones (keyed by cluster) are totals.
STATS_COUNTERS = {"TOPIC_PUT_NUMS": "put", "TOPIC_PUT_SIZE": "put_bytes", "GROUP_GET_NUMS": "get",
                  "GROUP_GET_SIZE": "get_bytes"}
STATS_TOTALS = {"BROKER_PUT_NUMS": "put", "BROKER_GET_NUMS": "get"}


def stats_data(traffic: BrokerTraffic, name: str, key: str) -> dict[str, dict[str, float]] | None:
    """A BrokerStatsData (``statsMinute``, ``statsHour``, ``statsDay``: ``sum``, ``tps``, ``avgpt``)
    of statistic ``name`` for ``key`` over the last minute, or None when there is no such statistic.
    The broker keeps one minute of samples, so the hour and day items repeat the minute's rate;
    ``avgpt`` (Java's average per put call) is not measured (0)."""
    if name in STATS_TOTALS:
        rate = traffic.total_rates(RATE_WINDOW).get(STATS_TOTALS[name])
    elif name in STATS_COUNTERS:
        kind = STATS_COUNTERS[name]
        parts = (key,) if kind.startswith("put") else tuple(key.split("@", 1))
        rate = traffic.rates().get((kind, *parts))
    else:
        rate = None
    if rate is None:
        return None
    item = {"sum": round(rate * RATE_WINDOW), "tps": rate, "avgpt": 0.0}
    return {"statsMinute": item, "statsHour": item, "statsDay": item}
