"""Message trace (RocketMQ 4.4+): send and consume records in RocketMQ's trace format.

A producer or push consumer made with ``enable_trace=True`` records every send (``Pub``) and
every listener call (``SubBefore``, ``SubAfter``) as Java's ``TraceDataEncoder`` writes them:
fields separated by ``\\x01``, each record ended by ``\\x02``. A :class:`TraceDispatcher` batches
records (up to 100 or 128 000 bytes, or 100 ms) into messages on the trace topic
(``RMQ_SYS_TRACE_TOPIC``) whose keys are the traced message ids and keys, so a trace is found by
querying the trace topic by message id. Traces are sent asynchronously by an inner producer on
the same client instance; a failed trace send is logged, never seen by the traced send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.client.hooks import ISendMessageHook, SendMessageContext
from rocketpy.client.message import UniqKeyGenerator
from rocketpy.client.results import ConsumeResult, SendStatus
from rocketpy.client.subscription import client_msg_id
from rocketpy.common.message import Message, MessageConst, MessageExt

DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
#: Java ``MessageType`` ordinals.
NORMAL_MSG, TRANS_MSG_HALF, DELAY_MSG = 0, 1, 3
#: Java ``ConsumeReturnType`` ordinals used as the SubAfter context code.
CONSUME_SUCCESS_CODE, CONSUME_FAILED_CODE = 0, 4


def trace_group(group: str) -> str:
    """The inner trace producer's group for a traced ``group``."""
    return f"{TRACE_GROUP_PREFIX}-{group}"


def _text(value: object) -> str:
    """Java's ``StringBuilder.append``: None is ``null``, booleans lower-case."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode(*fields: object) -> str:
    """One trace record: the fields joined by ``\\x01``, ended by ``\\x02``."""
    return CONTENT_SPLITOR.join(map(_text, fields)) + FIELD_SPLITOR


def decode_traces(data: str) -> list[dict[str, str]]:
    """The records of a trace message body (Java ``decoderFromTraceDataString``) as name → text."""
    names = {
        "Pub": ("traceType", "timeStamp", "regionId", "groupName", "topic", "msgId", "tags", "keys", "storeHost",
                "bodyLength", "costTime", "msgType", "offsetMsgId", "success", "clientHost"),
        "SubBefore": ("traceType", "timeStamp", "regionId", "groupName", "requestId", "msgId", "retryTimes", "keys"),
        "SubAfter": ("traceType", "requestId", "msgId", "costTime", "success", "keys", "contextCode", "timeStamp",
                     "groupName"),
    }
    records = []
    for record in data.split(FIELD_SPLITOR):
        values = record.split(CONTENT_SPLITOR)
        if values[0] in names:
            records.append(dict(zip(names[values[0]], values)))
    return records


@dataclass(slots=True)
class _Pending:
    data: list[str] = field(default_factory=list)
    keys: dict[str, None] = field(default_factory=dict)
    size: int = 0


class TraceDispatcher:
    """Batches trace records and sends them with an inner producer (Java ``AsyncTraceDispatcher``).

    :param producer: the inner producer (group :func:`trace_group`, on the traced client's instance),
        started on the first flush and shut down by :meth:`close`.
    :param clock: schedules the flushes.
    :param topic: the trace topic.
    """

    log = Logger()

    def __init__(self, producer: Any, clock: IReactorTime, topic: str = DEFAULT_TRACE_TOPIC,
                 batch_size: int = 100, max_msg_size: int = 128_000, flush_interval: float = 0.1) -> None:
        self.topic = topic
        self._clock = clock
        self._producer = producer
        self._batch_size, self._max_size, self._interval = batch_size, max_msg_size, flush_interval
        self._pending = _Pending()
        self._timer: IDelayedCall | None = None
        self._in_flight: set[Deferred[Any]] = set()
        self.request_ids = UniqKeyGenerator()
        self.sent = 0

    def now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def append(self, record: str, keys: list[str | None]) -> None:
        """Queue one record (and the keys its trace message is indexed by); flushed soon after."""
        p = self._pending
        p.data.append(record)
        p.size += len(record)
        for key in keys:
            if key:
                p.keys[key] = None
        if len(p.data) >= self._batch_size or p.size >= self._max_size:
            self._schedule(0)
        elif self._timer is None:
            self._schedule(self._interval)

    def _schedule(self, delay: float) -> None:
        if self._timer is not None and self._timer.active():
            if delay > 0:
                return
            self._timer.cancel()
        self._timer = self._clock.callLater(delay, self.flush)

    def flush(self) -> None:
        """Send what is queued as one trace message (asynchronously; failures are logged)."""
        self._timer = None
        p, self._pending = self._pending, _Pending()
        if not p.data:
            return
        if not self._producer.running:
            self._producer.start()
        msg = Message(self.topic, "".join(p.data).encode())
        msg.properties[MessageConst.KEYS] = " ".join(p.keys)
        d = self._producer.send_async(msg)
        self._in_flight.add(d)
        d.addCallbacks(self._sent, self._failed, errbackArgs=(len(p.data),))
        d.addBoth(lambda _: self._in_flight.discard(d))

    def _sent(self, result: Any) -> None:
        self.sent += 1

    def _failed(self, failure: Any, records: int) -> None:
        self.log.warn("{n} trace records to {topic} lost: {error}", n=records, topic=self.topic,
                      error=failure.getErrorMessage())

    def close(self) -> Deferred[None]:
        """Send what is queued, wait for the sends in flight, stop the inner producer."""
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self.flush()
        if self._in_flight:
            await DeferredList(list(self._in_flight))
        if self._producer.running:
            await self._producer.shutdown()


def _msg_type(msg: Message) -> int:
    if msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return TRANS_MSG_HALF
    if msg.properties.get(MessageConst.DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return DELAY_MSG
    return NORMAL_MSG


@implementer(ISendMessageHook)
class SendTraceHook:
    """Records a ``Pub`` trace of every send attempt that reached the broker (Java ``SendMessageTraceHookImpl``)."""

    name = "SendMessageTraceHook"

    def __init__(self, dispatcher: TraceDispatcher) -> None:
        self._dispatcher = dispatcher
        self._started: dict[int, int] = {}

    def send_message_before(self, context: SendMessageContext) -> None:
        if not context.message.topic.startswith(self._dispatcher.topic):
            self._started[id(context)] = self._dispatcher.now_ms()

    def send_message_after(self, context: SendMessageContext) -> None:
        started = self._started.pop(id(context), None)
        result = context.send_result
        if started is None or result is None:
            return
        msg = context.message
        self._dispatcher.append(
            encode("Pub", started, result.region_id, context.producer_group, msg.topic, result.msg_id, msg.tags,
                   msg.keys, context.broker_addr, len(msg.body), self._dispatcher.now_ms() - started,
                   _msg_type(msg), result.offset_msg_id, result.status is SendStatus.SEND_OK),
            [result.msg_id, msg.keys],
        )


@dataclass(slots=True)
class ConsumeTrace:
    """What ``SubBefore`` recorded, for the matching ``SubAfter``."""

    request_id: str
    started: int
    msgs: list[MessageExt]


class ConsumeTracer:
    """Records ``SubBefore``/``SubAfter`` around each listener call (Java ``ConsumeMessageTraceHookImpl``)."""

    def __init__(self, dispatcher: TraceDispatcher, group: str) -> None:
        self._dispatcher = dispatcher
        self._group = group

    def before(self, msgs: list[MessageExt]) -> ConsumeTrace | None:
        traced = [m for m in msgs if m.properties.get(MessageConst.TRACE_SWITCH) != "false"]
        if not traced:
            return None
        d = self._dispatcher
        now = d.now_ms()
        trace = ConsumeTrace(d.request_ids.next_id(now / 1000), now, traced)
        for m in traced:
            d.append(encode("SubBefore", now, m.properties.get(MessageConst.MSG_REGION), self._group,
                            trace.request_id, client_msg_id(m), m.reconsume_times, m.keys),
                     [client_msg_id(m), m.keys])
        return trace

    def after(self, trace: ConsumeTrace | None, result: ConsumeResult, batch: int) -> None:
        if trace is None:
            return
        d = self._dispatcher
        now = d.now_ms()
        cost = (now - trace.started) // max(1, batch)
        ok = result is ConsumeResult.CONSUME_SUCCESS
        for m in trace.msgs:
            d.append(encode("SubAfter", trace.request_id, client_msg_id(m), cost, ok, m.keys,
                            CONSUME_SUCCESS_CODE if ok else CONSUME_FAILED_CODE, now, self._group),
                     [client_msg_id(m), m.keys])
