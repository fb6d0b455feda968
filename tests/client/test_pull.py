"""Tests for rocketpy.client.consumer.PullConsumer and pull-result processing."""

from __future__ import annotations

import zlib

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import errors
from rocketpy.client.consumer import PullConsumer
from rocketpy.client.results import PullStatus
from rocketpy.client.subscription import build_subscription
from rocketpy.common.compression import DecompressionError, inflate_body
from rocketpy.common.message import MessageExt
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

from .fakes import NAMESRV, FakeCluster, response


class SubscriptionTests(SynchronousTestCase):
    def test_expression(self) -> None:
        """Tags split on ||, trimmed, with Java hash codes; * and empty mean all."""
        sub = build_subscription("T", " TagA || TagB ||", 5)
        self.assertEqual((sub.tags_set, sub.code_set, sub.sub_version), (["TagA", "TagB"], [2598919, 2598920], 5))
        self.assertTrue(build_subscription("T", "*", 0).matches_all)
        self.assertTrue(build_subscription("T", None, 0).matches_all)

    def test_inflate(self) -> None:
        """zlib bodies (type bits 0 or 3) inflate and lose the flag; unknown types and junk are refused."""
        for flag in (0x1, 0x301):
            msg = MessageExt(topic="T", body=zlib.compress(b"data"), sys_flag=flag | 0x4)
            inflate_body(msg)
            self.assertEqual((msg.body, msg.sys_flag), (b"data", 0x4))
        self.assertRaises(DecompressionError, inflate_body, MessageExt(topic="T", body=b"x", sys_flag=0x401))
        self.assertRaises(DecompressionError, inflate_body, MessageExt(topic="T", body=b"junk", sys_flag=0x1))


class PullConsumerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster = FakeCluster(self.clock)
        self.cluster.add_broker("broker-a", "10.0.0.1:10911", queues=2)
        self.cluster.add_topic("T")
        self.consumer = PullConsumer("CG", NAMESRV, self.clock, self.cluster.remoting)
        self.consumer.start()
        self.mq = MessageQueue("T", "broker-a", 1)

    def test_fetch_queues(self) -> None:
        """The readable queues of a topic, sorted; an unknown topic fails with 10005."""
        queues = self.successResultOf(self.consumer.fetch_subscribe_queues("T"))
        self.assertEqual(queues, [MessageQueue("T", "broker-a", 0), self.mq])
        f = self.failureResultOf(self.consumer.fetch_subscribe_queues("Nope"), errors.NoRouteError)
        self.assertEqual(f.value.code, 10005)

    def test_pull_found(self) -> None:
        """FOUND: records decoded, compressed bodies inflated, tags re-filtered, offsets attached."""
        self.cluster.publish("broker-a", "T", 1, b"a", TAGS="TagA")
        self.cluster.publish("broker-a", "T", 1, zlib.compress(b"b" * 5000), sys_flag=1, TAGS="TagB")
        self.cluster.publish("broker-a", "T", 1, b"c", TAGS="TagC")
        result = self.successResultOf(self.consumer.pull(self.mq, "TagA || TagB", 0, 32))
        self.assertEqual(result.status, PullStatus.FOUND)
        self.assertEqual((result.next_begin_offset, result.min_offset, result.max_offset), (3, 0, 3))
        self.assertEqual([m.body for m in result.messages], [b"a", b"b" * 5000])
        self.assertEqual(result.messages[1].sys_flag, 0)
        self.assertEqual([(m.properties["MIN_OFFSET"], m.properties["MAX_OFFSET"]) for m in result.messages],
                         [("0", "3")] * 2)
        [(addr, request)] = self.cluster.remoting.sent(RequestCode.PULL_MESSAGE)
        f = request.ext_fields
        self.assertEqual((f["sysFlag"], f["subscription"], f["queueOffset"]), ("4", "TagA || TagB", "0"))

    def test_pull_statuses(self) -> None:
        """No new message and an illegal offset map to their statuses with the next offset."""
        self.cluster.publish("broker-a", "T", 1, b"a")
        result = self.successResultOf(self.consumer.pull(self.mq, "*", 1))
        self.assertEqual((result.status, result.next_begin_offset), (PullStatus.NO_NEW_MSG, 1))
        result = self.successResultOf(self.consumer.pull(self.mq, "*", 7))
        self.assertEqual((result.status, result.next_begin_offset), (PullStatus.OFFSET_ILLEGAL, 1))

    def test_block_waits_for_message(self) -> None:
        """A blocking pull is held by the broker until a message arrives."""
        d = self.consumer.pull(self.mq, "*", 0, block=True, timeout=30)
        self.assertNoResult(d)
        self.cluster.publish("broker-a", "T", 1, b"late")
        self.clock.advance(0)
        self.assertEqual([m.body for m in self.successResultOf(d).messages], [b"late"])

    def test_pull_error(self) -> None:
        """A broker error code fails the pull with MQBrokerError."""
        self.cluster.remoting.on(RequestCode.PULL_MESSAGE, lambda a, r, t: _resp(26))
        f = self.failureResultOf(self.consumer.pull(self.mq, "*", 0), errors.MQBrokerError)
        self.assertEqual((f.value.code, f.value.broker_addr), (26, "10.0.0.1:10911"))

    def test_offsets(self) -> None:
        """Offsets: none stored is -1; update then query returns it; max offset from the broker."""
        self.assertEqual(self.successResultOf(self.consumer.query_consumer_offset(self.mq)), -1)
        self.successResultOf(self.consumer.update_consumer_offset(self.mq, 5))
        self.assertEqual(self.successResultOf(self.consumer.query_consumer_offset(self.mq)), 5)
        self.cluster.publish("broker-a", "T", 1, b"a")
        self.assertEqual(self.successResultOf(self.consumer.fetch_max_offset(self.mq)), 1)

    def test_not_started(self) -> None:
        """Pulling after shutdown fails."""
        self.successResultOf(self.consumer.shutdown())
        self.failureResultOf(self.consumer.pull(self.mq, "*", 0), errors.MQClientError)


def _resp(code: int) -> RemotingCommand:
    return response(code, "group missing", nextBeginOffset=0, minOffset=0, maxOffset=0)
