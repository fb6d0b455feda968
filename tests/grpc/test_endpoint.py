"""The gRPC endpoint against a real broker on loopback, driven by stubs generated from the v2 protos."""

from __future__ import annotations

import os
import queue
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import grpc
from twisted.internet import reactor
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import TestCase
from zope.interface.verify import verifyObject

from rocketpy.client import Producer, new_message
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.grpc.channel import NotDeliverable
from rocketpy.grpc.server import KEEPALIVE, GrpcService, broker_access, broker_messaging
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.grpc.v2.service_pb2_grpc import MessagingServiceStub
from rocketpy.interfaces import IChannel
from rocketpy.remoting.command import RemotingCommand
from tests.client.test_integration import LoopbackCluster

T = TypeVar("T")
CLIENT_ID = "test-client@1"


class GrpcCalls(TestCase):
    """A broker on loopback with its gRPC endpoint, and the calls of a 5.x client through generated stubs."""

    #: the metadata of every call (the ACL tests sign it)
    metadata: list[tuple[str, str]] = [("x-mq-client-id", CLIENT_ID)]
    #: the endpoint's keepalive pings: (interval, timeout) seconds
    keepalive = KEEPALIVE

    async def _start(self, **broker_settings: Any) -> None:
        self.cluster = LoopbackCluster(self)
        self.addCleanup(self.cluster.close)
        await self.cluster.add_broker("broker-a", **broker_settings)
        self.broker = self.cluster.brokers["broker-a"]
        service = GrpcService(reactor, "tcp:0:interface=127.0.0.1",
                              lambda: broker_messaging(reactor, self.broker, [1000, 5000]), broker_access(self.broker),
                              keepalive=self.keepalive)
        service.startService()
        self.addCleanup(service.stopService)
        await service.when_started()
        self.service = service
        self.pool = ThreadPool(1, 2, "grpc-test-client")
        self.pool.start()
        self.addCleanup(self.pool.stop)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{service.port}")
        self.addCleanup(self.channel.close)
        self.stub = MessagingServiceStub(self.channel)
        self.endpoints = pb.Endpoints(scheme=pb.AddressScheme.IPv4,
                                      addresses=[pb.Address(host="127.0.0.1", port=service.port)])

    def _call(self, f: Callable[..., T], *args: Any) -> Any:
        return deferToThreadPool(cast(IReactorFromThreads, reactor), self.pool, f, *args)

    def _unary(self, method: str, request: Any) -> Any:
        return self._call(getattr(self.stub, method), request, None, self.metadata)

    def _settings(self, settings: pb.Settings) -> Any:
        def exchange() -> Any:
            command = rpc.TelemetryCommand(settings=settings)
            stream = self.stub.Telemetry(iter([command]), metadata=self.metadata)
            return next(stream)
        return self._call(exchange)

    def _receive(self, group: str, topic: str, invisible: int = 10, poll: int = 5) -> Any:
        request = rpc.ReceiveMessageRequest(
            group=pb.Resource(name=group), batch_size=16,
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"))
        request.invisible_duration.seconds = invisible
        request.long_polling_timeout.seconds = poll
        return self._call(lambda: list(self.stub.ReceiveMessage(
            request, timeout=poll + 5, metadata=self.metadata)))

    async def _until(self, condition: Callable[[], bool], seconds: float = 10.0) -> None:
        """Until ``condition()`` holds, checking every 10 ms of the reactor's time."""
        for _ in range(int(seconds * 100)):
            if condition():
                return
            await deferLater(reactor, 0.01, lambda: None)
        self.fail(f"{condition} did not hold within {seconds} s")

    def _open_telemetry(self, settings: pb.Settings) -> tuple[Any, queue.Queue[Any]]:
        """A Telemetry stream that stays open until ``None`` is put in the returned queue."""
        requests: queue.Queue[Any] = queue.Queue()
        requests.put(rpc.TelemetryCommand(settings=settings))

        def commands() -> Iterator[Any]:
            while (command := requests.get()) is not None:
                yield command

        stream = self.stub.Telemetry(commands(), metadata=self.metadata, timeout=30)
        self.addCleanup(stream.cancel)
        self.addCleanup(requests.put, None)
        return stream, requests

    def _message(self, topic: str, body: bytes, tag: str = "TagA") -> pb.Message:
        sysp = pb.SystemProperties(tag=tag, keys=["k1"], message_id=uuid.uuid4().hex.upper(),
                                   message_type=pb.MessageType.NORMAL)
        return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sysp,
                          user_properties={"color": "blue"})



class GrpcEndpointTests(GrpcCalls):
    """QueryRoute, Telemetry, SendMessage, ReceiveMessage, AckMessage and ChangeInvisibleDuration."""

    async def test_route_and_settings(self) -> None:
        """QueryRoute advertises the endpoint the client reached; the settings come back merged."""
        await self._start()
        route = await self._unary("QueryRoute", rpc.QueryRouteRequest(topic=pb.Resource(name="T5"),
                                                                       endpoints=self.endpoints))
        self.assertEqual(route.status.code, pb.Code.OK)
        self.assertEqual(len(route.message_queues), 8)
        queue = route.message_queues[0]
        self.assertEqual(queue.permission, pb.Permission.READ_WRITE)
        self.assertEqual(queue.broker.name, "broker-a")
        self.assertEqual(queue.broker.endpoints.addresses[0].port, self.service.port)
        bad = await self._unary("QueryRoute", rpc.QueryRouteRequest(topic=pb.Resource(name="bad topic!"),
                                                                     endpoints=self.endpoints))
        self.assertEqual(bad.status.code, pb.Code.ILLEGAL_TOPIC)
        beat = await self._unary("Heartbeat", rpc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER))
        self.assertEqual(beat.status.code, pb.Code.UNRECOGNIZED_CLIENT_TYPE)
        answer = await self._settings(pb.Settings(client_type=pb.ClientType.PRODUCER,
                                                  publishing=pb.Publishing(topics=[pb.Resource(name="T5")])))
        self.assertEqual(answer.status.code, pb.Code.OK)
        self.assertEqual(answer.settings.publishing.max_body_size, 4 * 1024 * 1024)
        self.assertEqual(answer.settings.backoff_policy.max_attempts, 3)
        beat = await self._unary("Heartbeat", rpc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER))
        self.assertEqual(beat.status.code, pb.Code.OK)
        bye = await self._unary("NotifyClientTermination", rpc.NotifyClientTerminationRequest())
        self.assertEqual(bye.status.code, pb.Code.OK)

    async def test_client_id_required(self) -> None:
        """Without x-mq-client-id: CLIENT_ID_REQUIRED in the status, INVALID_ARGUMENT on Telemetry."""
        await self._start()
        route = await self._call(self.stub.QueryRoute, rpc.QueryRouteRequest(topic=pb.Resource(name="T5"),
                                                                              endpoints=self.endpoints))
        self.assertEqual(route.status.code, pb.Code.CLIENT_ID_REQUIRED)

        def telemetry() -> Any:
            try:
                return list(self.stub.Telemetry(iter([rpc.TelemetryCommand(settings=pb.Settings())])))
            except grpc.RpcError as e:
                return e.code()

        self.assertEqual(await self._call(telemetry), grpc.StatusCode.INVALID_ARGUMENT)

    async def test_send_receive_ack(self) -> None:
        """A 5.x send and a 4.x send are both received; an ack ends a lease, an unacked one comes back."""
        await self._start()
        await self._settings(pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER,
                                         subscription=pb.Subscription(group=pb.Resource(name="G5"))))
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("T5", b"five")]))
        self.assertEqual(sent.status.code, pb.Code.OK, sent)
        empty = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("T5", b"")]))
        self.assertEqual(empty.status.code, pb.Code.MESSAGE_BODY_EMPTY)
        big = await self._unary("SendMessage", rpc.SendMessageRequest(
            messages=[self._message("T5", b"x" * (4 * 1024 * 1024 + 1))]))
        self.assertEqual(big.status.code, pb.Code.MESSAGE_BODY_TOO_LARGE)
        producer = Producer("PG4", self.cluster.namesrv_addr, reactor)
        await producer.start()
        self.addCleanup(producer.shutdown)
        result = await producer.send(new_message("T5", b"four", tags="TagB"))
        self.assertTrue(result.msg_id)

        stream = await self._receive("G5", "T5")
        self.assertEqual(stream[0].status.code, pb.Code.OK)
        self.assertTrue(stream[-1].HasField("delivery_timestamp"))
        messages = {m.message.body: m.message for m in stream[1:-1]}
        self.assertEqual(set(messages), {b"five", b"four"})
        five = messages[b"five"]
        self.assertEqual(five.system_properties.message_id, sent.entries[0].message_id)
        self.assertEqual(five.system_properties.tag, "TagA")
        self.assertEqual(five.user_properties["color"], "blue")
        self.assertEqual(five.system_properties.delivery_attempt, 1)
        self.assertEqual(messages[b"four"].system_properties.tag, "TagB")

        ack = await self._unary("AckMessage", rpc.AckMessageRequest(
            group=pb.Resource(name="G5"), topic=pb.Resource(name="T5"),
            entries=[rpc.AckMessageEntry(message_id=five.system_properties.message_id,
                                         receipt_handle=five.system_properties.receipt_handle)]))
        self.assertEqual(ack.status.code, pb.Code.OK)
        bogus = await self._unary("AckMessage", rpc.AckMessageRequest(
            group=pb.Resource(name="G5"), topic=pb.Resource(name="T5"),
            entries=[rpc.AckMessageEntry(message_id="x", receipt_handle="garbage")]))
        self.assertEqual(bogus.entries[0].status.code, pb.Code.INVALID_RECEIPT_HANDLE)

        four = messages[b"four"]
        change = await self._unary("ChangeInvisibleDuration", rpc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="G5"), topic=pb.Resource(name="T5"),
            receipt_handle=four.system_properties.receipt_handle, message_id=four.system_properties.message_id))
        self.assertEqual(change.status.code, pb.Code.OK)
        again = await self._receive("G5", "T5")
        bodies = [m.message.body for m in again if m.HasField("message")]
        self.assertEqual(bodies, [b"four"])  # the acked one never comes back
        self.assertEqual(again[1].message.system_properties.delivery_attempt, 2)

    async def test_fifo_group(self) -> None:
        """A consumeMessageOrderly group: fifo in its settings, one assignment per queue, FIFO messages
        carry their group."""
        await self._start()
        self.broker.subscriptions.update_subscription_group_config(
            SubscriptionGroupConfig("GF", consume_message_orderly=True))
        answer = await self._settings(pb.Settings(client_type=pb.ClientType.PUSH_CONSUMER,
                                                  subscription=pb.Subscription(group=pb.Resource(name="GF"))))
        self.assertTrue(answer.settings.subscription.fifo)
        assigned = await self._unary("QueryAssignment", rpc.QueryAssignmentRequest(
            topic=pb.Resource(name="TF"), group=pb.Resource(name="GF"), endpoints=self.endpoints))
        self.assertEqual([a.message_queue.id for a in assigned.assignments], list(range(8)))
        plain = await self._unary("QueryAssignment", rpc.QueryAssignmentRequest(
            topic=pb.Resource(name="TF"), group=pb.Resource(name="G5"), endpoints=self.endpoints))
        self.assertEqual([a.message_queue.id for a in plain.assignments], [-1])
        msgs = [self._message("TF", b"f%d" % i) for i in range(3)]
        for msg in msgs:
            msg.system_properties.message_group = "order-1"
            msg.system_properties.message_type = pb.MessageType.FIFO
            await self._unary("SendMessage", rpc.SendMessageRequest(messages=[msg]))
        stream = await self._receive("GF", "TF")
        received = [r.message for r in stream if r.HasField("message")]
        self.assertEqual([m.body for m in received], [b"f0", b"f1", b"f2"])
        self.assertEqual({(m.system_properties.message_group, m.system_properties.message_type) for m in received},
                         {("order-1", pb.MessageType.FIFO)})

    async def test_forward_to_dead_letter_queue(self) -> None:
        """ForwardMessageToDeadLetterQueue stores the message on %DLQ%<group> and ends its lease."""
        await self._start()
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TD", b"bad")]))
        self.assertEqual(sent.status.code, pb.Code.OK)
        [_, received, _] = await self._receive("GD", "TD")
        sysp = received.message.system_properties
        request = rpc.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name="GD"), topic=pb.Resource(name="TD"), receipt_handle=sysp.receipt_handle,
            message_id=sysp.message_id, delivery_attempt=1, max_delivery_attempts=17)
        forwarded = await self._unary("ForwardMessageToDeadLetterQueue", request)
        self.assertEqual(forwarded.status.code, pb.Code.OK, forwarded)
        self.assertEqual(self.broker.store.get_max_offset_in_queue("%DLQ%GD", 0), 1)
        again = await self._unary("ForwardMessageToDeadLetterQueue", request)
        self.assertEqual(again.status.code, pb.Code.INVALID_RECEIPT_HANDLE)
        self.assertEqual(len(self.service.messaging.pop.receipts), 0)  # type: ignore[union-attr]

    async def test_retry_topic_then_dead_letter_queue(self) -> None:
        """A message given back (ChangeInvisibleDuration 0) comes back from %RETRY%<group>_<topic>
        under its topic and id, attempt 2; given back again with retryMaxTimes 1, the next receive
        moves it to %DLQ%<group> instead."""
        await self._start()
        self.broker.subscriptions.update_subscription_group_config(SubscriptionGroupConfig("GR", retry_max_times=1))
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TR", b"poison")]))

        async def give_back(message: pb.Message) -> None:
            change = await self._unary("ChangeInvisibleDuration", rpc.ChangeInvisibleDurationRequest(
                group=pb.Resource(name="GR"), topic=pb.Resource(name="TR"),
                receipt_handle=message.system_properties.receipt_handle,
                message_id=message.system_properties.message_id))
            self.assertEqual(change.status.code, pb.Code.OK)

        for attempt in (1, 2):
            [_, received, _] = await self._receive("GR", "TR")
            sysp = received.message.system_properties
            self.assertEqual((received.message.topic.name, sysp.message_id, sysp.delivery_attempt),
                             ("TR", sent.entries[0].message_id, attempt))
            await give_back(received.message)
        await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TR", b"fine")]))
        stream = await self._receive("GR", "TR")
        self.assertEqual([r.message.body for r in stream if r.HasField("message")], [b"fine"])
        self.assertEqual(self.broker.store.get_max_offset_in_queue("%RETRY%GR_TR", 0), 2)
        self.assertEqual(self.broker.store.get_max_offset_in_queue("%DLQ%GR", 0), 1)
        dead = await self.broker.store.look_message_by_offset(
            await self.broker.store.get_commit_log_offset_in_queue("%DLQ%GR", 0, 0))
        assert dead is not None
        self.assertEqual((dead.body, dead.properties["RETRY_TOPIC"]), (b"poison", "TR"))

    async def test_stop_writes_the_checkpoint(self) -> None:
        """Stopping the endpoint writes the in-flight receipts to <store>/config/popReceipts.json."""
        await self._start()
        await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TC", b"kept")]))
        [_, received, _] = await self._receive("GC", "TC")
        await self.service.stopService()
        path = os.path.join(os.path.dirname(self.broker.offsets.path or ""), "popReceipts.json")
        with open(path) as f:
            self.assertIn(received.message.system_properties.receipt_handle, f.read())

    async def test_abandoned_long_poll_leases_nothing(self) -> None:
        """A client that cancels its long poll leaves no waiter behind: a message sent afterwards goes
        to the next receive, not to the abandoned call."""
        await self._start()
        request = rpc.ReceiveMessageRequest(
            group=pb.Resource(name="GA"), batch_size=16,
            message_queue=pb.MessageQueue(topic=pb.Resource(name="TA"), id=-1),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"))
        request.invisible_duration.seconds = 60
        request.long_polling_timeout.seconds = 20
        pop = self.service.messaging.pop  # type: ignore[union-attr]
        await self._unary("QueryRoute", rpc.QueryRouteRequest(topic=pb.Resource(name="TA"), endpoints=self.endpoints))
        call = self.stub.ReceiveMessage(request, timeout=30, metadata=[("x-mq-client-id", CLIENT_ID)])

        def drain() -> Any:
            try:
                return list(call)
            except grpc.RpcError as e:
                return e.code()

        drained = self._call(drain)
        await self._until(lambda: any(pop._waiters.values()))
        call.cancel()
        self.assertEqual(await drained, grpc.StatusCode.CANCELLED)
        await self._until(lambda: not any(not d.called for ws in pop._waiters.values() for d in ws))
        await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TA", b"after")]))
        stream = await self._receive("GA", "TA")
        self.assertEqual([r.message.body for r in stream if r.HasField("message")], [b"after"])

    async def test_clients_in_the_broker_tables(self) -> None:
        """Heartbeats put 5.x clients in the broker's consumer and producer tables (what admin tools
        list); NotifyClientTermination takes them out."""
        await self._start()
        await self._settings(pb.Settings(
            client_type=pb.ClientType.SIMPLE_CONSUMER, user_agent=pb.UA(language=pb.Language.PYTHON),
            subscription=pb.Subscription(group=pb.Resource(name="GR"), subscriptions=[pb.SubscriptionEntry(
                topic=pb.Resource(name="TR"), expression=pb.FilterExpression(expression="TagA"))])))
        beat = await self._unary("Heartbeat", rpc.HeartbeatRequest(group=pb.Resource(name="GR"),
                                                                  client_type=pb.ClientType.SIMPLE_CONSUMER))
        self.assertEqual(beat.status.code, pb.Code.OK)
        group = self.broker.consumers.get_consumer_group_info("GR")
        assert group is not None
        [info] = group.channels.values()
        self.assertEqual((info.client_id, info.language), (CLIENT_ID, "PYTHON"))
        self.assertEqual(group.subscriptions["TR"].sub_string, "TagA")
        self.assertTrue(verifyObject(IChannel, info.channel))
        self.failureResultOf(info.channel.invoke_sync(RemotingCommand.request(1), 3), NotDeliverable)
        bye = await self._unary("NotifyClientTermination", rpc.NotifyClientTerminationRequest(
            group=pb.Resource(name="GR")))
        self.assertEqual(bye.status.code, pb.Code.OK)
        self.assertIsNone(self.broker.consumers.find_channel("GR", CLIENT_ID))

        await self._settings(pb.Settings(client_type=pb.ClientType.PRODUCER,
                                         publishing=pb.Publishing(topics=[pb.Resource(name="TR")])))
        await self._unary("Heartbeat", rpc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER))
        self.assertEqual([i.client_id for i in self.broker.producers.channels_of("TR")], [CLIENT_ID])
