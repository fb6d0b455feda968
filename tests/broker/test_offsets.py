"""Tests for :mod:`rocketpy.broker.offsets`."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.offsets import ConsumerOffsetManager


class ConsumerOffsetManagerTests(SynchronousTestCase):
    def test_commit_and_query(self) -> None:
        """A committed offset is returned; an unknown queue gives -1."""
        m = ConsumerOffsetManager()
        m.commit_offset("1.2.3.4:5", "G", "T", 1, 42)
        self.assertEqual(m.query_offset("G", "T", 1), 42)
        self.assertEqual(m.query_offset("G", "T", 0), -1)
        self.assertEqual(m.query_offset("H", "T", 1), -1)
        self.assertEqual(m.query_offsets("G", "T"), {1: 42})

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
