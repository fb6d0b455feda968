"""Timer messages through the gRPC endpoint: a delivery timestamp becomes ``TIMER_DELIVER_MS``, the
message comes when due with message type DELAY and its timestamp, also when a 4.x producer sent it."""

from __future__ import annotations

import time

from twisted.internet import reactor

from rocketpy.client import Producer, new_message
from rocketpy.common.message import MessageConst
from rocketpy.grpc.convert import timestamp
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from tests.grpc.test_endpoint import GrpcCalls


class GrpcTimerTests(GrpcCalls):
    async def test_delivery_timestamp(self) -> None:
        """DELAY with a delivery timestamp 1.5 s ahead: not received before it, received after with
        DELAY and the timestamp; a 4.x TIMER_DELIVER_MS message likewise; more than a day ahead:
        ILLEGAL_DELIVERY_TIME."""
        await self._start()
        await self._settings(pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER,
                                         subscription=pb.Subscription(group=pb.Resource(name="GT"))))
        now_ms = int(time.time() * 1000)
        deliver_ms = now_ms + 1500
        msg = self._message("TT", b"timed")
        msg.system_properties.message_type = pb.MessageType.DELAY
        msg.system_properties.delivery_timestamp.CopyFrom(timestamp(deliver_ms))
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[msg]))
        self.assertEqual(sent.status.code, pb.Code.OK, sent)
        producer = Producer("PGT", self.cluster.namesrv_addr, reactor)
        await producer.start()
        self.addCleanup(producer.shutdown)
        four = new_message("TT", b"four", tags="TagB")
        four.properties[MessageConst.TIMER_DELIVER_MS] = str(deliver_ms)
        await producer.send(four)

        far = self._message("TT", b"far")
        far.system_properties.delivery_timestamp.CopyFrom(timestamp(now_ms + 86_400_000 + 60_000))
        refused = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[far]))
        self.assertEqual(refused.status.code, pb.Code.ILLEGAL_DELIVERY_TIME)
        self.assertIn("max is 86400000", refused.status.message)

        # rocketmq-python-client 5.1.2 puts milliseconds in Timestamp.seconds: read as milliseconds
        python5 = self._message("TT", b"python5")
        python5.system_properties.delivery_timestamp.seconds = deliver_ms
        sent5 = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[python5]))
        self.assertEqual(sent5.status.code, pb.Code.OK, sent5)

        received: dict[bytes, pb.Message] = {}
        while len(received) < 3:
            stream = await self._receive("GT", "TT")
            arrived_ms = int(time.time() * 1000)
            for response in stream:
                if response.HasField("message"):
                    received[response.message.body] = response.message
                    self.assertGreaterEqual(arrived_ms, deliver_ms)
        for body in (b"timed", b"four", b"python5"):
            sysp = received[body].system_properties
            self.assertEqual(sysp.message_type, pb.MessageType.DELAY)
            self.assertEqual(sysp.delivery_timestamp.ToMilliseconds(), deliver_ms)
            self.assertNotIn(MessageConst.TIMER_OUT_MS, received[body].user_properties)
        self.assertEqual(received[b"timed"].system_properties.message_id, sent.entries[0].message_id)
