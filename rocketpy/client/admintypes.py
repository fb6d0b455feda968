"""What :class:`rocketpy.client.admin.AdminClient` returns: plain dataclasses, and the parsing of
the admin bodies (doc/wire.md §9) into them.

Broker bodies keyed by a MessageQueue use fastjson's object keys; name server bodies may have
bare numeric keys (``{0:"addr"}``): both are read here, so Apache RocketMQ 4.x answers parse too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rocketpy.client.runninginfo import ConsumerRunningInfo
from rocketpy.client.subscription import SubscriptionData
from rocketpy.common import fastjson
from rocketpy.common.fastjson import BodyError, loads_tolerant
from rocketpy.common.group import SubscriptionGroupConfig as GroupSettings
from rocketpy.common.route import BrokerData, MessageQueue

__all__ = [
    "BodyError", "BrokerStats", "BrokerStatus", "ConsumerRunningInfo", "ClusterInfo", "Connection", "ConsumeStats",
    "ConsumerConnection", "DirectConsumeResult", "GroupSettings", "GroupSummary", "QueueProgress",
    "QueueStatus", "ResetOffset", "StatsItem", "TopicOverview", "TopicSettings",
]


@dataclass(slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: cluster name → broker names, broker name → its addresses."""

    clusters: dict[str, list[str]]
    brokers: dict[str, BrokerData]

    def addresses(self, cluster: str, masters_only: bool = True) -> list[str]:
        """The addresses of ``cluster``'s brokers (masters only unless told), sorted by broker name."""
        found = []
        for name in sorted(self.clusters.get(cluster, ())):
            broker = self.brokers.get(name)
            if broker is None:
                continue
            found += [addr for bid, addr in sorted(broker.broker_addrs.items()) if bid == 0 or not masters_only]
        return found


@dataclass(slots=True)
class BrokerStatus:
    """One broker address of ``mqadmin clusterList``: its runtime table, or why it has none."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    stats: dict[str, str]
    error: str | None = None


@dataclass(slots=True)
class TopicOverview:
    """One topic of ``mqadmin topicList -c``: the clusters of its brokers and the groups consuming it."""

    topic: str
    clusters: list[str]
    groups: list[str]


@dataclass(slots=True)
class QueueStatus:
    """One queue of ``mqadmin topicStatus``."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(slots=True)
class TopicSettings:
    """UPDATE_AND_CREATE_TOPIC's fields (mqadmin updateTopic's defaults)."""

    topic: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6
    order: bool = False
    topic_sys_flag: int = 0
    topic_filter_type: str = "SINGLE_TAG"


@dataclass(slots=True)
class QueueProgress:
    """One queue of a group's progress: ``lag`` is broker offset minus consumer offset;
    ``last_timestamp`` the store time (ms) of the last consumed message, 0 when unknown;
    ``client_id`` the client that holds the queue (``consume_stats(with_clients=True)``)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    client_id: str = ""  # the client holding the queue, when asked for
    lag: int = field(init=False)

    def __post_init__(self) -> None:
        self.lag = max(self.broker_offset - self.consumer_offset, 0)


@dataclass(slots=True)
class ConsumeStats:
    """A group's progress over its queues (GET_CONSUME_STATS), sorted by topic, broker, queue."""

    group: str
    consume_tps: float
    queues: list[QueueProgress]
    total_lag: int = field(init=False)

    def __post_init__(self) -> None:
        self.queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        self.total_lag = sum(q.lag for q in self.queues)


@dataclass(slots=True)
class GroupSummary:
    """One line of ``mqadmin consumerProgress`` without ``-g``: a group and its consumers."""

    group: str
    clients: int
    version: int | None
    consume_type: str
    message_model: str
    consume_tps: float
    total_lag: int


@dataclass(slots=True)
class Connection:
    """A client connection a broker reports (consumer or producer)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(slots=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST: a group's live clients and what it subscribes to."""

    group: str
    connections: list[Connection]
    subscriptions: dict[str, str]
    consume_type: str
    message_model: str
    consume_from_where: str


@dataclass(slots=True)
class DirectConsumeResult:
    """A ConsumeMessageDirectlyResult: how the client's listener took the message."""

    consume_result: str
    order: bool
    auto_commit: bool
    remark: str | None
    spent_time_mills: int


@dataclass(slots=True)
class StatsItem:
    """One window of a BrokerStatsData: messages counted, per second, average per sample."""

    sum: int
    tps: float
    avgpt: float


@dataclass(slots=True)
class BrokerStats:
    """VIEW_BROKER_STATS_DATA: one statistic (``TOPIC_PUT_NUMS``, ``GROUP_GET_NUMS``, …) over the
    last minute, hour and day."""

    minute: StatsItem
    hour: StatsItem
    day: StatsItem


@dataclass(slots=True)
class ResetOffset:
    """Where resetOffsetByTime moved one queue; ``online`` says whether the group's clients were
    told (INVOKE_BROKER_TO_RESET_OFFSET) or, with none online, the broker's offset was written."""

    broker_name: str
    queue_id: int
    offset: int
    online: bool


def loads(body: bytes, what: str) -> Any:
    """A broker or name server body (fastjson object keys and bare numeric keys accepted)."""
    try:
        return fastjson.loads(body or b"{}")
    except ValueError:
        pass
    try:
        return loads_tolerant(body)
    except BodyError as e:
        raise BodyError(f"unreadable {what} body: {e}") from None


def _obj(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise BodyError(f"{what} is not a JSON object")
    return value


def parse_cluster_info(body: bytes) -> ClusterInfo:
    obj = _obj(loads(body, "cluster info"), "cluster info")
    try:
        brokers = {
            str(name): BrokerData(str(b.get("cluster", "")), str(name),
                                  {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()})
            for name, b in (obj.get("brokerAddrTable") or {}).items()
        }
        clusters = {str(c): sorted(str(n) for n in names) for c, names in (obj.get("clusterAddrTable") or {}).items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise BodyError(f"malformed cluster info: {e!r}") from None
    return ClusterInfo(clusters, brokers)


def parse_group_list(body: bytes) -> list[str]:
    """GroupList: ``{"groupList":[…]}``."""
    return sorted(str(g) for g in _obj(loads(body, "group list"), "group list").get("groupList") or [])


def parse_runtime_table(body: bytes) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's ``{"table":{…}}``, sorted by key."""
    table = _obj(_obj(loads(body, "runtime info"), "runtime info").get("table") or {}, "runtime table")
    return {str(k): str(v) for k, v in sorted(table.items())}


def parse_topic_list(body: bytes) -> list[str]:
    return sorted(str(t) for t in _obj(loads(body, "topic list"), "topic list").get("topicList") or [])


def _queue_key(key: Any) -> dict[str, Any]:
    """A MessageQueue map key: fastjson's object key (a tuple of items) or, from other writers, a dict."""
    return dict(key) if isinstance(key, tuple) else _obj(key, "queue key")


def parse_topic_stats(body: bytes) -> list[QueueStatus]:
    """GET_TOPIC_STATS_INFO's ``offsetTable``."""
    table = _obj(loads(body, "topic stats"), "topic stats").get("offsetTable") or {}
    try:
        return [
            QueueStatus(str(mq["brokerName"]), int(mq["queueId"]), int(v.get("minOffset", 0)),
                        int(v.get("maxOffset", 0)), int(v.get("lastUpdateTimestamp", 0)))
            for mq, v in ((_queue_key(k), v) for k, v in table.items())
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BodyError(f"malformed topic stats: {e!r}") from None


def consume_stats_from_json(group: str, obj: Any) -> ConsumeStats:
    """One ConsumeStats object (GET_CONSUME_STATS body, an entry of GET_BROKER_CONSUME_STATS)."""
    obj = _obj(obj, "consume stats")
    try:
        queues = [
            QueueProgress(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]), int(v.get("brokerOffset", 0)),
                          int(v.get("consumerOffset", 0)), int(v.get("lastTimestamp", 0)))
            for mq, v in ((_queue_key(k), v) for k, v in (obj.get("offsetTable") or {}).items())
        ]
        return ConsumeStats(group, float(obj.get("consumeTps") or 0.0), queues)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BodyError(f"malformed consume stats: {e!r}") from None


def parse_broker_consume_stats(body: bytes) -> tuple[list[ConsumeStats], int]:
    """GET_BROKER_CONSUME_STATS: one ConsumeStats per group and topic, and the broker's total lag."""
    obj = _obj(loads(body, "broker consume stats"), "broker consume stats")
    stats = []
    for entry in obj.get("consumeStatsList") or []:
        for group, per_topic in _obj(entry, "consume stats entry").items():
            stats += [consume_stats_from_json(str(group), s) for s in per_topic or []]
    return stats, int(obj.get("totalDiff") or 0)


def parse_connections(items: Any) -> list[Connection]:
    try:
        return sorted((Connection(str(c.get("clientId", "")), str(c.get("clientAddr", "")), str(c.get("language", "")),
                                  int(c.get("version", 0))) for c in items or []), key=lambda c: c.client_id)
    except (TypeError, ValueError, AttributeError) as e:
        raise BodyError(f"malformed connection list: {e!r}") from None


def parse_producer_table(body: bytes) -> dict[str, list[Connection]]:
    """GET_ALL_PRODUCER_INFO's ``{"data":{group:[ProducerInfo]}}`` (``remoteIP`` as the client address)."""
    data = _obj(_obj(loads(body, "producer table"), "producer table").get("data") or {}, "producer table data")
    try:
        return {str(group): parse_connections([{**p, "clientAddr": p.get("remoteIP", "")} for p in infos or []])
                for group, infos in sorted(data.items())}
    except (TypeError, AttributeError) as e:
        raise BodyError(f"malformed producer table: {e!r}") from None


def parse_consumer_connection(group: str, body: bytes) -> ConsumerConnection:
    obj = _obj(loads(body, "consumer connection"), "consumer connection")
    subs = _obj(obj.get("subscriptionTable") or {}, "subscriptionTable")
    return ConsumerConnection(
        group, parse_connections(obj.get("connectionSet")),
        {str(t): str(_obj(s, "subscription").get("subString", "*")) for t, s in sorted(subs.items())},
        str(obj.get("consumeType", "")), str(obj.get("messageModel", "")), str(obj.get("consumeFromWhere", "")),
    )


def parse_direct_result(body: bytes) -> DirectConsumeResult:
    obj = _obj(loads(body, "consume result"), "consume result")
    return DirectConsumeResult(str(obj.get("consumeResult", "")), bool(obj.get("order", False)),
                               bool(obj.get("autoCommit", True)), obj.get("remark"), int(obj.get("spentTimeMills", 0)))


def parse_reset_table(body: bytes) -> dict[tuple[str, int], int]:
    """ResetOffsetBody: ``(broker name, queue id)`` → offset."""
    table = _obj(loads(body, "reset offset"), "reset offset").get("offsetTable") or {}
    try:
        return {(str(mq["brokerName"]), int(mq["queueId"])): int(v)
                for mq, v in ((_queue_key(k), v) for k, v in table.items())}
    except (KeyError, TypeError, ValueError) as e:
        raise BodyError(f"malformed reset offset body: {e!r}") from None


def parse_running_info(body: bytes) -> ConsumerRunningInfo:
    """A ConsumerRunningInfo (GET_CONSUMER_RUNNING_INFO's answer, ``mqTable`` with object keys)."""
    obj = _obj(loads(body, "consumer running info"), "consumer running info")
    try:
        subs = [SubscriptionData(str(s["topic"]), str(s.get("subString", "*")), list(s.get("tagsSet") or []),
                                 list(s.get("codeSet") or []), int(s.get("subVersion", 0)),
                                 str(s.get("expressionType") or "TAG")) for s in obj.get("subscriptionSet") or []]
        queues = {MessageQueue(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])): dict(v)
                  for mq, v in ((_queue_key(k), v) for k, v in (obj.get("mqTable") or {}).items())}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BodyError(f"malformed consumer running info: {e!r}") from None
    props = {str(k): str(v) for k, v in (obj.get("properties") or {}).items()}
    status = {str(k): dict(v) for k, v in (obj.get("statusTable") or {}).items()}
    return ConsumerRunningInfo(props, subs, queues, status, obj.get("jstack"))


def parse_broker_stats(body: bytes) -> BrokerStats:
    """BrokerStatsData: ``{"statsMinute":{"sum","tps","avgpt"},"statsHour":…,"statsDay":…}``."""
    obj = _obj(loads(body, "broker stats"), "broker stats")
    try:
        items = [_obj(obj.get(key) or {}, key) for key in ("statsMinute", "statsHour", "statsDay")]
        minute, hour, day = (StatsItem(int(i.get("sum", 0)), float(i.get("tps", 0.0)), float(i.get("avgpt", 0.0)))
                             for i in items)
    except (TypeError, ValueError) as e:
        raise BodyError(f"malformed broker stats: {e!r}") from None
    return BrokerStats(minute, hour, day)


def parse_time_spans(body: bytes) -> dict[tuple[str, int], int]:
    """QUERY_CONSUME_TIME_SPAN: ``(broker name, queue id)`` → the last consumed message's store time."""
    spans = _obj(loads(body, "consume time span"), "consume time span").get("consumeTimeSpanSet") or []
    try:
        return {(str(s["messageQueue"]["brokerName"]), int(s["messageQueue"]["queueId"])): int(s["consumeTimeStamp"])
                for s in spans}
    except (KeyError, TypeError, ValueError) as e:
        raise BodyError(f"malformed consume time span: {e!r}") from None
