"""Topic routes as a client sees them: parsing the name server's answer and
turning it into the queues a producer writes and a consumer reads.

Follows Java's ``MQClientInstance.topicRouteData2TopicPublishInfo`` and
``topicRouteData2TopicSubscribeInfo`` (doc/wire.md §2).
"""

from __future__ import annotations

import random

from rocketpy.common.route import MASTER_ID, MessageQueue, QueueData, TopicRouteData, decode_topic_route
from rocketpy.common.topic import PERM_READ, PERM_WRITE

__all__ = [
    "decode_topic_route",
    "with_default_queue_nums",
    "TopicPublishInfo",
    "subscribe_queues",
    "RoundRobinIndex",
]


def with_default_queue_nums(route: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """The TBW102 route used for a topic the name server does not know yet.

    Each broker offers ``min(queue_nums, its TBW102 read queues)`` queues.
    """
    queues = []
    for q in route.queue_datas:
        n = min(queue_nums, q.read_queue_nums)
        queues.append(QueueData(q.broker_name, n, n, q.perm, q.topic_sys_flag))
    return TopicRouteData(queues, [b.copy() for b in route.broker_datas], dict(route.filter_server_table))


class RoundRobinIndex:
    """Java's ``ThreadLocalIndex``: a counter seeded at random, kept non-negative."""

    __slots__ = ("_value",)  # read and moved at its offset by rocketpy/_speedups_producer.h

    def __init__(self, start: int | None = None) -> None:
        self._value = random.randrange(0, 1 << 31) if start is None else start

    def next(self) -> int:
        self._value = (self._value + 1) & 0x7FFFFFFF
        return self._value


class TopicPublishInfo:
    """The write queues of a topic: every writable queue of a broker with a master.

    :ivar queues: the queues, broker by broker (sorted by broker name).
    :ivar route: the route the queues came from.
    :ivar order_topic: True when built from ``orderTopicConf``.
    """

    __slots__ = ("topic", "route", "index", "order_topic", "queues")  # read at their offsets in C

    def __init__(self, topic: str, route: TopicRouteData, index: RoundRobinIndex | None = None) -> None:
        self.topic = topic
        self.route = route
        self.index = index or RoundRobinIndex()
        self.order_topic = bool(route.order_topic_conf)
        self.queues: list[MessageQueue] = []
        if route.order_topic_conf:
            for item in route.order_topic_conf.split(";"):
                name, _, count = item.partition(":")
                self.queues += [MessageQueue(topic, name, i) for i in range(int(count or 0))]
            return
        masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PERM_WRITE and q.broker_name in masters:
                self.queues += [MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums)]

    def ok(self) -> bool:
        """True when there is at least one queue to write to."""
        return bool(self.queues)

    def write_queue_nums(self, broker_name: str | None) -> int:
        """The number of write queues the route gives ``broker_name`` (-1 if none)."""
        for q in self.route.queue_datas:
            if q.broker_name == broker_name:
                return q.write_queue_nums
        return -1

    def select_one(self, last_broker_name: str | None = None) -> MessageQueue:
        """The next queue round-robin, skipping ``last_broker_name`` when another broker exists."""
        n = len(self.queues)
        if last_broker_name is not None:
            for _ in range(n):
                mq = self.queues[self.index.next() % n]
                if mq.broker_name != last_broker_name:
                    return mq
        return self.queues[self.index.next() % n]


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The readable queues of ``topic``, sorted."""
    queues = [
        MessageQueue(topic, q.broker_name, i)
        for q in route.queue_datas
        if q.perm & PERM_READ
        for i in range(q.read_queue_nums)
    ]
    return sorted(queues)


def master_addresses(route: TopicRouteData) -> dict[str, str]:
    """broker name -> master address, for brokers of the route that have one."""
    return {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs}
