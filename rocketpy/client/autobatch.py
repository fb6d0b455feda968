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

from collections.abc import Callable, Set as AbstractSet
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from rocketpy.client.api import Mode
from rocketpy.client.firing import cheap_callbacks, compiled, deliver, fire, python_deliver, share_keys
from rocketpy.client.results import SendResult
from rocketpy.common import speedups
from rocketpy.common.message import Message, MessageConst, encode_batch, properties_to_string
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX
from rocketpy.remoting.errors import RemotingTimeoutError

#: ``(addr, message, queue, mode, timeout, batch_ids) -> Deferred[SendResult]``: one request.
SendRequest = Callable[[str, Message, MessageQueue, Mode, float, str | None], Deferred[Any]]
#: ``(addr, message, queue, mode, timeout, then, args) -> None``: :data:`SendRequest` of a single message
#: without a Deferred; ``then(result_or_failure, *args)`` gets its outcome (the producer's lone sends).
SendThen = Callable[[str, Message, MessageQueue, Mode, float, Callable[..., Any], tuple[Any, ...]], None]
#: ``(failure, *retry) -> outcome``: what becomes of a send that failed (a Failure, a result or a
#: Deferred of one), given the ``retry`` arguments passed to :meth:`AutoBatcher.send`.
FailureHandler = Callable[..., Any]

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


#: What a missing UNIQ_KEY adds to :func:`entry_size` once the producer sets it: ``UNIQ_KEY``, the
#: name-value separator and the 32 characters of :class:`~rocketpy.client.message.UniqKeyGenerator`'s ids
#: (and a property separator when there are other properties).
UNIQ_KEY_ENTRY = len(_UNIQ_KEY) + 1 + 32


def plain_entry_size(
    msg: Message, valid_topics: AbstractSet[str], max_message_size: int, compress_over: int, max_bytes: int
) -> int:
    """:func:`entry_size` of ``msg`` as the producer will send it (a missing UNIQ_KEY counted as
    :data:`UNIQ_KEY_ENTRY`) when ``msg`` may go just as it is, in an automatic batch or alone (the
    producer's ``_send_plain``); else -1.

    It may when its topic is in ``valid_topics`` (names ``check_topic`` accepted), its body is
    ``bytes`` of 1 to ``max_message_size`` bytes (``validate_message``) and below ``compress_over``
    (no compression), it is no retry-topic message nor a prepared transaction (the producer sends
    those as they are), it is :func:`batchable`, and its body leaves room in a batch of
    ``max_bytes``. Anything else (also properties that are not all strings) takes the producer's
    general path, which finds the same answer or the error. ``rocketpy._speedups`` has the same function.
    """
    topic, body, props = msg.topic, msg.body, msg.properties
    if type(body) is not bytes or type(props) is not dict or topic not in valid_topics:
        return -1
    n = len(body)
    if (n == 0 or n > max_message_size or n >= compress_over or n + BATCH_ENTRY_OVERHEAD >= max_bytes
            or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            or props.get(MessageConst.TRANSACTION_PREPARED) == "true" or not batchable(msg)):
        return -1
    try:
        size = BATCH_ENTRY_OVERHEAD + n + len(properties_to_string(props))
    except TypeError:
        return -1
    if _UNIQ_KEY not in props:
        size += UNIQ_KEY_ENTRY + 1 if props else UNIQ_KEY_ENTRY
    return size


#: The Python :func:`plain_entry_size`, the reference of ``rocketpy/_speedups_client.h``'s.
PYTHON_PLAIN_ENTRY_SIZE = plain_entry_size
plain_entry_size = getattr(speedups.compiled, "plain_entry_size", plain_entry_size)  # None: Python


class _Waiting(Deferred[Any]):
    """A send waiting for its queue's next batch (or alone in flight): the Deferred its caller gets.
    :meth:`AutoBatcher.join` sets the four attributes (no ``__init__`` of its own: a second frame
    per send costs as much as the Deferred)."""

    __slots__ = ("msg", "size", "deadline", "retry")
    msg: Message
    size: int
    deadline: float
    retry: tuple[Any, ...] | None


cheap_callbacks(_Waiting)  # the caller's addCallback and friends in C (rocketpy/client/firing.py)
share_keys(_Waiting)


class _Queue:
    """One queue's state: requests in flight and sends waiting for them. Kept while the producer
    lives (one per queue it sends to, as its routes' queues are): cheaper than a new one per lone send."""

    __slots__ = ("addr", "mq", "mode", "in_flight", "waiting", "linger_call")

    def __init__(self, addr: str, mq: MessageQueue, mode: Mode) -> None:
        self.addr, self.mq, self.mode = addr, mq, mode
        self.in_flight = 0
        self.waiting: list[_Waiting] = []
        self.linger_call: IDelayedCall | None = None


class AutoBatcher:
    """Holds back sends to a queue while a request to it is in flight; see the module doc."""

    # ``max_bytes`` and ``_queues`` read at their offsets by rocketpy/_speedups_producer.h
    __slots__ = ("_clock", "_send_request", "_send_then", "_on_failure", "max_bytes", "max_count", "linger", "_queues")

    def __init__(
        self, clock: IReactorTime, send_request: SendRequest, max_bytes: int, max_count: int, linger: float,
        on_failure: FailureHandler | None = None, send_then: SendThen | None = None,
    ) -> None:
        """
        :param send_request: makes one request (a single message, or a batch when
            ``batch_ids`` is given); fires with its :class:`SendResult`.
        :param max_bytes: most bytes of bodies and properties in one batch request.
        :param max_count: most messages in one batch request.
        :param linger: seconds an idle queue waits for company before sending (0: none).
        :param on_failure: gets a failed send given ``retry`` arguments (the producer's first-attempt
            errback, without one more callback on every send's Deferred).
        :param send_then: ``send_request`` of a single message without a Deferred, for the sends
            that go alone (none: ``send_request``).
        """
        self._clock = clock
        self._send_request = send_request
        self._send_then = send_then
        self._on_failure = on_failure
        self.max_bytes, self.max_count, self.linger = max_bytes, max_count, linger
        #: by address, topic, broker name, queue id and mode (hashed in C, unlike a MessageQueue)
        self._queues: dict[tuple[str, str, str, int, Mode], _Queue] = {}

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
        return self.join(addr, msg, mq, mode, timeout, retry, entry_size(msg), self._clock.seconds())

    def join(
        self, addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float, retry: tuple[Any, ...] | None,
        size: int, now: float,
    ) -> Deferred[Any]:
        """:meth:`send` given ``msg``'s :func:`entry_size` and the time now. (The producer's C ``plain_send``
        makes the append to a queue with a request in flight, or a flush scheduled, itself.)"""
        key = (addr, mq.topic, mq.broker_name, mq.queue_id, mode)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(addr, mq, mode)
        member = _Waiting()
        member.msg, member.size, member.deadline, member.retry = msg, size, now + timeout, retry
        if queue.in_flight == 0 and not queue.waiting and self.linger <= 0:
            self._alone(queue, member, timeout)
            return member
        queue.waiting.append(member)
        if queue.in_flight == 0 and queue.linger_call is None:
            queue.linger_call = self._clock.callLater(self.linger, self._lingered, queue)
        return member

    def flush_all(self) -> None:
        """Send what lingers now (on shutdown: nothing is left waiting)."""
        for queue in list(self._queues.values()):
            if queue.linger_call is not None:
                queue.linger_call.cancel()
                self._lingered(queue)

    def _lingered(self, queue: _Queue) -> None:
        queue.linger_call = None
        self._flush(queue)

    def _request(self, queue: _Queue, msg: Message, timeout: float, ids: str | None) -> Deferred[Any]:
        """One request; its caller ends it with :meth:`_answered` once its members have their results."""
        queue.in_flight += 1
        return self._send_request(queue.addr, msg, queue.mq, queue.mode, timeout, ids)

    def _alone(self, queue: _Queue, member: _Waiting, timeout: float) -> None:
        """``member`` goes in a request of its own; :meth:`_answered_alone` gets the outcome."""
        queue.in_flight += 1
        try:
            if self._send_then is not None:
                self._send_then(queue.addr, member.msg, queue.mq, queue.mode, timeout, self._answered_alone,
                                (queue, member))
                return
            d = self._send_request(queue.addr, member.msg, queue.mq, queue.mode, timeout, None)
        except Exception:
            self._answered_alone(Failure(), queue, member)
            return
        d.addBoth(self._answered_alone, queue, member)

    def _answered_alone(self, result: Any, queue: _Queue, member: _Waiting) -> None:
        if isinstance(result, Failure):
            self._fail(member, result)
        else:
            fire(member, result)
        self._answered(queue)

    def _fail(self, member: _Waiting, failure: Failure) -> None:
        """``member`` failed: its Deferred gets the failure, or what ``on_failure`` makes of it."""
        if member.retry is None or self._on_failure is None:
            member.errback(failure)
            return
        try:
            outcome = self._on_failure(failure, *member.retry)
        except Exception:
            outcome = Failure()
        if isinstance(outcome, Deferred):
            outcome.chainDeferred(member)
        elif isinstance(outcome, Failure):
            member.errback(outcome)
        else:
            member.callback(outcome)

    def _answered(self, queue: _Queue) -> None:
        """A request's members have their results: what they sent meanwhile joined the waiting
        sends, which leave now (while the queue still counted the request as in flight)."""
        queue.in_flight -= 1
        if not queue.waiting or queue.linger_call is not None:
            return
        if queue.in_flight == 0:
            self._flush(queue)
        else:  # more answers may be in this read: flush once they are all in
            queue.linger_call = self._clock.callLater(0, self._lingered, queue)

    def _flush(self, queue: _Queue) -> None:
        """Send everything waiting, in order, in requests within the limits."""
        waiting, queue.waiting = queue.waiting, []
        now = self._clock.seconds()
        parts = _split_waiting(waiting, now, self.max_bytes, self.max_count)
        for part in parts if parts is not None else split_waiting(waiting, now, self.max_bytes, self.max_count):
            if type(part) is list:
                self._send_chunk(queue, part, now)
            else:
                self._fail(part, Failure(RemotingTimeoutError("the send timed out waiting for its batch")))

    def _send_chunk(self, queue: _Queue, chunk: list[_Waiting], now: float) -> None:
        if len(chunk) == 1:
            self._alone(queue, chunk[0], chunk[0].deadline - now)
            return
        msgs, ids, earliest = _batch_of(chunk) or batch_of(chunk)
        try:
            body = encode_batch(msgs)
        except Exception:
            self._fail_all(Failure(), chunk)
            return
        batch = Message(msgs[0].topic, body, 0, {})
        try:
            d = self._request(queue, batch, earliest - now, ids)
        except Exception:  # counted in flight already: the members fail and the queue goes on
            d = fail()
        d.addCallbacks(
            _deliver, self._fail_all, callbackArgs=(chunk,), errbackArgs=(chunk,)
        ).addBoth(self._answered_batch, queue)

    def _fail_all(self, failure: Failure, chunk: list[_Waiting]) -> None:
        for member in chunk:
            self._fail(member, failure)

    def _answered_batch(self, result: Any, queue: _Queue) -> Any:
        self._answered(queue)
        return result  # None, or a failure of _deliver (reported as unhandled)


def split_waiting(waiting: list[_Waiting], now: float, max_bytes: int, max_count: int) -> list[Any]:
    """The waiting sends, in order, as the parts :meth:`AutoBatcher._flush` sends or fails: lists of members
    for one request each (within ``max_bytes`` and ``max_count``), and members whose deadline passed."""
    parts: list[Any] = []
    chunk: list[_Waiting] = []
    size = 0
    for member in waiting:
        if member.deadline <= now:
            parts.append(member)
            continue
        if chunk and (size + member.size > max_bytes or len(chunk) >= max_count):
            parts.append(chunk)
            chunk, size = [], 0
        chunk.append(member)
        size += member.size
    if chunk:
        parts.append(chunk)
    return parts


def batch_of(chunk: list[_Waiting]) -> tuple[list[Message], str, float]:
    """A batch request's messages, their comma-joined UNIQ_KEYs and the earliest deadline."""
    msgs = [member.msg for member in chunk]
    return msgs, ",".join([m.properties[_UNIQ_KEY] for m in msgs]), min([member.deadline for member in chunk])


def _none(*args: Any) -> None:
    return None


#: ``rocketpy._speedups``' versions (None for anything unusual: then the Python ones run).
_split_waiting: Callable[..., list[Any] | None] = getattr(compiled(), "split_waiting", _none)
_batch_of: Callable[[list[_Waiting]], tuple[list[Message], str, float] | None] = getattr(compiled(), "batch_of", _none)


def _deliver(result: SendResult, chunk: list[_Waiting]) -> None:
    """Each member's own result out of the batch's: its ids and its queue offset."""
    ids = result.msg_id.split(",")
    store_ids = result.offset_msg_id.split(",")
    if len(store_ids) != len(chunk):  # a broker that reports one id: keep it for all
        store_ids = [result.offset_msg_id] * len(chunk)
    args: tuple[Any, ...] = (chunk, result.status, ids, store_ids, result.queue, result.queue_offset, result.transaction_id,
            result.region_id)
    if not deliver(*args):
        python_deliver(*args)
