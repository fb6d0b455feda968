"""The push consumer: long-polling pull loops feeding a listener.

Per held queue a pull loop asks the broker for messages (the broker holds the
request up to ``suspend`` seconds when there is nothing new), caches them in
a :class:`ProcessQueue` (pausing above the flow-control thresholds) and hands
them to the consume service. Rebalance (every 20 s and when a broker says the
group changed), offset persistence (every 5 s: to the brokers, or for broadcasting to a
local file) and, for orderly consumers,
queue relocking (every 20 s) run on LoopingCalls of the injected clock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.internet.task import LoopingCall, deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.logger import LogLevel
from twisted.python.failure import Failure

from rocketpy.client.allocate import AllocateStrategy, allocate_averagely
from rocketpy.client.consumer import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, ConsumerBase, MessageModel
from rocketpy.client.errors import MQBrokerError, MQClientError, MQError, RemotingError
from rocketpy.client.message import local_ip
from rocketpy.client.offsets import OffsetStore
from rocketpy.client.process import ConcurrentConsumeService, Listener, OrderlyConsumeService, ProcessQueue
from rocketpy.client.producer import Producer
from rocketpy.client.rebalance import Rebalancer
from rocketpy.client.results import PullStatus
from rocketpy.client.runninginfo import (
    PROP_CONSUME_ORDERLY,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumerRunningInfo,
    process_queue_info,
)
from rocketpy.client.stats import ConsumerStats
from rocketpy.client.subscription import EXPRESSION_TAG, Selector, build_subscription, client_msg_id
from rocketpy.client.trace import DEFAULT_TRACE_TOPIC, ConsumeTracer, TraceDispatcher, trace_group
from rocketpy.common.message import Message, MessageConst, MessageExt
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX

#: where broadcasting consumers keep their offsets by default
DEFAULT_LOCAL_OFFSET_DIR = os.path.join("~", ".rocketpy", "offsets")

_CLIENT_ONLY_PROPERTIES = (MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET, MessageConst.CONSUME_START_TIME)


class PushConsumer(ConsumerBase):
    """Subscribes to topics and calls a listener with their messages.

    The listener gets ``(messages, context)`` and returns (or fires a Deferred
    with) :attr:`ConsumeResult.CONSUME_SUCCESS` or ``RECONSUME_LATER``; an
    exception counts as ``RECONSUME_LATER``.
    """

    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        group: str,
        namesrv_addrs: Any = (),
        reactor: Any = None,
        remoting_client: Any = None,
        *,
        orderly: bool = False,
        consume_timestamp: float | None = None,
        pull_batch_size: int = 32,
        consume_batch_max_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        max_reconsume_times: int = -1,
        concurrency: int = 20,
        suspend: float = 15.0,
        pull_timeout: float = 30.0,
        rebalance_interval: float = 20.0,
        persist_interval: float = 5.0,
        lock_interval: float = 20.0,
        allocate: AllocateStrategy[MessageQueue] = allocate_averagely,
        local_offset_dir: str | None = DEFAULT_LOCAL_OFFSET_DIR,
        enable_trace: bool = False,
        trace_topic: str = DEFAULT_TRACE_TOPIC,
        **kwargs: Any,
    ) -> None:
        """
        :param orderly: consume each queue in order, one batch at a time, under a broker lock.
        :param consume_timestamp: seconds; where CONSUME_FROM_TIMESTAMP starts (default: 30 min ago).
        :param max_reconsume_times: deliveries before the dead-letter queue; -1 means
            16 (concurrent) or unlimited (orderly).
        :param concurrency: most listener calls running at once (concurrent mode).
        :param enable_trace: record every listener call on ``trace_topic`` (RocketMQ's message trace).
        :param local_offset_dir: broadcasting: offsets are kept in
            ``<dir>/<client id>/<group>/offsets.json`` (client id: ``client_id`` if given, else
            ``<ip>@DEFAULT`` as Java's); None keeps them in memory only.

        Other keywords are :class:`ConsumerBase`'s.
        """
        super().__init__(group, namesrv_addrs, reactor, remoting_client, **kwargs)
        self.orderly = orderly
        self.consume_timestamp = self.clock.seconds() - 1800 if consume_timestamp is None else consume_timestamp
        self.pull_batch_size = pull_batch_size
        self.consume_batch_max_size = consume_batch_max_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.max_reconsume_times = max_reconsume_times if max_reconsume_times >= 0 or orderly else 16
        self.suspend, self.pull_timeout = suspend, pull_timeout
        self.allocate = allocate
        self.concurrency = concurrency
        self.listener: Listener | None = None
        self.stats = ConsumerStats(self.clock)
        remote = self.message_model is MessageModel.CLUSTERING
        path = None
        if not remote and local_offset_dir is not None:
            owner = kwargs.get("client_id") or f"{local_ip()}@DEFAULT"
            path = os.path.join(os.path.expanduser(local_offset_dir), owner, group, "offsets.json")
        self.offset_store = OffsetStore(self, remote, path, self._run_blocking)
        self.rebalancer = Rebalancer(self)
        self.consume_service = OrderlyConsumeService(self) if orderly else ConcurrentConsumeService(self, concurrency)
        self._inner_producer = Producer("CLIENT_INNER_PRODUCER", reactor=self.clock, instance=self.instance)
        self._loops: list[tuple[LoopingCall, float]] = [
            (LoopingCall(self.rebalancer.rebalance), rebalance_interval),
            (LoopingCall(self._persist_offsets), persist_interval),
        ]
        if orderly:
            self._loops.append((LoopingCall(self.rebalancer.lock_all), lock_interval))
        self._cancellable: set[Deferred[Any]] = set()
        #: with ``enable_trace``: SubBefore/SubAfter records of every listener call (rocketpy/client/trace.py)
        self.trace_dispatcher = TraceDispatcher(
            Producer(trace_group(group), reactor=self.clock, instance=self.instance), self.clock, trace_topic,
        ) if enable_trace else None
        self.tracer = ConsumeTracer(self.trace_dispatcher, group) if self.trace_dispatcher is not None else None

    def _run_blocking(self, f: Callable[..., Any], *args: Any) -> Deferred[Any]:
        """File work off the reactor thread: the reactor's thread pool (a fake clock: in place)."""
        get_pool = getattr(self.clock, "getThreadPool", None)
        if get_pool is None:
            return maybeDeferred(f, *args)
        return deferToThreadPool(self.clock, get_pool(), f, *args)  # type: ignore[arg-type]

    # configuration

    def subscribe(self, topic: str, expression: Selector = "*") -> None:
        """Consume ``topic``'s messages matching ``expression``: ``"*"``, ``"TagA || TagB"`` or a
        :class:`~rocketpy.client.subscription.MessageSelector` (``MessageSelector.by_sql("a > 5")``)."""
        self.subscriptions[topic] = build_subscription(topic, expression, int(self.clock.seconds() * 1000))

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener

    # lifecycle

    def start(self) -> Deferred[None]:
        """Fetch routes, heartbeat, rebalance once; fires when the first pulls are under way."""
        return Deferred.fromCoroutine(self._start())

    async def _start(self) -> None:
        if self.running:
            return
        if self.listener is None:
            raise MQClientError(-1, "register a listener before starting the consumer")
        if self.message_model is MessageModel.CLUSTERING:
            self.subscribe(RETRY_GROUP_TOPIC_PREFIX + self.group)
        self.running = True
        self.start_timestamp = self.clock.seconds()
        self.instance.register(self)
        self._inner_producer.start()
        for topic in list(self.subscriptions):
            try:
                await self.fetch_queues(topic)
            except (RemotingError, MQError) as e:  # the retry topic appears after the first heartbeat
                self.log.info("no route for {topic} yet: {error}", topic=topic, error=e)
        try:
            await self._check_client_in_broker()
        except MQError:
            await self._shutdown()
            raise
        await self.instance.send_heartbeat()
        await self.rebalancer.rebalance()
        for loop, interval in self._loops:
            loop.clock = self.clock
            loop.start(interval, now=False).addErrback(self._task_failed)

    async def _check_client_in_broker(self) -> None:
        """Java's ``checkClientInBroker``: a broker of each non-tag subscription must accept it.

        :raises MQClientError: with the broker's code and remark (property filter off, bad expression).
        """
        for sub in list(self.subscriptions.values()):
            queues = self.subscribe_info.get(sub.topic)
            if sub.expression_type.upper() == EXPRESSION_TAG or not queues:
                continue
            addr = await self.broker_addr(queues[0], only_this=False)
            try:
                await self.api.check_client_config(addr, self.instance.client_id, self.group, sub.to_json(), self.timeout)
            except MQBrokerError as e:
                raise MQClientError(e.code, f"check client in broker error, subscription {sub.sub_string!r} "
                                            f"of {sub.topic}: {e.remark}") from None

    def shutdown(self) -> Deferred[None]:
        """Stop pulling, persist offsets, release orderly locks, unregister."""
        return Deferred.fromCoroutine(self._shutdown())

    async def _shutdown(self) -> None:
        if not self.running:
            return
        self.running = False
        for loop, _ in self._loops:
            if loop.running:
                loop.stop()
        for pq in self.rebalancer.process_queues.values():
            pq.dropped = True
        for d in list(self._cancellable):
            d.cancel()
        held = list(self.rebalancer.process_queues)
        await self.offset_store.persist_all(held)
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            await self.rebalancer.unlock(held)
        await self._inner_producer.shutdown()
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.close()
        await self.instance.unregister(self)

    def on_consumer_ids_changed(self, group: str) -> None:
        if group == self.group and self.running:
            self.spawn(self.rebalancer.rebalance())

    def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: drop the held queues of ``topic`` named in ``offsets``, commit
        their new offsets and take them again from there (see :meth:`Rebalancer.reset_offsets`)."""
        if self.running:
            self.spawn(self.rebalancer.reset_offsets(topic, offsets))

    def consume_directly(self, msg: MessageExt, broker_name: str) -> Deferred[dict[str, Any]]:
        """CONSUME_MESSAGE_DIRECTLY: the listener on ``msg`` now; fires with the ConsumeMessageDirectlyResult."""
        return Deferred.fromCoroutine(self.consume_service.consume_directly(msg, broker_name))

    def running_info(self) -> ConsumerRunningInfo:
        """Settings, subscriptions, held queues and per-topic statistics (GET_CONSUMER_RUNNING_INFO).

        ``PROP_THREADPOOL_CORE_SIZE`` is the most listener calls at once: ``concurrency``, or for
        an orderly consumer the number of held queues (one consuming loop each).
        """
        info = super().running_info()
        queues = self.rebalancer.process_queues
        info.properties.update(
            consumeTimestamp=time.strftime("%Y%m%d%H%M%S", time.localtime(self.consume_timestamp)),
            pullBatchSize=str(self.pull_batch_size),
            consumeMessageBatchMaxSize=str(self.consume_batch_max_size),
            pullThresholdForQueue=str(self.pull_threshold_for_queue),
            pullThresholdSizeForQueue=str(self.pull_threshold_size_for_queue // (1024 * 1024)),
            maxReconsumeTimes=str(self.max_reconsume_times),
            consumeThreadMin=str(self.concurrency),
            consumeThreadMax=str(self.concurrency),
        )
        info.properties[PROP_CONSUME_ORDERLY] = str(self.orderly).lower()
        info.properties[PROP_THREADPOOL_CORE_SIZE] = str(len(queues) if self.orderly else self.concurrency)
        for mq, pq in sorted(queues.items()):
            info.mq_table[mq] = process_queue_info(pq, self.offset_store.read(mq))
        for topic in self.subscriptions:
            info.status_table[topic] = self.stats.status(topic)
        return info

    # helpers for the rebalancer and consume services

    def spawn(self, coro: Coroutine[Any, Any, Any], cancel_on_shutdown: bool = False) -> None:
        """Run ``coro``; its failure is logged. Cancelled on shutdown if asked."""
        d = Deferred.fromCoroutine(coro)
        if cancel_on_shutdown and not d.called:
            self._cancellable.add(d)
            d.addBoth(self._forget, d)
        d.addErrback(self._task_failed)

    def _forget(self, result: Any, d: Deferred[Any]) -> Any:
        self._cancellable.discard(d)
        return result

    def _task_failed(self, failure: Failure) -> None:
        if not isinstance(failure.value, CancelledError):
            self.log.failure("consumer task failed", failure, level=LogLevel.error)

    async def sleep(self, delay: float) -> None:
        """Wait ``delay`` seconds on the clock; shutdown cancels the wait."""
        d: Deferred[None] = deferLater(self.clock, delay, lambda: None)
        self._cancellable.add(d)
        try:
            await d
        finally:
            self._cancellable.discard(d)

    async def later(self, delay: float, call: Callable[[], Any]) -> None:
        await self.sleep(delay)
        if self.running:
            call()

    async def _persist_offsets(self) -> None:
        await self.offset_store.persist_all(list(self.rebalancer.process_queues))

    # send back

    async def send_back(self, msg: MessageExt, delay_level: int, mq: MessageQueue) -> bool:
        """Hand a failed message back for a later retry; False if that failed too."""
        try:
            addr = self.instance.master_address(mq.broker_name) or "{}:{}".format(*msg.store_host)
            await self.api.consumer_send_message_back(
                addr, msg, self.group, delay_level, client_msg_id(msg), self.max_reconsume_times, self.timeout
            )
            return True
        except (RemotingError, MQError) as e:
            self.log.info("send-back of {offset} failed ({error}); republishing", offset=msg.queue_offset, error=e)
        props = {k: v for k, v in msg.properties.items() if k not in _CLIENT_ONLY_PROPERTIES}
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, client_msg_id(msg))
        props.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        props.pop(MessageConst.TRANSACTION_PREPARED, None)
        props[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[MessageConst.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        props[MessageConst.DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
        retry = Message(RETRY_GROUP_TOPIC_PREFIX + self.group, msg.body, msg.flag, props)
        try:
            await self._inner_producer.send(retry)
            return True
        except (RemotingError, MQError) as e:
            self.log.warn("republishing {offset} of {mq} failed: {error}", offset=msg.queue_offset, mq=mq, error=e)
            return False

    # pull loop

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.spawn(self._pull_loop(mq, pq, offset), cancel_on_shutdown=True)

    def _flow_control_delay(self, pq: ProcessQueue) -> float:
        if len(pq) > self.pull_threshold_for_queue or pq.size > self.pull_threshold_size_for_queue:
            return 0.05
        if self.orderly and self.message_model is MessageModel.CLUSTERING and not pq.locked:
            return 3.0
        return 0.0

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        broker_id = 0
        while self.running and not pq.dropped:
            delay = self._flow_control_delay(pq)
            sub = self.subscriptions.get(mq.topic)
            if delay or sub is None:
                await self.sleep(delay or 3.0)
                continue
            commit = self.offset_store.read(mq) if self.message_model is MessageModel.CLUSTERING else -1
            flags = PULL_SUSPEND | PULL_SUBSCRIPTION | (PULL_COMMIT_OFFSET if commit > 0 else 0)
            started = pq.last_pull = self.clock.seconds()
            try:
                result = await self.pull_once(
                    mq, sub, offset, self.pull_batch_size, sys_flag=flags, commit_offset=max(commit, 0),
                    suspend=self.suspend, timeout=self.pull_timeout, broker_id=broker_id,
                )
            except (RemotingError, MQError) as e:
                self.log.info("pull from {mq} at {offset} failed: {error}", mq=mq, offset=offset, error=e)
                await self.sleep(3.0)
                continue
            if pq.dropped:
                return
            self.stats.pulled(mq.topic, len(result.messages), (self.clock.seconds() - started) * 1000)
            broker_id = result.suggest_which_broker_id
            if result.status is PullStatus.OFFSET_ILLEGAL:
                self.log.warn("offset {offset} of {mq} is illegal; restarting at {next}",
                              offset=offset, mq=mq, next=result.next_begin_offset)
                pq.dropped = True
                await self.sleep(10.0)
                self.offset_store.update(mq, result.next_begin_offset, increase_only=False)
                await self.offset_store.persist(mq)
                if self.rebalancer.process_queues.get(mq) is pq:
                    del self.rebalancer.process_queues[mq]
                return
            offset = result.next_begin_offset
            if result.messages:
                pq.put(result.messages)
                self.consume_service.submit(mq, pq, result.messages)
            elif not len(pq):
                self.offset_store.update(mq, offset, increase_only=True)
