"""GET_CONSUMER_RUNNING_INFO (307) on the client side (doc/wire.md §4).

An admin tool asks a broker; the broker forwards the request over the
consumer's connection, and the client instance answers with Java's
``ConsumerRunningInfo`` of the consumer of ``consumerGroup``: its settings
(``properties``), its subscriptions, the queues it holds (``mqTable``, a map
with fastjson object keys) and per-topic pull and consume statistics
(``statusTable``); with ``jstackEnable=true`` also a dump of every thread's stack.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from zope.interface import implementer

from rocketpy.client.subscription import SubscriptionData
from rocketpy.common.fastjson import dump_json, object_key_map, raw_object
from rocketpy.common.headers import get_str
from rocketpy.common.route import MessageQueue
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from rocketpy.client.process import ProcessQueue

#: ``properties`` keys of Java's ``ConsumerRunningInfo``.
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"
#: The client version rocketpy reports (``MQVersion`` V4_9_4, ordinal 401).
CLIENT_VERSION_DESC = "V4_9_4"
_MIB = 1024 * 1024


@dataclass
class ConsumerRunningInfo:
    """What one consumer runs, as Java's ``ConsumerRunningInfo``.

    :ivar mq_table: ``ProcessQueueInfo`` JSON per held queue.
    :ivar status_table: ``ConsumeStatus`` JSON per subscribed topic.
    :ivar jstack: a dump of every thread's stack, when asked for.
    """

    properties: dict[str, str] = field(default_factory=dict)
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    mq_table: dict[MessageQueue, dict[str, Any]] = field(default_factory=dict)
    status_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    jstack: str | None = None

    def encode(self) -> bytes:
        """The body as fastjson writes it: keys sorted, ``mqTable`` keyed by queue objects."""
        subscriptions = sorted(self.subscriptions, key=lambda s: (s.topic, s.sub_string))
        fields = {
            "mqTable": object_key_map((mq.to_json(), self.mq_table[mq]) for mq in sorted(self.mq_table)),
            "properties": dump_json(self.properties).decode(),
            "statusTable": dump_json(self.status_table).decode(),
            "subscriptionSet": dump_json([s.to_json() for s in subscriptions]).decode(),
        }
        if self.jstack is not None:
            fields["jstack"] = json.dumps(self.jstack)
        return raw_object(fields).encode("utf-8")


@runtime_checkable
class RunningInfoSource(Protocol):
    """A client instance member that can describe itself: a consumer."""

    group: str

    def running_info(self) -> ConsumerRunningInfo:
        """This consumer's settings, subscriptions, queues and statistics."""


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def process_queue_info(pq: ProcessQueue, commit_offset: int) -> dict[str, Any]:
    """Java's ``ProcessQueueInfo`` of one held queue (timestamps in ms; 0 = never).

    :param commit_offset: the consumer's offset of the queue in memory (-1 when none).
    """
    offsets = list(pq.messages)
    return {
        "cachedMsgCount": len(offsets),
        "cachedMsgMaxOffset": max(offsets, default=0),
        "cachedMsgMinOffset": min(offsets, default=0),
        "cachedMsgSizeInMiB": pq.size // _MIB,
        "commitOffset": commit_offset,
        "droped": pq.dropped,
        "lastConsumeTimestamp": _ms(pq.last_consume),
        "lastLockTimestamp": _ms(pq.last_lock),
        "lastPullTimestamp": _ms(pq.last_pull),
        "locked": pq.locked,
    }


def thread_dump() -> str:
    """Every thread's name and stack (the ``jstack`` of a Java client)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f'"{names.get(ident, "unknown")}" ident={ident}\n' + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    )


@implementer(IRequestProcessor)
class RunningInfoProcessor:
    """Answers GET_CONSUMER_RUNNING_INFO with the ConsumerRunningInfo of ext ``consumerGroup``.

    :param find: ``group -> ConsumerRunningInfo``, or None when this client has no consumer of it.
    """

    def __init__(self, find: Callable[[str], ConsumerRunningInfo | None]) -> None:
        self._find = find

    def process_request(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        info = self._find(group)
        if info is None:
            remark = f"The Consumer Group <{group}> not exist in this consumer"
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark)
        if request.ext_fields.get("jstackEnable", "").lower() == "true":
            info.jstack = thread_dump()
        return request.make_response(ResponseCode.SUCCESS, None, None, info.encode())

    def reject_request(self) -> bool:
        return False
