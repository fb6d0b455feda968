"""The MessagingService RPCs, run on the reactor thread: requests in, responses out.

:class:`Messaging` is what :mod:`rocketpy.grpc.server` calls for each RPC (after hopping
from gRPC's thread to the reactor). Each method returns the response message, or a Deferred
of it; statuses and messages follow the Java proxy's activities (``RouteActivity``,
``ClientActivity``, ``SendMessageActivity``, ``ReceiveMessageActivity``, ``AckMessageActivity``,
``ChangeInvisibleDurationActivity``, ``EndTransactionActivity``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from rocketpy.broker.clients import ClientChannelInfo, ConsumerManager, ProducerManager
from rocketpy.broker.filter import SubscriptionParseError, build_tag_filter
from rocketpy.broker.heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.sendback import SendBackProcessor
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.broker.transaction import NO_HALF_MESSAGE, WRONG_GROUP, WRONG_OFFSET
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.message import java_hash
from rocketpy.common.topic import TopicConfig, send_topic_problem
from rocketpy.grpc import convert
from rocketpy.grpc import settings as defaults
from rocketpy.grpc.channel import GrpcClientChannel, TelemetryStream
from rocketpy.grpc.checks import PeerChannel, as_deferred, check_broker, check_group, polling_ms, topic_name
from rocketpy.grpc.cluster import ClusterView
from rocketpy.grpc.pop import DEFAULT_INVISIBLE_MS, PopService
from rocketpy.grpc.queues import QueueRpcs
from rocketpy.grpc.recall import Recall, sent_handle
from rocketpy.grpc.receipts import AckOutcome, Lease
from rocketpy.grpc.route import RouteBroker, assignments, endpoints_of, master, route_queues
from rocketpy.grpc.settings import ClientSettings
from rocketpy.grpc.status import GrpcError, from_remoting, ok, overall, status
from rocketpy.grpc.transaction import TransactionId, end_request, sent_transaction_id
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.timer import TimerRules
from rocketpy.util.configfile import JsonConfigFile

MIN_INVISIBLE_MS = 10_000  # ProxyConfig.minInvisibleTimeMillsForRecv
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # ProxyConfig.maxInvisibleTimeMills
TBW102 = "TBW102"
#: How often clients that are gone are forgotten (the Java proxy's settings cleaner: every 5 s).
FORGET_PERIOD_S = 5.0
#: the client types that consume (and register in the broker's consumer table)
_CONSUMER_TYPES = (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER, pb.ClientType.PULL_CONSUMER)
#: END_TRANSACTION refusals meaning the transaction id names no half message of the topic
_NOT_A_TRANSACTION = frozenset({NO_HALF_MESSAGE, WRONG_GROUP, WRONG_OFFSET})


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who is calling: the ``x-mq-client-id`` header and the peer address (``ip:port``)."""

    client_id: str
    peer: str = "0.0.0.0:0"


class Messaging:
    """The RPCs over one broker's topics, send path and store.

    :param advertised: ``(host, port)`` that QueryRoute returns; None echoes the endpoint the
        client reached (the Java proxy's local mode).
    :param end_transaction: the broker's END_TRANSACTION processor (None: EndTransaction is UNSUPPORTED).
    :param cluster: the other brokers of a topic, which QueryRoute and QueryAssignment list too
        (None: this broker alone).
    :param slave: this broker is a slave: QueryRoute and QueryAssignment list the masters only (its
        own master among them; ``cluster`` must then not leave this broker's name out).
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, broker_name: str, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, send: SendMessageProcessor, send_back: SendBackProcessor,
                 pop: PopService, retry_delays_ms: list[int], auto_create_topic: bool = True,
                 advertised: tuple[str, int] | None = None, rng: random.Random | None = None,
                 consumers: ConsumerManager | None = None, producers: ProducerManager | None = None,
                 end_transaction: IRequestProcessor | None = None, cluster: ClusterView | None = None,
                 slave: bool = False) -> None:
        self._clock = clock
        self._broker_name = broker_name
        self._topics = topics
        self._groups = groups
        self._send = send
        self._send_back = send_back
        self.pop = pop
        pop.dead_letter = self._dead_letter
        self.settings = ClientSettings(retry_delays_ms, self._group_config)
        #: the POP state's file (rocketpy.grpc.checkpoint), when it is kept on disk
        self.checkpoint: JsonConfigFile | None = None
        #: the store's timer settings: a sent timer message gets a recall handle (None: none does)
        self.timer: TimerRules | None = None
        #: PullMessage and the offset RPCs (None: UNIMPLEMENTED)
        self.queues: QueueRpcs | None = None
        #: RecallMessage (None: UNIMPLEMENTED)
        self.recall: Recall | None = None
        self._auto_create = auto_create_topic
        self.advertised = advertised
        self._rng = rng or random.Random()
        self._consumers = consumers
        self._producers = producers
        self._channels: dict[str, GrpcClientChannel] = {}
        self._end_transaction = end_transaction
        #: the other brokers of a topic (None: this broker alone)
        self.cluster = cluster
        self._slave = slave
        self._forgetter = LoopingCall(self.forget_gone_clients)
        self._forgetter.clock = clock

    def start(self) -> None:
        """Start POP's renewal and revival, and forgetting clients that are gone."""
        self.pop.start()
        self._forgetter.start(FORGET_PERIOD_S, now=False)

    def stop(self) -> None:
        if self._forgetter.running:
            self._forgetter.stop()
        self.pop.stop()

    def _group_config(self, group: str) -> SubscriptionGroupConfig:
        """The group's settings (created with the defaults, as on a 4.x heartbeat)."""
        config = self._groups.find_subscription_group_config(group) if group else None
        return SubscriptionGroupConfig(group) if config is None else config

    def _retry_max_times(self, group: str) -> int:
        return self._group_config(group).retry_max_times

    def _dead_letter(self, group: str, lease: Lease) -> Deferred[bool]:
        """The message of ``lease`` to ``%DLQ%<group>``, as the Java proxy does it: a
        CONSUMER_SEND_MSG_BACK with delay level -1."""
        fields = {"offset": str(lease.commit_log_offset), "group": group, "delayLevel": "-1",
                  "originTopic": lease.topic, "maxReconsumeTimes": str(self._retry_max_times(group))}
        request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
        d = self._send_back.process_request(cast(Any, PeerChannel(self._broker_name)), request)
        return d.addCallback(lambda response: response.code == ResponseCode.SUCCESS)

    # -- route ------------------------------------------------------------------

    def _topic(self, resource: pb.Resource, peer: str) -> TopicConfig:
        name = topic_name(resource)
        config = self._topics.select_topic_config(name)
        if config is None and self._auto_create:
            config = self._topics.create_topic_in_send_message_method(name, TBW102, peer, 8)
        if config is None:
            raise GrpcError(pb.Code.TOPIC_NOT_FOUND, f"topic {name} not found")
        return config

    def _broker(self, endpoints: pb.Endpoints) -> pb.Broker:
        """This broker, at the advertised address or else where the client reached it."""
        if self.advertised is not None:
            endpoints = endpoints_of(*self.advertised)
        return master(self._broker_name, endpoints)

    async def _route_brokers(self, ctx: CallContext, topic: pb.Resource,
                             endpoints: pb.Endpoints) -> list[RouteBroker]:
        """Every master of ``topic``, by name: this broker when it has the topic, and the others the name
        servers route it to (``cluster``). A topic nobody has is auto-created here (or TOPIC_NOT_FOUND)."""
        name = topic_name(topic)
        peers = [] if self.cluster is None else await self.cluster.peers(name)
        # a slave's clients go to the masters (its own among the peers): it lists itself only when alone
        config = None if self._slave and peers else self._topics.select_topic_config(name)
        if config is None and not peers:
            config = self._topic(topic, ctx.peer)
        brokers = [] if config is None else [RouteBroker(self._broker(endpoints), config.perm,
                                                         config.read_queue_nums, config.write_queue_nums)]
        return sorted(brokers + peers, key=lambda b: b.broker.name)

    def query_route(self, ctx: CallContext, request: rpc.QueryRouteRequest) -> Deferred[rpc.QueryRouteResponse]:
        return Deferred.fromCoroutine(self._query_route(ctx, request))

    async def _query_route(self, ctx: CallContext, request: rpc.QueryRouteRequest) -> rpc.QueryRouteResponse:
        brokers = await self._route_brokers(ctx, request.topic, request.endpoints)
        return rpc.QueryRouteResponse(status=ok(), message_queues=route_queues(request.topic, brokers))

    def query_assignment(self, ctx: CallContext,
                         request: rpc.QueryAssignmentRequest) -> Deferred[rpc.QueryAssignmentResponse]:
        return Deferred.fromCoroutine(self._query_assignment(ctx, request))

    async def _query_assignment(self, ctx: CallContext,
                                request: rpc.QueryAssignmentRequest) -> rpc.QueryAssignmentResponse:
        check_group(request.group)
        brokers = await self._route_brokers(ctx, request.topic, request.endpoints)
        fifo = self._group_config(request.group.name).consume_message_orderly
        found = assignments(request.topic, brokers, fifo)
        if not found:
            return rpc.QueryAssignmentResponse(status=status(pb.Code.FORBIDDEN, "no readable queue"))
        return rpc.QueryAssignmentResponse(status=ok(), assignments=found)

    # -- clients ------------------------------------------------------------------

    def telemetry(self, ctx: CallContext, command: rpc.TelemetryCommand,
                  stream: TelemetryStream | None = None) -> rpc.TelemetryCommand | None:
        """Settings in, merged settings out; the client's answers to the broker's commands go to the
        calls waiting for them; nothing is answered but settings.

        Settings also register the client in the broker's tables and make ``stream`` the way the
        broker's requests reach it (``ClientActivity.processAndWriteClientSettings``).
        """
        if command.WhichOneof("command") != "settings":
            channel = self._channels.get(ctx.client_id)
            if channel is not None:
                channel.answered(command)
            return None
        merged = self.settings.update(ctx.client_id, command.settings)
        if stream is not None:
            self._channel(ctx).attach(stream)
        found = self.settings.get(ctx.client_id)
        if found is not None:
            self._register(ctx, found, found.subscription.group.name)
        return rpc.TelemetryCommand(status=ok(), settings=merged)

    def telemetry_closed(self, ctx: CallContext, stream: TelemetryStream | None = None) -> None:
        """The client's Telemetry stream ended: it is gone (its auto-renewed leases run out)."""
        self.pop.client_gone(ctx.client_id)
        channel = self._channels.get(ctx.client_id)
        if channel is not None and stream is not None:
            channel.detach(stream)

    def heartbeat(self, ctx: CallContext, request: rpc.HeartbeatRequest) -> rpc.HeartbeatResponse:
        found = self.settings.get(ctx.client_id)
        if found is None:
            return rpc.HeartbeatResponse(status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE,
                                                       "cannot find client settings for this client"))
        if found.client_type in _CONSUMER_TYPES:
            check_group(request.group)
        elif found.client_type != pb.ClientType.PRODUCER:
            return rpc.HeartbeatResponse(status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE,
                                                       pb.ClientType.Name(found.client_type)))
        self._register(ctx, found, request.group.name)
        return rpc.HeartbeatResponse(status=ok())

    def _register(self, ctx: CallContext, settings: pb.Settings, group: str) -> None:
        """A consumer in its group's table, a producer in its topics' (a consumer group must be legal)."""
        self._channel(ctx).settings = settings
        if settings.client_type in _CONSUMER_TYPES:
            if group and send_topic_problem(group) is None:
                self._register_consumer(ctx, group, settings)
        elif settings.client_type == pb.ClientType.PRODUCER:
            self._register_producer(ctx, settings)

    def _channel(self, ctx: CallContext) -> GrpcClientChannel:
        channel = self._channels.get(ctx.client_id)
        if channel is None:
            channel = self._channels[ctx.client_id] = GrpcClientChannel(ctx.client_id, ctx.peer, self._broker_name,
                                                                        self._clock)
        return channel

    def _channel_info(self, ctx: CallContext, settings: pb.Settings) -> ClientChannelInfo:
        language = pb.Language.Name(settings.user_agent.language) if settings.HasField("user_agent") else "OTHER"
        return ClientChannelInfo(self._channel(ctx), ctx.client_id, language)

    def _register_consumer(self, ctx: CallContext, group: str, settings: pb.Settings) -> None:
        """In the broker's consumer table, as ``ClientActivity.registerConsumer`` (CONSUME_PASSIVELY; a
        PULL_CONSUMER CONSUME_ACTIVELY, as a 4.x pull consumer)."""
        if self._consumers is None:
            return
        subscriptions = [SubscriptionData.build(entry.topic.name, entry.expression.expression or "*")
                         for entry in settings.subscription.subscriptions]
        kind = (ConsumeType.CONSUME_ACTIVELY if settings.client_type == pb.ClientType.PULL_CONSUMER
                else ConsumeType.CONSUME_PASSIVELY)
        data = ConsumerData(group, kind, MessageModel.CLUSTERING,
                            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subscriptions)
        self._consumers.register_consumer(data, self._channel_info(ctx, settings), notify=False)

    def _register_producer(self, ctx: CallContext, settings: pb.Settings) -> None:
        """In the broker's producer table, one group per topic (the Java proxy's producer group)."""
        if self._producers is None:
            return
        for topic in settings.publishing.topics:
            self._producers.register_producer(topic.name, self._channel_info(ctx, settings))

    def _unregister(self, client_id: str, settings: pb.Settings) -> None:
        channel = self._channels.pop(client_id, None)
        if channel is None:
            return
        if self._consumers is not None and settings.HasField("subscription"):
            self._consumers.unregister_consumer(settings.subscription.group.name, channel, notify=False)
        if self._producers is not None:
            for topic in settings.publishing.topics:
                self._producers.unregister_producer(topic.name, channel)

    def forget_gone_clients(self) -> list[str]:
        """Forget the clients that are gone (their settings and channels), as the Java proxy's settings
        cleaner: no open Telemetry stream, and no longer in the broker's client tables (their heartbeats
        stopped, so they expired as 4.x clients do). Their leases stay: they run out and come back."""
        raw = self.settings.all_raw()
        gone = [client_id for client_id in raw.keys() | self._channels.keys()
                if not self._alive(client_id, raw.get(client_id))]
        for client_id in gone:
            self.settings.remove(client_id)
            self._unregister(client_id, raw.get(client_id) or pb.Settings())
            self.log.info("gRPC client {client} is gone: forgotten", client=client_id)
        return gone

    def _alive(self, client_id: str, settings: pb.Settings | None) -> bool:
        """Whether the client has an open Telemetry stream or is in the broker's client tables."""
        channel = self._channels.get(client_id)
        if channel is None or settings is None:
            return False
        if channel.writable:
            return True
        if self._consumers is not None and settings.HasField("subscription"):
            info = self._consumers.find_channel(settings.subscription.group.name, client_id)
            if info is not None and info.channel is channel:
                return True
        return self._producers is not None and any(
            info.channel is channel for topic in settings.publishing.topics
            for info in self._producers.channels_of(topic.name))

    def notify_client_termination(self, ctx: CallContext, request: rpc.NotifyClientTerminationRequest
                                  ) -> rpc.NotifyClientTerminationResponse:
        self.pop.client_gone(ctx.client_id)
        settings = self.settings.remove(ctx.client_id)
        if settings is None:
            return rpc.NotifyClientTerminationResponse(status=status(
                pb.Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"))
        self._unregister(ctx.client_id, settings)
        return rpc.NotifyClientTerminationResponse(status=ok())

    # -- send ---------------------------------------------------------------------

    def send_message(self, ctx: CallContext, request: rpc.SendMessageRequest) -> Deferred[rpc.SendMessageResponse]:
        return Deferred.fromCoroutine(self._send_message(ctx, request))

    async def _send_message(self, ctx: CallContext, request: rpc.SendMessageRequest) -> rpc.SendMessageResponse:
        if not request.messages:
            raise GrpcError(pb.Code.MESSAGE_CORRUPTED, "no message to send")
        topic = request.messages[0].topic
        if any(m.topic.name != topic.name for m in request.messages):
            raise GrpcError(pb.Code.MESSAGE_CORRUPTED, "topic in message is not same")
        config = self._topic(topic, ctx.peer)
        if config.write_queue_nums <= 0:
            raise GrpcError(pb.Code.FORBIDDEN, f"topic {topic.name} has no writable queue")
        group = request.messages[0].system_properties.message_group
        queue_id = (abs(java_hash(group)) if group else self._rng.randrange(1 << 31)) % config.write_queue_nums
        producer_group = topic.name  # as the Java proxy: the topic is the producer group (transaction checks)
        channel = PeerChannel(ctx.peer)
        entries = []
        for msg in request.messages:
            command = convert.send_request(msg, producer_group, queue_id, defaults.MAX_MESSAGE_SIZE,
                                           int(self._clock.seconds() * 1000))
            response: RemotingCommand = await as_deferred(self._send.process_request(channel, command))
            if response.code != ResponseCode.SUCCESS:
                raise GrpcError(from_remoting(response.code, response.remark).code,
                                response.remark or str(response.code))
            fields = response.ext_fields
            entry = rpc.SendResultEntry(status=ok(), message_id=msg.system_properties.message_id,
                                        offset=int(fields.get("queueOffset", "0")))
            if msg.system_properties.message_type == pb.MessageType.TRANSACTION:
                entry.transaction_id = sent_transaction_id(self._broker_name, response)
            entry.recall_handle = sent_handle(msg, self._broker_name, self.timer, int(self._clock.seconds() * 1000))
            entries.append(entry)
        return rpc.SendMessageResponse(status=overall({e.status.code for e in entries}), entries=entries)

    # -- transactions ---------------------------------------------------------------

    def end_transaction(self, ctx: CallContext, request: rpc.EndTransactionRequest
                        ) -> Deferred[rpc.EndTransactionResponse]:
        return Deferred.fromCoroutine(self._end_transaction_of(ctx, request))

    async def _end_transaction_of(self, ctx: CallContext, request: rpc.EndTransactionRequest
                                  ) -> rpc.EndTransactionResponse:
        """Commit or roll back the half message the transaction id names (``EndTransactionActivity``)."""
        if self._end_transaction is None:
            raise GrpcError(pb.Code.UNSUPPORTED, "transactions are not served by this endpoint")
        name = topic_name(request.topic)
        if not request.transaction_id.strip():
            raise GrpcError(pb.Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        where = TransactionId.decode(request.transaction_id)
        if where.broker_name != self._broker_name:
            raise GrpcError(pb.Code.INVALID_TRANSACTION_ID, f"transaction id {request.transaction_id!r} is of "
                                                            f"broker {where.broker_name!r}, not this one")
        response = await as_deferred(self._end_transaction.process_request(
            cast(Any, PeerChannel(ctx.peer)), end_request(request, where)))
        if response is None or response.code == ResponseCode.SUCCESS:  # None: unknown state, nothing to do
            return rpc.EndTransactionResponse(status=ok())
        if response.code == ResponseCode.ILLEGAL_OPERATION:  # after its recovery duration: the check decides
            raise GrpcError(pb.Code.PRECONDITION_FAILED, response.remark or "too late")
        if response.remark in _NOT_A_TRANSACTION:
            raise GrpcError(pb.Code.INVALID_TRANSACTION_ID, f"{response.remark}: transaction "
                                                            f"{request.transaction_id} of topic {name}")
        raise GrpcError(from_remoting(response.code, response.remark).code, response.remark or str(response.code))

    # -- receive, ack, invisibility ------------------------------------------------

    def receive_message(self, ctx: CallContext, request: rpc.ReceiveMessageRequest,
                        remaining_ms: int | None) -> Deferred[list[rpc.ReceiveMessageResponse]]:
        """The whole response stream: a status, the messages, then the delivery timestamp."""
        return Deferred.fromCoroutine(self._receive(ctx, request, remaining_ms))

    async def _receive(self, ctx: CallContext, request: rpc.ReceiveMessageRequest,
                       remaining_ms: int | None) -> list[rpc.ReceiveMessageResponse]:
        try:
            stream = await self._receive_stream(ctx, request, remaining_ms)
        except GrpcError as e:
            stream = [rpc.ReceiveMessageResponse(status=status(e.code, e.message))]
        stream.append(rpc.ReceiveMessageResponse(delivery_timestamp=convert.timestamp(self.pop.now_ms())))
        return stream

    async def _receive_stream(self, ctx: CallContext, request: rpc.ReceiveMessageRequest,
                              remaining_ms: int | None) -> list[rpc.ReceiveMessageResponse]:
        # The request carries all a receive needs: a SimpleConsumer may receive before its
        # Telemetry settings arrived (it does not wait for them), so none are required here.
        poll_ms = polling_ms(request, remaining_ms)
        check_group(request.group)
        self._check_broker(request.message_queue.broker.name)
        topic = request.message_queue.topic
        self._topic(topic, ctx.peer)
        invisible_ms = convert.duration_ms(request.invisible_duration)
        renew_for = ctx.client_id if request.auto_renew else None
        if renew_for is not None:  # a PushConsumer: this endpoint keeps its messages invisible
            invisible_ms = DEFAULT_INVISIBLE_MS
        elif not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            raise GrpcError(pb.Code.ILLEGAL_INVISIBLE_TIME,
                            f"the invisibleTime is too small or too large, min: {MIN_INVISIBLE_MS}, "
                            f"max: {MAX_INVISIBLE_MS}, invisibleTime: {invisible_ms}")
        expression = request.filter_expression
        if expression.type == pb.FilterType.SQL:
            raise GrpcError(pb.Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filtering is not supported")
        try:
            tag_filter = build_tag_filter(expression.expression or "*")
        except SubscriptionParseError as e:
            raise GrpcError(pb.Code.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
        batch = max(1, request.batch_size)
        # The queue id is not used: as the Java proxy (ReceiveMessageQueueSelector), the request's
        # broker is popped as a whole (queue -1), whichever queue the client picked.
        group = self._group_config(request.group.name)
        received = await self.pop.receive(request.group.name, topic.name, batch, invisible_ms, poll_ms, tag_filter,
                                          group.retry_max_times + 1, renew_for,
                                          fifo=group.consume_message_orderly)
        if not received:
            return [rpc.ReceiveMessageResponse(status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))]
        stream = [rpc.ReceiveMessageResponse(status=ok())]
        for ext, lease in received:
            stream.append(rpc.ReceiveMessageResponse(
                message=convert.to_v2(ext, lease.handle, lease.attempt, invisible_ms, self.pop.now_ms())))
        return stream

    def _check_broker(self, name: str) -> None:
        check_broker(name, self._broker_name)

    def ack_message(self, ctx: CallContext, request: rpc.AckMessageRequest) -> rpc.AckMessageResponse:
        check_group(request.group)
        entries = []
        for entry in request.entries:
            outcome = self.pop.ack(request.group.name, request.topic.name, entry.receipt_handle)
            code = pb.Code.OK if outcome is AckOutcome.OK else pb.Code.INVALID_RECEIPT_HANDLE
            entries.append(rpc.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                status=status(code, None if code == pb.Code.OK else outcome.value)))
        return rpc.AckMessageResponse(status=overall({e.status.code for e in entries}), entries=entries)

    def forward_message_to_dead_letter_queue(self, ctx: CallContext,
                                             request: rpc.ForwardMessageToDeadLetterQueueRequest
                                             ) -> Deferred[rpc.ForwardMessageToDeadLetterQueueResponse]:
        return Deferred.fromCoroutine(self._forward(request))

    async def _forward(self, request: rpc.ForwardMessageToDeadLetterQueueRequest
                       ) -> rpc.ForwardMessageToDeadLetterQueueResponse:
        check_group(request.group)
        outcome = await self.pop.forward_to_dead_letter(request.group.name, request.topic.name, request.receipt_handle)
        if outcome is not AckOutcome.OK:
            return rpc.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.Code.INVALID_RECEIPT_HANDLE, outcome.value))
        return rpc.ForwardMessageToDeadLetterQueueResponse(status=ok())

    def change_invisible_duration(self, ctx: CallContext, request: rpc.ChangeInvisibleDurationRequest
                                  ) -> rpc.ChangeInvisibleDurationResponse:
        check_group(request.group)
        invisible_ms = convert.duration_ms(request.invisible_duration)
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise GrpcError(pb.Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large, max: "
                                                            f"{MAX_INVISIBLE_MS}, invisibleTime: {invisible_ms}")
        outcome, handle = self.pop.change_invisible(request.group.name, request.topic.name, request.receipt_handle,
                                                    invisible_ms)
        if outcome is not AckOutcome.OK:
            return rpc.ChangeInvisibleDurationResponse(status=status(pb.Code.INVALID_RECEIPT_HANDLE, outcome.value))
        return rpc.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)
