"""Tests for :mod:`rocketpy.broker.subscription`."""

from __future__ import annotations

import json
import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.util.configfile import ConfigFileError


class SubscriptionGroupManagerTests(SynchronousTestCase):
    def test_auto_create_with_java_defaults(self) -> None:
        """An unknown group is created with retryQueueNums 1 and retryMaxTimes 16 and persisted."""
        path = os.path.join(self.mktemp(), "subscriptionGroup.json")
        m = SubscriptionGroupManager(Clock(), path)
        config = m.find_subscription_group_config("CG")
        assert config is not None
        self.assertEqual((config.retry_queue_nums, config.retry_max_times), (1, 16))
        self.assertTrue(config.notify_consumer_ids_changed_enable)
        with open(path) as f:
            saved = json.load(f)
        self.assertEqual(saved["subscriptionGroupTable"]["CG"]["retryMaxTimes"], 16)
        self.assertEqual(saved["dataVersion"]["counter"], 1)
        self.assertIs(m.find_subscription_group_config("CG"), config)

    def test_no_auto_create(self) -> None:
        """With auto-create off, or for an invalid name, an unknown group stays unknown."""
        self.assertIsNone(SubscriptionGroupManager(Clock(), auto_create=False).find_subscription_group_config("CG"))
        self.assertIsNone(SubscriptionGroupManager(Clock()).find_subscription_group_config("bad group"))

    def test_system_groups(self) -> None:
        """The Java system groups exist from the start."""
        m = SubscriptionGroupManager(Clock(), auto_create=False)
        self.assertIsNotNone(m.find_subscription_group_config("TOOLS_CONSUMER"))
        self.assertFalse(m.groups()["CID_SYS_RMQ_TRANS"].consume_broadcast_enable)

    def test_round_trip_update_delete(self) -> None:
        """Updated groups survive a reload; deleting removes them."""
        path = self.mktemp()
        m = SubscriptionGroupManager(Clock(), path)
        m.update_subscription_group_config(SubscriptionGroupConfig("G1", retry_max_times=3, consume_enable=False))
        again = SubscriptionGroupManager(Clock(), path, auto_create=False)
        again.load()
        self.assertEqual(again.groups()["G1"], SubscriptionGroupConfig("G1", retry_max_times=3, consume_enable=False))
        self.assertTrue(again.delete_subscription_group_config("G1"))
        self.assertFalse(again.delete_subscription_group_config("G1"))

    def test_malformed_file(self) -> None:
        """A subscriptionGroup.json with a wrong type raises ConfigFileError."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"subscriptionGroupTable":{"G":{"retryMaxTimes":"many"}}}')
        self.assertRaises(ConfigFileError, SubscriptionGroupManager(Clock(), path).load)
