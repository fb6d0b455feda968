"""The admin calls of Java's ``MQAdminExt`` on Deferreds: what ``rocketpy-admin`` and a dashboard use.

:class:`AdminClient` speaks only the RocketMQ 4.x remoting protocol, so it administers Apache
RocketMQ 4.x clusters as well as rocketpy. Every method returns a Deferred firing with plain
values (:mod:`rocketpy.client.admintypes`, :class:`~rocketpy.common.message.MessageExt`,
:class:`~rocketpy.namesrv.routeinfo.TopicRouteData`); none formats anything. Failures:
:class:`NotFoundError` for a topic, group, cluster or message that does not exist,
:class:`~rocketpy.client.errors.MQBrokerError` when a broker refuses, remoting errors when
a name server or broker cannot be reached.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from rocketpy.client.admintypes import (
    BodyError,
    BrokerStatus,
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    Connection,
    DirectConsumeResult,
    GroupSettings,
    GroupSummary,
    QueueStatus,
    ResetOffset,
    TopicSettings,
    consume_stats_from_json,
    loads,
    parse_broker_consume_stats,
    parse_cluster_info,
    parse_connections,
    parse_consumer_connection,
    parse_direct_result,
    parse_reset_table,
    parse_time_spans,
    parse_topic_list,
    parse_topic_stats,
)
from rocketpy.client.api import Mode, MQClientAPI
from rocketpy.client.errors import MQBrokerError, MQClientError, MQError, NoNameServerError, RemotingError
from rocketpy.client.instance import parse_namesrv_addrs
from rocketpy.client.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from rocketpy.client.producer import Producer
from rocketpy.client.results import PullStatus, SendResult
from rocketpy.client.route import decode_topic_route, master_addresses, subscribe_queues
from rocketpy.client.subscription import build_subscription, inflate_body
from rocketpy.common.fastjson import dump_json
from rocketpy.common.headers import to_fields
from rocketpy.common.message import Message, MessageConst, MessageExt, RecordError, decode_offset_msg_id, decode_records
from rocketpy.namesrv.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG
from rocketpy.namesrv.processor import parse_properties
from rocketpy.namesrv.routeinfo import TopicRouteData
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

__all__ = ["AdminClient", "NotFoundError", "TOOLS_CONSUMER_GROUP", "TOOLS_PRODUCER_GROUP"]

#: The group admin pulls and sends go out as (Java's ``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
#: PULL_MESSAGE's subscription flag: the request carries its own tag expression.
_PULL_FLAG_SUBSCRIPTION = 0x4
_PULL_BATCH = 32
#: QUERY_MESSAGE's ``maxNum`` for a key query (mqadmin's 64).
_QUERY_MAX_NUM = 64
_END_OF_TIME = 2**63 - 1

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _deferred(method: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, Deferred[_T]]:
    """An ``async def`` method as a Deferred-returning one (it never raises)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> Deferred[_T]:
        return Deferred.fromCoroutine(method(*args, **kwargs))

    return wrapper


class NotFoundError(MQClientError):
    """A topic, group, cluster, broker or message named in an admin call does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.QUERY_NOT_FOUND, message)

    def __str__(self) -> str:
        return self.message


def _ok(response: RemotingCommand, addr: str, *codes: int) -> RemotingCommand:
    if response.code not in (codes or (ResponseCode.SUCCESS,)):
        raise MQBrokerError(response.code, response.remark, addr)
    return response


def _body(parse: Callable[..., _T], *args: Any) -> _T:
    """``parse(*args)``, a malformed body as an MQBrokerError-like client error."""
    try:
        return parse(*args)
    except (BodyError, RecordError) as e:
        raise MQClientError(ResponseCode.SYSTEM_ERROR, str(e)) from None


class AdminClient:
    """One admin connection set: the name servers and, on demand, the brokers.

    :param reactor: clock and network.
    :param namesrv_addrs: ``"host:port;host:port"`` or a list; name server calls try them in order.
    :param timeout: seconds per request.
    :param remoting: a remoting client to use (one is made, and closed by :meth:`close`, if None).
    """

    def __init__(self, reactor: IReactorTime, namesrv_addrs: str | Sequence[str], *, timeout: float = 5.0,
                 remoting: RemotingClient | None = None) -> None:
        self.reactor = reactor
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self.timeout = timeout
        self._owns_remoting = remoting is None
        self.remoting = remoting or RemotingClient(reactor, connect_timeout=min(timeout, 3.0))
        self.api = MQClientAPI(self.remoting)

    def close(self) -> Deferred[None]:
        """Close the connections (of a remoting client this object made)."""
        if self._owns_remoting:
            return self.remoting.close()
        return Deferred.fromCoroutine(_nothing())

    # plumbing

    async def call(self, addr: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
                   *ok: int) -> RemotingCommand:
        """One request to ``addr``; a response code outside ``ok`` (default SUCCESS) raises MQBrokerError."""
        request = RemotingCommand.request(code, fields or {}, body)
        return _ok(await self.remoting.invoke_sync(addr, request, self.timeout), addr, *ok)

    async def call_namesrv(self, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
                           *ok: int) -> RemotingCommand:
        """One request to the first name server that can be reached."""
        if not self.namesrv_addrs:
            raise NoNameServerError()
        error: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self.call(addr, code, fields, body, *ok)
            except RemotingError as e:
                error = e
        assert error is not None
        raise error

    async def _each_namesrv(self, code: int, fields: dict[str, str], body: bytes = b"") -> None:
        if not self.namesrv_addrs:
            raise NoNameServerError()
        for addr in self.namesrv_addrs:
            await self.call(addr, code, fields, body)

    # name server

    @_deferred
    async def cluster_info(self) -> ClusterInfo:
        response = await self.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return _body(parse_cluster_info, response.body)

    @_deferred
    async def topic_list(self, cluster: str | None = None) -> list[str]:
        """Every topic the name server knows, or those of ``cluster``."""
        if cluster is None:
            response = await self.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            await self._cluster_addresses(cluster)
            response = await self.call_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        return _body(parse_topic_list, response.body)

    @_deferred
    async def topic_route(self, topic: str) -> TopicRouteData:
        """:raises NotFoundError: when no name server routes ``topic``."""
        return await self._route(topic)

    async def _route(self, topic: str, what: str | None = None) -> TopicRouteData:
        response = await self.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, b"",
                                           ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(what or f"topic {topic!r} does not exist")
        return _body(decode_topic_route, response.body)

    async def _masters(self, topic: str, what: str | None = None) -> dict[str, str]:
        """Broker name → master address of the brokers routing ``topic``."""
        masters = master_addresses(await self._route(topic, what))
        if not masters:
            raise NotFoundError(f"no master broker serves topic {topic!r}")
        return dict(sorted(masters.items()))

    async def _group_masters(self, group: str) -> dict[str, str]:
        return await self._masters(RETRY_GROUP_TOPIC_PREFIX + group, f"consumer group {group!r} does not exist")

    async def _cluster_addresses(self, cluster: str, masters_only: bool = True) -> list[str]:
        info = await self.cluster_info()
        if cluster not in info.clusters:
            raise NotFoundError(f"cluster {cluster!r} does not exist")
        return info.addresses(cluster, masters_only)

    # brokers

    @_deferred
    async def broker_runtime_stats(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's runtime table (``mqadmin brokerStatus``)."""
        response = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        table = loads(response.body, "runtime info").get("table") or {}
        return {str(k): str(v) for k, v in sorted(table.items())}

    @_deferred
    async def cluster_list(self) -> list[BrokerStatus]:
        """Every broker address of every cluster with its runtime table (``mqadmin clusterList``)."""
        info = await self.cluster_info()
        rows = []
        for cluster, names in sorted(info.clusters.items()):
            for name in names:
                broker = info.brokers.get(name)
                for bid, addr in sorted(broker.broker_addrs.items()) if broker else ():
                    try:
                        rows.append(BrokerStatus(cluster, name, bid, addr, await self.broker_runtime_stats(addr)))
                    except (RemotingError, MQBrokerError) as e:
                        rows.append(BrokerStatus(cluster, name, bid, addr, {}, str(e)))
        return rows

    @_deferred
    async def cluster_addresses(self, cluster: str, masters_only: bool = True) -> list[str]:
        """The broker addresses of ``cluster``; :raises NotFoundError: for an unknown cluster."""
        return await self._cluster_addresses(cluster, masters_only)

    @_deferred
    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings by RocketMQ key."""
        response = await self.call(addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties(response.body.decode("utf-8", "replace"))

    @_deferred
    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Min and max offset of every queue of ``topic`` on every master (``mqadmin topicStatus``)."""
        queues: list[QueueStatus] = []
        for addr in (await self._masters(topic)).values():
            response = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            queues += _body(parse_topic_stats, response.body)
        return sorted(queues, key=lambda q: (q.broker_name, q.queue_id))

    # topics and groups

    @_deferred
    async def create_topic(self, addr: str, settings: TopicSettings) -> None:
        """UPDATE_AND_CREATE_TOPIC on one broker; it then registers the topic with its name servers."""
        fields = to_fields(
            topic=settings.topic, defaultTopic="TBW102", readQueueNums=settings.read_queue_nums,
            writeQueueNums=settings.write_queue_nums, perm=settings.perm, topicFilterType=settings.topic_filter_type,
            topicSysFlag=settings.topic_sys_flag, order=settings.order,
        )
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)

    @_deferred
    async def create_topic_in_cluster(self, cluster: str, settings: TopicSettings) -> list[str]:
        """The topic on every master of ``cluster``; an ordered topic's order conf goes to the name
        servers (``brokerName:writeQueueNums;…``). Returns the broker addresses."""
        info = await self.cluster_info()
        if cluster not in info.clusters:
            raise NotFoundError(f"cluster {cluster!r} does not exist")
        addrs = info.addresses(cluster)
        for addr in addrs:
            await self.create_topic(addr, settings)
        if settings.order:
            conf = ";".join(f"{name}:{settings.write_queue_nums}" for name in sorted(info.clusters[cluster]))
            fields = {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": settings.topic, "value": conf}
            await self._each_namesrv(RequestCode.PUT_KV_CONFIG, fields)
        return addrs

    @_deferred
    async def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """``topic`` off every master of ``cluster``, then off every name server (for that cluster, with
        its order conf).

        :raises NotFoundError: when no name server routes the topic, or the cluster is unknown.
        """
        await self._route(topic)
        addrs = await self._cluster_addresses(cluster)
        for addr in addrs:
            await self.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        await self._each_namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        await self._each_namesrv(RequestCode.DELETE_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": topic})
        return addrs

    @_deferred
    async def create_subscription_group(self, addr: str, settings: GroupSettings) -> None:
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, dump_json(settings.to_json()))

    @_deferred
    async def delete_subscription_group(self, addr: str, group: str, remove_offset: bool = False) -> None:
        fields = to_fields(groupName=group, removeOffset=remove_offset)
        await self.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)

    @_deferred
    async def delete_group_retry_topics(self, group: str, cluster: str) -> list[str]:
        """``%RETRY%group`` and ``%DLQ%group`` off ``cluster`` (after deleteSubGroup -c); returns those deleted."""
        deleted = []
        for topic in (RETRY_GROUP_TOPIC_PREFIX + group, DLQ_GROUP_TOPIC_PREFIX + group):
            try:
                await self.delete_topic(topic, cluster)
            except NotFoundError:
                continue
            deleted.append(topic)
        return deleted

    # consumers and producers

    @_deferred
    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """``group``'s progress (``mqadmin consumerProgress -g``) on every master of its retry topic's
        route, over ``topic`` or every topic it committed on. A broker that leaves ``lastTimestamp`` at 0
        (rocketpy) is asked QUERY_CONSUME_TIME_SPAN for it.

        :raises NotFoundError: when the group has no ``%RETRY%`` route (it never had a consumer).
        """
        fields = to_fields(consumerGroup=group, topic=topic)
        queues, tps = [], 0.0
        for addr in (await self._group_masters(group)).values():
            response = await self.call(addr, RequestCode.GET_CONSUME_STATS, fields)
            stats = _body(consume_stats_from_json, group, loads(response.body, "consume stats"))
            await self._fill_last_timestamps(addr, group, stats)
            queues += stats.queues
            tps += stats.consume_tps
        return ConsumeStats(group, tps, queues)

    async def _fill_last_timestamps(self, addr: str, group: str, stats: ConsumeStats) -> None:
        for topic in sorted({q.topic for q in stats.queues if q.consumer_offset > 0 and not q.last_timestamp}):
            try:
                response = await self.call(addr, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": topic, "group": group})
                spans = _body(parse_time_spans, response.body)
            except MQError:
                continue  # a broker without 303: the time stays unknown
            for q in stats.queues:
                if q.topic == topic and q.consumer_offset > 0 and not q.last_timestamp:
                    q.last_timestamp = max(spans.get((q.broker_name, q.queue_id), 0), 0)

    @_deferred
    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's live clients, from the first master that has them (``mqadmin consumerConnection``).

        :raises NotFoundError: when the group does not exist or no client of it is online.
        """
        for addr in (await self._group_masters(group)).values():
            response = await self.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}, b"",
                                       ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)
            if response.code == ResponseCode.SUCCESS:
                return _body(parse_consumer_connection, group, response.body)
        raise NotFoundError(f"consumer group {group!r} is not online")

    @_deferred
    async def consumer_groups(self) -> list[GroupSummary]:
        """Every group with a ``%RETRY%`` topic: clients online and total lag (``mqadmin consumerProgress``)."""
        summaries = []
        for topic in await self.topic_list():
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                continue
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
            stats = await self.consume_stats(group)
            try:
                conn: ConsumerConnection | None = await self.consumer_connection(group)
            except NotFoundError:
                conn = None
            versions = [c.version for c in conn.connections] if conn else []
            summaries.append(GroupSummary(
                group, len(versions), max(versions) if versions else None, conn.consume_type if conn else "",
                conn.message_model if conn else "", stats.consume_tps, stats.total_lag))
        return summaries

    @_deferred
    async def producer_connection(self, group: str, topic: str) -> list[Connection]:
        """The producers of ``group``, as the first master routing ``topic`` sees them."""
        addr = next(iter((await self._masters(topic)).values()))
        response = await self.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
        return _body(parse_connections, loads(response.body, "producer connection").get("connectionSet"))

    @_deferred
    async def broker_consume_stats(self, addr: str, order_only: bool = False) -> tuple[list[ConsumeStats], int]:
        """GET_BROKER_CONSUME_STATS: every group's progress on one broker, and its total lag (last
        consume times filled in as by :meth:`consume_stats`)."""
        response = await self.call(addr, RequestCode.GET_BROKER_CONSUME_STATS, to_fields(isOrder=order_only))
        stats, total = _body(parse_broker_consume_stats, response.body)
        for each in stats:
            await self._fill_last_timestamps(addr, each.group, each)
        return stats, total

    @_deferred
    async def reset_offset_by_time(self, topic: str, group: str, timestamp_ms: int, force: bool = True,
                                   for_c: bool = False) -> list[ResetOffset]:
        """Move ``group`` on ``topic`` to the first message stored at or after ``timestamp_ms`` (-1: the end).

        Each master tells the group's clients (INVOKE_BROKER_TO_RESET_OFFSET); where none is online
        the committed offsets are written instead, as mqadmin's fallback. Without ``force`` a queue the
        group has not yet reached keeps its offset.
        """
        fields = to_fields(topic=topic, group=group, timestamp=timestamp_ms, isForce=force, isC=for_c)
        result: list[ResetOffset] = []
        for name, addr in (await self._masters(topic)).items():
            response = await self.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields, b"",
                                       ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)
            if response.code == ResponseCode.SUCCESS:
                table = _body(parse_reset_table, response.body)
                result += [ResetOffset(b, q, offset, True) for (b, q), offset in sorted(table.items())]
            else:
                result += await self._reset_offline(addr, name, topic, group, timestamp_ms, force)
        return result

    async def _reset_offline(self, addr: str, broker: str, topic: str, group: str, timestamp_ms: int,
                             force: bool) -> list[ResetOffset]:
        response = await self.call(addr, RequestCode.GET_CONSUME_STATS, to_fields(consumerGroup=group, topic=topic))
        stats = _body(consume_stats_from_json, group, loads(response.body, "consume stats"))
        if not stats.queues:
            raise NotFoundError(f"consumer group {group!r} has no offsets on topic {topic!r} at {addr}")
        done = []
        for q in stats.queues:
            mq = MessageQueue(topic, broker, q.queue_id)
            if timestamp_ms == -1:
                target = await self.api.get_max_offset(addr, mq, self.timeout)
            else:
                target = await self.api.search_offset(addr, mq, timestamp_ms, self.timeout)
            offset = target if force or target < q.consumer_offset else q.consumer_offset
            await self.api.update_consumer_offset(addr, group, mq, offset, self.timeout)
            done.append(ResetOffset(broker, q.queue_id, offset, False))
        return done

    @_deferred
    async def consume_message_directly(self, group: str, client_id: str, msg_id: str,
                                       topic: str | None = None) -> DirectConsumeResult:
        """Have one client of ``group`` consume one stored message now (CONSUME_MESSAGE_DIRECTLY).

        :param msg_id: the offset message id, or with ``topic`` a UNIQ_KEY.
        """
        if topic is not None:
            msg_id = (await self.message_by_id(msg_id, topic)).msg_id
        addr = _store_address(msg_id)
        fields = {"consumerGroup": group, "clientId": client_id, "msgId": msg_id}
        response = await self.call(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
        return _body(parse_direct_result, response.body)

    # messages

    @_deferred
    async def view_message(self, msg_id: str) -> MessageExt:
        """The message of an offset message id, from the broker the id names (VIEW_MESSAGE_BY_ID)."""
        host, offset = _decode_msg_id(msg_id)
        response = await self.call(host, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}, b"",
                                   ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise NotFoundError(f"no message {msg_id} at {host}")
        return _inflated(_body(decode_records, response.body))[0]

    @_deferred
    async def message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message of an offset message id or, with ``topic``, of a UNIQ_KEY (``mqadmin queryMsgById``).

        Both ids are 32 hex digits: with ``topic`` the UNIQ_KEY is looked up first (decoding one as an
        offset id names a host that does not exist).
        """
        if topic is not None:
            try:
                return await self._by_unique_key(topic, msg_id)
            except NotFoundError:
                if not _is_offset_id(msg_id):
                    raise
        return await self.view_message(msg_id)

    @_deferred
    async def query_message_by_key(self, topic: str, key: str, begin_ms: int = 0,
                                   end_ms: int = _END_OF_TIME) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS hold ``key`` (QUERY_MESSAGE on every master)."""
        found = await self._query(topic, key, False, begin_ms, end_ms)
        return [m for m in found if key in (m.keys or "").split(" ")]

    @_deferred
    async def query_message_by_unique_key(self, topic: str, msg_id: str) -> MessageExt:
        """The message of ``topic`` whose UNIQ_KEY (the producer's message id) is ``msg_id``."""
        return await self._by_unique_key(topic, msg_id)

    async def _by_unique_key(self, topic: str, msg_id: str) -> MessageExt:
        found = await self._query(topic, msg_id, True, 0, _END_OF_TIME)
        for m in found:
            if m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == msg_id:
                return m
        raise NotFoundError(f"no message {msg_id} in topic {topic!r}")

    async def _query(self, topic: str, key: str, unique: bool, begin_ms: int, end_ms: int) -> list[MessageExt]:
        fields = to_fields(topic=topic, key=key, maxNum=_QUERY_MAX_NUM, beginTimestamp=begin_ms, endTimestamp=end_ms)
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        found: list[MessageExt] = []
        for addr in (await self._masters(topic)).values():
            response = await self.call(addr, RequestCode.QUERY_MESSAGE, fields, b"",
                                       ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
            if response.code == ResponseCode.SUCCESS:
                found += _inflated(_body(decode_records, response.body))
        return sorted(found, key=lambda m: m.store_timestamp)

    @_deferred
    async def query_message_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageExt:
        """The message at ``offset`` of one queue (``mqadmin queryMsgByOffset``)."""
        found = await self._pull_range(await self._master(topic, broker_name), MessageQueue(topic, broker_name, queue_id),
                                       offset, offset + 1, "*")
        if not found:
            raise NotFoundError(f"no message at offset {offset} of queue {queue_id} of {topic!r} on {broker_name}")
        return found[0]

    async def _master(self, topic: str, broker_name: str) -> str:
        masters = await self._masters(topic)
        if broker_name not in masters:
            raise NotFoundError(f"broker {broker_name!r} does not serve topic {topic!r}")
        return masters[broker_name]

    @_deferred
    async def pull_messages(self, topic: str, *, broker_name: str | None = None, queue_id: int | None = None,
                            offset: int | None = None, begin_ms: int | None = None, end_ms: int | None = None,
                            max_count: int | None = None, expression: str = "*") -> list[MessageExt]:
        """Messages of ``topic`` read without committing anything (``mqadmin printMsg``, ``consumeMessage``).

        Every readable queue (or the one of ``broker_name`` and ``queue_id``), from ``offset`` or the
        first message stored at ``begin_ms`` (else the start) to the last stored before ``end_ms``
        (else the end), at most ``max_count`` per queue, filtered by the tag ``expression``.
        """
        route = await self._route(topic)
        masters = master_addresses(route)
        queues = [mq for mq in subscribe_queues(topic, route)
                  if (broker_name is None or mq.broker_name == broker_name) and (queue_id is None or mq.queue_id == queue_id)]
        if not queues:
            raise NotFoundError(f"topic {topic!r} has no queue {queue_id} on broker {broker_name!r}")
        found: list[MessageExt] = []
        for mq in queues:
            addr = masters.get(mq.broker_name)
            if addr is None:
                continue
            start = offset if offset is not None else await self._offset_at(addr, mq, begin_ms, False)
            stop = await self._offset_at(addr, mq, end_ms, True)
            if max_count is not None:
                stop = min(stop, start + max_count)
            msgs = await self._pull_range(addr, mq, start, stop, expression)
            found += [m for m in msgs if (begin_ms is None or m.store_timestamp >= begin_ms)
                      and (end_ms is None or m.store_timestamp < end_ms)]
        return found

    async def _offset_at(self, addr: str, mq: MessageQueue, timestamp_ms: int | None, end: bool) -> int:
        if timestamp_ms is None:
            get = self.api.get_max_offset if end else self.api.get_min_offset
            return await get(addr, mq, self.timeout)
        return await self.api.search_offset(addr, mq, timestamp_ms, self.timeout)

    async def _pull_range(self, addr: str, mq: MessageQueue, start: int, stop: int, expression: str) -> list[MessageExt]:
        """The messages of ``mq`` in ``[start, stop)`` matching ``expression``."""
        sub = build_subscription(mq.topic, expression, 0)
        found: list[MessageExt] = []
        offset = start
        while offset < stop:
            fields = to_fields(
                consumerGroup=TOOLS_CONSUMER_GROUP, topic=mq.topic, queueId=mq.queue_id, queueOffset=offset,
                maxMsgNums=min(_PULL_BATCH, stop - offset), sysFlag=_PULL_FLAG_SUBSCRIPTION, commitOffset=0,
                suspendTimeoutMillis=0, subscription=sub.sub_string, subVersion=0, expressionType=sub.expression_type,
            )
            result = await self.api.pull_message(addr, fields, Mode.SYNC, self.timeout)
            if result.status is not PullStatus.FOUND and result.status is not PullStatus.NO_MATCHED_MSG:
                break
            found += [m for m in _inflated(result.messages) if m.queue_offset < stop and sub.matches(m)]
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        return found

    @_deferred
    async def send_message(self, topic: str, body: bytes, tags: str | None = None, keys: str | None = None,
                           broker_name: str | None = None, queue_id: int | None = None) -> SendResult:
        """Send one message as a short-lived producer of ``TOOLS_PRODUCER`` (``mqadmin sendMessage``);
        to one queue when ``broker_name`` and ``queue_id`` are given."""
        if (broker_name is None) != (queue_id is None):
            raise MQClientError(-1, "give both the broker name and the queue id, or neither")
        props = {MessageConst.TAGS: tags} if tags else {}
        if keys:
            props[MessageConst.KEYS] = keys
        producer = Producer(TOOLS_PRODUCER_GROUP, self.namesrv_addrs, self.reactor, self.remoting,
                            send_timeout=self.timeout)
        await producer.start()
        try:
            msg = Message(topic, body, 0, props)
            if broker_name is not None and queue_id is not None:
                return await producer.send_to_queue(msg, MessageQueue(topic, broker_name, queue_id))
            return await producer.send(msg)
        finally:
            await producer.shutdown()


async def _nothing() -> None:
    return None


def _is_offset_id(msg_id: str) -> bool:
    try:
        decode_offset_msg_id(msg_id)
    except ValueError:
        return False
    return True


def _decode_msg_id(msg_id: str) -> tuple[str, int]:
    try:
        (ip, port), offset = decode_offset_msg_id(msg_id)
    except ValueError:
        raise NotFoundError(f"{msg_id!r} is not an offset message id (give the topic to look up a UNIQ_KEY)") from None
    return (f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"), offset


def _store_address(msg_id: str) -> str:
    return _decode_msg_id(msg_id)[0]


def _inflated(msgs: list[MessageExt]) -> list[MessageExt]:
    for m in msgs:
        try:
            inflate_body(m)
        except ValueError:
            pass  # an LZ4/ZSTD body stays as stored
    return msgs
