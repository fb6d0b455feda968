"""CONSUME_MESSAGE_DIRECTLY (309) answered by the client: the listener on the forwarded record,
its outcome as Java's ConsumeMessageDirectlyResult (fake cluster, timers on a Clock)."""

from __future__ import annotations

import json
from typing import Any, cast

from twisted.internet.defer import Deferred
from zope.interface.verify import verifyObject

from rocketpy.client.process import ConsumeContext
from rocketpy.client.push import PushConsumer
from rocketpy.client.results import ConsumeResult
from rocketpy.common.compression import compressor
from rocketpy.common.message import MessageExt, encode_record
from rocketpy.common.route import MessageQueue
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

from .fakes import FakeRemotingClient
from .test_push import PushTestCase


def _record(body: bytes, topic: str = "Other") -> bytes:
    return bytes(encode_record(MessageExt(topic=topic, body=body, queue_id=3, born_host=("10.0.0.5", 1),
                                          store_host=("10.0.0.1", 10911))))


class ConsumeDirectlyTests(PushTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.queues: list[MessageQueue] = []

    def listener(self, msgs: list[MessageExt], context: ConsumeContext) -> Any:
        self.queues.append(context.queue)
        return super().listener(msgs, context)

    def direct(self, c: PushConsumer, body: bytes, group: str = "CG") -> RemotingCommand:
        processor = cast(FakeRemotingClient, c.instance.remoting).processors[RequestCode.CONSUME_MESSAGE_DIRECTLY]
        verifyObject(IRequestProcessor, processor)
        ext = {"consumerGroup": group, "clientId": "me", "msgId": "00", "brokerName": "broker-a"}
        request = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, body, language="JAVA")
        result = processor.process_request(None, request)
        response = self.successResultOf(result) if isinstance(result, Deferred) else result
        assert isinstance(response, RemotingCommand)
        return response

    def outcome(self, c: PushConsumer, answer: Any) -> dict[str, Any]:
        self.result = answer
        response = self.direct(c, _record(b"x"))
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        return json.loads(response.body)

    def test_listener_outcomes(self) -> None:
        """Success, later, a non-result and an exception, each as Java names them; the listener
        gets the decoded message (any topic: no subscription needed), the queue of its broker."""
        c = self.consumer()

        def boom() -> None:
            raise KeyError("nope")

        outcomes = [self.outcome(c, answer) for answer in
                    (ConsumeResult.CONSUME_SUCCESS, ConsumeResult.RECONSUME_LATER, "yes", boom)]
        self.assertEqual([o["consumeResult"] for o in outcomes],
                         ["CR_SUCCESS", "CR_LATER", "CR_RETURN_NULL", "CR_THROW_EXCEPTION"])
        self.assertEqual({(o["order"], o["autoCommit"]) for o in outcomes}, {(False, True)})
        self.assertEqual(outcomes[3]["remark"], "KeyError: 'nope'")
        self.assertEqual(self.received, [("Other", b"x", 0)] * 4)
        self.assertEqual({(q.topic, q.broker_name, q.queue_id) for q in self.queues}, {("Other", "broker-a", 3)})
        self.assertNotIn("remark", outcomes[0])

    def test_orderly_consumer_says_order(self) -> None:
        c = self.consumer(orderly=True)
        self.assertEqual(self.outcome(c, ConsumeResult.CONSUME_SUCCESS)["order"], True)

    def test_unknown_group_or_bad_record(self) -> None:
        c = self.consumer()
        response = self.direct(c, _record(b"x"), group="NOPE")
        self.assertEqual((response.code, response.remark),
                         (ResponseCode.SYSTEM_ERROR, "The Consumer Group <NOPE> not exist in this consumer"))
        response = self.direct(c, b"\x00\x00\x00\x09garbage")
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("bad message record", response.remark or "")
        self.assertEqual(self.received, [])

    def test_compressed_record_is_inflated(self) -> None:
        """A ZSTD-compressed record reaches the listener inflated (Java's MessageDecoder.decode); a corrupt
        compressed body is a SYSTEM_ERROR, never a traceback."""
        c = self.consumer()
        self.result = ConsumeResult.CONSUME_SUCCESS
        compress, flags = compressor("zstd")
        record = encode_record(MessageExt(topic="Other", body=compress(b"x" * 5000), queue_id=3, sys_flag=flags,
                                          born_host=("10.0.0.5", 1), store_host=("10.0.0.1", 10911)))
        self.assertEqual(self.direct(c, bytes(record)).code, ResponseCode.SUCCESS)
        self.assertEqual(self.received, [("Other", b"x" * 5000, 0)])
        junk = encode_record(MessageExt(topic="Other", body=b"junk", sys_flag=flags, born_host=("10.0.0.5", 1),
                                        store_host=("10.0.0.1", 10911)))
        response = self.direct(c, bytes(junk))
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("corrupt ZSTD body", response.remark or "")
