"""A push consumer's cached messages per queue, and the two ways of consuming them.

:class:`ProcessQueue` holds pulled, not yet consumed messages in offset order.
:class:`ConcurrentConsumeService` runs the listener on batches as they arrive,
at most ``concurrency`` at a time, and sends failures back for a later retry.
:class:`OrderlyConsumeService` runs one batch at a time per queue, only while
the queue is locked on its broker, retrying failures in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from inspect import iscoroutine
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet.defer import CancelledError, Deferred, DeferredSemaphore
from twisted.logger import Logger, LogLevel

from rocketpy.client.consumer import MessageModel
from rocketpy.client.results import ConsumeResult
from rocketpy.client.subscription import restore_retry_topic
from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.route import MessageQueue

if TYPE_CHECKING:
    from rocketpy.client.push import PushConsumer

#: A broker lock not renewed for this long is treated as lost (``REBALANCE_LOCK_MAX_LIVE_TIME``).
LOCK_MAX_LIVE = 30.0


@dataclass(slots=True)
class ConsumeContext:
    """Passed to the listener with each batch.

    :ivar ack_index: concurrent mode, on success: the last message consumed
        (later ones are sent back); defaults to the whole batch.
    :ivar delay_level: concurrent mode: delay level of the retry (0 lets the broker choose).
    :ivar suspend: orderly mode: seconds to wait before retrying a failed batch.
    """

    queue: MessageQueue
    ack_index: int = -1
    delay_level: int = 0
    suspend: float = 1.0


#: ``(messages, context) -> ConsumeResult`` or a Deferred firing with one.
Listener = Callable[[list[MessageExt], ConsumeContext], Any]


class ProcessQueue:
    """Messages pulled from one queue and not consumed yet, by offset."""

    def __init__(self) -> None:
        self.messages: dict[int, MessageExt] = {}  # offsets arrive increasing: insertion order is offset order
        self.size = 0
        self.max_offset = -1
        self.dropped = False
        self.locked = False
        self.last_lock = 0.0
        self.consuming = False
        #: When the last pull of this queue started / the last listener call on it began (seconds).
        self.last_pull = 0.0
        self.last_consume = 0.0

    def __len__(self) -> int:
        return len(self.messages)

    def put(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            if m.queue_offset not in self.messages:
                self.messages[m.queue_offset] = m
                self.size += len(m.body)
                self.max_offset = max(self.max_offset, m.queue_offset)

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit (first one still cached, or past the last)."""
        for m in msgs:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.size -= len(m.body)
        return next(iter(self.messages), self.max_offset + 1)

    def head(self, n: int) -> list[MessageExt]:
        """The ``n`` lowest-offset messages, left in place."""
        return [m for _, m in zip(range(n), self.messages.values())]

    def lock_valid(self, now: float) -> bool:
        return self.locked and now - self.last_lock <= LOCK_MAX_LIVE


class _ConsumeService:
    log = Logger()
    #: whether consumption is orderly (ConsumeMessageDirectlyResult's ``order``)
    orderly = False

    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer

    async def call_listener(self, msgs: list[MessageExt], context: ConsumeContext, pq: ProcessQueue) -> ConsumeResult:
        """Run the listener on ``msgs``; its time goes to the consumer's statistics."""
        c = self.consumer
        started = pq.last_consume = c.clock.seconds()
        tracer = c.tracer
        trace = tracer.before(msgs) if tracer is not None else None
        try:
            result = await self._listen(msgs, context)
        finally:
            c.stats.consume_time(context.queue.topic, (c.clock.seconds() - started) * 1000)
        if tracer is not None:
            tracer.after(trace, result, len(msgs))
        return result

    async def _listen(self, msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        try:
            status = await self._invoke(msgs, context)
        except CancelledError:
            raise
        except Exception:
            self.log.failure("listener failed on {n} messages of {mq}", level=LogLevel.warn, n=len(msgs), mq=context.queue)
            return ConsumeResult.RECONSUME_LATER
        if not isinstance(status, ConsumeResult):
            self.log.warn("listener returned {status!r}; treated as RECONSUME_LATER", status=status)
            return ConsumeResult.RECONSUME_LATER
        return status

    async def _invoke(self, msgs: list[MessageExt], context: ConsumeContext) -> Any:
        """What the listener answers for ``msgs`` (awaited); its exception propagates."""
        c = self.consumer
        assert c.listener is not None  # start() refuses to run without one
        now_ms = str(int(c.clock.seconds() * 1000))
        for m in msgs:
            restore_retry_topic(m, c.group)
            m.properties[MessageConst.CONSUME_START_TIME] = now_ms
        status = c.listener(msgs, context)
        if isinstance(status, Deferred) or iscoroutine(status):
            status = await status
        return status

    async def consume_directly(self, msg: MessageExt, broker_name: str) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY (``mqadmin consumeMessage``): the listener on ``msg`` alone,
        outside the queues (no offset, no retry, no statistics); Java's ConsumeMessageDirectlyResult."""
        c = self.consumer
        started = c.clock.seconds()
        remark = None
        try:
            status = await self._invoke([msg], ConsumeContext(MessageQueue(msg.topic, broker_name, msg.queue_id)))
        except CancelledError:
            raise
        except Exception as e:
            outcome, remark = "CR_THROW_EXCEPTION", f"{type(e).__name__}: {e}"
        else:
            outcome = _DIRECT_OUTCOMES.get(status, "CR_RETURN_NULL") if isinstance(status, ConsumeResult) \
                else "CR_RETURN_NULL"
        result: dict[str, Any] = {"autoCommit": True, "consumeResult": outcome, "order": self.orderly}
        if remark is not None:
            result["remark"] = remark
        result["spentTimeMills"] = int((c.clock.seconds() - started) * 1000)
        return result


#: a listener's answer → ConsumeMessageDirectlyResult's ``consumeResult`` (Java's CMResult)
_DIRECT_OUTCOMES = {ConsumeResult.CONSUME_SUCCESS: "CR_SUCCESS", ConsumeResult.RECONSUME_LATER: "CR_LATER"}


class ConcurrentConsumeService(_ConsumeService):
    """Batches of ``consume_batch_max_size`` consumed in parallel (up to ``concurrency``)."""

    def __init__(self, consumer: PushConsumer, concurrency: int) -> None:
        super().__init__(consumer)
        self._semaphore = DeferredSemaphore(concurrency)

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        size = self.consumer.consume_batch_max_size
        for i in range(0, len(msgs), size):
            self.consumer.spawn(self._consume(mq, pq, msgs[i : i + size]))

    async def _consume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if pq.dropped:
            return
        if self._semaphore.tokens > 0:  # the common case, without a Deferred
            self._semaphore.tokens -= 1
        else:
            await self._semaphore.acquire()
        try:
            context = ConsumeContext(mq, ack_index=len(msgs) - 1)
            status = await self.call_listener(msgs, context, pq)
        finally:
            self._semaphore.release()
        if pq.dropped:
            return
        c = self.consumer
        ack = min(context.ack_index, len(msgs) - 1) if status is ConsumeResult.CONSUME_SUCCESS else -1
        c.stats.consumed(mq.topic, ack + 1, len(msgs) - ack - 1)
        retry_later = []
        for m in msgs[ack + 1 :]:
            if c.message_model is MessageModel.BROADCASTING:
                self.log.warn("broadcast message {offset} of {mq} dropped after failure", offset=m.queue_offset, mq=mq)
            elif not await c.send_back(m, context.delay_level, mq):
                m.reconsume_times += 1
                retry_later.append(m)
        done = [m for m in msgs if all(m is not r for r in retry_later)] if retry_later else msgs
        offset = pq.remove(done)
        if not pq.dropped:
            c.offset_store.update(mq, offset, increase_only=True)
        if retry_later:
            c.spawn(c.later(5.0, lambda: self.submit(mq, pq, retry_later)))


class OrderlyConsumeService(_ConsumeService):
    """One batch at a time per queue, in offset order, while the queue is locked."""

    orderly = True

    def submit(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if not pq.consuming:
            pq.consuming = True
            self.consumer.spawn(self._consume(mq, pq))

    async def _consume(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        c = self.consumer
        try:
            while c.running and not pq.dropped and len(pq):
                if c.message_model is MessageModel.CLUSTERING and not pq.lock_valid(c.clock.seconds()):
                    if not await c.rebalancer.lock(mq, pq):
                        await c.sleep(1.0)
                        continue
                msgs = pq.head(c.consume_batch_max_size)
                context = ConsumeContext(mq)
                status = await self.call_listener(msgs, context, pq)
                ok = status is ConsumeResult.CONSUME_SUCCESS
                c.stats.consumed(mq.topic, len(msgs) if ok else 0, 0 if ok else len(msgs))
                if pq.dropped:
                    return
                if status is not ConsumeResult.CONSUME_SUCCESS and not await self._give_up(mq, msgs):
                    for m in msgs:
                        m.reconsume_times += 1
                    await c.sleep(context.suspend)
                    continue
                c.offset_store.update(mq, pq.remove(msgs), increase_only=False)
        finally:
            pq.consuming = False

    async def _give_up(self, mq: MessageQueue, msgs: list[MessageExt]) -> bool:
        """True once every message reached ``max_reconsume_times`` and went to the dead-letter queue."""
        limit = self.consumer.max_reconsume_times
        if limit < 0 or any(m.reconsume_times < limit for m in msgs):
            return False
        for m in msgs:
            if not await self.consumer.send_back(m, -1, mq):
                return False
        return True
