"""RecallMessage, PullMessage and the offset RPCs through generated stubs against a broker on loopback."""

from __future__ import annotations

import time
from typing import Any

from twisted.internet import reactor
from twisted.internet.task import deferLater

from rocketpy.broker.heartbeat import ConsumeType
from rocketpy.common.message import java_hash
from rocketpy.grpc.convert import timestamp
from rocketpy.grpc.recall import RecallHandle
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from tests.grpc.test_endpoint import CLIENT_ID, GrpcCalls

PRECISION_MS = 100


def _queue(topic: str, queue_id: int, broker: str = "broker-a") -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id, broker=pb.Broker(name=broker))


class GrpcRecallTests(GrpcCalls):
    async def _send(self, msg: pb.Message) -> Any:
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[msg]))
        self.assertEqual(sent.status.code, pb.Code.OK, sent)
        return sent.entries[0]

    async def _recall(self, topic: str, handle: str) -> Any:
        return await self._unary("RecallMessage", rpc.RecallMessageRequest(topic=pb.Resource(name=topic),
                                                                           recall_handle=handle))

    async def test_recalled_timer_message_is_never_delivered(self) -> None:
        """Two timer messages due at the same time, one recalled with the handle its send returned:
        only the other reaches the topic; recalling the delivered one, a bad handle, another topic's
        or broker's handle, and a handle whose time has passed are refused as the Java proxy does."""
        await self._start(timer_precision_ms=PRECISION_MS)
        deliver_ms = int(time.time() * 1000) + 1500
        entries = {}
        for body in (b"recalled", b"kept"):
            msg = self._message("TR", body)
            msg.system_properties.message_type = pb.MessageType.DELAY
            msg.system_properties.delivery_timestamp.CopyFrom(timestamp(deliver_ms))
            entries[body] = await self._send(msg)
        plain = await self._send(self._message("TN", b"plain"))
        self.assertEqual(plain.recall_handle, "")

        handle = RecallHandle.decode(entries[b"recalled"].recall_handle)
        self.assertEqual((handle.topic, handle.broker_name, handle.message_id),
                         ("TR", "broker-a", entries[b"recalled"].message_id))
        self.assertTrue(deliver_ms - PRECISION_MS < int(handle.timestamp) <= deliver_ms, handle)  # TIMER_OUT_MS + 1

        for topic, recall_handle, code, text in [
            ("TR", "not base64 at all!", pb.Code.INTERNAL_SERVER_ERROR, "recall handle is invalid"),
            ("TR", "", pb.Code.INTERNAL_SERVER_ERROR, "recall handle is invalid"),
            ("TN", entries[b"recalled"].recall_handle, pb.Code.INTERNAL_SERVER_ERROR, "recall failed, topic not match"),
            ("NoSuchTopic", entries[b"recalled"].recall_handle, pb.Code.INTERNAL_SERVER_ERROR,
             "recall failed, the topic[NoSuchTopic] not exist"),
            ("bad topic!", entries[b"recalled"].recall_handle, pb.Code.ILLEGAL_TOPIC, ""),
            ("TR", RecallHandle("TR", "broker-b", handle.timestamp, handle.message_id).encode(),
             pb.Code.INTERNAL_SERVER_ERROR, "recall failed, broker service not available"),
            ("TR", RecallHandle("TR", "broker-a", str(int(time.time() * 1000) - 1), handle.message_id).encode(),
             pb.Code.INTERNAL_SERVER_ERROR, "recall failed, timestamp invalid"),
        ]:
            refused = await self._recall(topic, recall_handle)
            self.assertEqual(refused.status.code, code, (topic, recall_handle, refused))
            self.assertIn(text, refused.status.message)

        # as Java: a handle naming no waiting timer message (here a plain one) stores a marker that cancels nothing
        unknown = await self._recall("TR", RecallHandle("TR", "broker-a", handle.timestamp, plain.message_id).encode())
        self.assertEqual((unknown.status.code, unknown.message_id), (pb.Code.OK, plain.message_id))

        recalled = await self._recall("TR", entries[b"recalled"].recall_handle.rstrip("="))  # padding optional
        self.assertEqual(recalled.status.code, pb.Code.OK, recalled)
        self.assertEqual(recalled.message_id, entries[b"recalled"].message_id)

        await self._start_group_read()
        received = await self._receive_all("GR", "TR", 1)
        self.assertEqual([m.body for m in received], [b"kept"])
        self.assertGreaterEqual(int(time.time() * 1000), deliver_ms)
        # both were due in one timer round: had the recall not cancelled it, it would be on the topic now
        self.assertEqual(self.broker.timer.cancelled, 1)
        total = 0
        for queue_id in range(8):
            end = await self._unary("QueryOffset", rpc.QueryOffsetRequest(
                message_queue=_queue("TR", queue_id), query_offset_policy=pb.QueryOffsetPolicy.END))
            total += end.offset
        self.assertEqual(total, 1)

        late = await self._recall("TR", entries[b"kept"].recall_handle)
        self.assertEqual(late.status.code, pb.Code.INTERNAL_SERVER_ERROR)
        self.assertEqual(late.status.message, "recall failed, timestamp invalid")

    async def _start_group_read(self) -> None:
        await self._settings(pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER,
                                         subscription=pb.Subscription(group=pb.Resource(name="GR"))))

    async def _receive_all(self, group: str, topic: str, count: int) -> list[pb.Message]:
        received: list[pb.Message] = []
        while len(received) < count:
            stream = await self._receive(group, topic)
            received.extend(r.message for r in stream if r.HasField("message"))
        return received


class GrpcPullTests(GrpcCalls):
    async def _pull(self, group: str, topic: str, queue_id: int, offset: int, expression: str = "*",
                    poll: int = 5, timeout: float | None = None, broker: str = "broker-a",
                    kind: Any = pb.FilterType.TAG) -> list[Any]:
        request = rpc.PullMessageRequest(group=pb.Resource(name=group), message_queue=_queue(topic, queue_id, broker),
                                         offset=offset, batch_size=32,
                                         filter_expression=pb.FilterExpression(type=kind, expression=expression))
        request.long_polling_timeout.seconds = poll
        return await self._call(lambda: list(self.stub.PullMessage(
            request, timeout=timeout or poll + 5, metadata=self.metadata)))

    def _parts(self, stream: list[Any]) -> tuple[Any, list[pb.Message], int | None]:
        """The status, the messages and the next offset, checking the order: status first, offset last."""
        self.assertTrue(stream[0].HasField("status"), stream)
        messages = [r.message for r in stream[1:] if r.HasField("message")]
        last = stream[-1]
        next_offset = last.next_offset if len(stream) > 1 and last.WhichOneof("content") == "next_offset" else None
        self.assertEqual(len(stream), 1 + len(messages) + (next_offset is not None), stream)
        return stream[0].status, messages, next_offset

    async def _offset(self, group: str, topic: str, queue_id: int) -> Any:
        return await self._unary("GetOffset", rpc.GetOffsetRequest(group=pb.Resource(name=group),
                                                                   message_queue=_queue(topic, queue_id)))

    async def test_pull_and_offsets(self) -> None:
        """Five messages on one queue: QueryOffset's three policies, a new group's offset 0, a pull of them
        all (status, messages, next offset), a TAG filter, an UpdateOffset the broker's offset table keeps
        and a pull that resumes there; a held pull answered by a message that arrives; an offset past the end."""
        await self._start(enable_property_filter=True)
        queue_id = abs(java_hash("grp")) % 8
        before_ms = int(time.time() * 1000) - 1000
        sent = []
        for i in range(5):
            msg = self._message("TP", b"m%d" % i, tag="TagB" if i % 2 else "TagA")
            msg.system_properties.message_type = pb.MessageType.FIFO
            msg.system_properties.message_group = "grp"
            answer = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[msg]))
            self.assertEqual(answer.status.code, pb.Code.OK, answer)
            sent.append(msg.system_properties.message_id)

        async def query(policy: Any, at_ms: int | None = None) -> Any:
            request = rpc.QueryOffsetRequest(message_queue=_queue("TP", queue_id), query_offset_policy=policy)
            if at_ms is not None:
                request.timestamp.CopyFrom(timestamp(at_ms))
            return await self._unary("QueryOffset", request)

        self.assertEqual((await query(pb.QueryOffsetPolicy.BEGINNING)).offset, 0)
        self.assertEqual((await query(pb.QueryOffsetPolicy.END)).offset, 5)
        self.assertEqual((await query(pb.QueryOffsetPolicy.TIMESTAMP, before_ms)).offset, 0)
        self.assertEqual((await query(pb.QueryOffsetPolicy.TIMESTAMP, before_ms + 3_600_000)).offset, 5)  # all older
        no_time = await query(pb.QueryOffsetPolicy.TIMESTAMP)
        self.assertEqual(no_time.status.code, pb.Code.BAD_REQUEST)
        first = await self._offset("GP", "TP", queue_id)
        self.assertEqual((first.status.code, first.offset), (pb.Code.OK, 0))

        status, messages, next_offset = self._parts(await self._pull("GP", "TP", queue_id, 0))
        self.assertEqual(status.code, pb.Code.OK)
        self.assertEqual(next_offset, 5)
        self.assertEqual([m.body for m in messages], [b"m%d" % i for i in range(5)])
        self.assertEqual([m.system_properties.message_id for m in messages], sent)
        self.assertEqual([m.system_properties.queue_offset for m in messages], list(range(5)))
        self.assertEqual({m.system_properties.queue_id for m in messages}, {queue_id})
        self.assertEqual(messages[1].system_properties.tag, "TagB")
        self.assertEqual(messages[0].system_properties.message_group, "grp")
        self.assertEqual(messages[0].system_properties.delivery_attempt, 1)
        self.assertEqual(messages[0].user_properties["color"], "blue")
        self.assertFalse(messages[0].system_properties.receipt_handle)
        self.assertFalse(messages[0].system_properties.HasField("invisible_duration"))

        status, tagged, next_offset = self._parts(await self._pull("GP", "TP", queue_id, 0, "TagB"))
        self.assertEqual([m.body for m in tagged], [b"m1", b"m3"])
        self.assertEqual(next_offset, 5)
        _status, sql, _next = self._parts(await self._pull("GP", "TP", queue_id, 0, "TAGS = 'TagA'", kind=pb.FilterType.SQL))
        self.assertEqual([m.body for m in sql], [b"m0", b"m2", b"m4"])

        updated = await self._unary("UpdateOffset", rpc.UpdateOffsetRequest(
            group=pb.Resource(name="GP"), message_queue=_queue("TP", queue_id), offset=3))
        self.assertEqual(updated.status.code, pb.Code.OK, updated)
        self.assertEqual(self.broker.offsets.query_offset("GP", "TP", queue_id), 3)  # the 4.x offset table
        resumed_at = (await self._offset("GP", "TP", queue_id)).offset
        self.assertEqual(resumed_at, 3)
        _status, resumed, next_offset = self._parts(await self._pull("GP", "TP", queue_id, resumed_at))
        self.assertEqual([m.body for m in resumed], [b"m3", b"m4"])
        self.assertEqual(next_offset, 5)

        # at the end: the pull waits for the next message
        started = time.monotonic()
        held = self._pull("GP", "TP", queue_id, 5, poll=10)
        await deferLater(reactor, 0.3, lambda: None)
        late = self._message("TP", b"late")
        late.system_properties.message_type = pb.MessageType.FIFO
        late.system_properties.message_group = "grp"
        await self._unary("SendMessage", rpc.SendMessageRequest(messages=[late]))
        status, arrived, next_offset = self._parts(await held)
        self.assertEqual((status.code, [m.body for m in arrived], next_offset), (pb.Code.OK, [b"late"], 6))
        self.assertLess(time.monotonic() - started, 8)

        status, _none, next_offset = self._parts(await self._pull("GP", "TP", queue_id, 100))
        self.assertEqual((status.code, next_offset), (pb.Code.ILLEGAL_OFFSET, 6))

    async def test_pull_consumer_registers(self) -> None:
        """A PULL_CONSUMER's settings and heartbeat register it in its group, actively consuming (as a 4.x
        pull consumer, so `mqadmin consumerConnection` lists it)."""
        await self._start()
        subscription = pb.Subscription(group=pb.Resource(name="GPC"), subscriptions=[
            pb.SubscriptionEntry(topic=pb.Resource(name="TP"), expression=pb.FilterExpression(expression="TagA"))])
        answer = await self._settings(pb.Settings(client_type=pb.ClientType.PULL_CONSUMER, subscription=subscription))
        self.assertEqual(answer.status.code, pb.Code.OK)
        beat = await self._unary("Heartbeat", rpc.HeartbeatRequest(client_type=pb.ClientType.PULL_CONSUMER,
                                                                   group=pb.Resource(name="GPC")))
        self.assertEqual(beat.status.code, pb.Code.OK, beat)
        info = self.broker.consumers.get_consumer_group_info("GPC")
        assert info is not None
        self.assertEqual(info.client_ids(), [CLIENT_ID])
        self.assertEqual(info.consume_type, ConsumeType.CONSUME_ACTIVELY)

    async def test_refusals(self) -> None:
        """Bad group, topic, broker, offset, filter and deadline: one status, no next offset."""
        await self._start(enable_property_filter=True)
        for stream, code in [
            (await self._pull("bad group!", "TP", 0, 0), pb.Code.ILLEGAL_CONSUMER_GROUP),
            (await self._pull("GP", "bad topic!", 0, 0), pb.Code.ILLEGAL_TOPIC),
            (await self._pull("GP", "NoSuchTopic", 0, 0), pb.Code.TOPIC_NOT_FOUND),
            (await self._pull("GP", "TP", 0, 0, broker="broker-b"), pb.Code.BAD_REQUEST),
            (await self._pull("GP", "TBW102", 0, 0, "a >", kind=pb.FilterType.SQL), pb.Code.ILLEGAL_FILTER_EXPRESSION),
            (await self._pull("GP", "TBW102", 0, 0, timeout=3), pb.Code.ILLEGAL_POLLING_TIME),
        ]:
            self.assertEqual([r.status.code for r in stream], [code], stream)
        negative = await self._unary("UpdateOffset", rpc.UpdateOffsetRequest(
            group=pb.Resource(name="GP"), message_queue=_queue("TBW102", 0), offset=-1))
        self.assertEqual(negative.status.code, pb.Code.ILLEGAL_OFFSET)
        unknown = await self._offset("GP", "NoSuchTopic", 0)
        self.assertEqual(unknown.status.code, pb.Code.TOPIC_NOT_FOUND)
        bad_queue = await self._offset("GP", "TBW102", 99)
        self.assertEqual(bad_queue.status.code, pb.Code.INTERNAL_SERVER_ERROR)
        self.assertIn("queueId[99] is illegal", bad_queue.status.message)
