"""The admin bodies as Apache RocketMQ 4.x writes them (fastjson: object keys, bare numeric
keys) parse into the AdminClient's dataclasses; the CLI's time argument and table layout."""

from __future__ import annotations

import time

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.admin.render import parse_time, table
from rocketpy.client import admintypes


class JavaBodyTests(SynchronousTestCase):
    def test_cluster_info_with_bare_numeric_keys(self) -> None:
        """Java's name server writes ``brokerAddrs`` keys unquoted even in 4.9.4."""
        body = (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},'
                b'"brokerName":"broker-a","cluster":"C1"}},"clusterAddrTable":{"C1":["broker-a"]}}')
        info = admintypes.parse_cluster_info(body)
        self.assertEqual(info.brokers["broker-a"].broker_addrs, {0: "10.0.0.5:10911", 1: "10.0.0.6:10911"})
        self.assertEqual(info.addresses("C1"), ["10.0.0.5:10911"])
        self.assertEqual(info.addresses("C1", masters_only=False), ["10.0.0.5:10911", "10.0.0.6:10911"])

    def test_consume_stats_with_object_keys(self) -> None:
        """GET_CONSUME_STATS: MessageQueue objects as map keys, lag per queue and in total."""
        body = (b'{"consumeTps":1.5,"offsetTable":{'
                b'{"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":7},'
                b'{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0}}}')
        stats = admintypes.consume_stats_from_json("G", admintypes.loads(body, "consume stats"))
        self.assertEqual([(q.queue_id, q.broker_offset, q.consumer_offset, q.lag, q.last_timestamp)
                          for q in stats.queues], [(0, 3, 3, 0, 0), (1, 9, 4, 5, 7)])
        self.assertEqual((stats.consume_tps, stats.total_lag), (1.5, 5))

    def test_broker_stats_and_producer_table(self) -> None:
        """VIEW_BROKER_STATS_DATA's BrokerStatsData (Java writes ``tps`` and ``avgpt`` as doubles) and
        GET_ALL_PRODUCER_INFO's ProducerInfo (``remoteIP`` is the client address)."""
        item = b'{"avgpt":1.25,"sum":120,"tps":2.0}'
        stats = admintypes.parse_broker_stats(b'{"statsDay":' + item + b',"statsHour":' + item
                                              + b',"statsMinute":{"avgpt":0.0,"sum":6,"tps":0.1}}')
        self.assertEqual((stats.minute.sum, stats.minute.tps, stats.hour.avgpt, stats.day.sum), (6, 0.1, 1.25, 120))
        self.assertRaises(admintypes.BodyError, admintypes.parse_broker_stats, b'{"statsMinute":{"sum":"x"}}')
        table = admintypes.parse_producer_table(
            b'{"data":{"PG":[{"clientId":"c1","language":"CPP","lastUpdateTimestamp":1,"remoteIP":"10.0.0.9:5000",'
            b'"version":401}],"Idle":[]}}')
        self.assertEqual(table, {"Idle": [], "PG": [admintypes.Connection("c1", "10.0.0.9:5000", "CPP", 401)]})

    def test_broker_consume_stats(self) -> None:
        body = (b'{"brokerAddr":"10.0.0.5:10911","consumeStatsList":[{"G1":[{"consumeTps":0.0,"offsetTable":'
                b'{{"brokerName":"b","queueId":0,"topic":"T"}:'
                b'{"brokerOffset":5,"consumerOffset":2,"lastTimestamp":0}}}]},'
                b'{"G2":[]}],"totalDiff":3}')
        stats, total = admintypes.parse_broker_consume_stats(body)
        self.assertEqual([(s.group, s.total_lag) for s in stats], [("G1", 3)])
        self.assertEqual(total, 3)

    def test_reset_table_and_malformed_bodies(self) -> None:
        body = b'{"offsetTable":{{"brokerName":"b","queueId":2,"topic":"T"}:17}}'
        self.assertEqual(admintypes.parse_reset_table(body), {("b", 2): 17})
        for parse in (admintypes.parse_topic_stats, admintypes.parse_cluster_info, admintypes.parse_reset_table):
            self.assertRaises(admintypes.BodyError, parse, b"[1, 2")
        self.assertRaises(admintypes.BodyError, admintypes.parse_topic_stats,
                          b'{"offsetTable":{{"queueId":0}:{"maxOffset":1}}}')


class RenderTests(SynchronousTestCase):
    def test_parse_time(self) -> None:
        """mqadmin's forms: now, milliseconds, local yyyy-MM-dd#HH:mm:ss:SSS; anything else is refused."""
        self.assertEqual(parse_time("now", 12.5), 12500)
        self.assertEqual(parse_time("1700000000123", 0), 1700000000123)
        expected = int(time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))) * 1000 + 6
        self.assertEqual(parse_time("2026-01-02#03:04:05:006", 0), expected)
        self.assertEqual(parse_time("2026-01-02#03:04:05", 0), expected - 6)
        self.assertRaises(ValueError, parse_time, "yesterday", 0)

    def test_table_aligns_columns(self) -> None:
        self.assertEqual(table(("#A", "#Long header"), [("xyz", 1), ("q", 22)]),
                         "#A   #Long header\nxyz  1\nq    22")
