"""Routes and queues as the wire carries them."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.route import BrokerData, MessageQueue, QueueData, TopicRouteData

Q1 = MessageQueue("T", "b", 1)


class MessageQueueTests(SynchronousTestCase):
    def test_queue_json(self) -> None:
        """MessageQueue reads and writes the Java shape; malformed objects raise ValueError."""
        obj = {"brokerName": "b", "queueId": 1, "topic": "T"}
        self.assertEqual(MessageQueue.from_json(obj), Q1)
        self.assertEqual(Q1.to_json(), obj)
        bad: object
        for bad in ([], {"queueId": 1}, {"topic": "T", "queueId": "x"}):
            self.assertRaises(ValueError, MessageQueue.from_json, bad)

    def test_order(self) -> None:
        """Queues order like Java's: topic, then broker name, then queue id."""
        self.assertEqual(sorted([MessageQueue("T", "b", 1), MessageQueue("S", "c", 0), MessageQueue("T", "a", 2)]),
                         [MessageQueue("S", "c", 0), MessageQueue("T", "a", 2), MessageQueue("T", "b", 1)])


class RouteJsonTests(SynchronousTestCase):
    def test_route_json(self) -> None:
        """Broker ids become quoted keys; orderTopicConf appears only when set."""
        route = TopicRouteData([QueueData("b", 4, 4, 6)], [BrokerData("c", "b", {1: "h:2", 0: "h:1"})])
        self.assertEqual(route.to_json(), {
            "brokerDatas": [{"brokerAddrs": {"0": "h:1", "1": "h:2"}, "brokerName": "b", "cluster": "c"}],
            "filterServerTable": {},
            "queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}],
        })
        route.order_topic_conf = "b:4"
        self.assertEqual(route.to_json()["orderTopicConf"], "b:4")
