"""Message trace end to end: a traced producer and push consumer, traces read back from the trace topic."""

from __future__ import annotations

import io
import json

from twisted.internet import reactor
from twisted.logger import capturedLogs

from rocketpy.admin.cli import execute
from rocketpy.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer, PullStatus, new_message
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult, SendStatus
from rocketpy.client.trace import decode_traces
from rocketpy.common.message import decode_records
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.features.test_features import FeatureTestCase, until

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


class TraceTests(FeatureTestCase):
    async def traces(self, cluster: object) -> list[dict[str, str]]:
        c = PullConsumer("TRACE_READER", cluster.namesrv_addr, reactor)  # type: ignore[attr-defined]
        await c.start()
        self.addCleanup(c.shutdown)
        records: list[dict[str, str]] = []
        for mq in await c.fetch_subscribe_queues(TRACE_TOPIC):
            result = await c.pull(mq, "*", 0, 32)
            if result.status is PullStatus.FOUND:
                for m in result.messages:
                    records += decode_traces(m.body.decode())
        return records

    async def test_send_and_consume_traced(self) -> None:
        """Pub, SubBefore and SubAfter records in RocketMQ's format reach the trace topic, and a trace
        message is found by querying the trace topic by the traced message id."""
        cluster = await self.cluster_with(trace_topic_enable=True)
        self.assertIsNotNone(cluster.brokers["broker-a"].topics.select_topic_config(TRACE_TOPIC))
        producer = Producer("TPG", cluster.namesrv_addr, reactor, enable_trace=True)
        await producer.start()
        sent = await producer.send(new_message("Traced", b"hello", tags="TagA", keys="order-1"))
        await cluster.wait_for_route("Traced")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        consumer = await self.push(cluster, listener, "Traced", group="TCG", enable_trace=True,
                                   consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        await until(lambda: got == [b"hello"], "message consumed")
        await producer.shutdown()  # both flush their pending traces
        await consumer.shutdown()
        await cluster.wait_for_route(TRACE_TOPIC)
        records: list[dict[str, str]] = []
        for _ in range(100):
            records = await self.traces(cluster)
            if len(records) >= 3:
                break
        by_type = {r["traceType"]: r for r in records}
        pub, before, after = by_type["Pub"], by_type["SubBefore"], by_type["SubAfter"]
        self.assertEqual(
            (pub["groupName"], pub["topic"], pub["msgId"], pub["tags"], pub["keys"], pub["bodyLength"],
             pub["msgType"], pub["offsetMsgId"], pub["success"], pub["regionId"]),
            ("TPG", "Traced", sent.msg_id, "TagA", "order-1", "5", "0", sent.offset_msg_id, "true", "DefaultRegion"),
        )
        self.assertEqual(pub["storeHost"], cluster.brokers["broker-a"].config.advertised_address)
        self.assertEqual((before["groupName"], before["msgId"], before["retryTimes"], before["keys"]),
                         ("TCG", sent.msg_id, "0", "order-1"))
        self.assertEqual((after["requestId"], after["msgId"], after["success"], after["contextCode"], after["groupName"]),
                         (before["requestId"], sent.msg_id, "true", "0", "TCG"))
        query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": TRACE_TOPIC, "key": sent.msg_id, "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(2**62)})
        response = await cluster.admin.invoke_sync(cluster.brokers["broker-a"].config.advertised_address, query, 5)
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        found = [r for m in decode_records(response.body) for r in decode_traces(m.body.decode())]
        self.assertIn(sent.msg_id, {r["msgId"] for r in found})
        out, err = io.StringIO(), io.StringIO()  # rocketpy-admin queryMsgTraceById
        status = await execute(reactor, ["queryMsgTraceById", "-i", sent.msg_id, "-n", cluster.namesrv_addr,
                                         "--json"], out, err)
        self.assertEqual((status, err.getvalue()), (0, ""))
        shown = json.loads(out.getvalue())
        self.assertEqual(sorted((r["traceType"], r["groupName"], r["success"]) for r in shown),
                         [("Pub", "TPG", "true"), ("SubAfter", "TCG", "true")])

    async def test_trace_failure_never_fails_a_send(self) -> None:
        """With no trace topic (and no auto-creation) sends still succeed; lost traces are only logged."""
        cluster = await self.cluster_with(auto_create_topic_enable=False)
        broker = cluster.brokers["broker-a"]
        fields = {"topic": "Plain", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                  "perm": "6", "topicFilterType": "SINGLE_TAG", "order": "false"}
        created = await cluster.admin.invoke_sync(
            broker.config.advertised_address, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields), 5)
        self.assertEqual(created.code, ResponseCode.SUCCESS)
        await cluster.wait_for_route("Plain")
        producer = Producer("TPG2", cluster.namesrv_addr, reactor, enable_trace=True)
        await producer.start()
        result = await producer.send(Message("Plain", b"x"))
        self.assertEqual(result.status, SendStatus.SEND_OK)
        with capturedLogs() as logs:
            await producer.shutdown()
        assert producer.tracer is not None
        self.assertEqual(producer.tracer.sent, 0)
        lost = [e for e in logs if e.get("log_format") == "{n} trace records to {topic} lost: {error}"]
        self.assertEqual([(e["n"], e["topic"]) for e in lost], [(1, "RMQ_SYS_TRACE_TOPIC")])
