"""Client-manage and consumer-manage request processors and their shared base (doc/wire.md §4–5).

The admin processor is in :mod:`rocketpy.broker.admin`.

Every handler answers bad input with a response code and a remark naming the
problem (a :class:`Rejected`, or a :class:`~rocketpy.common.headers.HeaderError`
as SYSTEM_ERROR, see :class:`~rocketpy.remoting.responders.Responder`); all
response ext values are strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from rocketpy.broker.filter import PropertyFilterDisabled, SubscriptionParseError, build_filter
from rocketpy.broker.clients import ClientChannelInfo, ConsumerManager, ProducerManager
from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.heartbeat import HeartbeatError, MessageModel, parse_heartbeat
from rocketpy.broker.offsets import ConsumerOffsetManager, RebalanceLockManager
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.broker.traffic import BrokerTraffic
from rocketpy.common.fastjson import dump_json, loads_body
from rocketpy.common.headers import get_int, get_str
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import PERM_READ, PERM_WRITE, retry_topic
from rocketpy.interfaces import IChannel, ICommandLocator, IStoreService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.responders import RequestRefused

Handler = Callable[[IChannel, RemotingCommand], "RemotingCommand | Deferred[RemotingCommand]"]
NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


class Rejected(RequestRefused):
    """A request the broker refuses with ``code`` and ``remark``."""


@dataclass
class BrokerTables:
    """What the processors share: settings, managers, the store and the clock."""

    config: BrokerConfig
    topics: TopicConfigManager
    subscriptions: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    store: IStoreService
    clock: IReactorTime
    locks: RebalanceLockManager
    #: how many pull requests long polling holds now (GET_BROKER_RUNTIME_INFO)
    held_pulls: Callable[[], int] = lambda: 0
    #: traffic counters and rates (GET_CONSUME_STATS, GET_BROKER_RUNTIME_INFO); None: not counted
    traffic: BrokerTraffic | None = None
    #: the timer's GET_BROKER_RUNTIME_INFO keys (``TimerMessageService.runtime_figures``)
    timer_figures: Callable[[], dict[str, str]] = dict

    def queue(self, request: RemotingCommand) -> tuple[str, int]:
        """The request's ``topic`` and ``queueId``, checked against the topic table.

        :raises Rejected: unknown topic (17) or queue id out of range (1).
        """
        topic = get_str(request.ext_fields, "topic")
        queue_id = get_int(request.ext_fields, "queueId", bits=32)
        config = self.topics.select_topic_config(topic)
        if config is None:
            raise Rejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        valid = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= queue_id < valid:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:{topic} read/write queue nums:{valid}",
            )
        return topic, queue_id


@implementer(ICommandLocator)
class TableProcessor:
    """Request handlers over the broker's tables: ``handlers`` says which method answers which
    code, and the server registers each under its code
    (:func:`~rocketpy.remoting.responders.register_responders`)."""

    handlers: dict[int, Handler]

    def __init__(self, tables: BrokerTables) -> None:
        self._t = tables

    def responders(self) -> dict[int, Handler]:
        return self.handlers


def ok_response(request: RemotingCommand, body: bytes = b"", **ext: object) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, None, {k: str(v) for k, v in ext.items()}, body)


def body_json(request: RemotingCommand) -> Any:
    try:
        return loads_body(request.body)
    except (UnicodeDecodeError, ValueError) as e:
        raise Rejected(ResponseCode.SYSTEM_ERROR, f"request body is not JSON: {e}") from None


class ClientManageProcessor(TableProcessor):
    """HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG."""

    def __init__(self, tables: BrokerTables) -> None:
        super().__init__(tables)
        self.handlers = {
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
        }

    def heart_beat(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """Register producers and consumers; create each consumer group and its retry topic."""
        try:
            data = parse_heartbeat(request.body)
        except HeartbeatError as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        t = self._t
        for consumer in data.consumers:
            group = t.subscriptions.find_subscription_group_config(consumer.group_name)
            notify = group.notify_consumer_ids_changed_enable if group is not None else True
            if group is not None and consumer.message_model == MessageModel.CLUSTERING:
                t.topics.create_topic_in_send_message_back_method(
                    retry_topic(consumer.group_name), group.retry_queue_nums, PERM_READ | PERM_WRITE
                )
            info = ClientChannelInfo(channel, data.client_id, request.language, request.version)
            t.consumers.register_consumer(consumer, info, notify)
        for group_name in data.producer_groups:
            t.producers.register_producer(
                group_name, ClientChannelInfo(channel, data.client_id, request.language, request.version)
            )
        return ok_response(request)

    def check_client_config(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46): can this broker serve the body's ``subscriptionData``?

        Java clients ask it at start for every non-tag subscription: SQL92 needs
        ``enablePropertyFilter`` (else SYSTEM_ERROR) and an expression that compiles (else 23).
        """
        body = body_json(request) if request.body else None
        sub = body.get("subscriptionData") if isinstance(body, dict) else None
        if not isinstance(sub, dict):
            return ok_response(request)
        try:
            build_filter(sub.get("subString"), sub.get("expressionType"), self._t.config.enable_property_filter)
        except PropertyFilterDisabled as e:
            raise Rejected(ResponseCode.SYSTEM_ERROR, str(e)) from None
        except SubscriptionParseError as e:
            raise Rejected(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e)) from None
        return ok_response(request)

    def unregister_client(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """Forget this connection's producer and consumer group (empty names are ignored)."""
        get_str(request.ext_fields, "clientID")
        producer = request.ext_fields.get("producerGroup")
        consumer = request.ext_fields.get("consumerGroup")
        if producer:
            self._t.producers.unregister_producer(producer, channel)
        if consumer:
            group = self._t.subscriptions.groups().get(consumer)
            notify = group.notify_consumer_ids_changed_enable if group is not None else True
            self._t.consumers.unregister_consumer(consumer, channel, notify)
        return ok_response(request)


class ConsumerManageProcessor(TableProcessor):
    """Consumer lists, committed offsets and queue offsets."""

    def __init__(self, tables: BrokerTables) -> None:
        super().__init__(tables)
        self.handlers = {
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
        }

    def consumer_list(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        info = self._t.consumers.get_consumer_group_info(group)
        ids = info.client_ids() if info is not None else []
        if not ids:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return ok_response(request, dump_json({"consumerIdList": ids}))

    def query_consumer_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """The committed offset; 0 for a new group on a never-truncated queue; else 22."""
        group = get_str(request.ext_fields, "consumerGroup")
        topic, queue_id = self._t.queue(request)
        offset = self._t.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return ok_response(request, offset=offset)
        if self._t.store.get_min_offset_in_queue(topic, queue_id) <= 0:
            return ok_response(request, offset=0)
        raise Rejected(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)

    def update_consumer_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        topic, queue_id = self._t.queue(request)
        offset = get_int(request.ext_fields, "commitOffset")
        self._t.offsets.commit_offset(channel.remote_address, group, topic, queue_id, offset)
        return ok_response(request)

    def max_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._t.queue(request)
        return ok_response(request, offset=self._t.store.get_max_offset_in_queue(topic, queue_id))

    def min_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._t.queue(request)
        return ok_response(request, offset=self._t.store.get_min_offset_in_queue(topic, queue_id))

    def search_offset(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        topic, queue_id = self._t.queue(request)
        timestamp = get_int(request.ext_fields, "timestamp")
        d: Deferred[int] = self._t.store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
        return d.addCallback(lambda offset: ok_response(request, offset=offset))

    def earliest_time(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        topic, queue_id = self._t.queue(request)
        d: Deferred[int] = self._t.store.get_earliest_message_time(topic, queue_id)
        return d.addCallback(lambda timestamp: ok_response(request, timestamp=timestamp))

    def lock_batch(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """Lock queues for orderly consumption; the body lists the queues the client now holds."""
        group, client_id, mqs = _lock_body(request)
        held = self._t.locks.try_lock_batch(group, mqs, client_id)
        return ok_response(request, dump_json({"lockOKMQSet": [mq.to_json() for mq in held]}))

    def unlock_batch(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group, client_id, mqs = _lock_body(request)
        self._t.locks.unlock_batch(group, mqs, client_id)
        return ok_response(request)


def _lock_body(request: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
    """``consumerGroup``, ``clientId`` and ``mqSet`` of a LockBatchRequestBody / UnlockBatchRequestBody."""
    obj = body_json(request)
    try:
        group, client_id = obj["consumerGroup"], obj["clientId"]
        if not isinstance(group, str) or not isinstance(client_id, str):
            raise ValueError("consumerGroup and clientId must be strings")
        return group, client_id, [MessageQueue.from_json(mq) for mq in obj.get("mqSet") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise Rejected(ResponseCode.SYSTEM_ERROR, f"bad lock request body: {e!r}") from None
