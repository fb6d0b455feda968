"""Tests for rocketpy.client.latency (MQFaultStrategy)."""

from __future__ import annotations

import random

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client.latency import LatencyFaultTolerance, MQFaultStrategy, not_available_duration
from rocketpy.client.route import RoundRobinIndex, TopicPublishInfo, decode_topic_route

ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"a:1"},"brokerName":"a"},{"brokerAddrs":{"0":"b:1"},"brokerName":"b"}],'
    b'"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":2,"writeQueueNums":2},'
    b'{"brokerName":"b","perm":6,"readQueueNums":3,"writeQueueNums":3}]}'
)


def publish_info() -> TopicPublishInfo:
    return TopicPublishInfo("T", decode_topic_route(ROUTE), RoundRobinIndex(0))


class DurationTableTests(SynchronousTestCase):
    def test_table(self) -> None:
        """Each latency bucket maps to Java 4.9's ban; the edges belong to the upper bucket."""
        cases = {0: 0, 49: 0, 50: 0, 549: 0, 550: 30000, 999: 30000, 1000: 60000, 2000: 120000,
                 2999: 120000, 3000: 180000, 14999: 180000, 15000: 600000, 30000: 600000}
        for latency, duration in cases.items():
            self.assertEqual(not_available_duration(latency), duration, latency)


class FaultStrategyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.strategy = MQFaultStrategy(self.clock, enabled=True, rng=random.Random(3))

    def test_disabled_records_nothing(self) -> None:
        """With the strategy off, faults are ignored and only the last broker is avoided."""
        strategy = MQFaultStrategy(self.clock)
        strategy.update_fault_item("b", 0, True)
        self.assertTrue(strategy.tolerance.is_available("b"))
        info = publish_info()
        self.assertTrue(all(strategy.select_one_message_queue(info, "a").broker_name == "b" for _ in range(5)))

    def test_isolation_bans_ten_minutes(self) -> None:
        """A failed call bans its broker for 600 s, then it is available again."""
        self.strategy.update_fault_item("a", 5, isolation=True)
        self.assertFalse(self.strategy.tolerance.is_available("a"))
        self.clock.advance(599.999)
        self.assertFalse(self.strategy.tolerance.is_available("a"))
        self.clock.advance(0.001)
        self.assertTrue(self.strategy.tolerance.is_available("a"))

    def test_slow_call_bans_thirty_seconds(self) -> None:
        """A 600 ms call bans for 30 s; a 100 ms call not at all."""
        self.strategy.update_fault_item("a", 600, isolation=False)
        self.strategy.update_fault_item("b", 100, isolation=False)
        self.assertTrue(self.strategy.tolerance.is_available("b"))
        self.clock.advance(29.9)
        self.assertFalse(self.strategy.tolerance.is_available("a"))
        self.clock.advance(0.1)
        self.assertTrue(self.strategy.tolerance.is_available("a"))

    def test_select_skips_banned_broker(self) -> None:
        """Selection takes only queues of available brokers, ignoring the last broker."""
        self.strategy.update_fault_item("b", 10, isolation=True)
        info = publish_info()
        self.assertEqual({self.strategy.select_one_message_queue(info, "a").broker_name for _ in range(10)}, {"a"})

    def test_all_banned_picks_least_bad(self) -> None:
        """With every broker banned, the least bad one is used with a queue id in its range."""
        self.strategy.update_fault_item("a", 10, isolation=True)
        self.clock.advance(1)
        self.strategy.update_fault_item("b", 2000, isolation=False)  # banned 120 s, ends earlier
        info = publish_info()
        for _ in range(6):
            mq = self.strategy.select_one_message_queue(info, None)
            self.assertEqual(mq.broker_name, "a")  # lower latency sorts first; half = 1
            self.assertIn(mq.queue_id, (0, 1))

    def test_least_bad_without_queues_is_forgotten(self) -> None:
        """A picked broker with no write queue in this topic is dropped; round-robin is used."""
        self.strategy.tolerance.update("gone", 1, 0)  # available, but not in this route
        self.strategy.update_fault_item("a", 10, isolation=True)
        self.strategy.update_fault_item("b", 10, isolation=True)
        mq = self.strategy.select_one_message_queue(publish_info(), None)
        self.assertIn(mq.broker_name, ("a", "b"))
        self.assertTrue(self.strategy.tolerance.is_available("gone"))
        self.assertNotIn("gone", {self.strategy.tolerance.pick_one_at_least() for _ in range(5)})


class PickOneAtLeastTests(SynchronousTestCase):
    def test_order(self) -> None:
        """Available items sort first, then by latency, then by ban end; the better half is used."""
        clock = Clock()
        tolerance = LatencyFaultTolerance(clock, random.Random(5))
        self.assertIsNone(tolerance.pick_one_at_least())
        tolerance.update("slow", 900, 0)
        tolerance.update("banned", 1, 5000)
        tolerance.update("fast", 10, 0)
        tolerance.update("worse", 1000, 0)
        picks = {tolerance.pick_one_at_least() for _ in range(10)}
        self.assertEqual(picks, {"fast", "slow"})
