"""Tests for :mod:`rocketpy.broker.topicconfig`."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.topic import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
)
from rocketpy.util.configfile import ConfigFileError


def _manager(clock: Clock, path: str | None = None, **kwargs: Any) -> TopicConfigManager:
    return TopicConfigManager(clock, path, broker_name="broker-x", cluster_name="ClusterY", **kwargs)


class SystemTopicTests(SynchronousTestCase):
    def test_system_topics(self) -> None:
        """A fresh broker has the Java system topics with their queue counts and perms."""
        m = _manager(Clock())
        expected = {
            "SELF_TEST_TOPIC": (1, 6),
            "TBW102": (8, 7),
            "BenchmarkTest": (1024, 6),
            "ClusterY": (16, 7),
            "broker-x": (1, 7),
            "OFFSET_MOVED_EVENT": (1, 6),
            "SCHEDULE_TOPIC_XXXX": (18, 6),
            "rmq_sys_wheel_timer": (1, 6),
            "ClusterY_REPLY_TOPIC": (1, 6),
        }
        got = {n: (c.write_queue_nums, c.perm) for n, c in m.topics().items()}
        self.assertEqual(got, expected)

    def test_no_tbw102_without_auto_create(self) -> None:
        """With auto-create off there is no TBW102, and cluster/broker topics can be INHERIT only."""
        m = _manager(Clock(), auto_create_topic_enable=False, cluster_topic_enable=False, broker_topic_enable=False)
        self.assertNotIn("TBW102", m)
        self.assertEqual(m.select_topic_config("ClusterY").perm, PERM_INHERIT)  # type: ignore[union-attr]
        self.assertEqual(m.select_topic_config("broker-x").perm, PERM_INHERIT)  # type: ignore[union-attr]

    def test_custom_default_queue_nums(self) -> None:
        """TBW102 gets default_topic_queue_nums queues."""
        m = _manager(Clock(), default_topic_queue_nums=3)
        self.assertEqual(m.select_topic_config("TBW102").read_queue_nums, 3)  # type: ignore[union-attr]


class AutoCreateTests(SynchronousTestCase):
    def test_create_from_tbw102(self) -> None:
        """queues = min(requested, template), perm = template without INHERIT, version bumped, listener told."""
        clock = Clock()
        clock.advance(5)
        m = _manager(clock)
        calls: list[int] = []
        m.add_change_listener(lambda: calls.append(1))
        before = m.data_version.counter
        clock.advance(1)
        config = m.create_topic_in_send_message_method("T1", "TBW102", "1.2.3.4:5", 4, 0)
        assert config is not None
        self.assertEqual((config.read_queue_nums, config.write_queue_nums, config.perm), (4, 4, 6))
        self.assertEqual(m.data_version.counter, before + 1)
        self.assertEqual(m.data_version.timestamp, 6000)
        self.assertEqual(calls, [1])
        big = m.create_topic_in_send_message_method("T2", "TBW102", "1.2.3.4:5", 100, 0)
        self.assertEqual(big.write_queue_nums, 8)  # type: ignore[union-attr]

    def test_existing_topic_is_returned_unchanged(self) -> None:
        """An existing topic is returned as it is and nothing is bumped."""
        m = _manager(Clock())
        first = m.create_topic_in_send_message_method("T1", "TBW102", "peer", 4)
        counter = m.data_version.counter
        self.assertIs(m.create_topic_in_send_message_method("T1", "TBW102", "peer", 2), first)
        self.assertEqual(m.data_version.counter, counter)

    def test_template_missing_or_not_inherit(self) -> None:
        """No template, or one without INHERIT, creates nothing."""
        m = _manager(Clock())
        self.assertIsNone(m.create_topic_in_send_message_method("T1", "NOPE", "peer", 4))
        self.assertIsNone(m.create_topic_in_send_message_method("T1", "SELF_TEST_TOPIC", "peer", 4))
        self.assertNotIn("T1", m)

    def test_tbw102_loaded_but_auto_create_off(self) -> None:
        """With auto-create off a persisted TBW102 no longer acts as a template."""
        m = _manager(Clock(), auto_create_topic_enable=False)
        m.update_topic_config(TopicConfig("TBW102", 8, 8, 7))
        self.assertIsNone(m.create_topic_in_send_message_method("T1", "TBW102", "peer", 4))

    def test_retry_topic(self) -> None:
        """Send-back topics get the requested queues and perm, once."""
        m = _manager(Clock())
        config = m.create_topic_in_send_message_back_method("%RETRY%G", 1, PERM_READ | PERM_WRITE)
        self.assertEqual((config.read_queue_nums, config.write_queue_nums, config.perm), (1, 1, 6))
        self.assertIs(m.create_topic_in_send_message_back_method("%RETRY%G", 3), config)

    def test_listener_failure_is_logged(self) -> None:
        """A failing change listener does not break topic creation."""
        m = _manager(Clock())

        def boom() -> None:
            raise RuntimeError("boom")

        m.add_change_listener(boom)
        self.assertIsNotNone(m.create_topic_in_send_message_method("T1", "TBW102", "peer", 4))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_delete(self) -> None:
        """Deleting bumps the version; deleting an unknown topic is a no-op."""
        m = _manager(Clock())
        m.update_topic_config(TopicConfig("T1"))
        counter = m.data_version.counter
        self.assertTrue(m.delete_topic_config("T1"))
        self.assertFalse(m.delete_topic_config("T1"))
        self.assertEqual(m.data_version.counter, counter + 1)


class PersistenceTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """topics.json has the Java shape and a new manager loads topics and version from it."""
        path = os.path.join(self.mktemp(), "config", "topics.json")
        m = _manager(Clock(), path)
        m.update_topic_config(TopicConfig("T1", 2, 3, 6, "MULTI_TAG", 1, True))
        with open(path) as f:
            obj = json.load(f)
        self.assertEqual(set(obj), {"topicConfigTable", "dataVersion"})
        self.assertEqual(
            obj["topicConfigTable"]["T1"],
            {
                "order": True,
                "perm": 6,
                "readQueueNums": 2,
                "topicFilterType": "MULTI_TAG",
                "topicName": "T1",
                "topicSysFlag": 1,
                "writeQueueNums": 3,
            },
        )
        again = _manager(Clock(), path)
        again.load()
        self.assertEqual(again.select_topic_config("T1"), TopicConfig("T1", 2, 3, 6, "MULTI_TAG", 1, True))
        self.assertEqual(again.data_version, m.data_version)

    def test_write_failure_is_logged(self) -> None:
        """A topics.json that cannot be written is logged; the change still applies in memory."""
        blocker = self.mktemp()
        with open(blocker, "w") as f:
            f.write("a file, not a directory")
        m = _manager(Clock(), os.path.join(blocker, "topics.json"))
        with capturedLogs() as events:
            m.update_topic_config(TopicConfig("T1"))
        self.assertIn("T1", m)
        self.assertEqual([e["log_format"] for e in events if "log_failure" in e], ["cannot write {path}"])
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)

    def test_missing_file_loads_nothing(self) -> None:
        """Loading without a file keeps the system topics."""
        m = _manager(Clock(), os.path.join(self.mktemp(), "topics.json"))
        m.load()
        self.assertIn("TBW102", m)

    def test_malformed_file(self) -> None:
        """A malformed topics.json raises ConfigFileError naming the file."""
        path = self.mktemp()
        for content in (b"{nope", b"[1]", b'{"topicConfigTable":{"T":{"perm":"x"}}}'):
            with open(path, "wb") as f:
                f.write(content)
            m = _manager(Clock(), path)
            e = self.assertRaises(ConfigFileError, m.load)
            self.assertIn(path, str(e))


class SlaveLearnTests(SynchronousTestCase):
    def test_learn_then_master_wins(self) -> None:
        """A slave learns unknown topics (growing to the highest queue seen) without moving the data
        version; topics from the master are never changed; the master's copy replaces learnt ones."""
        clock = Clock()
        slave = TopicConfigManager(clock)
        slave.update_topic_config(TopicConfig("FromMaster", 2, 2))
        version = slave.data_version.to_json()
        self.assertTrue(slave.learn_queue("New", 0))
        self.assertFalse(slave.learn_queue("New", 0))
        self.assertTrue(slave.learn_queue("New", 3))
        self.assertFalse(slave.learn_queue("FromMaster", 5))
        new = slave.select_topic_config("New")
        assert new is not None
        self.assertEqual((new.read_queue_nums, new.write_queue_nums, new.perm), (4, 4, 6))
        self.assertEqual(slave.select_topic_config("FromMaster").read_queue_nums, 2)  # type: ignore[union-attr]
        self.assertEqual(slave.data_version.to_json(), version)
        master = TopicConfigManager(clock)
        master.update_topic_config(TopicConfig("New", 8, 8, topic_sys_flag=1))
        slave.apply_json(master.to_json())
        self.assertEqual(slave.learnt, set())
        self.assertEqual(slave.select_topic_config("New").to_json(), master.select_topic_config("New").to_json())  # type: ignore[union-attr]
