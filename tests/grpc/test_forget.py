"""Forgetting 5.x clients that vanished without NotifyClientTermination, on a Clock (the Java
proxy's settings cleaner): their settings and channels go once their Telemetry stream ended and
the broker's client tables expired them; live clients stay; leases are left to run out."""

from __future__ import annotations

from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.clients import ConsumerManager, ProducerManager
from rocketpy.broker.filter import build_tag_filter
from rocketpy.broker.offsets import ConsumerOffsetManager
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import MessageExt
from rocketpy.common.topic import TopicConfig
from rocketpy.grpc.messaging import CallContext, Messaging
from rocketpy.grpc.pop import PopService, Received
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from tests.broker.featurestore import new_clock, open_store, put

EXPIRY_S = 120.0  # the broker's channelExpiredTimeout
CONSUMER, PRODUCER, LIVE = CallContext("consumer@1"), CallContext("producer@1"), CallContext("live@1")


class _Stream:
    def write(self, command: rpc.TelemetryCommand) -> bool:
        return True


class ForgetClientsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.store = open_store(self, self.clock)
        topics = TopicConfigManager(self.clock)
        topics.update_topic_config(TopicConfig("T", 1, 1))
        self.pop = PopService(self.clock, self.store, topics, ConsumerOffsetManager())
        self.consumers = ConsumerManager(self.clock, EXPIRY_S)
        self.producers = ProducerManager(self.clock, EXPIRY_S)
        self.messaging = Messaging(self.clock, "broker-a", topics, SubscriptionGroupManager(self.clock),
                                   cast(Any, None), cast(Any, None), self.pop, [1000],
                                   consumers=self.consumers, producers=self.producers)
        self.messaging.start()
        self.addCleanup(self.messaging.stop)

    def _connect(self, ctx: CallContext, settings: pb.Settings) -> _Stream:
        """Settings over a Telemetry stream, then a heartbeat, as the 5.x clients start."""
        stream = _Stream()
        answer = self.messaging.telemetry(ctx, rpc.TelemetryCommand(settings=settings), stream)
        self.assertEqual(cast(rpc.TelemetryCommand, answer).status.code, pb.Code.OK)
        self.assertEqual(self._heartbeat(ctx, settings), pb.Code.OK)
        return stream

    def _heartbeat(self, ctx: CallContext, settings: pb.Settings) -> Any:
        request = rpc.HeartbeatRequest(client_type=settings.client_type, group=settings.subscription.group)
        return self.messaging.heartbeat(ctx, request).status.code

    def _pass(self, seconds: int, live: pb.Settings | None = None) -> None:
        """``seconds`` go by: the broker scans its client tables every 10 s; ``live`` heartbeats every 10 s."""
        for _ in range(seconds // 10):
            self.clock.advance(10)
            self.consumers.scan_not_active_channel()
            self.producers.scan_not_active_channel()
            if live is not None:
                self.assertEqual(self._heartbeat(LIVE, live), pb.Code.OK)

    def _known(self) -> set[str]:
        return set(self.messaging.settings.all_raw()) | set(self.messaging._channels)

    def _receive(self, client_id: str) -> Received:
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", 10, 300_000, 0, build_tag_filter("*"), 0, client_id))
        return self.successResultOf(d)

    def test_vanished_clients_forgotten_live_kept(self) -> None:
        consumer = pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER,
                               subscription=pb.Subscription(group=pb.Resource(name="G")))
        producer = pb.Settings(client_type=pb.ClientType.PRODUCER,
                               publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
        live = pb.Settings(client_type=pb.ClientType.PUSH_CONSUMER,
                           subscription=pb.Subscription(group=pb.Resource(name="G")))
        streams = {ctx: self._connect(ctx, s) for ctx, s in
                   [(CONSUMER, consumer), (PRODUCER, producer), (LIVE, live)]}
        put(self, self.store, MessageExt(topic="T", body=b"m"))
        [(_, lease)] = self._receive(CONSUMER.client_id)
        for ctx in (CONSUMER, PRODUCER, LIVE):  # every stream ends; only LIVE keeps its heartbeats
            self.messaging.telemetry_closed(ctx, streams[ctx])
        self._pass(120, live)
        self.assertEqual(self._known(), {c.client_id for c in (CONSUMER, PRODUCER, LIVE)})  # not expired yet
        self._pass(20, live)  # expired from the broker's tables, and forgotten within 5 s
        self.clock.advance(5)
        self.assertEqual(self._known(), {LIVE.client_id})
        self.assertIsNone(self.consumers.find_channel("G", CONSUMER.client_id))
        self.assertIsNotNone(self.consumers.find_channel("G", LIVE.client_id))
        self.assertEqual(self.producers.channels_of("T"), [])
        # its lease was left alone: in the table until it runs out, then the message comes back
        self.assertEqual(len(self.pop.receipts), 1)
        self.clock.advance(lease.expires_ms / 1000 - self.clock.seconds() + 1)
        [(again, second)] = self._receive(LIVE.client_id)
        self.assertEqual((again.body, second.attempt), (b"m", 2))
        # back after being forgotten: unknown until it sends settings again (ClientActivity.heartbeat)
        self.assertEqual(self._heartbeat(CONSUMER, consumer), pb.Code.UNRECOGNIZED_CLIENT_TYPE)
        self._connect(CONSUMER, consumer)
        self.assertIsNotNone(self.consumers.find_channel("G", CONSUMER.client_id))

    def test_open_stream_kept(self) -> None:
        """A client with its Telemetry stream open is not forgotten, even out of the tables."""
        settings = pb.Settings(client_type=pb.ClientType.PRODUCER)  # no topics: in no table
        self._connect(PRODUCER, settings)
        self._pass(300)
        self.assertEqual(self._known(), {PRODUCER.client_id})

    def test_stops_with_the_service(self) -> None:
        stream = self._connect(PRODUCER, pb.Settings(client_type=pb.ClientType.PRODUCER))
        self.messaging.telemetry_closed(PRODUCER, stream)
        self.messaging.stop()
        self.clock.advance(10)
        self.assertEqual(self._known(), {PRODUCER.client_id})
        self.messaging.start()
        self.clock.advance(5)
        self.assertEqual(self._known(), set())
