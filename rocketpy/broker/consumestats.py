"""Consume progress bodies: GET_CONSUME_STATS (208, one group), GET_BROKER_CONSUME_STATS (317,
every group: ``mqadmin brokerConsumeStats``), QUERY_CONSUME_QUEUE (321, ``mqadmin queryCq``) and
QUERY_CONSUME_TIME_SPAN (303), as Java's ConsumeStats, ConsumeStatsList, QueryConsumeQueueResponseBody
and QueryConsumeTimeSpanBody."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rocketpy.broker.processors import BrokerTables
from rocketpy.common.fastjson import dump_json, object_key_map, raw_object
from rocketpy.common.route import MessageQueue


def queue_offsets(tables: BrokerTables, group: str, topic: str) -> list[tuple[int, int, int]]:
    """Per write queue of ``topic`` (none when this broker lacks it): queue id, broker offset and
    ``group``'s committed offset (0 when none)."""
    config = tables.topics.select_topic_config(topic)
    if config is None:
        return []
    store, offsets = tables.store, tables.offsets
    return [(queue_id, max(store.get_max_offset_in_queue(topic, queue_id), 0),
             max(offsets.query_offset(group, topic, queue_id), 0)) for queue_id in range(config.write_queue_nums)]


async def consume_stats(tables: BrokerTables, group: str, topics: Iterable[str]) -> tuple[str, int]:
    """``group``'s ConsumeStats JSON over ``topics`` (those this broker lacks are skipped) and its
    total lag (broker offset minus committed offset, summed over the queues). Each queue's
    ``lastTimestamp`` is the store time of the last consumed message (0 when none is stored):
    one read-pool hop for all of them."""
    rows = []
    tps = 0.0
    rates = {} if tables.traffic is None else tables.traffic.rates()
    for topic in topics:
        queues = queue_offsets(tables, group, topic)
        if queues:
            tps += rates.get(("get", topic, group), 0.0)
        rows += [(topic, queue_id, broker_offset, committed) for queue_id, broker_offset, committed in queues]
    store = tables.store
    last = [(topic, queue_id, committed - 1) for topic, queue_id, _, committed in rows
            if committed - 1 >= max(store.get_min_offset_in_queue(topic, queue_id), 0)]
    times = dict(zip(last, await store.next_store_times(last))) if last else {}
    broker = tables.config.broker_name
    entries = [(MessageQueue(topic, broker, queue_id).to_json(),
                {"brokerOffset": broker_offset, "consumerOffset": committed,
                 "lastTimestamp": max(times.get((topic, queue_id, committed - 1), 0), 0)})
               for topic, queue_id, broker_offset, committed in rows]
    diff = sum(broker_offset - committed for _, _, broker_offset, committed in rows)
    return raw_object({"consumeTps": json.dumps(tps), "offsetTable": object_key_map(entries)}), diff


async def broker_consume_stats(tables: BrokerTables, order_only: bool) -> bytes:
    """ConsumeStatsList: per subscription group, one ConsumeStats per topic it committed offsets on
    (with ``order_only``, orderly topics only; a topic an online group no longer subscribes to is
    left out, as Java), and the total lag."""
    groups = []
    total = 0
    for group in sorted(tables.subscriptions.groups()):
        online = tables.consumers.get_consumer_group_info(group)
        stats = []
        for topic in sorted(tables.offsets.topics_of_group(group)):
            config = tables.topics.select_topic_config(topic)
            if config is None or (order_only and not config.order):
                continue
            if online is not None and online.subscriptions and topic not in online.subscriptions:
                continue
            body, diff = await consume_stats(tables, group, [topic])
            stats.append(body)
            total += diff
        groups.append("{" + dump_json(group).decode() + ":[" + ",".join(stats) + "]}")
    addr = dump_json(tables.config.advertised_address).decode()
    return ('{"brokerAddr":' + addr + ',"consumeStatsList":[' + ",".join(groups) + '],"totalDiff":'
            + str(total) + "}").encode("utf-8")


def consume_queue_body(window: tuple[int, int, list[tuple[int, int, int]] | None],
                       subscription: dict[str, Any] | None) -> bytes:
    """QueryConsumeQueueResponseBody as fastjson writes it (null fields left out)."""
    low, high, entries = window
    body: dict[str, Any] = {"maxQueueIndex": high, "minQueueIndex": low, "queueData": [
        {"eval": False, "physicOffset": phy, "physicSize": size, "tagsCode": tags} for phy, size, tags in entries or ()
    ]}
    if subscription is not None:
        body["subscriptionData"] = subscription
    return dump_json(body)


async def consume_time_span(tables: BrokerTables, topic: str, group: str, queues: int, now_ms: int) -> bytes:
    """QueryConsumeTimeSpanBody: per queue of ``topic`` the store times of its oldest, newest and
    last consumed messages and how long the next one to consume has waited (0 at the end)."""
    spans = []
    for queue_id in range(queues):
        oldest, newest, consumed, following = await tables.store.query_consume_time_span(
            topic, queue_id, tables.offsets.query_offset(group, topic, queue_id))
        spans.append({
            "consumeTimeStamp": consumed,
            "delayTime": now_ms - following if following >= 0 else 0,
            "maxTimeStamp": newest,
            "messageQueue": MessageQueue(topic, tables.config.broker_name, queue_id).to_json(),
            "minTimeStamp": oldest,
        })
    return dump_json({"consumeTimeSpanSet": spans})
