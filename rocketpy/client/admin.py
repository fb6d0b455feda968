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

from rocketpy.client.adminacl import AclAdmin
from rocketpy.client.adminbase import NotFoundError, deferred_method, parse_body
from rocketpy.client.adminmessages import TOOLS_CONSUMER_GROUP, TOOLS_PRODUCER_GROUP, MessageAdmin
from rocketpy.client.admintypes import (
    BrokerStats,
    BrokerStatus,
    Connection,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    GroupSettings,
    GroupSummary,
    QueueProgress,
    QueueStatus,
    ResetOffset,
    TopicOverview,
    TopicSettings,
    consume_stats_from_json,
    loads,
    parse_broker_consume_stats,
    parse_broker_stats,
    parse_connections,
    parse_group_list,
    parse_producer_table,
    parse_consumer_connection,
    parse_reset_table,
    parse_running_info,
    parse_runtime_table,
    parse_time_spans,
    parse_topic_list,
    parse_topic_stats,
)
from rocketpy.client.errors import MQBrokerError, MQError, RemotingError
from rocketpy.common.fastjson import dump_json
from rocketpy.common.headers import to_fields
from rocketpy.common.properties import parse_properties
from rocketpy.common.route import MessageQueue, NAMESPACE_ORDER_TOPIC_CONFIG
from rocketpy.common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, TBW102
from rocketpy.remoting.codes import RequestCode, ResponseCode

__all__ = ["AdminClient", "NotFoundError", "TOOLS_CONSUMER_GROUP", "TOOLS_PRODUCER_GROUP"]


class AdminClient(MessageAdmin, AclAdmin):
    """One admin connection set: the name servers and, on demand, the brokers.

    :param reactor: clock and network.
    :param namesrv_addrs: ``"host:port;host:port"`` or a list; name server calls try them in order.
    :param timeout: seconds per request.
    :param remoting: a remoting client to use (one is made, and closed by :meth:`close`, if None).
    """

    # brokers

    @deferred_method
    async def broker_runtime_stats(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's runtime table (``mqadmin brokerStatus``)."""
        response = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return parse_body(parse_runtime_table, response.body)

    @deferred_method
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
                    except (RemotingError, MQError) as e:  # one broker down: its row says why
                        rows.append(BrokerStatus(cluster, name, bid, addr, {}, str(e)))
        return rows

    @deferred_method
    async def broker_stats(self, addr: str, stats_name: str, key: str) -> BrokerStats:
        """VIEW_BROKER_STATS_DATA: one of the broker's statistics, e.g. ``TOPIC_PUT_NUMS`` of a topic or
        ``GROUP_GET_NUMS`` of ``topic@group`` (``mqadmin statsAll``).

        :raises NotFoundError: when the broker has no such statistic (nothing counted yet).
        """
        fields = {"statsName": stats_name, "statsKey": key}
        response = await self.call(addr, RequestCode.VIEW_BROKER_STATS_DATA, fields, b"",
                                   ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)
        if response.code != ResponseCode.SUCCESS:
            raise NotFoundError(response.remark or f"no statistic {stats_name} {key} at {addr}")
        return parse_body(parse_broker_stats, response.body)

    @deferred_method
    async def system_topics(self, addr: str) -> list[str]:
        """The topics a broker made for itself (GET_SYSTEM_TOPIC_LIST_FROM_BROKER): TBW102, its name,
        its cluster's, the schedule and transaction topics."""
        response = await self.call(addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
        return parse_body(parse_topic_list, response.body)

    @deferred_method
    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings by RocketMQ key."""
        response = await self.call(addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties(response.body.decode("utf-8", "replace"))

    # topics

    @deferred_method
    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Min and max offset of every queue of ``topic`` on every master (``mqadmin topicStatus``)."""
        queues: list[QueueStatus] = []
        for addr in (await self._masters(topic)).values():
            response = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            queues += parse_body(parse_topic_stats, response.body)
        return sorted(queues, key=lambda q: (q.broker_name, q.queue_id))

    @deferred_method
    async def topic_consumer_groups(self, topic: str) -> list[str]:
        """The groups that consume ``topic`` or hold offsets on it, on any master (QUERY_TOPIC_CONSUME_BY_WHO)."""
        groups: set[str] = set()
        for addr in (await self._masters(topic)).values():
            response = await self.call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
            groups.update(parse_body(parse_group_list, response.body))
        return sorted(groups)

    @deferred_method
    async def topic_overview(self) -> list[TopicOverview]:
        """Every topic but the ``%RETRY%`` and ``%DLQ%`` ones, with its clusters and consumer groups
        (``mqadmin topicList -c``); a topic without a route has neither."""
        cluster_of = {name: b.cluster for name, b in (await self.cluster_info()).brokers.items()}
        overview = []
        for topic in await self.topic_list():
            if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
                continue
            try:
                route = await self._route(topic)
                groups = await self.topic_consumer_groups(topic)
            except NotFoundError:
                overview.append(TopicOverview(topic, [], []))
                continue
            clusters = sorted({cluster_of.get(b.broker_name, b.cluster) for b in route.broker_datas})
            overview.append(TopicOverview(topic, clusters, groups))
        return overview

    # creating and deleting topics and groups

    @deferred_method
    async def create_topic(self, addr: str, settings: TopicSettings) -> None:
        """UPDATE_AND_CREATE_TOPIC on one broker; it then registers the topic with its name servers."""
        fields = to_fields(
            topic=settings.topic, defaultTopic=TBW102, readQueueNums=settings.read_queue_nums,
            writeQueueNums=settings.write_queue_nums, perm=settings.perm, topicFilterType=settings.topic_filter_type,
            topicSysFlag=settings.topic_sys_flag, order=settings.order,
        )
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)

    @deferred_method
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

    @deferred_method
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
        order_conf = {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": topic}
        await self._each_namesrv(RequestCode.DELETE_KV_CONFIG, order_conf)
        return addrs

    @deferred_method
    async def create_subscription_group(self, addr: str, settings: GroupSettings) -> None:
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, dump_json(settings.to_json()))

    @deferred_method
    async def delete_subscription_group(self, addr: str, group: str, remove_offset: bool = False) -> None:
        fields = to_fields(groupName=group, removeOffset=remove_offset)
        await self.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)

    @deferred_method
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

    @deferred_method
    async def consumer_running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """One client's ConsumerRunningInfo (its queues, settings, statistics), through a master of the
        group (GET_CONSUMER_RUNNING_INFO; ``mqadmin consumerStatus``)."""
        error: MQError | None = None
        for addr in (await self._group_masters(group)).values():
            fields = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
            try:
                response = await self.call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
            except MQBrokerError as e:  # not connected to this broker: try the next
                error = e
                continue
            return parse_body(parse_running_info, response.body)
        raise error or NotFoundError(f"client {client_id!r} of group {group!r} is not online")

    @deferred_method
    async def consume_stats(self, group: str, topic: str | None = None, with_clients: bool = False) -> ConsumeStats:
        """``group``'s progress (``mqadmin consumerProgress -g``) on every master of its retry topic's
        route, over ``topic`` or every topic it committed on. A broker that leaves ``lastTimestamp`` at 0
        for a consumed queue (rocketpy before 2026-12) is asked QUERY_CONSUME_TIME_SPAN for it.

        With ``with_clients`` each queue names the client holding it (asked with
        GET_CONSUMER_RUNNING_INFO; ``mqadmin consumerProgress -s``).

        :raises NotFoundError: when the group has no ``%RETRY%`` route (it never had a consumer).
        """
        fields = to_fields(consumerGroup=group, topic=topic)
        queues, tps = [], 0.0
        for addr in (await self._group_masters(group)).values():
            response = await self.call(addr, RequestCode.GET_CONSUME_STATS, fields)
            stats = parse_body(consume_stats_from_json, group, loads(response.body, "consume stats"))
            await self._fill_last_timestamps(addr, group, stats)
            queues += stats.queues
            tps += stats.consume_tps
        if with_clients:
            await self._fill_clients(group, queues)
        return ConsumeStats(group, tps, queues)

    async def _fill_clients(self, group: str, queues: list[QueueProgress]) -> None:
        try:
            clients = (await self.consumer_connection(group)).connections
        except NotFoundError:
            return  # nobody online holds a queue
        owner = {}
        for client in clients:
            info = await self.consumer_running_info(group, client.client_id)
            owner.update({(mq.topic, mq.broker_name, mq.queue_id): client.client_id for mq in info.mq_table})
        for q in queues:
            q.client_id = owner.get((q.topic, q.broker_name, q.queue_id), "")

    async def _fill_last_timestamps(self, addr: str, group: str, stats: ConsumeStats) -> None:
        for topic in sorted({q.topic for q in stats.queues if q.consumer_offset > 0 and not q.last_timestamp}):
            try:
                response = await self.call(addr, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": topic, "group": group})
                spans = parse_body(parse_time_spans, response.body)
            except MQError:
                continue  # a broker without 303: the time stays unknown
            for q in stats.queues:
                if q.topic == topic and q.consumer_offset > 0 and not q.last_timestamp:
                    q.last_timestamp = max(spans.get((q.broker_name, q.queue_id), 0), 0)

    @deferred_method
    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's live clients, from the first master that has them (``mqadmin consumerConnection``).

        :raises NotFoundError: when the group does not exist or no client of it is online.
        """
        for addr in (await self._group_masters(group)).values():
            response = await self.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}, b"",
                                       ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)
            if response.code == ResponseCode.SUCCESS:
                return parse_body(parse_consumer_connection, group, response.body)
        raise NotFoundError(f"consumer group {group!r} is not online")

    @deferred_method
    async def consumer_groups(self) -> list[GroupSummary]:
        """Every group with a ``%RETRY%`` topic: clients online and total lag (``mqadmin consumerProgress``)."""
        summaries = []
        for topic in await self.topic_list():
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                continue
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
            try:
                stats = await self.consume_stats(group)
            except NotFoundError:
                continue  # deleted since the topic list was read
            try:
                conn: ConsumerConnection | None = await self.consumer_connection(group)
            except NotFoundError:
                conn = None
            versions = [c.version for c in conn.connections] if conn else []
            summaries.append(GroupSummary(
                group, len(versions), max(versions) if versions else None, conn.consume_type if conn else "",
                conn.message_model if conn else "", stats.consume_tps, stats.total_lag))
        return summaries

    @deferred_method
    async def producer_connection(self, group: str, topic: str) -> list[Connection]:
        """The producers of ``group``, as the first master routing ``topic`` sees them."""
        addr = next(iter((await self._masters(topic)).values()))
        response = await self.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
        return parse_body(parse_connections, loads(response.body, "producer connection").get("connectionSet"))

    @deferred_method
    async def producer_table(self, addr: str) -> dict[str, list[Connection]]:
        """Every producer group's connected producers on one broker (GET_ALL_PRODUCER_INFO)."""
        response = await self.call(addr, RequestCode.GET_ALL_PRODUCER_INFO)
        return parse_body(parse_producer_table, response.body)

    @deferred_method
    async def broker_consume_stats(self, addr: str, order_only: bool = False) -> tuple[list[ConsumeStats], int]:
        """GET_BROKER_CONSUME_STATS: every group's progress on one broker, and its total lag (last
        consume times filled in as by :meth:`consume_stats`)."""
        response = await self.call(addr, RequestCode.GET_BROKER_CONSUME_STATS, to_fields(isOrder=order_only))
        stats, total = parse_body(parse_broker_consume_stats, response.body)
        for each in stats:
            await self._fill_last_timestamps(addr, each.group, each)
        return stats, total

    @deferred_method
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
                table = parse_body(parse_reset_table, response.body)
                result += [ResetOffset(b, q, offset, True) for (b, q), offset in sorted(table.items())]
            else:
                result += await self._reset_offline(addr, name, topic, group, timestamp_ms, force)
        return result

    async def _reset_offline(self, addr: str, broker: str, topic: str, group: str, timestamp_ms: int,
                             force: bool) -> list[ResetOffset]:
        response = await self.call(addr, RequestCode.GET_CONSUME_STATS, to_fields(consumerGroup=group, topic=topic))
        stats = parse_body(consume_stats_from_json, group, loads(response.body, "consume stats"))
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
