"""Tests for rocketpy.namesrv.processor: each request code, called directly."""

from __future__ import annotations

import json
import os
import zlib

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.common.topic import DataVersion, TopicConfig
from rocketpy.interfaces import ICommandLocator, IRequestProcessor
from rocketpy.namesrv.kvconfig import KVConfigManager
from rocketpy.namesrv.processor import NamesrvProcessor
from rocketpy.namesrv.routeinfo import FLAG_UNIT, RouteInfoManager
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.fakes import FakeChannel, registered
from tests.namesrv.helpers import register_request

C = RequestCode
R = ResponseCode


class ProcessorTestBase(SynchronousTestCase):
    """Builds a processor on a Clock and a temporary KV file."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.routes = RouteInfoManager()
        self.kv_path = os.path.join(self.mktemp(), "kvConfig.json")
        self.kv = KVConfigManager(self.kv_path)
        self.kv.load()
        self.processor = NamesrvProcessor(self.routes, self.kv, self.clock, {"productEnvName": "center"})
        self.server = registered(self.processor)
        self.channel = FakeChannel("127.0.0.1:40001")
        self.addCleanup(lambda: self.assertEqual(self.channel.sent, [], "the name server never calls brokers"))

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        request = RemotingCommand.request(code, ext, body)
        request.opaque = 42
        result = self.server.answer(self.channel, request)
        # the KV writes answer once written
        response = self.successResultOf(result) if isinstance(result, Deferred) else result
        assert response.is_response and response.opaque == 42
        assert all(isinstance(v, str) for v in response.ext_fields.values())
        return response

    def route(self, topic: str = "T") -> RemotingCommand:
        return self.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})

    def register(self, request: RemotingCommand | None = None) -> RemotingCommand:
        response = self.server.answer(self.channel, request or register_request())
        assert isinstance(response, RemotingCommand) and response.is_response
        return response


class RegisterAndRouteTests(ProcessorTestBase):
    def test_provides_interface(self) -> None:
        """The processor is a command locator; its responders, as registered, are never busy."""
        self.assertTrue(verifyObject(ICommandLocator, self.processor))
        for responder in self.server.processors.values():
            self.assertTrue(verifyObject(IRequestProcessor, responder))
            self.assertFalse(responder.reject_request())

    def test_route_after_register(self) -> None:
        """After a master registers, the route body has quoted broker-id keys."""
        response = self.register()
        self.assertEqual((response.code, response.ext_fields, response.body), (R.SUCCESS, {}, b""))
        route = self.route()
        self.assertEqual(route.code, R.SUCCESS)
        self.assertIn(b'"brokerAddrs":{"0":"127.0.0.1:10911"}', route.body)
        self.assertEqual(json.loads(route.body)["queueDatas"][0]["writeQueueNums"], 4)

    def test_unknown_topic(self) -> None:
        """An unknown topic gets TOPIC_NOT_EXIST with Java's remark and no body."""
        response = self.route("nope")
        self.assertEqual(response.code, R.TOPIC_NOT_EXIST)
        self.assertEqual(response.remark, "No topic route info in name server for the topic: nope")
        self.assertEqual(response.body, b"")

    def test_expiry_with_clock(self) -> None:
        """A broker is routed for 120 s of silence and gone after a scan past that."""
        self.register()
        self.clock.advance(119)
        self.routes.scan_not_active_broker(self.clock.seconds())
        self.assertEqual(self.route().code, R.SUCCESS)
        self.clock.advance(1.5)
        self.routes.scan_not_active_broker(self.clock.seconds())
        self.assertEqual(self.route().code, R.TOPIC_NOT_EXIST)
        self.assertTrue(self.channel.closed)

    def test_slave_gets_master_addr(self) -> None:
        """A slave's registration response names its master and the master's HA address."""
        self.register()
        response = self.register(register_request(broker_addr="127.0.0.2:10911", broker_id=1))
        self.assertEqual(response.ext_fields, {"masterAddr": "127.0.0.1:10911", "haServerAddr": "127.0.0.1:10912"})

    def test_register_returns_order_conf(self) -> None:
        """The registration response body is the ORDER_TOPIC_CONFIG KV table when there is one."""
        self.call(C.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"})
        self.assertEqual(self.register().body, b'{"table":{"T":"broker-a:4"}}')

    def test_route_order_conf(self) -> None:
        """A topic in ORDER_TOPIC_CONFIG gets orderTopicConf in its route."""
        self.register()
        self.call(C.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"})
        self.assertEqual(json.loads(self.route().body)["orderTopicConf"], "broker-a:4")
        self.assertNotIn(b"orderTopicConf", self.route("T2").body)

    def test_compressed_registration(self) -> None:
        """A compressed registration body is decoded when the compressed header is true."""
        self.register(register_request(topics={"C": 2}, compressed=True))
        self.assertEqual(json.loads(self.route("C").body)["queueDatas"][0]["readQueueNums"], 2)

    def test_crc_checked(self) -> None:
        """A matching bodyCrc32 is accepted; a wrong one gets SYSTEM_ERROR "crc32 not match"."""
        request = register_request()
        request.ext_fields["bodyCrc32"] = str(zlib.crc32(request.body) & 0x7FFFFFFF)
        self.assertEqual(self.register(request).code, R.SUCCESS)
        request = register_request(topics={"X": 1})
        request.ext_fields["bodyCrc32"] = "12345"
        response = self.register(request)
        self.assertEqual((response.code, response.remark), (R.SYSTEM_ERROR, "crc32 not match"))
        self.assertEqual(self.route("X").code, R.TOPIC_NOT_EXIST)

    def test_malformed_body(self) -> None:
        """A registration body that is not JSON gets SYSTEM_ERROR, not an exception."""
        request = register_request()
        request.body = b"{not json"
        response = self.register(request)
        self.assertEqual(response.code, R.SYSTEM_ERROR)
        self.assertIn("malformed JSON", response.remark or "")

    def test_unregister(self) -> None:
        """UNREGISTER_BROKER removes the broker's route."""
        self.register()
        ext = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster", "brokerId": "0"}
        self.assertEqual(self.call(C.UNREGISTER_BROKER, ext).code, R.SUCCESS)
        self.assertEqual(self.route().code, R.TOPIC_NOT_EXIST)

    def test_query_data_version(self) -> None:
        """QUERY_DATA_VERSION says whether the version changed and returns the stored one."""
        self.register()
        ext = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster", "brokerId": "0"}
        same = self.call(C.QUERY_DATA_VERSION, ext, b'{"counter":1,"timestamp":1000}')
        self.assertEqual((same.ext_fields, same.body), ({"changed": "false"}, b'{"counter":1,"timestamp":1000}'))
        other = self.call(C.QUERY_DATA_VERSION, ext, b'{"counter":2,"timestamp":1000}')
        self.assertEqual(other.ext_fields, {"changed": "true"})

    def test_query_data_version_refreshes_broker(self) -> None:
        """An unchanged QUERY_DATA_VERSION counts as a sign of life."""
        self.register()
        self.clock.advance(100)
        ext = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster", "brokerId": "0"}
        self.call(C.QUERY_DATA_VERSION, ext, b'{"counter":1,"timestamp":1000}')
        self.clock.advance(100)
        self.assertEqual(self.routes.scan_not_active_broker(self.clock.seconds()), [])
        self.assertEqual(self.routes.query_data_version("127.0.0.1:10911"), DataVersion(1, 1000))


class ListAndAdminTests(ProcessorTestBase):
    def setUp(self) -> None:
        super().setUp()
        self.register(register_request(topics={"T": 4, "A": 4}))

    def test_cluster_info(self) -> None:
        """GET_BROKER_CLUSTER_INFO lists brokers and clusters."""
        body = json.loads(self.call(C.GET_BROKER_CLUSTER_INFO).body)
        self.assertEqual(body["clusterAddrTable"], {"DefaultCluster": ["broker-a"]})
        self.assertEqual(body["brokerAddrTable"]["broker-a"]["brokerAddrs"], {"0": "127.0.0.1:10911"})

    def test_topic_lists(self) -> None:
        """All-topics, by-cluster and system topic lists."""
        self.assertEqual(self.call(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body, b'{"topicList":["A","T"]}')
        by_cluster = self.call(C.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
        self.assertEqual(json.loads(by_cluster.body)["topicList"], ["A", "T"])
        system = json.loads(self.call(C.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)
        self.assertEqual(system, {"brokerAddr": "127.0.0.1:10911", "topicList": ["DefaultCluster", "broker-a"]})

    def test_unit_topic_lists(self) -> None:
        """The three unit-topic codes answer TopicLists filtered by topicSysFlag."""
        for code in (C.GET_UNIT_TOPIC_LIST, C.GET_HAS_UNIT_SUB_TOPIC_LIST, C.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST):
            self.assertEqual(self.call(code).body, b'{"topicList":[]}', code)
        unit = {"U": TopicConfig("U", topic_sys_flag=FLAG_UNIT)}
        self.routes.register_broker("DefaultCluster", "u:1", "broker-u", 0, "", 0, DataVersion(1, 1), unit)
        self.assertEqual(self.call(C.GET_UNIT_TOPIC_LIST).body, b'{"topicList":["U"]}')
        self.assertEqual(self.call(C.GET_HAS_UNIT_SUB_TOPIC_LIST).body, b'{"topicList":[]}')

    def test_delete_topic(self) -> None:
        """DELETE_TOPIC_IN_NAMESRV removes the route."""
        self.assertEqual(self.call(C.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"}).code, R.SUCCESS)
        self.assertEqual(self.route().code, R.TOPIC_NOT_EXIST)

    def test_write_perm(self) -> None:
        """WIPE/ADD_WRITE_PERM_OF_BROKER report counts as strings and change perm."""
        wipe = self.call(C.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        self.assertEqual(wipe.ext_fields, {"wipeTopicCount": "2"})
        self.assertEqual(json.loads(self.route().body)["queueDatas"][0]["perm"], 4)
        add = self.call(C.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        self.assertEqual(add.ext_fields, {"addTopicCount": "2"})
        self.assertEqual(json.loads(self.route().body)["queueDatas"][0]["perm"], 6)


class KVAndConfigTests(ProcessorTestBase):
    def test_kv_round_trip(self) -> None:
        """PUT, GET, GET_KVLIST_BY_NAMESPACE, DELETE, then QUERY_NOT_FOUND."""
        put = {"namespace": "ns", "key": "k", "value": "v"}
        self.assertEqual(self.call(C.PUT_KV_CONFIG, put).code, R.SUCCESS)
        self.assertEqual(self.call(C.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).ext_fields, {"value": "v"})
        self.assertEqual(self.call(C.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}).body, b'{"table":{"k":"v"}}')
        self.assertEqual(self.call(C.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}).code, R.SUCCESS)
        missing = self.call(C.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
        self.assertEqual((missing.code, missing.remark), (R.QUERY_NOT_FOUND, "No config item, Namespace: ns Key: k"))
        listing = self.call(C.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"})
        self.assertEqual((listing.code, listing.remark), (R.QUERY_NOT_FOUND, "No config item, Namespace: ns"))

    def test_kv_persisted(self) -> None:
        """A KV put through the processor survives a restart (a new manager on the same file)."""
        self.call(C.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
        again = KVConfigManager(self.kv_path)
        again.load()
        self.assertEqual(again.get("ns", "k"), "v")

    def test_kv_write_failure(self) -> None:
        """A KV file that cannot be written gives SYSTEM_ERROR, not an exception."""
        blocker = self.mktemp()
        with open(blocker, "wb"):
            pass
        processor = NamesrvProcessor(self.routes, KVConfigManager(os.path.join(blocker, "kv.json")), self.clock)
        request = RemotingCommand.request(C.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
        result = registered(processor).answer(self.channel, request)
        assert isinstance(result, Deferred)
        response = self.successResultOf(result)
        self.assertEqual((response.code, (response.remark or "")[:10]), (R.SYSTEM_ERROR, "I/O error:"))
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)

    def test_namesrv_config(self) -> None:
        """UPDATE_NAMESRV_CONFIG merges properties; GET_NAMESRV_CONFIG returns them."""
        update = self.call(C.UPDATE_NAMESRV_CONFIG, body=b"# comment\norderMessageEnable=true\nclusterTest : false\n")
        self.assertEqual(update.code, R.SUCCESS)
        config = self.call(C.GET_NAMESRV_CONFIG).body.decode()
        self.assertEqual(config, "clusterTest=false\norderMessageEnable=true\nproductEnvName=center\n")

    def test_namesrv_config_blacklist(self) -> None:
        """Paths the name server writes to cannot be changed remotely."""
        response = self.call(C.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/etc/passwd\n")
        self.assertEqual((response.code, response.remark), (R.NO_PERMISSION, "Can not update config in black list."))
        self.assertNotIn("kvConfigPath", self.call(C.GET_NAMESRV_CONFIG).body.decode())



class BadRequestTests(ProcessorTestBase):
    def test_unknown_code(self) -> None:
        """The name server registers no responder for a broker's code (its node answers
        REQUEST_CODE_NOT_SUPPORTED: tests/remoting)."""
        self.assertNotIn(C.SEND_MESSAGE, self.processor.responders())

    def test_missing_fields_named(self) -> None:
        """Every code with a required field answers SYSTEM_ERROR naming it when it is missing."""
        cases = {
            C.GET_ROUTEINFO_BY_TOPIC: "topic",
            C.GET_KV_CONFIG: "namespace",
            C.PUT_KV_CONFIG: "namespace",
            C.DELETE_KV_CONFIG: "namespace",
            C.GET_KVLIST_BY_NAMESPACE: "namespace",
            C.REGISTER_BROKER: "clusterName",
            C.UNREGISTER_BROKER: "clusterName",
            C.QUERY_DATA_VERSION: "clusterName",
            C.GET_TOPICS_BY_CLUSTER: "cluster",
            C.DELETE_TOPIC_IN_NAMESRV: "topic",
            C.WIPE_WRITE_PERM_OF_BROKER: "brokerName",
            C.ADD_WRITE_PERM_OF_BROKER: "brokerName",
        }
        for code, field in cases.items():
            response = self.call(code)
            self.assertEqual(response.code, R.SYSTEM_ERROR, code)
            self.assertIn(field, response.remark or "", code)

    def test_non_numeric_fields_named(self) -> None:
        """A non-numeric brokerId or bodyCrc32 answers SYSTEM_ERROR naming the field."""
        for field in ("brokerId", "bodyCrc32"):
            request = register_request()
            request.ext_fields[field] = "abc"
            response = self.register(request)
            self.assertEqual(response.code, R.SYSTEM_ERROR)
            self.assertIn(field, response.remark or "")
        self.assertEqual(self.routes.topic_list(), [])

    def test_handlers_without_fields(self) -> None:
        """Codes without required fields answer SUCCESS on empty tables."""
        for code in (C.GET_BROKER_CLUSTER_INFO, C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, C.GET_SYSTEM_TOPIC_LIST_FROM_NS):
            self.assertEqual(self.call(code).code, R.SUCCESS, code)
