"""What a broker holds, read for monitoring (``/metrics``, the dashboard's ``/api/``): consumer
groups' progress per topic, how long their next message has waited, client connections.

Everything here reads in-memory tables on the reactor thread, except
:func:`store_time_lags`, whose store reads go through the store's read pool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import chain
from dataclasses import dataclass
from typing import Any


from rocketpy.broker.consumestats import queue_offsets
from rocketpy.broker.processors import BrokerTables
from rocketpy.common.topic import DLQ_GROUP_TOPIC_PREFIX


@dataclass(frozen=True)
class GroupProgress:
    """A consumer group on one topic of this broker.

    :ivar queues: per write queue: queue id, broker offset, the group's committed offset.
    :ivar online: consumers of the group connected now.
    :ivar message_model: ``CLUSTERING`` or ``BROADCASTING`` (CLUSTERING while none is online).
    """

    group: str
    topic: str
    queues: list[tuple[int, int, int]]
    online: int
    message_model: str

    @property
    def broker_offset(self) -> int:
        return sum(q[1] for q in self.queues)

    @property
    def consumer_offset(self) -> int:
        return sum(q[2] for q in self.queues)

    @property
    def lag(self) -> int:
        """Messages stored and not consumed yet (RocketMQ's ``diffTotal``)."""
        return self.broker_offset - self.consumer_offset


def group_progress(tables: BrokerTables, pulled: Iterable[tuple[str, str]] = ()) -> list[GroupProgress]:
    """Every group that subscribes to, committed offsets on, or (``pulled``: ``(topic, group)``
    pairs) pulled from a topic of this broker (dead letter topics left out, as rocketmq-exporter),
    ordered by topic and group."""
    consumers = tables.consumers
    infos = {group: consumers.get_consumer_group_info(group) for group in consumers.groups()}
    groups_of: dict[str, set[str]] = {}
    subscribed = ((topic, group) for group, info in infos.items() if info is not None for topic in info.subscriptions)
    for topic, group in chain(tables.offsets.pairs(), subscribed, pulled):
        groups_of.setdefault(topic, set()).add(group)
    out = []
    for topic in sorted(groups_of):
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX) or tables.topics.select_topic_config(topic) is None:
            continue
        for group in sorted(groups_of[topic]):
            info = infos.get(group)
            online = 0 if info is None else len(info.channels)
            model = "CLUSTERING" if info is None else info.message_model.name
            out.append(GroupProgress(group, topic, queue_offsets(tables, group, topic), online, model))
    return out


async def store_time_lags(tables: BrokerTables, progress: list[GroupProgress],
                          now_ms: int) -> dict[tuple[str, str], int]:
    """Per ``(group, topic)``: how many ms the oldest message the group has still to consume has
    waited since it was stored, over its queues (0 when it is caught up); rocketmq-exporter's
    ``rocketmq_group_get_latency_by_storetime``. Only lagging queues are read: in one read-pool hop.
    """
    lags = {(p.group, p.topic): 0 for p in progress}
    keys, positions = [], []
    for p in progress:
        for queue_id, broker_offset, committed in p.queues:
            if committed < broker_offset:
                keys.append((p.group, p.topic))
                positions.append((p.topic, queue_id, committed))
    if positions:
        for key, stored in zip(keys, await tables.store.next_store_times(positions)):
            if stored >= 0:
                lags[key] = max(lags[key], now_ms - stored)
    return lags


def connections_by_language(tables: BrokerTables) -> Counter[str]:
    """Client connections that sent a heartbeat (producers and consumers), by client language."""
    languages: dict[Any, str] = {}
    for group in tables.consumers.groups():
        info = tables.consumers.get_consumer_group_info(group)
        if info is not None:
            for channel, client in info.channels.items():
                languages[channel] = client.language
    for group in tables.producers.groups():
        for client in tables.producers.channels_of(group):
            languages[client.channel] = client.language
    return Counter(languages.values())
