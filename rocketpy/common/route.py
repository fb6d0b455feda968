"""Routes as the name server hands them out and clients read them: brokers, queue data, queues.

``TopicRouteData``, ``QueueData``, ``BrokerData`` and ``MessageQueue`` are RocketMQ's classes
of those names; their JSON is described in ``doc/namesrv.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from rocketpy.common.fastjson import BodyError, as_int, loads_tolerant

#: Broker id of a master; slaves have ids >= 1 (``MixAll.MASTER_ID``).
MASTER_ID = 0
#: The name server's KV namespace whose entry for a topic (``"broker-a:4;broker-b:4"``) becomes
#: its route's ``orderTopicConf``.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


@dataclass(slots=True)
class QueueData:
    """The queues one broker (by name) offers for a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData:
    """A broker name with the address of each of its ids (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def copy(self) -> BrokerData:
        return replace(self, broker_addrs=dict(self.broker_addrs))

    def to_json(self) -> dict[str, Any]:
        """Broker ids as quoted keys (``{"0":"ip:port"}``), which every client reads (doc/wire.md §2)."""
        addrs = {str(broker_id): addr for broker_id, addr in sorted(self.broker_addrs.items())}
        return {"brokerAddrs": addrs, "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(slots=True)
class TopicRouteData:
    """The route of one topic, as GET_ROUTEINFO_BY_TOPIC returns it."""

    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The GET_ROUTEINFO_BY_TOPIC body; ``orderTopicConf`` only when set."""
        body: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
            "queueDatas": [q.to_json() for q in self.queue_datas],
        }
        if self.order_topic_conf is not None:
            body["orderTopicConf"] = self.order_topic_conf
        return body


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; orders like Java's (topic, broker, id)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: Any) -> MessageQueue:
        """:raises ValueError: when ``obj`` is not a MessageQueue object."""
        if not isinstance(obj, dict) or not isinstance(obj.get("topic"), str):
            raise ValueError(f"not a message queue: {obj!r}")
        return cls(obj["topic"], str(obj.get("brokerName") or ""), int(obj.get("queueId", 0)))


def _int(obj: dict[str, Any], key: str, default: int = 0) -> int:
    return as_int(obj.get(key, default), f"route field {key}")


def decode_topic_route(body: bytes) -> TopicRouteData:
    """Parse a GET_ROUTEINFO_BY_TOPIC body; bare numeric ``brokerAddrs`` keys are accepted.

    :raises BodyError: when the body is not a route.
    """
    obj = loads_tolerant(body)
    if not isinstance(obj, dict):
        raise BodyError("route body is not a JSON object")
    try:
        queues = [
            QueueData(
                str(q["brokerName"]),
                _int(q, "readQueueNums"),
                _int(q, "writeQueueNums"),
                _int(q, "perm"),
                _int(q, "topicSysFlag", _int(q, "topicSynFlag")),
            )
            for q in obj.get("queueDatas") or []
        ]
        brokers = [
            BrokerData(
                str(b.get("cluster", "")),
                str(b["brokerName"]),
                {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()},
            )
            for b in obj.get("brokerDatas") or []
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BodyError(f"malformed route: {e!r}") from None
    return TopicRouteData(queues, brokers, dict(obj.get("filterServerTable") or {}), obj.get("orderTopicConf"))
