"""Tests for :mod:`rocketpy.broker.offsets`."""

from __future__ import annotations

import json

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.offsets import ConsumerOffsetManager, RebalanceLockManager
from rocketpy.common.route import MessageQueue


class ConsumerOffsetManagerTests(SynchronousTestCase):
    def test_commit_and_query(self) -> None:
        """A committed offset is returned; an unknown queue gives -1."""
        m = ConsumerOffsetManager()
        m.commit_offset("1.2.3.4:5", "G", "T", 1, 42)
        self.assertEqual(m.query_offset("G", "T", 1), 42)
        self.assertEqual(m.query_offset("G", "T", 0), -1)
        self.assertEqual(m.query_offset("H", "T", 1), -1)
        self.assertEqual(m.query_offsets("G", "T"), {1: 42})

    def test_positions(self) -> None:
        """Every committed (group, topic, queue, offset), for retention's guard."""
        m = ConsumerOffsetManager()
        m.commit_offset("h", "G1", "T", 0, 5)
        m.commit_offset("h", "G1", "T", 1, 7)
        m.commit_offset("h", "G2", "U", 3, 1)
        self.assertEqual(sorted(m.positions()), [("G1", "T", 0, 5), ("G1", "T", 1, 7), ("G2", "U", 3, 1)])

    def test_negative_offsets_ignored(self) -> None:
        """ali-ons commits -1 for an untouched queue: it neither creates nor overwrites an offset."""
        m = ConsumerOffsetManager()
        m.commit_offset("peer", "G", "T", 0, -1)
        self.assertEqual(m.query_offset("G", "T", 0), -1)
        m.commit_offset("peer", "G", "T", 0, 7)
        m.commit_offset("peer", "G", "T", 0, -1)
        self.assertEqual(m.query_offset("G", "T", 0), 7)

    def test_persist_shape_and_load(self) -> None:
        """consumerOffset.json is {"offsetTable":{"topic@group":{"qid":offset}}} and loads back."""
        path = self.mktemp()
        m = ConsumerOffsetManager(path)
        m.commit_offset("peer", "G", "T", 0, 3)
        m.commit_offset("peer", "G", "%RETRY%G", 0, 1)
        m.persist()
        with open(path) as f:
            self.assertEqual(json.load(f), {"offsetTable": {"T@G": {"0": 3}, "%RETRY%G@G": {"0": 1}}})
        again = ConsumerOffsetManager(path)
        again.load()
        self.assertEqual(again.query_offset("G", "T", 0), 3)

    def test_lookups_and_remove(self) -> None:
        """Topics of a group and groups of a topic come from the keys; removing a topic drops its offsets."""
        m = ConsumerOffsetManager()
        m.commit_offset("p", "G1", "T", 0, 1)
        m.commit_offset("p", "G2", "T", 0, 1)
        m.commit_offset("p", "G1", "U", 0, 1)
        self.assertEqual(m.topics_of_group("G1"), {"T", "U"})
        self.assertEqual(m.groups_of_topic("T"), {"G1", "G2"})
        m.remove_topic("T")
        self.assertEqual(m.groups_of_topic("T"), set())
        self.assertEqual(m.topics_of_group("G1"), {"U"})


class RebalanceLockManagerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.locks = RebalanceLockManager(self.clock, max_live=60.0)
        self.q0, self.q1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)

    def test_first_locker_wins_until_expiry(self) -> None:
        """A held queue is refused to others for 60 s after its holder's last lock, then taken over."""
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0], "A"), [self.q0])
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0, self.q1], "B"), [self.q1])
        self.clock.advance(60)
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0], "B"), [])
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0], "A"), [self.q0])  # renewed
        self.clock.advance(61)
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0], "B"), [self.q0])

    def test_groups_are_separate_and_unlock(self) -> None:
        """Locks are per group; only the holder's unlock frees a queue."""
        self.locks.try_lock_batch("G", [self.q0], "A")
        self.assertEqual(self.locks.try_lock_batch("H", [self.q0], "B"), [self.q0])
        self.locks.unlock_batch("G", [self.q0], "B")
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0], "B"), [])
        self.locks.unlock_batch("G", [self.q0], "A")
        self.assertEqual(self.locks.try_lock_batch("G", [self.q0], "B"), [self.q0])
        self.locks.unlock_batch("nogroup", [self.q1], "A")
