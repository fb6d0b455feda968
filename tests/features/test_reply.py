"""Request/reply end to end: a rocketpy requester, a push consumer replying with another client,
the broker pushing the reply back (SEND_REPLY_MESSAGE_V2 → PUSH_REPLY_MESSAGE_TO_CLIENT)."""

from __future__ import annotations

from twisted.internet import reactor

from rocketpy.client import (
    ConsumeFromWhere, Message, MessageExt, MQClientError, Producer, RequestTimeoutError, create_reply_message,
)
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult
from rocketpy.common.message import MessageConst
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.features.test_features import FeatureTestCase, until

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


class RequestReplyTests(FeatureTestCase):
    async def test_request_gets_reply(self) -> None:
        """Producer.request fires with the reply a consumer created with create_reply_message; the reply
        carries the request's correlation id, came on the reply topic and is also stored there."""
        cluster = await self.cluster_with()
        requester = await self.producer(cluster)
        await requester.send(Message("Req", b"warm-up"))  # the topic exists before the consumer starts
        await cluster.wait_for_route("Req")
        replier = Producer("REPLIER", cluster.namesrv_addr, reactor)
        await replier.start()
        self.addCleanup(replier.shutdown)
        answered: list[str] = []

        async def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            for m in msgs:
                if MessageConst.CORRELATION_ID in m.properties:
                    result = await replier.send(create_reply_message(m, b"re:" + m.body))
                    answered.append(result.msg_id)
            return ConsumeResult.CONSUME_SUCCESS

        await self.push(cluster, listener, "Req", group="RESPONDER",
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        reply = await requester.request(Message("Req", b"ping"), timeout=15)
        self.assertEqual((reply.topic, reply.body), (REPLY_TOPIC, b"re:ping"))
        props = reply.properties
        self.assertEqual(props[MessageConst.MESSAGE_TYPE], "reply")
        self.assertEqual(props[MessageConst.REPLY_TO_CLIENT], requester.instance.client_id)
        self.assertEqual(props[MessageConst.MESSAGE_TTL], "15000")
        for key in (MessageConst.CORRELATION_ID, MessageConst.PUSH_REPLY_TIME, MessageConst.REPLY_MESSAGE_ARRIVE_TIME):
            self.assertTrue(props.get(key), key)
        second = await requester.request(Message("Req", b"again"), timeout=15)
        self.assertEqual(second.body, b"re:again")
        self.assertNotEqual(second.properties[MessageConst.CORRELATION_ID], props[MessageConst.CORRELATION_ID])
        await until(lambda: len(answered) == 2, "the replier's second send answered")  # after the push
        self.assertEqual(cluster.brokers["broker-a"].store.get_max_offset_in_queue(REPLY_TOPIC, 0), 2)

    async def test_timeout(self) -> None:
        """No one replies: RequestTimeoutError with RocketMQ's code and text, after the timeout."""
        cluster = await self.cluster_with()
        requester = await self.producer(cluster)
        started = reactor.seconds()
        with self.assertRaises(RequestTimeoutError) as caught:
            await requester.request(Message("Silent", b"anyone?"), timeout=0.5)
        self.assertGreaterEqual(reactor.seconds() - started, 0.45)
        self.assertEqual(caught.exception.code, 10006)
        self.assertEqual(caught.exception.message,
                         "send request message to <Silent> OK, but wait reply message timeout, 500 ms.")
        self.assertEqual(requester.instance.reply_futures._waiting, {})

    async def test_reply_to_unknown_client(self) -> None:
        """A reply whose requester has no connection: SYSTEM_ERROR naming it (the reply is still stored)."""
        cluster = await self.cluster_with()
        fields = {"producerGroup": "PG", "topic": REPLY_TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                  "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0",
                  "properties": "MSG_TYPE\x01reply\x02REPLY_TO_CLIENT\x01nobody@1\x02CORRELATION_ID\x01c1"}
        addr = cluster.brokers["broker-a"].config.advertised_address
        response = await cluster.admin.invoke_sync(
            addr, RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE, fields, b"late"), 5)
        self.assertEqual((response.code, response.remark),
                         (ResponseCode.SYSTEM_ERROR, "push reply message fail, channel of <nobody@1> not found."))
        self.assertEqual(cluster.brokers["broker-a"].store.get_max_offset_in_queue(REPLY_TOPIC, 0), 1)

    def test_create_reply_needs_cluster(self) -> None:
        """A message that did not come from a broker has no CLUSTER: 10007."""
        with self.assertRaises(MQClientError) as caught:
            create_reply_message(Message("T", b"x"), b"y")
        self.assertEqual(caught.exception.code, 10007)
