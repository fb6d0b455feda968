"""Tests for rocketpy.client.route."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client.route import (
    RoundRobinIndex,
    TopicPublishInfo,
    decode_topic_route,
    subscribe_queues,
    with_default_queue_nums,
)
from rocketpy.common.fastjson import BodyError
from rocketpy.common.route import MessageQueue

UNQUOTED = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"brokerName":"broker-b",'
    b'"cluster":"C"},{"brokerAddrs":{"1":"10.0.0.7:10911"},"brokerName":"broker-c","cluster":"C"},'
    b'{"brokerAddrs":{"0":"10.0.0.8:10911"},"brokerName":"broker-a","cluster":"C"}],'
    b'"filterServerTable":{},"queueDatas":['
    b'{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":3},'
    b'{"brokerName":"broker-c","perm":6,"readQueueNums":2,"writeQueueNums":2},'
    b'{"brokerName":"broker-a","perm":4,"readQueueNums":1,"topicSynFlag":0,"writeQueueNums":1}]}'
)


class DecodeTests(SynchronousTestCase):
    def test_unquoted_keys(self) -> None:
        """fastjson's bare numeric broker-id keys parse to int ids."""
        route = decode_topic_route(UNQUOTED)
        self.assertEqual(route.broker_datas[0].broker_addrs, {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"})
        self.assertEqual([q.write_queue_nums for q in route.queue_datas], [3, 2, 1])

    def test_malformed(self) -> None:
        """A body that is not a route raises BodyError."""
        self.assertRaises(BodyError, decode_topic_route, b"[1]")
        self.assertRaises(BodyError, decode_topic_route, b'{"queueDatas":[{"perm":6}]}')
        self.assertRaises(BodyError, decode_topic_route, b"{nope")


class PublishInfoTests(SynchronousTestCase):
    def test_write_queues(self) -> None:
        """Only writable queues of brokers with a master, sorted by broker name."""
        info = TopicPublishInfo("T", decode_topic_route(UNQUOTED), RoundRobinIndex(0))
        self.assertEqual(info.queues, [MessageQueue("T", "broker-b", i) for i in range(3)])
        self.assertTrue(info.ok())
        self.assertEqual(info.write_queue_nums("broker-c"), 2)
        self.assertEqual(info.write_queue_nums("nope"), -1)

    def test_order_topic_conf(self) -> None:
        """orderTopicConf overrides the queue datas."""
        route = decode_topic_route(UNQUOTED)
        route.order_topic_conf = "broker-a:2;broker-c:1"
        info = TopicPublishInfo("T", route)
        self.assertTrue(info.order_topic)
        self.assertEqual(
            info.queues,
            [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-c", 0)],
        )

    def test_subscribe_queues(self) -> None:
        """Readable queues of every broker, sorted."""
        queues = subscribe_queues("T", decode_topic_route(UNQUOTED))
        self.assertEqual(len(queues), 5)
        self.assertEqual(queues[0], MessageQueue("T", "broker-a", 0))

    def test_default_route(self) -> None:
        """The TBW102 template gives min(4, read queues) queues per broker."""
        route = decode_topic_route(
            b'{"brokerDatas":[{"brokerAddrs":{"0":"a:1"},"brokerName":"a","cluster":"C"},'
            b'{"brokerAddrs":{"0":"b:1"},"brokerName":"b","cluster":"C"}],'
            b'"queueDatas":[{"brokerName":"a","perm":7,"readQueueNums":8,"writeQueueNums":8},'
            b'{"brokerName":"b","perm":7,"readQueueNums":2,"writeQueueNums":8}]}'
        )
        info = TopicPublishInfo("New", with_default_queue_nums(route, 4))
        self.assertEqual([(q.broker_name, q.queue_id) for q in info.queues],
                         [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)])


class SelectTests(SynchronousTestCase):
    def info(self) -> TopicPublishInfo:
        route = decode_topic_route(
            b'{"brokerDatas":[{"brokerAddrs":{"0":"a:1"},"brokerName":"a"},'
            b'{"brokerAddrs":{"0":"b:1"},"brokerName":"b"}],'
            b'"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":2,"writeQueueNums":2},'
            b'{"brokerName":"b","perm":6,"readQueueNums":2,"writeQueueNums":2}]}'
        )
        return TopicPublishInfo("T", route, RoundRobinIndex(0))

    def test_round_robin(self) -> None:
        """Without a last broker, queues are taken in turn."""
        info = self.info()
        picked = [(q.broker_name, q.queue_id) for q in (info.select_one() for _ in range(5))]
        self.assertEqual(picked, [("a", 1), ("b", 0), ("b", 1), ("a", 0), ("a", 1)])

    def test_avoid_last_broker(self) -> None:
        """The broker that failed last is skipped while another exists."""
        info = self.info()
        for _ in range(6):
            self.assertEqual(info.select_one("a").broker_name, "b")

    def test_only_last_broker(self) -> None:
        """With a single broker, it is used even if it failed last."""
        info = self.info()
        info.queues = [q for q in info.queues if q.broker_name == "a"]
        self.assertEqual(info.select_one("a").broker_name, "a")

    def test_index_wraps_positive(self) -> None:
        """The counter wraps from 2**31-1 to 0, never negative."""
        index = RoundRobinIndex(0x7FFFFFFF)
        self.assertEqual(index.next(), 0)
