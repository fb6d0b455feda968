"""Client-manage, consumer-manage and admin request processors (spec §3.2–3.3, §3.7).

Every handler answers bad input with a response code and a remark naming the
problem (a :class:`~rocketpy.common.headers.HeaderError` becomes
SYSTEM_ERROR); all response ext values are strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.broker.clients import (
    ClientChannelInfo,
    ConsumerManager,
    HeartbeatError,
    MessageModel,
    ProducerManager,
    parse_heartbeat,
)
from rocketpy.broker.config import BrokerConfig, dump_json
from rocketpy.broker.offsets import ConsumerOffsetManager, MessageQueue, RebalanceLockManager
from rocketpy.broker.subscription import SubscriptionGroupConfig, SubscriptionGroupManager
from rocketpy.broker.topicconfig import (
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
    TopicConfigManager,
    retry_topic,
    topic_problem,
)
from rocketpy.common.fastjson import object_key_map
from rocketpy.common.headers import HeaderError, get_bool, get_int, get_str
from rocketpy.interfaces import IChannel, IRequestProcessor
from rocketpy.remoting.codes import ROCKETPY_VERSION, LanguageCode, RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError

Handler = Callable[[IChannel, RemotingCommand], "RemotingCommand | Deferred[RemotingCommand]"]
VERSION_DESC = "V4_9_4"
#: GET_BROKER_RUNTIME_INFO keys rocketpy does not measure (``mqadmin clusterList`` reads them).
_ZERO_RUNTIME_KEYS = (
    "msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning", "msgGetTotalTodayNow", "earliestMessageTimeStamp", "commitLogMinOffset",
    "sendThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueSize",
    "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills", "dispatchBehindBytes",
)
NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
#: Seconds the broker waits for a consumer's answer to a request it forwards (GET_CONSUMER_RUNNING_INFO).
CALL_CONSUMER_TIMEOUT = 5.0


class Rejected(Exception):
    """A request refused with ``code`` and ``remark``."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass
class BrokerTables:
    """What the processors share: settings, managers, the store and the clock."""

    config: BrokerConfig
    topics: TopicConfigManager
    subscriptions: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    store: Any  # StoreService (doc/store-api.md)
    clock: IReactorTime
    locks: RebalanceLockManager

    def queue(self, request: RemotingCommand) -> tuple[str, int]:
        """The request's ``topic`` and ``queueId``, checked against the topic table.

        :raises Rejected: unknown topic (17) or queue id out of range (1).
        """
        topic = get_str(request.ext_fields, "topic")
        queue_id = get_int(request.ext_fields, "queueId")
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


@implementer(IRequestProcessor)
class _TableProcessor:
    """Dispatches by request code to ``handlers``; turns bad input into responses."""

    handlers: dict[int, Handler]

    def __init__(self, tables: BrokerTables) -> None:
        self._t = tables

    def reject_request(self) -> bool:
        return False

    @property
    def codes(self) -> list[int]:
        """The request codes this processor serves."""
        return list(self.handlers)

    def process_request(
        self, channel: IChannel, request: RemotingCommand
    ) -> RemotingCommand | Deferred[RemotingCommand]:
        handler = self.handlers.get(request.code)
        if handler is None:
            return request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
            )
        try:
            return handler(channel, request)
        except HeaderError as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        except Rejected as e:
            return request.make_response(e.code, e.remark)


def _ok(request: RemotingCommand, body: bytes = b"", **ext: object) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, None, {k: str(v) for k, v in ext.items()}, body)


def _body_json(request: RemotingCommand) -> Any:
    try:
        return json.loads(request.body)
    except (UnicodeDecodeError, ValueError) as e:
        raise Rejected(ResponseCode.SYSTEM_ERROR, f"request body is not JSON: {e}") from None


class ClientManageProcessor(_TableProcessor):
    """HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG."""

    def __init__(self, tables: BrokerTables) -> None:
        super().__init__(tables)
        self.handlers = {
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.CHECK_CLIENT_CONFIG: lambda channel, request: _ok(request),
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
        return _ok(request)

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
        return _ok(request)


class ConsumerManageProcessor(_TableProcessor):
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
        return _ok(request, dump_json({"consumerIdList": ids}))

    def query_consumer_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """The committed offset; 0 for a new group on a never-truncated queue; else 22."""
        group = get_str(request.ext_fields, "consumerGroup")
        topic, queue_id = self._t.queue(request)
        offset = self._t.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return _ok(request, offset=offset)
        if self._t.store.get_min_offset_in_queue(topic, queue_id) <= 0:
            return _ok(request, offset=0)
        raise Rejected(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)

    def update_consumer_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        topic, queue_id = self._t.queue(request)
        offset = get_int(request.ext_fields, "commitOffset")
        self._t.offsets.commit_offset(channel.remote_address, group, topic, queue_id, offset)
        return _ok(request)

    def max_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._t.queue(request)
        return _ok(request, offset=self._t.store.get_max_offset_in_queue(topic, queue_id))

    def min_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic, queue_id = self._t.queue(request)
        return _ok(request, offset=self._t.store.get_min_offset_in_queue(topic, queue_id))

    def search_offset(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        topic, queue_id = self._t.queue(request)
        timestamp = get_int(request.ext_fields, "timestamp")
        d: Deferred[int] = self._t.store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
        return d.addCallback(lambda offset: _ok(request, offset=offset))

    def earliest_time(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        topic, queue_id = self._t.queue(request)
        d: Deferred[int] = self._t.store.get_earliest_message_time(topic, queue_id)
        return d.addCallback(lambda timestamp: _ok(request, timestamp=timestamp))

    def lock_batch(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """Lock queues for orderly consumption; the body lists the queues the client now holds."""
        group, client_id, mqs = _lock_body(request)
        held = self._t.locks.try_lock_batch(group, mqs, client_id)
        return _ok(request, dump_json({"lockOKMQSet": [mq.to_json() for mq in held]}))

    def unlock_batch(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group, client_id, mqs = _lock_body(request)
        self._t.locks.unlock_batch(group, mqs, client_id)
        return _ok(request)


def _lock_body(request: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
    """``consumerGroup``, ``clientId`` and ``mqSet`` of a LockBatchRequestBody / UnlockBatchRequestBody."""
    obj = _body_json(request)
    try:
        group, client_id = obj["consumerGroup"], obj["clientId"]
        if not isinstance(group, str) or not isinstance(client_id, str):
            raise ValueError("consumerGroup and clientId must be strings")
        return group, client_id, [MessageQueue.from_json(mq) for mq in obj.get("mqSet") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise Rejected(ResponseCode.SYSTEM_ERROR, f"bad lock request body: {e!r}") from None


def _relayed(answer: RemotingCommand, request: RemotingCommand) -> RemotingCommand:
    """A consumer's answer as the response to the admin ``request``."""
    ext = {k: str(v) for k, v in answer.ext_fields.items()}
    return request.make_response(answer.code, answer.remark, ext, answer.body)


def _consumer_call_failed(failure: Failure, request: RemotingCommand, group: str, client_id: str) -> RemotingCommand:
    """The response when a forwarded request got no answer: timeout (207) or any other failure (1)."""
    error = failure.value
    if isinstance(error, RemotingTimeoutError):
        remark = f"consumer <{group}> <{client_id}> Timeout: {error}"
        return request.make_response(ResponseCode.CONSUME_MSG_TIMEOUT, remark)
    remark = f"invoke consumer <{group}> <{client_id}> Exception: {type(error).__name__}: {error}"
    return request.make_response(ResponseCode.SYSTEM_ERROR, remark)


class AdminBrokerProcessor(_TableProcessor):
    """Topic and group administration and broker statistics (mqadmin / console)."""

    def __init__(self, tables: BrokerTables) -> None:
        super().__init__(tables)
        self._boot = tables.clock.seconds()
        self.handlers = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: lambda c, r: _ok(r, tables.topics.encode()),
            RequestCode.GET_ALL_CONSUMER_OFFSET: lambda c, r: _ok(r, tables.offsets.encode()),
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda c, r: _ok(r, tables.subscriptions.encode()),
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_subscription_group,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by_who,
        }

    def update_and_create_topic(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """Create or replace a topic; the change listener re-registers with the name servers."""
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        if topic == self._t.config.cluster_name:
            remark = f"the topic[{topic}] is conflict with system reserved words."
            raise Rejected(ResponseCode.SYSTEM_ERROR, remark)
        problem = topic_problem(topic)
        if problem is not None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, problem)
        config = TopicConfig(
            topic,
            get_int(ext, "readQueueNums"),
            get_int(ext, "writeQueueNums"),
            get_int(ext, "perm"),
            ext.get("topicFilterType") or "SINGLE_TAG",
            get_int(ext, "topicSysFlag", 0),
            get_bool(ext, "order"),
        )
        if config.read_queue_nums < 0 or config.write_queue_nums < 0:
            raise Rejected(ResponseCode.SYSTEM_ERROR, "queue numbers must not be negative")
        self._t.topics.update_topic_config(config)
        return _ok(request)

    def delete_topic(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic = get_str(request.ext_fields, "topic")
        self._t.topics.delete_topic_config(topic)
        self._t.offsets.remove_topic(topic)
        return _ok(request)

    def update_subscription_group(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        obj = _body_json(request)
        name = obj.get("groupName") if isinstance(obj, dict) else None
        if not isinstance(name, str) or not name:
            raise Rejected(ResponseCode.SYSTEM_ERROR, "subscription group body without groupName")
        try:
            config = SubscriptionGroupConfig.from_json(name, obj)
        except (TypeError, ValueError) as e:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"bad subscription group body: {e}") from None
        self._t.subscriptions.update_subscription_group_config(config)
        return _ok(request)

    def _total_messages(self) -> int:
        store = self._t.store
        return sum(
            store.get_max_offset_in_queue(name, qid)
            for name, config in self._t.topics.topics().items()
            for qid in range(config.write_queue_nums)
        )

    def runtime_info(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """``{"table":{…}}`` with the keys ``mqadmin clusterList`` reads, all strings."""
        now = self._t.clock.seconds()
        total = str(self._total_messages())
        table = dict.fromkeys(_ZERO_RUNTIME_KEYS, "0")
        table.update(
            brokerVersionDesc=VERSION_DESC,
            brokerVersion=str(ROCKETPY_VERSION),
            bootTimestamp=str(int(self._boot * 1000)),
            runtime=f"[ {int(now - self._boot)} seconds ]",
            msgPutTotalTodayNow=total,
            putTps="0.0 0.0 0.0",
            getTransferedTps="0.0 0.0 0.0",
            commitLogDiskRatio="0.0",
            commitLogMaxOffset=str(self._t.store.max_physical_offset),
            sendThreadPoolQueueCapacity="10000",
            pullThreadPoolQueueCapacity="100000",
            brokerActive="true",
        )
        return _ok(request, dump_json({"table": table}))

    def broker_config(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        props = self._t.config.to_properties()
        body = "".join(f"{k}={v}\n" for k, v in sorted(props.items())).encode("utf-8")
        return _ok(request, body, version=dump_json(self._t.topics.data_version.to_json()).decode())

    def _mq(self, topic: str, queue_id: int) -> dict[str, Any]:
        return {"brokerName": self._t.config.broker_name, "queueId": queue_id, "topic": topic}

    def topic_stats(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic = get_str(request.ext_fields, "topic")
        config = self._t.topics.select_topic_config(topic)
        if config is None:
            raise Rejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self._t.store
        entries = [
            (
                self._mq(topic, qid),
                {
                    "lastUpdateTimestamp": 0,
                    "maxOffset": store.get_max_offset_in_queue(topic, qid),
                    "minOffset": store.get_min_offset_in_queue(topic, qid),
                },
            )
            for qid in range(config.write_queue_nums)
        ]
        return _ok(request, ('{"offsetTable":' + object_key_map(entries) + "}").encode("utf-8"))

    def consume_stats(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        topic = request.ext_fields.get("topic")
        topics = [topic] if topic else sorted(self._t.offsets.topics_of_group(group))
        entries = []
        for name in topics:
            config = self._t.topics.select_topic_config(name)
            if config is None:
                continue
            for qid in range(config.write_queue_nums):
                committed = max(self._t.offsets.query_offset(group, name, qid), 0)
                stats = {
                    "brokerOffset": self._t.store.get_max_offset_in_queue(name, qid),
                    "consumerOffset": committed,
                    "lastTimestamp": 0,
                }
                entries.append((self._mq(name, qid), stats))
        body = '{"consumeTps":0.0,"offsetTable":' + object_key_map(entries) + "}"
        return _ok(request, body.encode("utf-8"))

    def consumer_connections(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        info = self._t.consumers.get_consumer_group_info(group)
        if info is None:
            raise Rejected(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return _ok(request, dump_json(info.to_json()))

    def consumer_running_info(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """Ask one consumer (ext ``consumerGroup``, ``clientId``) for its ConsumerRunningInfo.

        The consumer's answer (code, remark, body) is the response; see :meth:`call_consumer`.
        """
        group = get_str(request.ext_fields, "consumerGroup")
        client_id = get_str(request.ext_fields, "clientId")
        return self.call_consumer(request, group, client_id)

    def call_consumer(self, request: RemotingCommand, group: str, client_id: str) -> Deferred[RemotingCommand]:
        """Forward ``request`` (code, ext fields, body) to a consumer over its connection.

        :raises Rejected: SYSTEM_ERROR when ``client_id`` has no connection in ``group``.
        :return: fires with the consumer's answer; with CONSUME_MSG_TIMEOUT when none comes within
            :data:`CALL_CONSUMER_TIMEOUT`, SYSTEM_ERROR when the call fails otherwise (as Java's broker).
        """
        info = self._t.consumers.find_channel(group, client_id)
        if info is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> not online")
        forward = RemotingCommand.request(
            request.code, dict(request.ext_fields), request.body, language=LanguageCode.JAVA.name
        )
        d: Deferred[RemotingCommand] = maybeDeferred(info.channel.invoke_sync, forward, CALL_CONSUMER_TIMEOUT)
        return d.addCallbacks(
            _relayed, _consumer_call_failed, callbackArgs=(request,), errbackArgs=(request, group, client_id)
        )

    def producer_connections(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "producerGroup")
        infos = self._t.producers.channels_of(group)
        if not infos:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return _ok(request, dump_json({"connectionSet": [i.to_json() for i in infos]}))

    def consumed_by_who(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic = get_str(request.ext_fields, "topic")
        groups = self._t.consumers.groups_of_topic(topic) | self._t.offsets.groups_of_topic(topic)
        return _ok(request, dump_json({"groupList": sorted(groups)}))
