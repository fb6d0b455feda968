"""Automatic batching of sends, Nagle-style, per message queue.

While a send request to a queue is in flight, later sends to that queue wait;
when it answers, they leave together as SEND_BATCH_MESSAGE (320) requests of at
most ``max_bytes`` and ``max_count`` messages. One send at a time therefore
waits for nothing; ``linger`` seconds of waiting may be added for throughput.
(RocketMQ 5's Java producer ``autoBatch``; Kafka's ``linger.ms`` and ``batch.size``.)

An answer first gives its members their results, so what their callbacks send joins
the waiting sends, which leave when the queue has nothing else in flight, or else at
the end of the reactor turn (``callLater(0)``: the other answers of the same read are
in by then). Flushing on every answer instead splits a closed loop's sends into ever
smaller batches (1, 2, 7, 29 messages at 1000 in flight over 4 queues; doc/benchmarks.md,
"Seventh pass").

Every caller gets a Deferred of its own :class:`SendResult` (its UNIQ_KEY, its
store id, its queue offset) or of the request's failure, so the producer's retry
rules apply to each member as to an unbatched send. Only 4.x protocol is used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from rocketpy.client.api import Mode
from rocketpy.client.results import SendResult
from rocketpy.common.message import Message, MessageConst, encode_batch, properties_to_string
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.errors import RemotingTimeoutError

#: ``(addr, message, queue, mode, timeout, batch_ids) -> Deferred[SendResult]``: one request.
SendRequest = Callable[[str, Message, MessageQueue, Mode, float, str | None], Deferred[Any]]
#: ``(failure, *retry) -> outcome``: what becomes of a send that failed (a Failure, a result or a
#: Deferred of one), given the ``retry`` arguments passed to :meth:`AutoBatcher.send`.
FailureHandler = Callable[..., Any]
_Key = tuple[str, MessageQueue, Mode]

#: RocketMQ 5's Java ``batchMaxBytes``.
DEFAULT_BATCH_MAX_BYTES = 32 * 1024
DEFAULT_BATCH_MAX_COUNT = 1000
#: Framing of one message in a batch body besides its body and properties (``encode_batch``).
BATCH_ENTRY_OVERHEAD = 22
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX


def batchable(msg: Message) -> bool:
    """True when ``msg`` may travel in a batch: the broker refuses delayed batch members,
    a batch waits for the store as its members do by default, and a reply must go as
    SEND_REPLY_MESSAGE to be pushed to its requester."""
    props = msg.properties
    return (MessageConst.DELAY_TIME_LEVEL not in props and props.get(MessageConst.WAIT_STORE_MSG_OK) != "false"
            and MessageConst.MESSAGE_TYPE not in props)


def entry_size(msg: Message) -> int:
    """The bytes ``msg`` takes in a batch body (its properties counted as text)."""
    return BATCH_ENTRY_OVERHEAD + len(msg.body) + len(properties_to_string(msg.properties))


class _Waiting:
    """A send waiting for its queue's next batch (or alone in flight)."""

    __slots__ = ("msg", "size", "deadline", "retry", "done")

    def __init__(self, msg: Message, size: int, deadline: float, retry: tuple[Any, ...] | None) -> None:
        self.msg, self.size, self.deadline, self.retry = msg, size, deadline, retry
        self.done: Deferred[Any] = Deferred()


@dataclass(slots=True)
class _Queue:
    """One queue's state: requests in flight and sends waiting for them. Kept while the producer
    lives (one per queue it sends to, as its routes' queues are): cheaper than a new one per lone send."""

    in_flight: int = 0
    waiting: list[_Waiting] = field(default_factory=list)
    linger_call: IDelayedCall | None = None


class AutoBatcher:
    """Holds back sends to a queue while a request to it is in flight; see the module doc."""

    def __init__(
        self, clock: IReactorTime, send_request: SendRequest, max_bytes: int, max_count: int, linger: float,
        on_failure: FailureHandler | None = None,
    ) -> None:
        """
        :param send_request: makes one request (a single message, or a batch when
            ``batch_ids`` is given); fires with its :class:`SendResult`.
        :param max_bytes: most bytes of bodies and properties in one batch request.
        :param max_count: most messages in one batch request.
        :param linger: seconds an idle queue waits for company before sending (0: none).
        :param on_failure: gets a failed send given ``retry`` arguments (the producer's first-attempt
            errback, without one more callback on every send's Deferred).
        """
        self._clock = clock
        self._send_request = send_request
        self._on_failure = on_failure
        self.max_bytes, self.max_count, self.linger = max_bytes, max_count, linger
        self._queues: dict[_Key, _Queue] = {}

    def fits(self, msg: Message) -> bool:
        """True when ``msg`` is batchable and its body leaves room in a batch."""
        return len(msg.body) + BATCH_ENTRY_OVERHEAD < self.max_bytes and batchable(msg)

    def send(
        self, addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float,
        retry: tuple[Any, ...] | None = None,
    ) -> Deferred[Any]:
        """Send ``msg`` (UNIQ_KEY already set) now if its queue is idle, else with the next batch.

        :param retry: if given, a failure goes to ``on_failure(failure, *retry)`` and the returned
            Deferred fires with what that gives.
        """
        key = (addr, mq, mode)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
        if queue.in_flight == 0 and not queue.waiting and self.linger <= 0:
            alone = _Waiting(msg, 0, 0.0, retry)
            self._request(key, queue, msg, timeout, None).addBoth(self._answered_alone, key, queue, alone)
            return alone.done
        waiting = _Waiting(msg, entry_size(msg), self._clock.seconds() + timeout, retry)
        queue.waiting.append(waiting)
        if queue.in_flight == 0 and queue.linger_call is None:
            queue.linger_call = self._clock.callLater(self.linger, self._lingered, key, queue)
        return waiting.done

    def flush_all(self) -> None:
        """Send what lingers now (on shutdown: nothing is left waiting)."""
        for key, queue in list(self._queues.items()):
            if queue.linger_call is not None:
                queue.linger_call.cancel()
                self._lingered(key, queue)

    def _lingered(self, key: _Key, queue: _Queue) -> None:
        queue.linger_call = None
        self._flush(key, queue)

    def _request(
        self, key: _Key, queue: _Queue, msg: Message, timeout: float, ids: str | None
    ) -> Deferred[Any]:
        """One request; its caller ends it with :meth:`_answered` once its members have their results."""
        queue.in_flight += 1
        addr, mq, mode = key
        return self._send_request(addr, msg, mq, mode, timeout, ids)

    def _answered_alone(self, result: Any, key: _Key, queue: _Queue, member: _Waiting) -> None:
        if isinstance(result, Failure):
            self._fail(member, result)
        else:
            member.done.callback(result)
        self._answered(key, queue)

    def _fail(self, member: _Waiting, failure: Failure) -> None:
        """``member`` failed: its Deferred gets the failure, or what ``on_failure`` makes of it."""
        if member.retry is None or self._on_failure is None:
            member.done.errback(failure)
            return
        try:
            outcome = self._on_failure(failure, *member.retry)
        except Exception:
            outcome = Failure()
        if isinstance(outcome, Deferred):
            outcome.chainDeferred(member.done)
        elif isinstance(outcome, Failure):
            member.done.errback(outcome)
        else:
            member.done.callback(outcome)

    def _answered(self, key: _Key, queue: _Queue) -> None:
        """A request's members have their results: what they sent meanwhile joined the waiting
        sends, which leave now (while the queue still counted the request as in flight)."""
        queue.in_flight -= 1
        if not queue.waiting or queue.linger_call is not None:
            return
        if queue.in_flight == 0:
            self._flush(key, queue)
        else:  # more answers may be in this read: flush once they are all in
            queue.linger_call = self._clock.callLater(0, self._lingered, key, queue)

    def _flush(self, key: _Key, queue: _Queue) -> None:
        """Send everything waiting, in order, in requests within the limits."""
        waiting, queue.waiting = queue.waiting, []
        now = self._clock.seconds()
        chunk: list[_Waiting] = []
        size = 0
        for member in waiting:
            if member.deadline <= now:
                self._fail(member, Failure(RemotingTimeoutError("the send timed out waiting for its batch")))
                continue
            if chunk and (size + member.size > self.max_bytes or len(chunk) >= self.max_count):
                self._send_chunk(key, queue, chunk, now)
                chunk, size = [], 0
            chunk.append(member)
            size += member.size
        if chunk:
            self._send_chunk(key, queue, chunk, now)

    def _send_chunk(self, key: _Key, queue: _Queue, chunk: list[_Waiting], now: float) -> None:
        timeout = min(member.deadline for member in chunk) - now
        if len(chunk) == 1:
            self._request(key, queue, chunk[0].msg, timeout, None).addBoth(
                self._answered_alone, key, queue, chunk[0])
            return
        msgs = [member.msg for member in chunk]
        try:
            body = encode_batch(msgs)
        except Exception:
            self._fail_all(Failure(), chunk)
            return
        ids = ",".join(m.properties[_UNIQ_KEY] for m in msgs)
        batch = Message(msgs[0].topic, body, 0, {})
        self._request(key, queue, batch, timeout, ids).addCallbacks(
            _deliver, self._fail_all, callbackArgs=(chunk,), errbackArgs=(chunk,)
        ).addBoth(self._answered_batch, key, queue)

    def _fail_all(self, failure: Failure, chunk: list[_Waiting]) -> None:
        for member in chunk:
            self._fail(member, failure)

    def _answered_batch(self, result: Any, key: _Key, queue: _Queue) -> Any:
        self._answered(key, queue)
        return result  # None, or a failure of _deliver (reported as unhandled)


def _deliver(result: SendResult, chunk: list[_Waiting]) -> None:
    """Each member's own result out of the batch's: its ids and its queue offset."""
    ids = result.msg_id.split(",")
    store_ids = result.offset_msg_id.split(",")
    if len(store_ids) != len(chunk):  # a broker that reports one id: keep it for all
        store_ids = [result.offset_msg_id] * len(chunk)
    for i, member in enumerate(chunk):
        member.done.callback(SendResult(
            result.status, ids[i], store_ids[i], result.queue, result.queue_offset + i,
            result.transaction_id, result.region_id,
        ))
