"""Tests for :mod:`rocketpy.broker.processors`: response codes, bodies and bad input."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.broker.admin import AdminBrokerProcessor
from rocketpy.broker.clients import ConsumerManager, ProducerManager
from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.offsets import ConsumerOffsetManager, RebalanceLockManager
from rocketpy.broker.processors import (
    BrokerTables,
    ClientManageProcessor,
    ConsumerManageProcessor,
)
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import MessageConst, MessageExt, offset_msg_id
from rocketpy.common.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TopicConfig
from rocketpy.interfaces import ICommandLocator, IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectionLost, RemotingTimeoutError
from tests.broker.test_clients import CPP_HEARTBEAT, CPP_PRODUCER_HEARTBEAT, ONS_HEARTBEAT
from tests.fakes import CannedStoreService, FakeChannel, registered
from tests.common.fastjson import fastjson_loads, mq_key


def _request(code: int, body: bytes = b"", **ext: object) -> RemotingCommand:
    return RemotingCommand.request(code, {k: str(v) for k, v in ext.items()}, body, language="CPP")


class ProcessorTestBase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.store = CannedStoreService()
        self.registrations: list[int] = []
        topics = TopicConfigManager(self.clock)
        topics.add_change_listener(lambda: self.registrations.append(1))
        topics.update_topic_config(TopicConfig("T", 4, 4))
        self.registrations.clear()
        self.t = BrokerTables(
            BrokerConfig(), topics, SubscriptionGroupManager(self.clock), ConsumerOffsetManager(),
            ConsumerManager(self.clock), ProducerManager(self.clock), self.store, self.clock,
            RebalanceLockManager(self.clock),
        )
        self.channel = FakeChannel("10.0.0.9:4000")
        self.client = ClientManageProcessor(self.t)
        self.consumer = ConsumerManageProcessor(self.t)
        self.admin = AdminBrokerProcessor(self.t)

    def call(self, processor: Any, request: RemotingCommand) -> RemotingCommand:
        result = registered(processor).answer(self.channel, request)
        if isinstance(result, Deferred):
            result = self.successResultOf(result)
        assert isinstance(result, RemotingCommand)
        self.assertTrue(all(isinstance(v, str) for v in result.ext_fields.values()), result.ext_fields)
        return result

    def assertCode(self, response: RemotingCommand, code: int, remark_part: str | None = None) -> None:
        self.assertEqual(response.code, code, response.remark)
        if remark_part is not None:
            self.assertIn(remark_part, response.remark or "")


class ClientManageTests(ProcessorTestBase):
    def test_interface(self) -> None:
        """All three are command locators whose responders, as registered, accept every request."""
        for p in (self.client, self.consumer, self.admin):
            verifyObject(ICommandLocator, p)
            for responder in registered(p).processors.values():
                verifyObject(IRequestProcessor, responder)
                self.assertFalse(responder.reject_request())

    def test_cpp_heartbeat_creates_group_and_retry_topic(self) -> None:
        """A CLUSTERING consumer's heartbeat creates its group and %RETRY% topic (1 queue, perm 6) and re-registers."""
        response = self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))
        self.assertCode(response, ResponseCode.SUCCESS)
        retry = self.t.topics.select_topic_config("%RETRY%CID_TAG")
        assert retry is not None
        self.assertEqual((retry.read_queue_nums, retry.write_queue_nums, retry.perm), (1, 1, 6))
        self.assertIn("CID_TAG", self.t.subscriptions.groups())
        self.assertEqual(self.registrations, [1])
        self.assertEqual(self.t.consumers.get_consumer_group_info("CID_TAG").client_ids(),  # type: ignore[union-attr]
                         ["17142-127.0.0.1@DEFAULT"])
        self.assertEqual(self.channel.oneway[0].code, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)

    def test_ali_ons_and_producer_heartbeats(self) -> None:
        """ali-ons consumer and C++ producer heartbeats register their groups."""
        self.assertCode(self.call(self.client, _request(RequestCode.HEART_BEAT, ONS_HEARTBEAT)), 0)
        self.assertIn("%RETRY%CID_ALI_EXPLORE", self.t.topics)
        self.assertCode(self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_PRODUCER_HEARTBEAT)), 0)
        self.assertIs(self.t.producers.get_available_channel("PID_EXPLORE"), self.channel)

    def test_broadcasting_consumer_gets_no_retry_topic(self) -> None:
        """A BROADCASTING consumer's group is created but no retry topic."""
        body = CPP_HEARTBEAT.replace(b'"messageModel":1', b'"messageModel":0')
        self.assertCode(self.call(self.client, _request(RequestCode.HEART_BEAT, body)), 0)
        self.assertNotIn("%RETRY%CID_TAG", self.t.topics)

    def test_bad_heartbeat(self) -> None:
        """A malformed heartbeat body is SYSTEM_ERROR with the reason."""
        self.assertCode(self.call(self.client, _request(RequestCode.HEART_BEAT, b"{")), 1, "not JSON")

    def test_unregister(self) -> None:
        """UNREGISTER_CLIENT drops the groups named; empty names (C++) are ignored; clientID is required."""
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_PRODUCER_HEARTBEAT))
        r = self.call(self.client, _request(RequestCode.UNREGISTER_CLIENT, clientID="x", producerGroup="PID_EXPLORE",
                                            consumerGroup=""))
        self.assertCode(r, 0)
        self.assertEqual(self.t.producers.groups(), [])
        self.assertEqual(self.t.consumers.groups(), ["CID_TAG"])
        self.call(self.client, _request(RequestCode.UNREGISTER_CLIENT, clientID="x", consumerGroup="CID_TAG"))
        self.assertEqual(self.t.consumers.groups(), [])
        self.assertCode(self.call(self.client, _request(RequestCode.UNREGISTER_CLIENT)), 1, "clientID")

    def test_check_client_config_and_unknown_code(self) -> None:
        """CHECK_CLIENT_CONFIG succeeds; other codes have no responder here (the node answers them)."""
        self.assertCode(self.call(self.client, _request(RequestCode.CHECK_CLIENT_CONFIG)), 0)
        self.assertNotIn(999, self.client.responders())


class CheckClientConfigTests(ProcessorTestBase):
    """CHECK_CLIENT_CONFIG (46), which Java push consumers send at start for SQL92 subscriptions."""

    def check(self, enabled: bool, expression: str, kind: str = "SQL92") -> RemotingCommand:
        self.t.config.enable_property_filter = enabled
        body = {"clientId": "c", "group": "G",
                "subscriptionData": {"topic": "T", "subString": expression, "expressionType": kind}}
        return self.call(self.client, _request(RequestCode.CHECK_CLIENT_CONFIG, json.dumps(body).encode()))

    def test_answers(self) -> None:
        """Tags always pass; SQL92 needs the property filter (else Java's remark) and an expression that compiles."""
        self.assertCode(self.check(False, "TagA", "TAG"), ResponseCode.SUCCESS)
        self.assertCode(self.check(True, "a > 5"), ResponseCode.SUCCESS)
        disabled = self.check(False, "a > 5")
        self.assertEqual((disabled.code, disabled.remark),
                         (ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92"))
        self.assertCode(self.check(True, "a >"), ResponseCode.SUBSCRIPTION_PARSE_FAILED, "Invalid MessageSelector.")
        self.assertCode(self.call(self.client, _request(RequestCode.CHECK_CLIENT_CONFIG, b"[1]")), ResponseCode.SUCCESS)


class ConsumerManageTests(ProcessorTestBase):
    def test_consumer_list(self) -> None:
        """The live client ids, or SYSTEM_ERROR naming the group when there are none."""
        self.assertCode(self.call(self.consumer, _request(38, consumerGroup="CID_TAG")), 1,
                        "no consumer for this group, CID_TAG")
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))
        r = self.call(self.consumer, _request(38, consumerGroup="CID_TAG"))
        self.assertEqual(json.loads(r.body), {"consumerIdList": ["17142-127.0.0.1@DEFAULT"]})

    def test_query_offset_rules(self) -> None:
        """Stored offset wins; none with min offset 0 is "0"; none on a truncated queue is 22."""
        q = _request(14, consumerGroup="G", topic="T", queueId=1)
        self.assertEqual(self.call(self.consumer, q).ext_fields, {"offset": "0"})
        self.store.min[("T", 1)] = 5
        self.assertCode(self.call(self.consumer, q), ResponseCode.QUERY_NOT_FOUND, "Not found")
        self.assertCode(self.call(self.consumer, _request(15, consumerGroup="G", topic="T", queueId=1,
                                                          commitOffset=9)), 0)
        self.assertEqual(self.call(self.consumer, q).ext_fields, {"offset": "9"})

    def test_update_offset_negative_ignored(self) -> None:
        """ali-ons' -1 commit is accepted and stores nothing."""
        self.assertCode(self.call(self.consumer, _request(15, consumerGroup="G", topic="T", queueId=0,
                                                          commitOffset=-1)), 0)
        self.assertEqual(self.t.offsets.query_offset("G", "T", 0), -1)

    def test_queue_offsets(self) -> None:
        """GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP and GET_EARLIEST_MSG_STORETIME answer as strings."""
        self.store.max[("T", 2)] = 17
        self.store.min[("T", 2)] = 3
        self.assertEqual(self.call(self.consumer, _request(30, topic="T", queueId=2)).ext_fields, {"offset": "17"})
        self.assertEqual(self.call(self.consumer, _request(31, topic="T", queueId=2)).ext_fields, {"offset": "3"})
        r = self.call(self.consumer, _request(29, topic="T", queueId=2, timestamp=5000))
        self.assertEqual(r.ext_fields, {"offset": "5"})
        r = self.call(self.consumer, _request(32, topic="T", queueId=2))
        self.assertEqual(r.ext_fields, {"timestamp": "1700000000000"})

    def test_lock_and_unlock_batch(self) -> None:
        """LOCK_BATCH_MQ answers the queues the client holds (C++ body shape); UNLOCK_BATCH_MQ frees them."""
        mq = {"brokerName": "broker-a", "queueId": 0, "topic": "T"}
        body = json.dumps({"clientId": "A", "consumerGroup": "CG", "mqSet": [mq]}).encode()
        self.assertEqual(json.loads(self.call(self.consumer, _request(41, body)).body), {"lockOKMQSet": [mq]})
        other = body.replace(b'"A"', b'"B"')
        self.assertEqual(json.loads(self.call(self.consumer, _request(41, other)).body), {"lockOKMQSet": []})
        self.assertCode(self.call(self.consumer, _request(42, body)), 0)
        self.assertEqual(json.loads(self.call(self.consumer, _request(41, other)).body), {"lockOKMQSet": [mq]})
        for bad in (b"", b"[]", b'{"clientId":"A"}', b'{"clientId":"A","consumerGroup":"G","mqSet":[{"q":1}]}'):
            self.assertCode(self.call(self.consumer, _request(41, bad)), 1, "body")

    def test_bad_input(self) -> None:
        """Missing or non-numeric fields, unknown topics and out-of-range queues get named errors."""
        cases = [
            (_request(30, queueId=0), 1, "'topic' is missing"),
            (_request(30, topic="T"), 1, "'queueId' is missing"),
            (_request(30, topic="T", queueId="x"), 1, "'queueId' is not a number"),
            (_request(30, topic="NOPE", queueId=0), 17, "NOPE"),
            (_request(30, topic="T", queueId=4), 1, "queueId[4] is illegal"),
            (_request(31, topic="T", queueId=-1), 1, "queueId[-1]"),
            (_request(14, topic="T", queueId=0), 1, "'consumerGroup' is missing"),
            (_request(15, consumerGroup="G", topic="T", queueId=0), 1, "'commitOffset' is missing"),
            (_request(29, topic="T", queueId=0, timestamp="soon"), 1, "'timestamp' is not a number"),
            (_request(32, topic="T", queueId=9), 1, "illegal"),
            (_request(38), 1, "consumerGroup"),
        ]
        for request, code, remark in cases:
            self.assertCode(self.call(self.consumer, request), code, remark)


class AdminTests(ProcessorTestBase):
    def test_update_and_create_topic(self) -> None:
        """UPDATE_AND_CREATE_TOPIC stores the topic and triggers a registration."""
        r = self.call(self.admin, _request(17, topic="New", defaultTopic="TBW102", readQueueNums=2,
                                           writeQueueNums=3, perm=6, topicFilterType="SINGLE_TAG", order="false"))
        self.assertCode(r, 0)
        self.assertEqual(self.t.topics.select_topic_config("New"), TopicConfig("New", 2, 3, 6))
        self.assertEqual(self.registrations, [1])

    def test_update_and_create_topic_bad_input(self) -> None:
        """Reserved or invalid names and missing or bad numbers are SYSTEM_ERROR with a reason."""
        ok = dict(readQueueNums=1, writeQueueNums=1, perm=6)
        cases = [
            (dict(ok, topic="DefaultCluster"), "reserved"),
            (dict(ok, topic="a b"), "illegal characters"),
            (dict(ok, topic="X", readQueueNums="many"), "readQueueNums"),
            (dict(topic="X", readQueueNums=1, writeQueueNums=1), "'perm' is missing"),
            (dict(ok, topic="X", writeQueueNums=-1), "negative"),
        ]
        for ext, remark in cases:
            self.assertCode(self.call(self.admin, _request(17, b"", **ext)), 1, remark)
        self.assertNotIn("X", self.t.topics)

    def test_delete_topic(self) -> None:
        """DELETE_TOPIC_IN_BROKER removes the topic and its offsets."""
        self.t.offsets.commit_offset("p", "G", "T", 0, 5)
        self.assertCode(self.call(self.admin, _request(215, topic="T")), 0)
        self.assertNotIn("T", self.t.topics)
        self.assertEqual(self.t.offsets.query_offset("G", "T", 0), -1)

    def test_table_bodies(self) -> None:
        """GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET and GET_ALL_SUBSCRIPTIONGROUP_CONFIG return the tables."""
        body = json.loads(self.call(self.admin, _request(21)).body)
        self.assertEqual(body["topicConfigTable"]["T"]["writeQueueNums"], 4)
        self.assertIn("dataVersion", body)
        self.t.offsets.commit_offset("p", "G", "T", 0, 5)
        self.assertEqual(json.loads(self.call(self.admin, _request(43)).body), {"offsetTable": {"T@G": {"0": 5}}})
        self.assertIn("TOOLS_CONSUMER", json.loads(self.call(self.admin, _request(201)).body)["subscriptionGroupTable"])

    def test_update_subscription_group(self) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP takes the Java body; a body without groupName is refused."""
        body = json.dumps({"groupName": "G9", "retryMaxTimes": 2}).encode()
        self.assertCode(self.call(self.admin, _request(200, body)), 0)
        self.assertEqual(self.t.subscriptions.groups()["G9"].retry_max_times, 2)
        self.assertCode(self.call(self.admin, _request(200, b"{}")), 1, "groupName")
        self.assertCode(self.call(self.admin, _request(200, b"[")), 1, "not JSON")
        self.assertCode(self.call(self.admin, _request(200, b'{"groupName":"G","retryMaxTimes":"x"}')), 1)

    def test_runtime_info(self) -> None:
        """GET_BROKER_RUNTIME_INFO has the clusterList keys, every value a string."""
        self.store.max[("T", 0)] = 7
        table = json.loads(self.call(self.admin, _request(28)).body)["table"]
        for key in ("brokerVersionDesc", "msgPutTotalTodayNow", "msgGetTotalTodayNow", "putTps",
                    "getTransferedTps", "earliestMessageTimeStamp", "commitLogDiskRatio",
                    "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
                    "pageCacheLockTimeMills", "msgPutTotalYesterdayMorning", "msgGetTotalTodayMorning"):
            self.assertIsInstance(table[key], str, key)
        self.assertEqual(table["msgPutTotalTodayNow"], "7")
        self.assertEqual(table["commitLogMaxOffset"], "1234")
        self.assertEqual(table["heldPullRequests"], "0")
        self.t.held_pulls = lambda: 3
        self.assertEqual(json.loads(self.call(self.admin, _request(28)).body)["table"]["heldPullRequests"], "3")

    def test_broker_config(self) -> None:
        """GET_BROKER_CONFIG returns key=value lines with RocketMQ names and a version ext field."""
        r = self.call(self.admin, _request(26))
        lines = dict(line.split("=", 1) for line in r.body.decode().splitlines())
        self.assertEqual(lines["brokerName"], "broker-a")
        self.assertEqual(lines["brokerClusterName"], "DefaultCluster")
        self.assertEqual(lines["listenPort"], "10911")
        self.assertIn("counter", json.loads(r.ext_fields["version"]))

    def test_topic_stats(self) -> None:
        """GET_TOPIC_STATS_INFO has one object-keyed entry per queue; an unknown topic is 17."""
        self.store.max[("T", 1)] = 4
        body = self.call(self.admin, _request(202, topic="T")).body.decode()
        self.assertIn('{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"lastUpdateTimestamp":0,"maxOffset":4,'
                      '"minOffset":0}', body)
        self.assertEqual(body.count("queueId"), 4)
        self.assertCode(self.call(self.admin, _request(202, topic="NOPE")), 17)
        self.assertCode(self.call(self.admin, _request(202)), 1, "topic")

    def test_consume_stats(self) -> None:
        """GET_CONSUME_STATS reports broker and consumer offsets per queue of the group's topics, and
        the store time of the last consumed message (the fake's time at offset 5)."""
        self.store.max[("T", 0)] = 10
        self.t.offsets.commit_offset("p", "G", "T", 0, 6)
        body = self.call(self.admin, _request(208, consumerGroup="G")).body.decode()
        self.assertTrue(body.startswith('{"consumeTps":0.0,"offsetTable":{'))
        self.assertIn('"queueId":0,"topic":"T"}:{"brokerOffset":10,"consumerOffset":6,"lastTimestamp":1000005}', body)
        self.assertIn('"queueId":3,"topic":"T"}:{"brokerOffset":0,"consumerOffset":0', body)
        self.assertCode(self.call(self.admin, _request(208)), 1, "consumerGroup")

    def test_broker_consume_stats(self) -> None:
        """GET_BROKER_CONSUME_STATS: every subscription group's ConsumeStats per topic, and the total lag."""
        self.store.max[("T", 0)] = 10
        self.store.max[("T", 1)] = 3
        self.t.subscriptions.find_subscription_group_config("G")
        self.t.subscriptions.find_subscription_group_config("IDLE")
        self.t.offsets.commit_offset("p", "G", "T", 0, 6)
        stats = fastjson_loads(self.call(self.admin, _request(RequestCode.GET_BROKER_CONSUME_STATS)).body)
        self.assertEqual((stats["brokerAddr"], stats["totalDiff"]), (self.t.config.advertised_address, 7))
        by_group = {name: value for entry in stats["consumeStatsList"] for name, value in entry.items()}
        self.assertEqual(by_group["IDLE"], [])
        [g_stats] = by_group["G"]
        self.assertEqual(g_stats["offsetTable"][mq_key("T", self.t.config.broker_name, 0)],
                         {"brokerOffset": 10, "consumerOffset": 6, "lastTimestamp": 1_000_005})  # offset 5's time
        ordered = fastjson_loads(self.call(self.admin, _request(RequestCode.GET_BROKER_CONSUME_STATS,
                                                                isOrder="true")).body)
        self.assertEqual(ordered["totalDiff"], 0)  # T is not an orderly topic

    def test_connections_and_consumed_by(self) -> None:
        """Connection lists and QUERY_TOPIC_CONSUME_BY_WHO; offline groups are named in the error."""
        self.assertCode(self.call(self.admin, _request(203, consumerGroup="CID_TAG")), 206, "CID_TAG")
        self.assertCode(self.call(self.admin, _request(204, producerGroup="PID_EXPLORE")), 1, "PID_EXPLORE")
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_PRODUCER_HEARTBEAT))
        conn = json.loads(self.call(self.admin, _request(203, consumerGroup="CID_TAG")).body)
        self.assertEqual(conn["connectionSet"][0]["clientAddr"], "10.0.0.9:4000")
        prod = json.loads(self.call(self.admin, _request(204, producerGroup="PID_EXPLORE")).body)
        self.assertEqual(prod["connectionSet"][0]["clientId"], "15983-127.0.0.1@DEFAULT")
        self.t.offsets.commit_offset("p", "OLD", "ExploreTopic", 0, 1)
        who = json.loads(self.call(self.admin, _request(300, topic="ExploreTopic")).body)
        self.assertEqual(who, {"groupList": ["CID_TAG", "OLD"]})


class ConsumerChannel(FakeChannel):
    """A consumer's connection: GET_CONSUMER_RUNNING_INFO sent to it waits on :attr:`answer`."""

    def __init__(self, remote_address: str) -> None:
        super().__init__(remote_address)
        self.calls: list[tuple[RemotingCommand, float]] = []
        self.oneway: list[RemotingCommand] = []
        self.answer: Deferred[RemotingCommand] = Deferred()

    def invoke_sync(self, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        self.calls.append((request, timeout))
        return self.answer

    def invoke_oneway(self, request: RemotingCommand) -> Deferred[None]:
        self.oneway.append(request)
        return succeed(None)


class ConsumerConnectedBase(ProcessorTestBase):
    """A consumer of CID_TAG connected through :class:`ConsumerChannel`."""

    CLIENT = "17142-127.0.0.1@DEFAULT"

    def setUp(self) -> None:
        super().setUp()
        self.consumer_channel = ConsumerChannel("10.0.0.7:5000")
        joined = registered(self.client).answer(self.consumer_channel, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))
        assert isinstance(joined, RemotingCommand)
        self.assertCode(joined, 0)


class ConsumerRunningInfoTests(ConsumerConnectedBase):
    """GET_CONSUMER_RUNNING_INFO (307): forwarded to the consumer's connection, its answer relayed."""

    def ask(self, **ext: object) -> Deferred[RemotingCommand]:
        """Send 307 from the admin's channel; the response Deferred (the consumer has not answered yet)."""
        request = _request(RequestCode.GET_CONSUMER_RUNNING_INFO, b"", **ext)
        request.opaque = 77
        result = registered(self.admin).answer(self.channel, request)
        assert isinstance(result, Deferred)
        return result

    def test_forwarded_and_relayed(self) -> None:
        """The request goes to the consumer's channel (5 s timeout) and its answer comes back to the admin."""
        d = self.ask(consumerGroup="CID_TAG", clientId=self.CLIENT, jstackEnable="false")
        self.assertNoResult(d)
        [(forwarded, timeout)] = self.consumer_channel.calls
        self.assertEqual(forwarded.code, RequestCode.GET_CONSUMER_RUNNING_INFO)
        self.assertEqual(
            forwarded.ext_fields, {"consumerGroup": "CID_TAG", "clientId": self.CLIENT, "jstackEnable": "false"}
        )
        self.assertEqual(forwarded.language, "JAVA")
        self.assertEqual(timeout, 5.0)
        body = b'{"mqTable":{},"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}'
        self.consumer_channel.answer.callback(forwarded.make_response(ResponseCode.SUCCESS, None, None, body))
        response = self.successResultOf(d)
        self.assertCode(response, 0)
        self.assertEqual((response.body, response.opaque), (body, 77))

    def test_consumer_error_relayed(self) -> None:
        """A consumer's error answer reaches the admin with its code and remark."""
        d = self.ask(consumerGroup="CID_TAG", clientId=self.CLIENT)
        [(forwarded, _)] = self.consumer_channel.calls
        remark = "The Consumer Group <CID_TAG> not exist in this consumer"
        self.consumer_channel.answer.callback(forwarded.make_response(ResponseCode.SYSTEM_ERROR, remark))
        self.assertCode(self.successResultOf(d), 1, remark)

    def test_not_online(self) -> None:
        """An unknown client id or group is SYSTEM_ERROR naming the client; nothing is sent."""
        for group, client_id in (("CID_TAG", "10.0.0.1@other"), ("NOGROUP", self.CLIENT)):
            response = self.call(self.admin, _request(307, consumerGroup=group, clientId=client_id))
            self.assertCode(response, 1, f"The Consumer <{client_id}> not online")
        self.assertCode(self.call(self.admin, _request(307, consumerGroup="CID_TAG")), 1, "clientId")
        self.assertEqual(self.consumer_channel.calls, [])

    def test_closed_connection_is_not_online(self) -> None:
        """Once the consumer's connection closed, the broker no longer knows the client."""
        self.t.consumers.do_channel_close_event(self.consumer_channel)
        response = self.call(self.admin, _request(307, consumerGroup="CID_TAG", clientId=self.CLIENT))
        self.assertCode(response, 1, "not online")

    def test_timeout(self) -> None:
        """No answer in time: CONSUME_MSG_TIMEOUT (207) naming group and client, as Java's broker."""
        d = self.ask(consumerGroup="CID_TAG", clientId=self.CLIENT)
        self.consumer_channel.answer.errback(RemotingTimeoutError("no response from 10.0.0.7:5000 in 5 s"))
        self.assertCode(self.successResultOf(d), ResponseCode.CONSUME_MSG_TIMEOUT,
                        f"consumer <CID_TAG> <{self.CLIENT}> Timeout")

    def test_connection_lost(self) -> None:
        """Any other failure of the call is SYSTEM_ERROR with the error in the remark."""
        d = self.ask(consumerGroup="CID_TAG", clientId=self.CLIENT)
        self.consumer_channel.answer.errback(RemotingConnectionLost("10.0.0.7:5000", "closed"))
        response = self.successResultOf(d)
        self.assertCode(response, 1, f"invoke consumer <CID_TAG> <{self.CLIENT}> Exception: RemotingConnectionLost")


class ConsumeMessageDirectlyTests(ConsumerConnectedBase):
    """CONSUME_MESSAGE_DIRECTLY (309): the stored record of ``msgId`` goes to the consumer."""

    def direct(self, msg_id: str) -> Deferred[RemotingCommand] | RemotingCommand:
        request = _request(RequestCode.CONSUME_MESSAGE_DIRECTLY, consumerGroup="CID_TAG", clientId=self.CLIENT,
                           msgId=msg_id)
        return registered(self.admin).answer(self.channel, request)

    def test_record_forwarded_and_result_relayed(self) -> None:
        self.store.records[4096] = b"the record"
        d = self.direct(offset_msg_id(("10.0.0.1", 10911), 4096))
        assert isinstance(d, Deferred)
        [(forwarded, timeout)] = self.consumer_channel.calls
        self.assertEqual((forwarded.code, forwarded.body, timeout), (309, b"the record", 5.0))
        self.assertEqual((forwarded.ext_fields["brokerName"], forwarded.ext_fields["consumerGroup"]),
                         (self.t.config.broker_name, "CID_TAG"))
        result = b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,"spentTimeMills":3}'
        self.consumer_channel.answer.callback(forwarded.make_response(ResponseCode.SUCCESS, None, None, result))
        self.assertEqual(self.successResultOf(d).body, result)

    def test_bad_or_unknown_message(self) -> None:
        response = self.direct("not-hex")
        assert isinstance(response, RemotingCommand)
        self.assertCode(response, 1, "not an offset message id")
        response = self.successResultOf(self.direct(offset_msg_id(("10.0.0.1", 10911), 8)))  # type: ignore[arg-type]
        self.assertCode(response, 1, "no message")
        self.assertEqual(self.consumer_channel.calls, [])

    def test_offline_consumer_reads_nothing(self) -> None:
        self.t.consumers.do_channel_close_event(self.consumer_channel)
        response = self.direct(offset_msg_id(("10.0.0.1", 10911), 0))
        assert isinstance(response, RemotingCommand)
        self.assertCode(response, 1, "not online")
        self.assertEqual(self.store.selected, [])


class ResetOffsetTests(ConsumerConnectedBase):
    """INVOKE_BROKER_TO_RESET_OFFSET (222): offsets by time, told to the group's clients (220)."""

    def reset(self, **ext: object) -> RemotingCommand:
        fields: dict[str, object] = {"topic": "T", "group": "CID_TAG", "timestamp": 50_000, "isForce": "false"}
        fields.update(ext)
        return self.call(self.admin, _request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, b"", **fields))

    def commit(self, *offsets: int) -> None:
        for queue_id, offset in enumerate(offsets):
            self.t.offsets.commit_offset("p", "CID_TAG", "T", queue_id, offset)

    def java_client(self) -> ConsumerChannel:
        """A Java client joins CID_TAG beside the C++ one (the heartbeat's language decides)."""
        channel = ConsumerChannel("10.0.0.8:6000")
        body = json.loads(CPP_HEARTBEAT)
        body["clientID"] = "10.0.0.8@java"
        beat = RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode(), language="JAVA")
        self.assertCode(registered(self.client).answer(channel, beat), 0)
        return channel

    def test_offsets_by_time_told_to_the_clients(self) -> None:
        """The time's offset where the group is past it; without force a group before it stays.
        Each client gets the body shape of its language."""
        java = self.java_client()
        self.commit(100, 100, 10, 100)  # the fake store finds offset timestamp // 1000 = 50
        self.consumer_channel.oneway.clear()
        java.oneway.clear()
        response = self.reset()
        self.assertCode(response, 0)
        expected = {mq_key("T", self.t.config.broker_name, q): o for q, o in enumerate((50, 50, 10, 50))}
        self.assertEqual(fastjson_loads(response.body)["offsetTable"], expected)
        [notice] = java.oneway
        self.assertEqual((notice.code, notice.ext_fields), (RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                         {"topic": "T", "group": "CID_TAG", "timestamp": "50000", "isForce": "false"}))
        self.assertEqual(fastjson_loads(notice.body)["offsetTable"], expected)
        [cpp_notice] = self.consumer_channel.oneway
        self.assertEqual([e["offset"] for e in json.loads(cpp_notice.body)["offsetTable"]], [50, 50, 10, 50])
        forced = fastjson_loads(self.reset(isForce="true").body)["offsetTable"]
        self.assertEqual(forced[mq_key("T", self.t.config.broker_name, 2)], 50)

    def test_to_the_end_and_for_cpp(self) -> None:
        """Timestamp -1 is each queue's end; isC sends the C++ list body to every client."""
        java = self.java_client()
        self.commit(0, 0, 0, 0)
        self.store.max[("T", 1)] = 7
        java.oneway.clear()
        self.assertCode(self.reset(timestamp=-1, isForce="true", isC="true"), 0)
        [notice] = java.oneway
        table = json.loads(notice.body)["offsetTable"]
        self.assertEqual(table[1], {"brokerName": self.t.config.broker_name, "offset": 7, "queueId": 1, "topic": "T"})

    def test_refusals(self) -> None:
        """Unknown topic, a group without offsets (1 SYSTEM_ERROR), no client online (206)."""
        self.assertCode(self.reset(topic="NOPE"), 1, "no topic in this broker")
        self.assertCode(self.reset(), 1, "THe consumer group <CID_TAG> not exist")
        self.commit(1)  # queues 1-3 without an offset take the time's
        self.consumer_channel.oneway.clear()
        self.assertCode(self.reset(), 0)
        offsets = json.loads(self.consumer_channel.oneway[0].body)["offsetTable"]
        self.assertEqual(sorted(e["offset"] for e in offsets), [1, 50, 50, 50])
        self.t.consumers.do_channel_close_event(self.consumer_channel)
        self.assertCode(self.reset(), ResponseCode.CONSUMER_NOT_ONLINE, "Consumer not online")


class GroupAndFileAdminTests(ProcessorTestBase):
    def test_delete_subscription_group(self) -> None:
        """DELETE_SUBSCRIPTIONGROUP removes the group; its offsets only with removeOffset=true."""
        self.t.subscriptions.find_subscription_group_config("G1")  # auto-created
        self.t.offsets.commit_offset("p", "G1", "T", 0, 5)
        self.assertCode(self.call(self.admin, _request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="G1")), 0)
        self.assertNotIn("G1", self.t.subscriptions.groups())
        self.assertEqual(self.t.offsets.query_offset("G1", "T", 0), 5)
        request = _request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="G1", removeOffset="true")
        self.assertCode(self.call(self.admin, request), 0)
        self.assertEqual(self.t.offsets.query_offset("G1", "T", 0), -1)
        self.assertCode(self.call(self.admin, _request(RequestCode.DELETE_SUBSCRIPTIONGROUP)), 1, "groupName")

    def test_trigger_delete_files(self) -> None:
        self.assertCode(self.call(self.admin, _request(RequestCode.TRIGGER_DELETE_FILES)), 0)
        self.assertEqual(self.store.delete_requests, 1)

    def test_system_topic_list(self) -> None:
        response = self.call(self.admin, _request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))
        topics = json.loads(response.body)["topicList"]
        self.assertTrue({"TBW102", "SCHEDULE_TOPIC_XXXX", self.t.config.broker_name,
                         self.t.config.cluster_name} <= set(topics), topics)
        self.assertNotIn("T", topics)

    def test_clone_group_offset(self) -> None:
        """One topic, or every topic of srcGroup; an online srcGroup's unsubscribed topics only offline."""
        self.t.topics.update_topic_config(TopicConfig("ExploreTopic", 4, 4))
        for topic in ("T", "ExploreTopic", "Gone"):
            self.t.offsets.commit_offset("p", "CID_TAG", topic, 0, 9)

        def clone(dest: str, **ext: object) -> None:
            request = _request(RequestCode.CLONE_GROUP_OFFSET, b"", srcGroup="CID_TAG", destGroup=dest, **ext)
            self.assertCode(self.call(self.admin, request), 0)

        clone("ONE", topic="T")
        self.assertEqual(sorted(self.t.offsets.topics_of_group("ONE")), ["T"])
        clone("ALL", topic="")
        self.assertEqual(sorted(self.t.offsets.topics_of_group("ALL")), ["ExploreTopic", "T"])  # no topic "Gone"
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))  # CID_TAG online: ExploreTopic only
        clone("ONLINE")
        self.assertEqual(sorted(self.t.offsets.topics_of_group("ONLINE")), ["ExploreTopic"])
        clone("OFFLINE", offline="true")
        self.assertEqual(self.t.offsets.query_offsets("OFFLINE", "T"), {0: 9})

    def test_query_consume_queue(self) -> None:
        """QUERY_CONSUME_QUEUE: entries, bounds and the group's subscription; missing queue or index."""
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_HEARTBEAT))
        self.t.topics.update_topic_config(TopicConfig("ExploreTopic", 4, 4))

        def query(**ext: object) -> RemotingCommand:
            fields: dict[str, object] = {"topic": "T", "queueId": 0, "index": 3, "count": 5}
            fields.update(ext)
            return self.call(self.admin, _request(RequestCode.QUERY_CONSUME_QUEUE, b"", **fields))

        body = json.loads(query().body)
        self.assertEqual((body["minQueueIndex"], body["maxQueueIndex"]), (0, 5))
        self.assertEqual(body["queueData"], [{"eval": False, "physicOffset": 300, "physicSize": 10, "tagsCode": 7},
                                             {"eval": False, "physicOffset": 400, "physicSize": 10, "tagsCode": 7}])
        self.assertNotIn("subscriptionData", body)
        self.assertNotIn("subscriptionData", json.loads(query(consumerGroup="CID_TAG").body))  # not its topic
        subscribed = json.loads(query(consumerGroup="CID_TAG", topic="ExploreTopic").body)["subscriptionData"]
        self.assertEqual((subscribed["topic"], subscribed["subString"]), ("ExploreTopic", "TagA"))
        self.assertCode(query(index=9), 0, "Index 9 of 0@T is not exist!")
        self.assertCode(query(topic="NOPE"), 1, "0@NOPE is not exist!")
        self.assertCode(query(count="x"), 1, "count")

    def test_query_consume_time_span(self) -> None:
        """QUERY_CONSUME_TIME_SPAN: per queue the store's times; delay = now - the next message's time."""
        self.t.offsets.commit_offset("p", "G", "T", 0, 4)
        request = _request(RequestCode.QUERY_CONSUME_TIME_SPAN, topic="T", group="G")
        spans = json.loads(self.call(self.admin, request).body)["consumeTimeSpanSet"]
        self.assertEqual(len(spans), 4)
        now_ms = int(self.clock.seconds() * 1000)
        self.assertEqual(spans[0], {"consumeTimeStamp": 15, "delayTime": now_ms - 1_000_004, "maxTimeStamp": 20,
                                    "messageQueue": {"brokerName": self.t.config.broker_name, "queueId": 0,
                                                     "topic": "T"}, "minTimeStamp": 10})
        self.assertEqual(spans[1]["delayTime"], 0)
        self.assertCode(self.call(self.admin, _request(RequestCode.QUERY_CONSUME_TIME_SPAN, topic="NOPE", group="G")),
                        1, "topic[NOPE] not exist")

    def test_all_producer_info(self) -> None:
        """GET_ALL_PRODUCER_INFO: each group's producers with client id, address, language, version."""
        self.call(self.client, _request(RequestCode.HEART_BEAT, CPP_PRODUCER_HEARTBEAT))
        data = json.loads(self.call(self.admin, _request(RequestCode.GET_ALL_PRODUCER_INFO)).body)["data"]
        [producer] = data["PID_EXPLORE"]
        self.assertEqual((producer["clientId"], producer["remoteIP"], producer["language"]),
                         ("15983-127.0.0.1@DEFAULT", "10.0.0.9:4000", "CPP"))
        self.assertEqual(producer["lastUpdateTimestamp"], int(self.clock.seconds() * 1000))

    def test_resume_check_half_message(self) -> None:
        """RESUME_CHECK_HALF_MESSAGE puts the half message back with 0 checks; other ids are errors."""
        self.store.messages[64] = MessageExt(topic=TRANS_CHECK_MAX_TIME_TOPIC, body=b"x",
                                             properties={MessageConst.TRANSACTION_CHECK_TIMES: "15"})
        self.store.messages[128] = MessageExt(topic="T", body=b"y")

        def resume(offset: int) -> RemotingCommand:
            msg_id = offset_msg_id(("10.0.0.1", 10911), offset)
            return self.call(self.admin, _request(RequestCode.RESUME_CHECK_HALF_MESSAGE, msgId=msg_id))

        self.assertCode(resume(64), 0)
        [put] = self.store.put
        self.assertEqual((put.topic, put.properties[MessageConst.TRANSACTION_CHECK_TIMES]), (TRANS_HALF_TOPIC, "0"))
        self.assertCode(resume(128), 1, "no half message")
        self.assertCode(resume(256), 1, "no half message")
        self.assertCode(self.call(self.admin, _request(RequestCode.RESUME_CHECK_HALF_MESSAGE, msgId="zz")), 1,
                        "not an offset message id")
