"""Rates of the broker's traffic counters (:mod:`rocketpy.broker.traffic`) on a Clock."""

from __future__ import annotations

from collections.abc import Hashable

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.traffic import GetCounts, RateWindow


class RateWindowTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.values: dict[Hashable, int] = {"a": 0}
        self.window = RateWindow(self.clock, lambda: dict(self.values), interval=10, window=60)

    def test_zero_before_the_first_sample(self) -> None:
        """Nothing sampled yet: every counter rates 0."""
        self.values["a"] = 100
        self.assertEqual(self.window.rates(), {"a": 0.0})

    def test_growth_since_start(self) -> None:
        """Within the first minute, a rate is the growth since the start sample; new keys count from 0."""
        self.window.start()
        self.clock.advance(5)
        self.values.update(a=50, b=5)
        self.assertEqual(self.window.rates(), {"a": 10.0, "b": 1.0})

    def test_last_minute_only(self) -> None:
        """Later, a rate averages the growth since the newest sample at least a minute (or the
        span asked for) old."""
        self.window.start()
        for _ in range(6):  # a counter growing 10/s for a minute, then 100/s
            self.clock.advance(10)
            self.values["a"] += 100
        for _ in range(6):
            self.clock.advance(10)
            self.values["a"] += 1000
        self.clock.advance(5)
        self.values["a"] += 500
        # now t = 125, a = 7100; the newest sample at least 60 s old was taken at t = 60, a = 500
        self.assertAlmostEqual(self.window.rates()["a"], (7100 - 500) / 65)
        # over 10 s: the sample at t = 110, a = 4600
        self.assertAlmostEqual(self.window.rates(10)["a"], (7100 - 4600) / 15)
        self.assertLessEqual(len(self.window._samples), 8)

    def test_shrinking_counter_rates_zero(self) -> None:
        """A counter that went down (a topic deleted and made again) rates 0, not negative."""
        self.values["a"] = 100
        self.window.start()
        self.clock.advance(5)
        self.values["a"] = 10
        self.assertEqual(self.window.rates(), {"a": 0.0})

    def test_stop_leaves_no_timer(self) -> None:
        self.window.start()
        self.window.stop()
        self.window.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class GetCountsTests(SynchronousTestCase):
    def test_counts_per_topic_and_group(self) -> None:
        """Messages and bytes add up per (topic, group)."""
        gets = GetCounts()
        gets.record("T", "G", 3, 300)
        gets.record("T", "G", 1, 50)
        gets.record("T", "H", 2, 20)
        self.assertEqual(gets.table, {("T", "G"): [4, 350], ("T", "H"): [2, 20]})
