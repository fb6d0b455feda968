"""Tests for rocketpy.namesrv.bodies: JSON bodies in and out."""

from __future__ import annotations

import json
import struct
import zlib

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.fastjson import BodyError
from rocketpy.common.route import BrokerData, QueueData, TopicRouteData
from rocketpy.common.topic import DataVersion, TopicConfig
from rocketpy.namesrv import bodies
from rocketpy.namesrv.bodies import RegisterBrokerBody


class OutgoingTests(SynchronousTestCase):
    def route(self) -> TopicRouteData:
        return TopicRouteData(
            [QueueData("broker-a", 4, 4, 6, 0)],
            [BrokerData("DefaultCluster", "broker-a", {1: "10.0.0.6:10911", 0: "10.0.0.5:10911"})],
        )

    def test_topic_route_exact(self) -> None:
        """The route body is doc/wire.md §2's JSON with quoted broker-id keys and sorted keys."""
        self.assertEqual(
            bodies.encode_topic_route(self.route()),
            b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.5:10911","1":"10.0.0.6:10911"},'
            b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
            b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}',
        )

    def test_topic_route_order_conf(self) -> None:
        """orderTopicConf appears only when set."""
        route = self.route()
        route.order_topic_conf = "broker-a:4"
        self.assertEqual(json.loads(bodies.encode_topic_route(route))["orderTopicConf"], "broker-a:4")

    def test_non_ascii_escaped(self) -> None:
        """Non-ASCII text is \\u-escaped, as fastjson BrowserCompatible does."""
        self.assertEqual(bodies.encode_topic_list(["thé"]), b'{"topicList":["th\\u00e9"]}')

    def test_cluster_info(self) -> None:
        """ClusterInfo has brokerAddrTable and clusterAddrTable with sorted names."""
        body = bodies.encode_cluster_info(
            {"broker-a": BrokerData("C", "broker-a", {0: "a:1"})}, {"C": {"broker-b", "broker-a"}}
        )
        self.assertEqual(
            body,
            b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"a:1"},"brokerName":"broker-a","cluster":"C"}},'
            b'"clusterAddrTable":{"C":["broker-a","broker-b"]}}',
        )

    def test_topic_list_and_kv_table(self) -> None:
        """TopicList omits brokerAddr unless given; KVTable wraps its table."""
        self.assertEqual(bodies.encode_topic_list(["A"]), b'{"topicList":["A"]}')
        self.assertEqual(bodies.encode_topic_list([], "a:1"), b'{"brokerAddr":"a:1","topicList":[]}')
        self.assertEqual(bodies.encode_kv_table({"T": "broker-a:4"}), b'{"table":{"T":"broker-a:4"}}')

    def test_data_version_round_trip(self) -> None:
        """DataVersion encodes as counter/timestamp and decodes back."""
        body = bodies.encode_data_version(DataVersion(3, 1700000000000))
        self.assertEqual(body, b'{"counter":3,"timestamp":1700000000000}')
        self.assertEqual(bodies.decode_data_version(body), DataVersion(3, 1700000000000))


JAVA_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"timestamp":1700000000000},'
    b'"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
    b'"topicName":"T","topicSysFlag":0,"writeQueueNums":4},'
    b'"TBW102":{"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
    b'"topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8}}}}'
)


class RegisterBodyTests(SynchronousTestCase):
    def test_java_json(self) -> None:
        """The JSON a Java broker sends decodes into topic configs and the data version."""
        body = bodies.decode_register_body(JAVA_BODY)
        self.assertEqual(body.data_version, DataVersion(3, 1700000000000))
        self.assertEqual(body.topic_configs["TBW102"], TopicConfig("TBW102", 8, 8, 7, topic_sys_flag=0))
        self.assertEqual(body.filter_servers, [])

    def test_unquoted_keys(self) -> None:
        """A body with fastjson's bare numeric keys in some map still decodes."""
        raw = JAVA_BODY.replace(b'"filterServerList":[]', b'"filterServerList":[],"extra":{0:"x",1:"y"}')
        self.assertEqual(bodies.decode_register_body(raw).data_version.counter, 3)

    def test_empty_body(self) -> None:
        """An empty body is a registration with no topics at version 0."""
        self.assertEqual(bodies.decode_register_body(b""), RegisterBrokerBody())

    def test_compressed_java_layout(self) -> None:
        """The compressed form (zlib of int32-length-prefixed parts) decodes, built here byte by byte."""

        def part(data: bytes) -> bytes:
            return struct.pack(">i", len(data)) + data

        raw = part(b'{"counter":5,"timestamp":77}') + struct.pack(">i", 2)
        raw += part(b"T 4 4 6 SINGLE_TAG") + part(b"TBW102 8 8 7 SINGLE_TAG") + part(b'["1.2.3.4:30000"]')
        body = bodies.decode_register_body(zlib.compress(raw, 9), compressed=True)
        self.assertEqual(body.data_version, DataVersion(5, 77))
        self.assertEqual(body.topic_configs, {"T": TopicConfig("T", 4, 4, 6), "TBW102": TopicConfig("TBW102", 8, 8, 7)})
        self.assertEqual(body.filter_servers, ["1.2.3.4:30000"])

    def test_encode_round_trip(self) -> None:
        """encode_register_body output decodes to the same body, in both forms."""
        original = RegisterBrokerBody(DataVersion(2, 9), {"T": TopicConfig("T", 4, 4, 6)}, ["f:1"])
        for compressed in (False, True):
            encoded = bodies.encode_register_body(original, compressed)
            self.assertEqual(bodies.decode_register_body(encoded, compressed), original)

    def test_compressed_truncated(self) -> None:
        """A truncated compressed body raises BodyError."""
        raw = struct.pack(">i", 100) + b"{}"
        self.assertRaises(BodyError, bodies.decode_register_body, zlib.compress(raw), True)

    def test_compressed_not_zlib(self) -> None:
        """A body flagged compressed that is not zlib raises BodyError."""
        self.assertRaises(BodyError, bodies.decode_register_body, JAVA_BODY, True)

    def test_bad_types(self) -> None:
        """Non-numeric queue counts and non-object tables raise BodyError."""
        self.assertRaises(BodyError, bodies.decode_register_body, JAVA_BODY.replace(b'"readQueueNums":4', b'"readQueueNums":"x"'))
        self.assertRaises(BodyError, bodies.decode_register_body, b'{"topicConfigSerializeWrapper":[]}')
        self.assertRaises(BodyError, bodies.decode_register_body, b"[]")
