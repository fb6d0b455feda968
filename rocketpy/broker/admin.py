"""The admin request processor: topics, groups, offsets, statistics, forwarded consumer calls
(doc/wire.md §9; mqadmin and the console).

Bad input is answered as in :mod:`rocketpy.broker.processors`: a response code and a remark.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.python.failure import Failure

from rocketpy.broker.consumestats import broker_consume_stats, consume_queue_body, consume_stats, consume_time_span
from rocketpy.broker.processors import BrokerTables, Rejected, TableProcessor, body_json, ok_response
from rocketpy.broker.resetoffset import reset_group_offsets
from rocketpy.broker.traffic import stats_data, topic_offsets
from rocketpy.broker.transaction import resumed_half
from rocketpy.common.fastjson import dump_json, object_key_map, raw_object
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.headers import get_bool, get_int, get_str
from rocketpy.common.message import decode_offset_msg_id
from rocketpy.common.properties import format_properties
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import TopicConfig, topic_problem
from rocketpy.interfaces import IChannel
from rocketpy.remoting.codes import ROCKETPY_VERSION, LanguageCode, RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError

VERSION_DESC = "V4_9_4"
#: GET_BROKER_RUNTIME_INFO keys rocketpy does not measure (``mqadmin clusterList`` reads them).
_ZERO_RUNTIME_KEYS = (
    "msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning", "msgGetTotalTodayNow", "commitLogMinOffset",
    "sendThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueSize",
    "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills", "dispatchBehindBytes",
)
#: Seconds the broker waits for a consumer's answer to a request it forwards (307, 309).
CALL_CONSUMER_TIMEOUT = 5.0


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


class AdminBrokerProcessor(TableProcessor):
    """Topic and group administration and broker statistics (mqadmin / console)."""

    def __init__(self, tables: BrokerTables) -> None:
        super().__init__(tables)
        self._boot = tables.clock.seconds()
        self.handlers = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: lambda c, r: ok_response(r, tables.topics.encode()),
            RequestCode.GET_ALL_CONSUMER_OFFSET: lambda c, r: ok_response(r, tables.offsets.encode()),
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda c, r: ok_response(r, tables.subscriptions.encode()),
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.TRIGGER_DELETE_FILES: self.trigger_delete_files,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER:
                lambda c, r: ok_response(r, dump_json({"topicList": sorted(tables.topics.system_topics)})),
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
            RequestCode.RESUME_CHECK_HALF_MESSAGE: self.resume_check_half_message,
            RequestCode.GET_ALL_PRODUCER_INFO:
                lambda c, r: ok_response(r, dump_json({"data": tables.producers.producer_table()})),
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
            RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue,
            RequestCode.QUERY_CONSUME_TIME_SPAN: self.query_consume_time_span,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by_who,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_broker_stats,
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
            get_int(ext, "readQueueNums", bits=32),
            get_int(ext, "writeQueueNums", bits=32),
            get_int(ext, "perm", bits=32),
            ext.get("topicFilterType") or "SINGLE_TAG",
            get_int(ext, "topicSysFlag", 0, bits=32),
            get_bool(ext, "order"),
        )
        if config.read_queue_nums < 0 or config.write_queue_nums < 0:
            raise Rejected(ResponseCode.SYSTEM_ERROR, "queue numbers must not be negative")
        self._t.topics.update_topic_config(config)
        return ok_response(request)

    def delete_topic(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic = get_str(request.ext_fields, "topic")
        self._t.topics.delete_topic_config(topic)
        self._t.offsets.remove_topic(topic)
        return ok_response(request)

    def update_subscription_group(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        obj = body_json(request)
        name = obj.get("groupName") if isinstance(obj, dict) else None
        if not isinstance(name, str) or not name:
            raise Rejected(ResponseCode.SYSTEM_ERROR, "subscription group body without groupName")
        try:
            config = SubscriptionGroupConfig.from_json(name, obj)
        except (TypeError, ValueError) as e:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"bad subscription group body: {e}") from None
        self._t.subscriptions.update_subscription_group_config(config)
        return ok_response(request)

    def delete_subscription_group(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP (``mqadmin deleteSubGroup``): ext ``groupName``, and with
        ``removeOffset`` true its committed offsets too."""
        group = get_str(request.ext_fields, "groupName")
        self._t.subscriptions.delete_subscription_group_config(group)
        if get_bool(request.ext_fields, "removeOffset"):
            self._t.offsets.remove_group(group)
        return ok_response(request)

    def trigger_delete_files(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """TRIGGER_DELETE_FILES: expired commit-log files go on the next clean passes, whatever
        the store's ``delete_when`` hour says (Java's ``executeDeleteFilesManually``)."""
        self._t.store.execute_delete_files_manually()
        return ok_response(request)

    def clone_group_offset(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """CLONE_GROUP_OFFSET (``mqadmin cloneGroupOffset``): ext ``srcGroup``, ``destGroup``, ``topic``
        (blank: every topic srcGroup committed on), ``offline``. Topics this broker lacks are skipped,
        and unless ``offline`` so are those an online srcGroup no longer subscribes to (as Java)."""
        ext = request.ext_fields
        src, dest = get_str(ext, "srcGroup"), get_str(ext, "destGroup")
        topic = ext.get("topic", "")
        offline = get_bool(ext, "offline")
        online = self._t.consumers.get_consumer_group_info(src)
        for name in [topic] if topic.strip() else sorted(self._t.offsets.topics_of_group(src)):
            if self._t.topics.select_topic_config(name) is None:
                continue
            if not offline and online is not None and online.subscriptions and name not in online.subscriptions:
                continue
            self._t.offsets.clone_offset(src, dest, name)
        return ok_response(request)

    def runtime_info(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """``{"table":{…}}`` with the keys ``mqadmin clusterList`` reads, all strings; the oldest
        message's store time and the disk ratio are read in the store's read pool."""
        return self._t.store.commit_log_figures().addCallback(self._runtime_table, request)

    def _runtime_table(self, figures: tuple[int, float], request: RemotingCommand) -> RemotingCommand:
        earliest, disk_ratio = figures
        now = self._t.clock.seconds()
        total = str(sum(topic_offsets(self._t.topics, self._t.store).values()))
        table = dict.fromkeys(_ZERO_RUNTIME_KEYS, "0")
        table.update(
            brokerVersionDesc=VERSION_DESC,
            brokerVersion=str(ROCKETPY_VERSION),
            bootTimestamp=str(int(self._boot * 1000)),
            runtime=f"[ {int(now - self._boot)} seconds ]",
            msgPutTotalTodayNow=total,
            putTps=self._tps("put"),
            getTransferedTps=self._tps("get"),
            commitLogDiskRatio=str(max(disk_ratio, 0.0)),
            earliestMessageTimeStamp=str(max(earliest, 0)),
            commitLogMaxOffset=str(self._t.store.max_physical_offset),
            sendThreadPoolQueueCapacity="10000",
            pullThreadPoolQueueCapacity="100000",
            brokerActive="true",
            heldPullRequests=str(self._t.held_pulls()),  # rocketpy's own: long polls parked now
        )
        table.update(self._t.timer_figures())
        return ok_response(request, dump_json({"table": table}))

    def _tps(self, key: str) -> str:
        """Messages ``key`` (put or got) per second over 10 s, 1 min and 10 min, as Java's broker."""
        traffic = self._t.traffic
        return " ".join(str(0.0 if traffic is None else traffic.total_rates(span).get(key, 0.0))
                        for span in (10, 60, 600))

    def view_broker_stats(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA (``mqadmin statsAll``, rocketmq-dashboard's topic TPS): ext
        ``statsName`` (``TOPIC_PUT_NUMS``, ``GROUP_GET_NUMS`` …) and ``statsKey`` (a topic, ``topic@group``)."""
        name, key = get_str(request.ext_fields, "statsName"), get_str(request.ext_fields, "statsKey")
        data = None if self._t.traffic is None else stats_data(self._t.traffic, name, key)
        if data is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return ok_response(request, dump_json(data))

    def broker_config(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        props = self._t.config.to_properties()
        body = format_properties(props).encode("utf-8")
        return ok_response(request, body, version=dump_json(self._t.topics.data_version.to_json()).decode())

    def topic_stats(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """GET_TOPIC_STATS_INFO: per write queue its offsets and its newest message's store time
        (``lastUpdateTimestamp``, 0 when empty; one read-pool hop for all queues)."""
        topic = get_str(request.ext_fields, "topic")
        config = self._t.topics.select_topic_config(topic)
        if config is None:
            raise Rejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self._t.store
        bounds = [(qid, store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid))
                  for qid in range(config.write_queue_nums)]
        newest = [(topic, qid, high - 1) for qid, low, high in bounds if high > max(low, 0)]

        def answer(times: list[int]) -> RemotingCommand:
            last = {qid: max(stamp, 0) for (_, qid, _), stamp in zip(newest, times)}
            entries = [(MessageQueue(topic, self._t.config.broker_name, qid).to_json(),
                        {"lastUpdateTimestamp": last.get(qid, 0), "maxOffset": high, "minOffset": low})
                       for qid, low, high in bounds]
            return ok_response(request, raw_object({"offsetTable": object_key_map(entries)}).encode("utf-8"))

        return (store.next_store_times(newest) if newest else succeed([])).addCallback(answer)

    def consume_stats(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        group = get_str(request.ext_fields, "consumerGroup")
        topic = request.ext_fields.get("topic")
        stats = consume_stats(self._t, group, [topic] if topic else sorted(self._t.offsets.topics_of_group(group)))
        return Deferred.fromCoroutine(stats).addCallback(lambda found: ok_response(request, found[0].encode("utf-8")))

    def broker_consume_stats(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """GET_BROKER_CONSUME_STATS (ext ``isOrder``): every group's progress on this broker."""
        stats = broker_consume_stats(self._t, get_bool(request.ext_fields, "isOrder"))
        return Deferred.fromCoroutine(stats).addCallback(lambda body: ok_response(request, body))

    def query_consume_queue(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """QUERY_CONSUME_QUEUE (ext ``topic``, ``queueId``, ``index``, ``count``, optional
        ``consumerGroup``): ``count`` consume-queue entries from ``index``, the queue's bounds and
        the group's subscription to the topic."""
        ext = request.ext_fields
        topic, queue_id = get_str(ext, "topic"), get_int(ext, "queueId", bits=32)
        index, count = get_int(ext, "index"), get_int(ext, "count", bits=32)
        group = ext.get("consumerGroup")
        subscription = self._t.consumers.find_subscription_data(group, topic) if group else None
        d = self._t.store.query_consume_queue(topic, queue_id, index, min(max(count, 0), 1000))

        def answer(window: Any) -> RemotingCommand:
            if window is None:
                return request.make_response(ResponseCode.SYSTEM_ERROR, f"{queue_id}@{topic} is not exist!")
            remark = None if window[2] is not None else f"Index {index} of {queue_id}@{topic} is not exist!"
            body = consume_queue_body(window, None if subscription is None else subscription.to_json())
            return request.make_response(ResponseCode.SUCCESS, remark, None, body)

        return d.addCallback(answer)

    def query_consume_time_span(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """QUERY_CONSUME_TIME_SPAN (ext ``topic``, ``group``): see :func:`consume_time_span`."""
        topic, group = get_str(request.ext_fields, "topic"), get_str(request.ext_fields, "group")
        config = self._t.topics.select_topic_config(topic)
        if config is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] not exist")
        now_ms = int(self._t.clock.seconds() * 1000)
        span = consume_time_span(self._t, topic, group, config.write_queue_nums, now_ms)
        return Deferred.fromCoroutine(span).addCallback(lambda body: ok_response(request, body))

    def consumer_connections(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        info = self._t.consumers.get_consumer_group_info(group)
        if info is None:
            raise Rejected(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return ok_response(request, dump_json(info.to_json()))

    def consumer_running_info(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """Ask one consumer (ext ``consumerGroup``, ``clientId``) for its ConsumerRunningInfo.

        The consumer's answer (code, remark, body) is the response; see :meth:`call_consumer`.
        """
        group = get_str(request.ext_fields, "consumerGroup")
        client_id = get_str(request.ext_fields, "clientId")
        return self.call_consumer(request, group, client_id)

    def consume_message_directly(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """Have one consumer (ext ``consumerGroup``, ``clientId``) consume the stored message of
        ext ``msgId`` now (``mqadmin consumeMessage``): its record goes to the consumer as the body,
        with ext ``brokerName`` added; the consumer's ConsumeMessageDirectlyResult is the response."""
        ext = request.ext_fields
        group, client_id, msg_id = get_str(ext, "consumerGroup"), get_str(ext, "clientId"), get_str(ext, "msgId")
        try:
            _host, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"msgId {msg_id!r} is not an offset message id") from None
        self._consumer_channel(group, client_id)  # not online: answer before reading the store
        d = self._t.store.select_one_message_by_offset(offset)
        return d.addCallback(self._consume_record, request, group, client_id, msg_id)

    def _consume_record(self, record: bytes | None, request: RemotingCommand, group: str, client_id: str,
                        msg_id: str) -> RemotingCommand | Deferred[RemotingCommand]:
        if record is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"no message {msg_id} in this broker")
        ext = dict(request.ext_fields, brokerName=self._t.config.broker_name)
        try:
            return self.call_consumer(request, group, client_id, ext, record)
        except Rejected as e:  # the consumer left while the store read
            return request.make_response(e.code, e.remark)

    def reset_offset(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """INVOKE_BROKER_TO_RESET_OFFSET (ext ``topic``, ``group``, ``timestamp`` ms or -1, ``isForce``,
        ``isC``): see :mod:`rocketpy.broker.resetoffset`."""
        ext = request.ext_fields
        topic, group = get_str(ext, "topic"), get_str(ext, "group")
        timestamp, force = get_int(ext, "timestamp"), get_bool(ext, "isForce")
        config = self._t.topics.select_topic_config(topic)
        if config is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR,
                           f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        return Deferred.fromCoroutine(reset_group_offsets(
            self._t, request, topic, group, timestamp, force, config.write_queue_nums, get_bool(ext, "isC", False)))

    def resume_check_half_message(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """RESUME_CHECK_HALF_MESSAGE (ext ``msgId``, ``mqadmin resumeCheckHalfMessage``): the half
        message is put back on the half queue with its check count at 0, to be checked again."""
        msg_id = get_str(request.ext_fields, "msgId")
        try:
            _host, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"msgId {msg_id!r} is not an offset message id") from None
        return Deferred.fromCoroutine(self._resume_half(request, offset, msg_id))

    async def _resume_half(self, request: RemotingCommand, offset: int, msg_id: str) -> RemotingCommand:
        msg = await self._t.store.look_message_by_offset(offset)
        resumed = None if msg is None else resumed_half(msg)
        if resumed is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"no half message {msg_id} in this broker")
        result = await self._t.store.put_message(resumed)
        if not result.ok:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         "Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.")
        return ok_response(request)

    def call_consumer(self, request: RemotingCommand, group: str, client_id: str, ext: dict[str, str] | None = None,
                      body: bytes | None = None) -> Deferred[RemotingCommand]:
        """Forward ``request`` (code, ext fields, body, or the ``ext`` and ``body`` given) to a
        consumer over its connection.

        :raises Rejected: SYSTEM_ERROR when ``client_id`` has no connection in ``group``.
        :return: fires with the consumer's answer; with CONSUME_MSG_TIMEOUT when none comes within
            :data:`CALL_CONSUMER_TIMEOUT`, SYSTEM_ERROR when the call fails otherwise (as Java's broker).
        """
        consumer = self._consumer_channel(group, client_id)
        forward = RemotingCommand.request(
            request.code, dict(request.ext_fields if ext is None else ext), request.body if body is None else body,
            language=LanguageCode.JAVA.name,
        )
        d: Deferred[RemotingCommand] = maybeDeferred(consumer.invoke_sync, forward, CALL_CONSUMER_TIMEOUT)
        return d.addCallbacks(
            _relayed, _consumer_call_failed, callbackArgs=(request,), errbackArgs=(request, group, client_id)
        )

    def _consumer_channel(self, group: str, client_id: str) -> IChannel:
        info = self._t.consumers.find_channel(group, client_id)
        if info is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> not online")
        return info.channel

    def producer_connections(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "producerGroup")
        infos = self._t.producers.channels_of(group)
        if not infos:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return ok_response(request, dump_json({"connectionSet": [i.to_json() for i in infos]}))

    def consumed_by_who(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        topic = get_str(request.ext_fields, "topic")
        groups = self._t.consumers.groups_of_topic(topic) | self._t.offsets.groups_of_topic(topic)
        return ok_response(request, dump_json({"groupList": sorted(groups)}))
