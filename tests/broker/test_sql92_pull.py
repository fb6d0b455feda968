"""PULL_MESSAGE and CHECK_CLIENT_CONFIG with SQL92 subscriptions, over a real store."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.heartbeat import SubscriptionData
from rocketpy.broker.pull import PullMessageProcessor
from rocketpy.broker.topicconfig import TopicConfig, TopicConfigManager
from rocketpy.common.message import MessageExt, decode_records
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.broker.featurestore import new_clock, open_store, put
from tests.fakes import FakeChannel
from tests.broker.test_pull import CPP_PULL


class SqlPullTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.store = open_store(self, self.clock)
        self.topics = TopicConfigManager(self.clock)
        self.topics.update_topic_config(TopicConfig("T", 1, 1))
        self.registered: dict[tuple[str, str], SubscriptionData] = {}
        self.processor = self.make_processor(property_filter=True)
        for i, (a, color, tag) in enumerate([("1", "red", "TagA"), ("7", "red", "TagB"), ("9", "blue", "TagA"),
                                             (None, "red", "TagA"), ("12", "red", None)]):
            props = {k: v for k, v in (("a", a), ("color", color), ("TAGS", tag)) if v is not None}
            put(self, self.store, MessageExt("T", b"m%d" % i, properties=props))

    def make_processor(self, property_filter: bool) -> PullMessageProcessor:
        return PullMessageProcessor(self.store, self.topics, find_subscription=lambda g, t: self.registered.get((g, t)),
                                    property_filter=property_filter)

    def pull(self, processor: PullMessageProcessor | None = None, **fields: str) -> RemotingCommand:
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL, **{"sysFlag": "4", **fields}))
        result: Any = (processor or self.processor).process_request(FakeChannel(), request)
        if isinstance(result, RemotingCommand):
            return result
        response: RemotingCommand = self.successResultOf(result)
        return response

    def bodies(self, response: RemotingCommand) -> list[bytes]:
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        return [m.body for m in decode_records(response.body)]

    def test_pull_with_expression(self) -> None:
        """The broker returns only the messages whose properties satisfy the expression."""
        response = self.pull(expressionType="SQL92", subscription="a > 5 AND color = 'red'")
        self.assertEqual(self.bodies(response), [b"m1", b"m4"])
        self.assertEqual(response.ext_fields["nextBeginOffset"], "5")

    def test_tags_property(self) -> None:
        """TAGS is a property like any other."""
        response = self.pull(expressionType="SQL92", subscription="TAGS IN ('TagA') AND a IS NOT NULL")
        self.assertEqual(self.bodies(response), [b"m0", b"m2"])

    def test_nothing_matches_advances(self) -> None:
        """No match: PULL_RETRY_IMMEDIATELY, NO_MATCHED_MESSAGE, nextBeginOffset past every scanned entry."""
        response = self.pull(expressionType="SQL92", subscription="a > 100")
        self.assertEqual(response.code, ResponseCode.PULL_RETRY_IMMEDIATELY)
        self.assertEqual((response.remark, response.ext_fields["nextBeginOffset"]), ("NO_MATCHED_MESSAGE", "5"))

    def test_batch_limit_counts_kept_messages(self) -> None:
        """maxMsgNums counts returned messages; the next offset follows the last one scanned."""
        response = self.pull(expressionType="SQL92", subscription="color = 'red'", maxMsgNums="2")
        self.assertEqual(self.bodies(response), [b"m0", b"m1"])
        self.assertEqual(response.ext_fields["nextBeginOffset"], "2")

    def test_registered_subscription(self) -> None:
        """Without the subscription flag the heartbeat's SQL92 subscription is used."""
        self.registered[("CID", "T")] = SubscriptionData.build("T", "color = 'blue'", 5, "SQL92")
        response = self.pull(sysFlag="0", subVersion="5")
        self.assertEqual(self.bodies(response), [b"m2"])

    def test_malformed(self) -> None:
        """A malformed expression: SUBSCRIPTION_PARSE_FAILED with the reason, nothing read."""
        response = self.pull(expressionType="SQL92", subscription="a > AND")
        self.assertEqual(response.code, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
        self.assertIn("Invalid MessageSelector.", response.remark or "")
        self.assertIn("position 4", response.remark or "")

    def test_disabled(self) -> None:
        """enablePropertyFilter off: SYSTEM_ERROR with RocketMQ's remark."""
        response = self.pull(self.make_processor(False), expressionType="SQL92", subscription="a > 5")
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertEqual(response.remark, "The broker does not support consumer to filter message by SQL92")

