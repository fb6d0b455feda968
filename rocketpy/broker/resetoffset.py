"""INVOKE_BROKER_TO_RESET_OFFSET (222, ``mqadmin resetOffsetByTime``): move a group's consumers
on a topic to the offsets of a point in time (Java 4.9 ``Broker2Client.resetOffset``).

For each queue the new offset is the first message stored at or after ``timestamp`` (-1: the
queue's end), unless the group is already before it and ``isForce`` is false. A group with no
offset on the topic at all is refused; unlike Java's broker, a queue the group has not committed
yet (a new group's empty queue) simply takes the new offset instead of failing the reset. The group's
clients are told with RESET_CONSUMER_CLIENT_OFFSET (220, oneway); they drop the queue, take the
offset and commit it. The broker's own committed offsets are left to them, as in Java.
"""

from __future__ import annotations

from rocketpy.broker.clients import ClientChannelInfo
from rocketpy.broker.processors import BrokerTables
from rocketpy.common.fastjson import dump_json, object_key_map, raw_object
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand


async def reset_group_offsets(tables: BrokerTables, request: RemotingCommand, topic: str, group: str, timestamp: int,
                              force: bool, queues: int, for_c: bool) -> RemotingCommand:
    """The reset of ``group`` on the ``queues`` queues of ``topic``; the response to ``request``.

    :param tables: the broker's tables (offsets, store, consumers, config).
    :param for_c: the C++ client's body shape (a list) for every client's notice; a client whose
        heartbeat says CPP gets it anyway (Java leaves that to ``mqadmin -c``).
    """
    committed = tables.offsets.query_offsets(group, topic)
    if not committed:
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
    targets: dict[int, int] = {}
    for queue_id in range(queues):
        if timestamp == -1:
            target = tables.store.get_max_offset_in_queue(topic, queue_id)
        else:
            target = max(0, await tables.store.get_offset_in_queue_by_time(topic, queue_id, timestamp))
        current = committed.get(queue_id)
        targets[queue_id] = target if force or current is None or target < current else current
    broker = tables.config.broker_name
    body = offset_table_body(topic, broker, targets)
    c_body = _c_body(topic, broker, targets)

    def body_for(client: ClientChannelInfo) -> bytes:  # the C++ client reads only the list shape
        return c_body if for_c or client.language == LanguageCode.CPP.name else body

    # every field of Java's ResetOffsetRequestHeader: the C++ client aborts on a missing one
    ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true" if force else "false"}
    if not tables.consumers.tell_group(group, RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext, body_for):
        remark = f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}"
        return request.make_response(ResponseCode.CONSUMER_NOT_ONLINE, remark)
    return request.make_response(ResponseCode.SUCCESS, None, None, body)


def offset_table_body(topic: str, broker: str, offsets: dict[int, int]) -> bytes:
    """Java's ResetOffsetBody: ``{"offsetTable":{{"brokerName":…,"queueId":…,"topic":…}:offset}}``."""
    entries = ((MessageQueue(topic, broker, queue_id).to_json(), offset) for queue_id, offset in sorted(offsets.items()))
    return raw_object({"offsetTable": object_key_map(entries)}).encode("utf-8")


def _c_body(topic: str, broker: str, offsets: dict[int, int]) -> bytes:
    """ResetOffsetBodyForC: the same table as a list of ``{brokerName, offset, queueId, topic}``."""
    return dump_json({"offsetTable": [dict(MessageQueue(topic, broker, queue_id).to_json(), offset=offset)
                                      for queue_id, offset in sorted(offsets.items())]})
