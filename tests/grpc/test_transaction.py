"""Transactional messages over the gRPC endpoint: half messages, EndTransaction, and the broker's
check of an orphaned transaction sent down the producer's Telemetry stream."""

from __future__ import annotations

import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.message import MessageConst, decode_record
from rocketpy.common.topic import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketpy.grpc.status import GrpcError
from rocketpy.grpc.transaction import TransactionId
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from tests.grpc.test_endpoint import GrpcCalls


class TransactionIdTests(SynchronousTestCase):
    def test_round_trip_and_garbage(self) -> None:
        where = TransactionId("broker-a", 123456789012, 42)
        self.assertEqual(TransactionId.decode(where.encode()), where)
        for bad in ("", "zz", "00000001", where.encode() + "00", where.encode()[:-2], "7FFFFFFF" + "00" * 24):
            with self.assertRaises(GrpcError) as caught:
                TransactionId.decode(bad)
            self.assertEqual(caught.exception.code, pb.Code.INVALID_TRANSACTION_ID)


class GrpcTransactionTests(GrpcCalls):
    """A TRANSACTION send is a half message until EndTransaction; the broker's check reaches the producer."""

    def _half(self, topic: str, body: bytes, born_ms: int | None = None, recovery_s: int | None = None) -> pb.Message:
        msg = self._message(topic, body)
        msg.system_properties.message_type = pb.MessageType.TRANSACTION
        if born_ms is not None:
            msg.system_properties.born_timestamp.FromMilliseconds(born_ms)
        if recovery_s is not None:
            msg.system_properties.orphaned_transaction_recovery_duration.seconds = recovery_s
        return msg

    async def _send_half(self, msg: pb.Message) -> Any:
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[msg]))
        self.assertEqual(sent.status.code, pb.Code.OK, sent)
        return sent.entries[0]

    def _end(self, topic: str, entry: Any, resolution: Any, transaction_id: str | None = None,
             source: Any = pb.TransactionSource.SOURCE_CLIENT) -> Any:
        return self._unary("EndTransaction", rpc.EndTransactionRequest(
            topic=pb.Resource(name=topic), message_id=entry.message_id,
            transaction_id=entry.transaction_id if transaction_id is None else transaction_id,
            resolution=resolution, source=source))

    def _stored(self, topic: str) -> int:
        store = self.broker.store
        return sum(store.get_max_offset_in_queue(topic, q) for q in range(8))

    async def test_commit_and_rollback(self) -> None:
        """Committed: the message reaches its topic (and a consumer); rolled back: it never does."""
        await self._start()
        committed = await self._send_half(self._half("TX", b"commit me"))
        rolled = await self._send_half(self._half("TX", b"roll me back"))
        self.assertTrue(committed.transaction_id)
        self.assertNotEqual(committed.transaction_id, rolled.transaction_id)
        self.assertEqual((self._stored("TX"), self.broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)), (0, 2))

        done = await self._end("TX", committed, pb.TransactionResolution.COMMIT)
        self.assertEqual(done.status.code, pb.Code.OK, done)
        done = await self._end("TX", rolled, pb.TransactionResolution.ROLLBACK)
        self.assertEqual(done.status.code, pb.Code.OK, done)
        self.assertEqual(self._stored("TX"), 1)
        self.assertEqual(self.broker.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0), 2)  # both decided
        again = await self._end("TX", committed, pb.TransactionResolution.COMMIT)  # a retry commits once
        self.assertEqual(again.status.code, pb.Code.OK)
        self.assertEqual(self._stored("TX"), 1)

        stream = await self._receive("GX", "TX")
        received = [r.message for r in stream if r.HasField("message")]
        self.assertEqual([m.body for m in received], [b"commit me"])
        self.assertEqual(received[0].system_properties.message_id, committed.message_id)
        self.assertEqual(received[0].system_properties.message_type, pb.MessageType.NORMAL)

    async def test_refusals(self) -> None:
        """Empty, malformed or foreign ids and a wrong topic: INVALID_TRANSACTION_ID; an unknown
        resolution changes nothing."""
        await self._start()
        entry = await self._send_half(self._half("TX", b"pending"))
        where = TransactionId.decode(entry.transaction_id)
        cases = {
            "": pb.Code.INVALID_TRANSACTION_ID,
            "not hex": pb.Code.INVALID_TRANSACTION_ID,
            TransactionId("broker-z", where.commit_log_offset, where.tran_state_table_offset).encode():
                pb.Code.INVALID_TRANSACTION_ID,
            TransactionId("broker-a", where.commit_log_offset, where.tran_state_table_offset + 1).encode():
                pb.Code.INVALID_TRANSACTION_ID,
            TransactionId("broker-a", 1 << 40, 0).encode(): pb.Code.INVALID_TRANSACTION_ID,
        }
        for transaction_id, code in cases.items():
            answer = await self._end("TX", entry, pb.TransactionResolution.COMMIT, transaction_id)
            self.assertEqual(answer.status.code, code, (transaction_id, answer))
        wrong_topic = await self._end("TY", entry, pb.TransactionResolution.COMMIT)
        self.assertEqual(wrong_topic.status.code, pb.Code.INVALID_TRANSACTION_ID, wrong_topic)
        self.assertIn("producer group", wrong_topic.status.message)
        bad_topic = await self._end("bad topic!", entry, pb.TransactionResolution.COMMIT)
        self.assertEqual(bad_topic.status.code, pb.Code.ILLEGAL_TOPIC)
        unknown = await self._end("TX", entry, pb.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
        self.assertEqual(unknown.status.code, pb.Code.OK)
        self.assertEqual(self._stored("TX") + self.broker.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0), 0)
        too_long = self._half("TX", b"x")
        too_long.system_properties.orphaned_transaction_recovery_duration.seconds = 3601
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[too_long]))
        self.assertEqual(sent.status.code, pb.Code.BAD_REQUEST)

    async def test_orphaned_transaction_recovered_through_telemetry(self) -> None:
        """The broker's check of an old half message becomes a RecoverOrphanedTransactionCommand on the
        producer's Telemetry stream; its EndTransaction (SERVER_CHECK) with that id commits it."""
        await self._start()
        stream, requests = self._open_telemetry(pb.Settings(
            client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="TX")])))
        settings = await self._call(next, stream)
        self.assertTrue(settings.HasField("settings"))
        # registered by its settings alone (no heartbeat yet): the topic is its producer group
        self.assertEqual([i.client_id for i in self.broker.producers.channels_of("TX")], ["test-client@1"])
        old = int(time.time() * 1000) - 60_000  # older than the check's 6 s transaction timeout
        entry = await self._send_half(self._half("TX", b"orphan", born_ms=old))
        await self.broker.transaction_check.check()

        command = await self._call(next, stream)
        recover = command.recover_orphaned_transaction_command
        self.assertEqual(recover.message.body, b"orphan")
        self.assertEqual(recover.message.topic.name, "TX")
        self.assertEqual(recover.message.system_properties.message_id, entry.message_id)
        self.assertEqual(recover.message.system_properties.message_type, pb.MessageType.TRANSACTION)
        self.assertEqual(recover.message.user_properties["color"], "blue")
        self.assertTrue(recover.transaction_id)

        done = await self._end("TX", entry, pb.TransactionResolution.COMMIT, recover.transaction_id,
                               pb.TransactionSource.SOURCE_SERVER_CHECK)
        self.assertEqual(done.status.code, pb.Code.OK, done)
        self.assertEqual(self._stored("TX"), 1)
        late = await self._end("TX", entry, pb.TransactionResolution.ROLLBACK)  # the original id, too late
        self.assertEqual(late.status.code, pb.Code.OK)
        self.assertEqual(self._stored("TX"), 1)

        requests.put(None)  # the stream ends: a later check has nowhere to go
        self.assertEqual(list(stream), [])
        channel = self.broker.producers.get_available_channel("TX")
        assert channel is not None
        await self._until(lambda: getattr(channel, "stream") is None)

    async def test_check_goes_to_a_producer_with_a_stream(self) -> None:
        """Of two producers of the topic, the one whose Telemetry stream ended is passed over even
        with the newer heartbeat (Java's getAvailableChannel skips unwritable channels)."""
        await self._start()
        publishing = pb.Settings(client_type=pb.ClientType.PRODUCER,
                                 publishing=pb.Publishing(topics=[pb.Resource(name="TX")]))
        stream, _ = self._open_telemetry(publishing)
        await self._call(next, stream)
        gone = [("x-mq-client-id", "gone-client@2")]

        def exchange_and_end() -> Any:
            return list(self.stub.Telemetry(iter([rpc.TelemetryCommand(settings=publishing)]), metadata=gone))

        await self._call(exchange_and_end)
        beat = await self._call(self.stub.Heartbeat, rpc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), None,
                                gone)
        self.assertEqual(beat.status.code, pb.Code.OK)
        self.assertEqual(sorted(i.client_id for i in self.broker.producers.channels_of("TX")),
                         ["gone-client@2", "test-client@1"])
        await self._until(lambda: len([i for i in self.broker.producers.channels_of("TX")
                                        if getattr(i.channel, "writable")]) == 1)
        entry = await self._send_half(self._half("TX", b"orphan", born_ms=int(time.time() * 1000) - 60_000))
        await self.broker.transaction_check.check()
        command = await self._call(next, stream)
        self.assertEqual(command.recover_orphaned_transaction_command.message.system_properties.message_id,
                         entry.message_id)

    async def test_recovery_duration_delays_the_check(self) -> None:
        """A transaction is not checked before its orphaned_transaction_recovery_duration has passed
        (CHECK_IMMUNITY_TIME_IN_SECONDS); after it, the producer's own EndTransaction is refused and
        the answer to the check decides (Java 5's EndTransactionProcessor)."""
        await self._start()
        stream, _ = self._open_telemetry(pb.Settings(
            client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="TX")])))
        await self._call(next, stream)
        born = int(time.time() * 1000) - 60_000
        await self._send_half(self._half("TX", b"recovering", born_ms=born, recovery_s=3600))
        orphan = await self._send_half(self._half("TX", b"orphan", born_ms=born))
        late = await self._send_half(self._half("TX", b"late", born_ms=born, recovery_s=30))
        await self.broker.transaction_check.check()

        asked = [await self._call(next, stream) for _ in range(2)]  # written in half queue order during the check
        recovers = [c.recover_orphaned_transaction_command for c in asked]
        self.assertEqual([r.message.body for r in recovers], [b"orphan", b"late"])
        found = await self.broker.store.get_message("TEST", TRANS_HALF_TOPIC, 0, 0, 100)
        halves = [decode_record(r) for r in found.records]
        [put_back] = [m for m in halves[3:] if m.body == b"recovering"]  # unasked, uncounted
        self.assertNotIn(MessageConst.TRANSACTION_CHECK_TIMES, put_back.properties)
        self.assertEqual(put_back.properties[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS], "3600")

        refused = await self._end("TX", late, pb.TransactionResolution.COMMIT)
        self.assertEqual(refused.status.code, pb.Code.PRECONDITION_FAILED, refused)
        self.assertEqual(self._stored("TX"), 0)
        for entry, recover in zip((orphan, late), recovers):
            done = await self._end("TX", entry, pb.TransactionResolution.COMMIT, recover.transaction_id,
                                   pb.TransactionSource.SOURCE_SERVER_CHECK)
            self.assertEqual(done.status.code, pb.Code.OK, done)
        self.assertEqual(self._stored("TX"), 2)
