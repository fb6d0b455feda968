"""``/metrics`` of a real broker on loopback, fetched over HTTP with ``twisted.web.client.Agent``."""

from __future__ import annotations

import json
import zlib
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, readBody
from twisted.web.resource import Resource

from rocketpy.client import Message, PullConsumer, PullStatus, new_message
from rocketpy.client.transaction import LocalTransactionState, TransactionProducer
from rocketpy.common import fastjson
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.web.service import HttpListenError, HttpService, http_service
from tests.client.test_integration import LoopbackCluster

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: rocketmq-exporter's families that Grafana dashboard 10477 plots, with their labels.
EXPORTER = {
    "rocketmq_broker_tps": {"cluster", "brokerIP", "broker"},
    "rocketmq_broker_qps": {"cluster", "brokerIP", "broker"},
    "rocketmq_producer_tps": {"cluster", "broker", "topic"},
    "rocketmq_producer_message_size": {"cluster", "broker", "topic"},
    "rocketmq_producer_offset": {"cluster", "broker", "topic"},
    "rocketmq_consumer_tps": {"cluster", "broker", "topic", "group"},
    "rocketmq_consumer_message_size": {"cluster", "broker", "topic", "group"},
    "rocketmq_consumer_offset": {"cluster", "broker", "topic", "group"},
    "rocketmq_group_get_latency_by_storetime": {"cluster", "broker", "topic", "group"},
    "rocketmq_message_accumulation": {"cluster", "broker", "topic", "group"},
}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} samples of {name} with {labels}")
    return found[0]


class Undecided:
    """A transaction listener that never decides."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW


class BrokerHttpTestCase(TestCase):
    """A broker with its HTTP endpoint, and the requests the tests make."""

    timeout = 60

    async def start(self, **settings: Any) -> tuple[LoopbackCluster, Any, str]:
        """A name server, broker ``bm`` and its HTTP endpoint on port 0."""
        cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        await cluster.add_broker("bm", **settings)
        broker = cluster.brokers["bm"]
        http = http_service(reactor, "tcp:0:interface=127.0.0.1", broker)  # as twistd: pages formatted in a thread
        http.startService()
        self.addCleanup(http.stopService)
        await http.when_started()
        assert http.listening_port is not None
        return cluster, broker, f"http://127.0.0.1:{http.listening_port.getHost().port}"  # type: ignore[attr-defined]

    async def get(self, url: str, **headers: str) -> tuple[int, dict[str, list[str]], bytes]:
        from twisted.web.http_headers import Headers

        response = await Agent(reactor).request(b"GET", url.encode(), Headers({k: [v] for k, v in headers.items()}))
        body = await readBody(response)
        return response.code, {k.decode().lower(): [v.decode() for v in vs]
                               for k, vs in response.headers.getAllRawHeaders()}, body

    async def scrape(self, base: str) -> Samples:
        code, headers, body = await self.get(base + "/metrics")
        self.assertEqual(code, 200)
        self.assertTrue(headers["content-type"][0].startswith("text/plain; version=0.0.4"))
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(body.decode()) for s in family.samples}

    async def producer_and_consumer(self, cluster: LoopbackCluster) -> tuple[Any, Any]:
        from rocketpy.client import Producer

        producer = Producer("PG", cluster.namesrv_addr, reactor)
        await producer.start()
        self.addCleanup(producer.shutdown)
        consumer = PullConsumer("GA", cluster.namesrv_addr, reactor)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        return producer, consumer


class MetricsTests(BrokerHttpTestCase):
    async def test_lag_per_group_and_topic(self) -> None:
        """Produced, not consumed: each group's lag on each topic it committed on is the messages
        past its offset; the exporter's families are there with its labels, and the dashboard's
        accumulation expression (producer offset − consumer offset) agrees."""
        cluster, broker, base = await self.start()
        producer, group_a = await self.producer_and_consumer(cluster)
        first = await producer.send(Message("MetricsA", b"a0"))
        for i in range(1, 6):
            await producer.send_to_queue(Message("MetricsA", b"a%d" % i), first.queue)
        on_b = await producer.send(Message("MetricsB", b"b0"))
        for i in range(1, 3):
            await producer.send_to_queue(Message("MetricsB", b"b%d" % i), on_b.queue)
        group_b = PullConsumer("GB", cluster.namesrv_addr, reactor)
        await group_b.start()
        self.addCleanup(group_b.shutdown)
        await group_a.update_consumer_offset(first.queue, 2)
        await group_b.update_consumer_offset(on_b.queue, 1)
        await deferLater(reactor, 0.05, lambda: None)  # the unconsumed messages wait ≥ 50 ms

        samples = await self.scrape(base)
        where = {"cluster": "DefaultCluster", "broker": "bm"}
        lag = {(t, g): value(samples, "rocketmq_message_accumulation", topic=t, group=g, **where)
               for t, g in (("MetricsA", "GA"), ("MetricsB", "GB"))}
        self.assertEqual(lag, {("MetricsA", "GA"): 4, ("MetricsB", "GB"): 2})
        self.assertFalse([ls for (n, ls) in samples if n == "rocketmq_message_accumulation"
                          and {("topic", "MetricsA"), ("group", "GB")} <= ls])
        self.assertEqual(value(samples, "rocketmq_producer_offset", topic="MetricsA"), 6)
        self.assertEqual(value(samples, "rocketmq_consumer_offset", topic="MetricsA", group="GA"), 2)
        dashboard = (value(samples, "rocketmq_producer_offset", topic="MetricsB")
                     - value(samples, "rocketmq_consumer_offset", topic="MetricsB", group="GB"))
        self.assertEqual(dashboard, 2)
        self.assertGreaterEqual(value(samples, "rocketmq_group_get_latency_by_storetime",
                                      topic="MetricsA", group="GA"), 50)
        self.assertGreater(value(samples, "rocketmq_producer_tps", topic="MetricsA"), 0)
        self.assertGreater(value(samples, "rocketmq_producer_message_size", topic="MetricsA"), 0)
        self.assertGreater(value(samples, "rocketmq_broker_tps", brokerIP=broker.config.advertised_address), 0)
        for name, labels in EXPORTER.items():
            self.assertIn(labels, [{k for k, _ in ls} for (n, ls) in samples if n == name], name)

    async def test_own_metrics_move(self) -> None:
        """rocketpy_ families: put and flush latency counts grow with sends (SYNC_FLUSH), pulls
        show as consumer TPS, connections are counted by client language."""
        cluster, broker, base = await self.start(flush_disk_type="SYNC_FLUSH")
        producer, consumer = await self.producer_and_consumer(cluster)
        sent = await producer.send(Message("MetricsC", b"c0"))
        before = await self.scrape(base)
        for i in range(1, 4):
            await producer.send_to_queue(Message("MetricsC", b"c%d" % i), sent.queue)
        await producer.send(new_message("MetricsD", b"in 10 s", delay_level=3))
        timed = new_message("MetricsD", b"in an hour")
        timed.properties["TIMER_DELAY_SEC"] = "3600"
        await producer.send(timed)
        transactions = TransactionProducer("TPG", cluster.namesrv_addr, reactor, listener=Undecided())
        await transactions.start()
        self.addCleanup(transactions.shutdown)
        await transactions.send_message_in_transaction(Message("MetricsE", b"undecided"))
        pulled = await consumer.pull(sent.queue, "*", 0)
        self.assertEqual((pulled.status, len(pulled.messages)), (PullStatus.FOUND, 4))
        self.assertEqual((await consumer.pull(sent.queue, "*", 4)).status, PullStatus.NO_NEW_MSG)
        for client in (producer, consumer, transactions):
            await client.instance.send_heartbeat()
        after = await self.scrape(base)
        self.assertEqual(value(after, "rocketpy_connections", language="PYTHON"), 3)
        for name in ("rocketpy_put_latency_seconds_count", "rocketpy_flush_latency_seconds_count"):
            self.assertGreaterEqual(value(after, name) - value(before, name), 3, name)
        self.assertGreater(value(after, "rocketmq_consumer_tps", topic="MetricsC", group="GA"), 0)
        request = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "GA", "topic": "MetricsC"})
        stats = fastjson.loads((await cluster.admin.invoke_sync(broker.config.advertised_address, request, 5)).body)
        self.assertGreater(stats["consumeTps"], 0)  # mqadmin consumerProgress: the same pull counts
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        response = await cluster.admin.invoke_sync(broker.config.advertised_address, request, 5)
        table = json.loads(response.body)["table"]
        for key in ("putTps", "getTransferedTps"):  # mqadmin clusterList's InTPS and OutTPS
            self.assertTrue(all(float(tps) > 0 for tps in table[key].split()), table[key])
        self.assertGreater(value(after, "rocketmq_broker_qps"), 0)
        runtime = {n[len("rocketmq_brokeruntime_"):]: v for (n, _), v in after.items()
                   if n.startswith("rocketmq_brokeruntime_")}
        self.assertGreater(runtime["getfound_tps10"], 0)
        self.assertGreater(runtime["getmiss_tps10"], 0)
        self.assertEqual(runtime["gettotal_tps10"], runtime["getfound_tps10"] + runtime["getmiss_tps10"])
        self.assertEqual(runtime["put_message_average_size"],
                         runtime["put_message_size_total"] / runtime["putmessage_times_total"])
        self.assertEqual(runtime["send_threadpoolqueue_headwait_timemills"], 0)
        self.assertEqual(value(after, "rocketpy_put_refused_total", reason="OS_PAGECACHE_BUSY"), 0)
        for name in ("rocketpy_page_cache_busy_total", "rocketpy_held_pulls"):
            self.assertEqual(value(after, name), 0, name)
        self.assertTrue(0 <= value(after, "rocketpy_disk_used_ratio") <= 1)  # 0 until the first check (10 s)
        self.assertEqual(value(after, "rocketpy_channels"), 3)  # producer, consumer, transaction producer
        self.assertEqual(value(after, "rocketpy_commitlog_bytes"), broker.store.max_physical_offset)
        delayed = {ls: v for (n, ls), v in after.items() if n == "rocketpy_delay_backlog"}
        self.assertEqual(len(delayed), 18)
        self.assertEqual(value(after, "rocketpy_delay_backlog", level="3"), 1)
        self.assertEqual(sum(delayed.values()), 1)
        self.assertEqual(value(after, "rocketpy_transaction_half_backlog"), 1)
        self.assertEqual(value(after, "rocketpy_timer_backlog"), 1)
        self.assertEqual((table["timerCongestNum"], table["timerOffsetBehind"], table["timerReadBehind"]), ("1", "0", "0"))


class NegotiationTests(BrokerHttpTestCase):
    async def test_gzip_and_openmetrics(self) -> None:
        """The page is gzipped for a scraper that accepts it, and in OpenMetrics for one asking for it;
        paths other than /metrics are 404."""
        _cluster, _broker, base = await self.start()
        code, headers, body = await self.get(base + "/metrics", **{"Accept-Encoding": "gzip"})
        self.assertEqual((code, headers["content-encoding"]), (200, ["gzip"]))
        self.assertIn(b"rocketmq_broker_tps", zlib.decompress(body, 16 + zlib.MAX_WBITS))
        code, headers, body = await self.get(base + "/metrics", Accept="application/openmetrics-text; version=1.0.0")
        self.assertTrue(headers["content-type"][0].startswith("application/openmetrics-text"))
        self.assertTrue(body.endswith(b"# EOF\n"))
        self.assertEqual((await self.get(base + "/nothing"))[0], 404)


class HttpServiceTests(TestCase):
    async def test_stop_closes_the_port(self) -> None:
        """Once stopped, the endpoint refuses connections; a taken port fails the start."""
        http = HttpService(reactor, "tcp:0:interface=127.0.0.1", Resource())
        http.startService()
        self.addCleanup(http.stopService)  # a second stop does nothing
        await http.when_started()
        assert http.listening_port is not None
        port = http.listening_port.getHost().port  # type: ignore[attr-defined]
        taken = HttpService(reactor, f"tcp:{port}:interface=127.0.0.1", Resource())
        with capturedLogs() as events:
            with self.assertRaises(HttpListenError) as raised:
                await taken.startService()
        self.assertIn(f"cannot serve HTTP on tcp:{port}:interface=127.0.0.1", str(raised.exception))
        self.assertIn("--http none", str(raised.exception))
        self.assertEqual([e["log_level"] for e in events], [LogLevel.critical])
        await taken.stopService()
        await http.stopService()
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port)
        with self.assertRaises(ConnectionRefusedError):
            await endpoint.connect(Factory.forProtocol(Protocol))
