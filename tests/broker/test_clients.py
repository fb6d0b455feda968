"""Tests for :mod:`rocketpy.broker.heartbeat` and :mod:`rocketpy.broker.clients`: heartbeat bodies,
group membership, expiry, notifications."""

from __future__ import annotations

import json

from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.broker.clients import ClientChannelInfo, ClientChannelListener, ConsumerManager, ProducerManager
from rocketpy.broker.heartbeat import (
    ConsumeFromWhere,
    ConsumeType,
    HeartbeatError,
    MessageModel,
    SubscriptionData,
    parse_heartbeat,
)
from rocketpy.interfaces import IChannelEventListener
from rocketpy.remoting.codes import RequestCode
from tests.fakes import FakeChannel

#: doc/wire.md §4: the C++ client (PyPI rocketmq 0.4.4).
CPP_HEARTBEAT = (
    b'{"clientID":"17142-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
    b'"groupName":"CID_TAG","messageModel":1,"subscriptionDataSet":['
    b'{"subString":"*","subVersion":"1795938075655","topic":"%RETRY%CID_TAG"},'
    b'{"codeSet":[0],"subString":"TagA","subVersion":"1795938075655","tagsSet":["TagA"],"topic":"ExploreTopic"}]}]}'
)
#: doc/wire.md §4: ali-ons 3.12.
ONS_HEARTBEAT = (
    b'{"clientID":"192.0.2.2@19513","consumerDataSet":[{"groupName":"CID_ALI_EXPLORE",'
    b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    b'"subscriptionDataSet":[{"topic":"AliTopic2","subString":"TagA||TagB","classFilterMode":false,'
    b'"tagsSet":["TagA","TagB"],"codeSet":[2598919,2598920],"subVersion":1795938220455}],"unitMode":false}],'
    b'"producerDataSet":[]}'
)
#: doc/wire.md §14: a C++ producer (no consumerDataSet key at all).
CPP_PRODUCER_HEARTBEAT = b'{"clientID":"15983-127.0.0.1@DEFAULT","producerDataSet":[{"groupName":"PID_EXPLORE"}]}'


def _notified(channel: FakeChannel) -> list[str]:
    """The groups named by the NOTIFY_CONSUMER_IDS_CHANGED requests ``channel`` received."""
    out = []
    for r in channel.oneway:
        assert r.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and r.is_oneway
        out.append(r.ext_fields["consumerGroup"])
    return out


class ParseHeartbeatTests(SynchronousTestCase):
    def test_cpp_consumer(self) -> None:
        """C++ ordinals, string subVersion and the bogus codeSet [0] parse; tags come from strings."""
        hb = parse_heartbeat(CPP_HEARTBEAT)
        self.assertEqual(hb.client_id, "17142-127.0.0.1@DEFAULT")
        self.assertEqual(hb.producer_groups, [])
        (c,) = hb.consumers
        self.assertEqual(
            (c.group_name, c.consume_type, c.message_model, c.consume_from_where),
            ("CID_TAG", ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
             ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
        )
        retry, topic = c.subscriptions
        self.assertEqual(retry, SubscriptionData("%RETRY%CID_TAG", "*", frozenset(), 1795938075655, "TAG"))
        self.assertEqual(topic.tags_set, frozenset({"TagA"}))
        self.assertEqual(topic.to_json()["codeSet"], [2598919])  # Java "TagA".hashCode(), not the C++ [0]

    def test_ali_ons_consumer(self) -> None:
        """ali-ons enum names, numeric subVersion and an empty producerDataSet parse."""
        hb = parse_heartbeat(ONS_HEARTBEAT)
        (c,) = hb.consumers
        self.assertEqual(c.message_model, MessageModel.CLUSTERING)
        (sub,) = c.subscriptions
        self.assertEqual((sub.sub_string, sub.tags_set, sub.sub_version),
                         ("TagA||TagB", frozenset({"TagA", "TagB"}), 1795938220455))

    def test_cpp_producer(self) -> None:
        """A producer heartbeat without consumerDataSet parses."""
        hb = parse_heartbeat(CPP_PRODUCER_HEARTBEAT)
        self.assertEqual((hb.producer_groups, hb.consumers), (["PID_EXPLORE"], []))

    def test_missing_keys_take_defaults(self) -> None:
        """Missing enums, subString and subVersion fall back to Java defaults; tagsSet alone gives the tags."""
        hb = parse_heartbeat(b'{"clientID":"c","consumerDataSet":[{"groupName":"G",'
                             b'"subscriptionDataSet":[{"topic":"T","tagsSet":["A"]}]}]}')
        (c,) = hb.consumers
        self.assertEqual(c.consume_type, ConsumeType.CONSUME_PASSIVELY)
        self.assertEqual(c.subscriptions, [SubscriptionData("T", "A", frozenset({"A"}), 0, "TAG")])

    def test_bad_bodies(self) -> None:
        """Non-JSON, missing clientID, wrong types and unknown enums raise HeartbeatError."""
        for body in (
            b"nope",
            b"[]",
            b'{"producerDataSet":[]}',
            b'{"clientID":"c","consumerDataSet":{}}',
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G","messageModel":"SIDEWAYS"}]}',
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":9}]}',
            b'{"clientID":"c","consumerDataSet":[{}]}',
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"subString":"*"}]}]}',
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
            b'[{"topic":"T","subVersion":"x"}]}]}',
        ):
            self.assertRaises(HeartbeatError, parse_heartbeat, body)


def _register(m: ConsumerManager, channel: FakeChannel, client_id: str, body: bytes = CPP_HEARTBEAT) -> bool:
    (data,) = parse_heartbeat(body).consumers
    return m.register_consumer(data, ClientChannelInfo(channel, client_id, "CPP", 63))


class ConsumerManagerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.m = ConsumerManager(self.clock, expiry=120.0)
        self.a = FakeChannel("10.0.0.1:1")
        self.b = FakeChannel("10.0.0.2:2")

    def test_join_notifies_every_member(self) -> None:
        """A new member triggers NOTIFY_CONSUMER_IDS_CHANGED to all members; a repeat heartbeat does not."""
        self.assertTrue(_register(self.m, self.a, "A"))
        self.assertEqual(_notified(self.a), ["CID_TAG"])
        self.assertTrue(_register(self.m, self.b, "B"))
        self.assertEqual(_notified(self.a), ["CID_TAG", "CID_TAG"])
        self.assertEqual(_notified(self.b), ["CID_TAG"])
        self.assertFalse(_register(self.m, self.a, "A"))
        self.assertEqual(len(self.a.oneway), 2)
        group = self.m.get_consumer_group_info("CID_TAG")
        assert group is not None
        self.assertEqual(sorted(group.client_ids()), ["A", "B"])

    def test_reconnect_replaces_old_channel(self) -> None:
        """A client id heartbeating on a new connection replaces the old one without a membership change."""
        _register(self.m, self.a, "A")
        self.assertFalse(_register(self.m, self.b, "A"))
        group = self.m.get_consumer_group_info("CID_TAG")
        assert group is not None
        self.assertEqual(list(group.channels), [self.b])
        self.assertEqual(group.client_ids(), ["A"])
        self.assertEqual(len(self.a.oneway) + len(self.b.oneway), 1)

    def test_unregister_and_close_notify_the_rest(self) -> None:
        """Leaving by UNREGISTER_CLIENT or by a closed connection notifies the remaining members."""
        _register(self.m, self.a, "A")
        _register(self.m, self.b, "B")
        del self.a.oneway[:], self.b.oneway[:]
        self.assertTrue(self.m.unregister_consumer("CID_TAG", self.b))
        self.assertEqual(_notified(self.a), ["CID_TAG"])
        self.assertFalse(self.m.unregister_consumer("CID_TAG", self.b))
        self.m.do_channel_close_event(self.a)
        self.assertIsNone(self.m.get_consumer_group_info("CID_TAG"))

    def test_expiry(self) -> None:
        """A member silent for more than 120 s is dropped and closed; a heartbeat keeps it alive."""
        _register(self.m, self.a, "A")
        _register(self.m, self.b, "B")
        self.clock.advance(100)
        _register(self.m, self.b, "B")
        self.clock.advance(20)
        self.assertEqual(self.m.scan_not_active_channel(), 0)
        self.clock.advance(1)
        del self.b.oneway[:]
        self.assertEqual(self.m.scan_not_active_channel(), 1)
        self.assertTrue(self.a.closed)
        self.assertFalse(self.b.closed)
        self.assertEqual(_notified(self.b), ["CID_TAG"])
        self.assertEqual(self.m.get_consumer_group_info("CID_TAG").client_ids(), ["B"])  # type: ignore[union-attr]

    def test_broken_channel_is_logged(self) -> None:
        """A notification that cannot be written (failed Deferred or exception) is logged, never raised."""
        with capturedLogs() as events:
            self.assertTrue(_register(self.m, FakeChannel(broken=True), "A"))
            self.assertTrue(_register(self.m, FakeChannel(raises=True), "B"))
        failures = [e for e in events if "failed" in e.get("log_format", "")]
        self.assertEqual([(e["what"], e["error"]) for e in failures], [("NOTIFY_CONSUMER_IDS_CHANGED", "gone")] * 3)

    def test_subscriptions(self) -> None:
        """The latest heartbeat's subscriptions are kept per topic; topics dropped by the client go."""
        _register(self.m, self.a, "A")
        sub = self.m.find_subscription_data("CID_TAG", "ExploreTopic")
        self.assertEqual(sub.sub_string if sub else None, "TagA")
        self.assertEqual(self.m.groups_of_topic("ExploreTopic"), {"CID_TAG"})
        body = CPP_HEARTBEAT.replace(b'"topic":"ExploreTopic"', b'"topic":"Other"')
        _register(self.m, self.a, "A", body)
        self.assertIsNone(self.m.find_subscription_data("CID_TAG", "ExploreTopic"))
        self.assertIsNotNone(self.m.find_subscription_data("CID_TAG", "Other"))

    def test_connection_json(self) -> None:
        """The group renders as Java's ConsumerConnection with enum names."""
        _register(self.m, self.a, "A")
        obj = json.loads(json.dumps(self.m.get_consumer_group_info("CID_TAG").to_json()))  # type: ignore[union-attr]
        self.assertEqual(obj["connectionSet"], [{"clientAddr": "10.0.0.1:1", "clientId": "A", "language": "CPP",
                                                 "version": 63}])
        self.assertEqual(obj["messageModel"], "CLUSTERING")
        self.assertEqual(set(obj["subscriptionTable"]), {"%RETRY%CID_TAG", "ExploreTopic"})


class ProducerManagerTests(SynchronousTestCase):
    def test_register_expire_close(self) -> None:
        """Producers are found by group, expire after 120 s and vanish when their channel closes."""
        clock = Clock()
        m = ProducerManager(clock)
        a, b = FakeChannel("a:1"), FakeChannel("b:2")
        m.register_producer("PG", ClientChannelInfo(a, "A"))
        clock.advance(10)
        m.register_producer("PG", ClientChannelInfo(b, "B"))
        self.assertIs(m.get_available_channel("PG"), b)
        clock.advance(115)
        self.assertEqual(m.scan_not_active_channel(), 1)
        self.assertTrue(a.closed)
        self.assertEqual([i.client_id for i in m.channels_of("PG")], ["B"])
        m.do_channel_close_event(b)
        self.assertIsNone(m.get_available_channel("PG"))
        self.assertEqual(m.groups(), [])


class ListenerTests(SynchronousTestCase):
    def test_close_event_reaches_both_managers(self) -> None:
        """A closed channel is forgotten by the consumer and the producer manager."""
        clock = Clock()
        consumers, producers = ConsumerManager(clock), ProducerManager(clock)
        listener = ClientChannelListener(consumers, producers)
        verifyObject(IChannelEventListener, listener)
        a = FakeChannel()
        _register(consumers, a, "A")
        producers.register_producer("PG", ClientChannelInfo(a, "A"))
        listener.on_channel_connect(a.remote_address, a)
        listener.on_channel_idle(a.remote_address, a)
        self.assertEqual(producers.groups(), ["PG"])
        listener.on_channel_close(a.remote_address, a)
        self.assertEqual((consumers.groups(), producers.groups()), ([], []))
