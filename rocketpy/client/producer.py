"""The producer: Java's ``DefaultMQProducerImpl`` send path on Deferreds.

``send`` → :meth:`Producer._send_default` (route, attempts within one timeout
budget, queue choice by :class:`MQFaultStrategy`) → :meth:`Producer._attempt`
(broker address) → :meth:`Producer._send_kernel` (UNIQ_KEY, compression, hooks, header) →
:meth:`MQClientAPI.send_message` → the remoting client.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from rocketpy.client.api import MQClientAPI, Mode, send_header
from rocketpy.client.autobatch import DEFAULT_BATCH_MAX_BYTES, DEFAULT_BATCH_MAX_COUNT, AutoBatcher, plain_entry_size
from rocketpy.client.errors import (
    BrokerNotFoundError,
    MQBrokerError,
    MQClientError,
    MQError,
    MessageInvalidError,
    NoNameServerError,
    NoRouteError,
    RemotingError,
    RemotingTooMuchRequestError,
    SendFailedError,
)
from rocketpy.client.hooks import ICheckForbiddenHook, ISendMessageHook, SendMessageContext
from rocketpy.client.instance import ClientInstance, JoiningMember, shared_or_new
from rocketpy.client.latency import MQFaultStrategy
from rocketpy.client import autobatch, firing, reply
from rocketpy.client.message import MAX_MESSAGE_SIZE, UniqKeyGenerator, batch_body, valid_topics, validate_message
from rocketpy.client.results import SendResult, SendStatus
from rocketpy.client.route import RoundRobinIndex, TopicPublishInfo
from rocketpy.client.trace import DEFAULT_TRACE_TOPIC, SendTraceHook, TraceDispatcher, trace_group
from rocketpy.common.compression import compressor
from rocketpy.common.message import Message, MessageConst, MessageExt, MessageSysFlag, java_hash
from rocketpy.common.route import MASTER_ID, MessageQueue, TopicRouteData
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX
from rocketpy.interfaces import IRPCHook
from rocketpy.common.topic import TBW102
from rocketpy.remoting.client import Permits, RemotingClient
from rocketpy.remoting.codes import ROCKETPY_VERSION, RequestCode, ResponseCode, SerializeType
from rocketpy.remoting import writenow
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.tls import ClientTLS

#: Broker codes after which a sync send tries another queue (``DefaultMQProducer.retryResponseCodes``).
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
#: No limit on a message's batch entry: for :func:`plain_entry_size` when nothing is batched.
_UNBOUNDED = sys.maxsize
_BUDGET_SPENT = {
    Mode.SYNC: "sendDefaultImpl call timeout",
    Mode.ASYNC: "DEFAULT ASYNC send call timeout",
    Mode.ONEWAY: "sendDefaultImpl call timeout",
}

#: ``(queues, message, arg) -> queue`` for :meth:`Producer.send_orderly`.
MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """Java's ``SelectMessageQueueByHash``: the same ``arg`` always picks the same queue."""
    h = arg if isinstance(arg, int) else java_hash(str(arg))
    return queues[abs(h) % len(queues)]


class Producer(JoiningMember):
    """Sends messages to the brokers of a RocketMQ cluster.

    Every send method returns a Deferred; none raises. Timeouts are seconds.
    """

    log = Logger()

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str] = (),
        reactor: IReactorTime | None = None,
        remoting_client: Any = None,
        *,
        instance: ClientInstance | None = None,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        retry_times_async: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        retry_response_codes: Iterable[int] = RETRY_RESPONSE_CODES,
        compress_over: int = 4096,
        compress_level: int = 5,
        compression: str = "zlib",
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        send_latency_fault_enable: bool = False,
        send_smart_msg: bool = True,
        serialize_type: int = SerializeType.JSON,
        rpc_hooks: Iterable[IRPCHook] = (),
        send_message_hooks: Iterable[ISendMessageHook] = (),
        check_forbidden_hooks: Iterable[ICheckForbiddenHook] = (),
        client_id: str | None = None,
        rng: random.Random | None = None,
        auto_batch: bool = True,
        batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
        batch_max_count: int = DEFAULT_BATCH_MAX_COUNT,
        linger: float = 0.0,
        credentials: Sequence[str] | None = None,
        tls: bool | ClientTLS = False,
        tls_ca: str | None = None,
        enable_trace: bool = False,
        trace_topic: str = DEFAULT_TRACE_TOPIC,
    ) -> None:
        """
        :param namesrv_addrs: ``"host:port;host:port"`` or a list.
        :param reactor: clock and network (required unless ``instance`` is given).
        :param remoting_client: a :class:`~rocketpy.remoting.client.RemotingClient`
            to share; one is made (with ``rpc_hooks``, ``serialize_type``) if None.
        :param instance: a :class:`ClientInstance` to share with other producers
            and consumers (then ``namesrv_addrs`` and ``remoting_client`` are unused).
        :param send_latency_fault_enable: ban slow or failing brokers for a while.
        :param send_smart_msg: SEND_MESSAGE_V2 with one-letter keys (else code 10).
        :param serialize_type: JSON (default; Apache brokers) or MSGPACK (rocketpy only).
        :param auto_batch: while a send to a queue is in flight, later SYNC and ASYNC sends
            to it wait and leave together as one SEND_BATCH_MESSAGE (:mod:`rocketpy.client.autobatch`).
        :param batch_max_bytes: most bytes (bodies and properties) in one automatic batch.
        :param batch_max_count: most messages in one automatic batch.
        :param linger: seconds an idle queue holds a send for others to join it (0: none).
        :param credentials: ``(access_key, secret_key)`` for brokers with ACL on; ``tls``,
            ``tls_ca``: connect with TLS (both :class:`ClientInstance`'s, doc/security.md).
        :param compression: codec of bodies of ``compress_over`` bytes or more: ``"zlib"`` (every
            client reads it), ``"lz4"`` or ``"zstd"`` (RocketMQ 5 clients and rocketpy; the
            ``compression`` extra). :raises CompressionUnavailable: when its library is missing.
        :param enable_trace: record every send on ``trace_topic`` (RocketMQ's message trace).
        """
        self.group = group
        self._clock, self.instance = shared_or_new(
            reactor, namesrv_addrs, remoting_client, instance, client_id=client_id, rpc_hooks=rpc_hooks,
            serialize_type=serialize_type, credentials=credentials, tls=tls, tls_ca=tls_ca,
        )
        self.send_timeout = send_timeout
        self.retry_times, self.retry_times_async = retry_times, retry_times_async
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.retry_response_codes = frozenset(retry_response_codes)
        self.compress_over, self.compress_level = compress_over, compress_level
        self._compress, self._compressed_flags = compressor(compression, compress_level)
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.send_smart_msg = send_smart_msg
        self.fault_strategy = MQFaultStrategy(self._clock, send_latency_fault_enable, rng)
        self.send_message_hooks = list(send_message_hooks)
        self.check_forbidden_hooks = list(check_forbidden_hooks)
        #: with ``enable_trace``: batches the send traces (rocketpy/client/trace.py)
        self.tracer = TraceDispatcher(
            Producer(trace_group(group), instance=self.instance), self._clock, trace_topic) if enable_trace else None
        if self.tracer is not None:
            self.send_message_hooks.append(SendTraceHook(self.tracer))
        self._uniq = UniqKeyGenerator(rng=rng)
        self._publish: dict[str, TopicPublishInfo] = {}
        self._batcher = (
            AutoBatcher(self._clock, self._request, batch_max_bytes, batch_max_count, linger, self._first_failed,
                        self._request_then)
            if auto_batch else None
        )

    # ClientInstance member (start/shutdown: JoiningMember)

    def topics(self) -> Iterable[str]:
        return list(self._publish)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        if topic in self._publish:
            self._publish[topic] = TopicPublishInfo(topic, route)

    def heartbeat_data(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return [{"groupName": self.group}], []

    def unregister_groups(self) -> tuple[str | None, str | None]:
        return self.group, None

    def shutdown(self) -> Deferred[None]:
        """Send what lingers in automatic batches and the pending trace records (``enable_trace``),
        then leave the client instance."""
        if self._batcher is not None:
            self._batcher.flush_all()
        leave = super().shutdown
        if self.tracer is None:
            return leave()
        return self.tracer.close().addCallback(lambda _: leave())

    # public send API

    def send(self, msg: Message, timeout: float | None = None) -> Deferred[SendResult]:
        """SYNC: up to ``1 + retry_times`` attempts, all within ``timeout``."""
        budget = self.send_timeout if timeout is None else timeout
        return _plain_send(self, msg, Mode.SYNC, budget) or self._send_default(msg, Mode.SYNC, budget)

    def request(self, msg: Message, timeout: float = 3.0) -> Deferred[MessageExt]:
        """Send ``msg`` and fire with the reply its consumer sends (``create_reply_message``; RocketMQ
        4.6 request/reply); ``RequestTimeoutError`` (10006) when none comes within ``timeout`` seconds."""
        return Deferred.fromCoroutine(reply.request(self.instance, self._clock, self.send, msg, timeout))

    def send_async(self, msg: Message, timeout: float | None = None) -> Deferred[SendResult]:
        """ASYNC: bounded by the in-flight permits; retried only after network failures."""
        budget = self.send_timeout if timeout is None else timeout
        return _plain_send(self, msg, Mode.ASYNC, budget) or self._send_default(msg, Mode.ASYNC, budget)

    def send_oneway(self, msg: Message) -> Deferred[None]:
        """ONEWAY: one attempt, fires once written; no result."""
        return _plain_send(self, msg, Mode.ONEWAY, self.send_timeout) or self._send_default(
            msg, Mode.ONEWAY, self.send_timeout)

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> Deferred[SendResult]:
        """SYNC send of several messages of one topic in one request (never compressed)."""
        return self._send_batch(list(msgs), self._budget(timeout))

    def send_orderly(
        self, msg: Message, selector: MessageQueueSelector, arg: Any, timeout: float | None = None
    ) -> Deferred[SendResult]:
        """SYNC send to the queue ``selector(queues, msg, arg)`` picks; one attempt."""
        return self._send_select(msg, lambda qs: selector(qs, msg, arg), self._budget(timeout))

    def send_to_queue(self, msg: Message, queue: MessageQueue, timeout: float | None = None) -> Deferred[SendResult]:
        """SYNC send to ``queue``; one attempt."""
        return self._send_select(msg, lambda qs: queue, self._budget(timeout))

    # sendDefaultImpl and friends

    def _budget(self, timeout: float | None) -> float:
        return self.send_timeout if timeout is None else timeout

    def _check_running(self) -> None:
        if not self.running:
            raise MQClientError(-1, f"producer {self.group!r} is not started")

    def _retriable(self, mode: Mode, error: Exception) -> bool:
        if isinstance(error, RemotingError):
            return True
        if mode is Mode.ASYNC:
            return False
        if isinstance(error, MQBrokerError):
            return error.code in self.retry_response_codes
        return isinstance(error, MQClientError)

    def _send_plain(self, msg: Message, mode: Mode, timeout: float) -> Deferred[Any] | None:
        """The usual send in one step, None for anything else (:meth:`_send_default`).

        The usual send: a running producer with no hooks and no fault strategy sends a message that
        goes as it is (:func:`plain_entry_size`: not compressed, no retry topic, ...; within an
        automatic batch's limits when batching) to a cached route. It is what :meth:`_send_default`
        and :meth:`_send_kernel` do for it, without their checks.
        """
        batcher = self._batcher if mode is not Mode.ONEWAY else None
        try:
            if (
                not self.running or timeout <= 0 or self.send_message_hooks or self.check_forbidden_hooks
                or self.fault_strategy.enabled or (mode is Mode.SYNC and self.retry_another_broker_when_not_store_ok)
            ):
                return None
            info = self._publish.get(msg.topic)
            if info is None or not info.queues:
                return None
            size = plain_entry_size(msg, valid_topics, self.max_message_size, self.compress_over,
                                    _UNBOUNDED if batcher is None else batcher.max_bytes)
        except Exception:  # not a usual message: the general path fails the send with the error
            return None
        if size < 0:
            return None
        begin = self._clock.seconds()
        mq = info.select_one()
        first = (msg, mq, mode, timeout, None, begin)
        addr = self.instance.master_address(mq.broker_name)
        if addr is None:
            return self._attempt(msg, mq, mode, timeout, None, first=first)
        props = msg.properties
        if _UNIQ_KEY not in props:
            props[_UNIQ_KEY] = self._uniq.next_id(begin)
        return self._join_or_request(batcher, addr, msg, mq, mode, timeout, first, size, begin)

    def _join_or_request(
        self, batcher: AutoBatcher | None, addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float,
        first: tuple[Any, ...], size: int, begin: float,
    ) -> Deferred[Any]:
        """:meth:`_send_plain`'s end (also the C ``plain_send``'s for a queue with nothing in flight)."""
        try:  # as _attempt does
            if batcher is not None:
                return batcher.join(addr, msg, mq, mode, timeout, first, size, begin)
            d = self._request(addr, msg, mq, mode, timeout, None)
        except Exception:
            d = fail()
        return d.addErrback(self._first_failed, *first)

    def _send_default(self, msg: Message, mode: Mode, timeout: float, batch_ids: str | None = None) -> Deferred[Any]:
        """Java's ``sendDefaultImpl``: validate, route, then attempts within one ``timeout`` budget.

        The first attempt to a cached route is made here with plain callbacks, one
        Deferred per send; route look-ups and further attempts go on in
        :meth:`_send_attempts`.

        :param batch_ids: for a batch (already validated), the comma-joined UNIQ_KEYs.
        """
        try:
            self._check_running()
            if batch_ids is None:
                validate_message(msg, self.max_message_size)
            begin = self._clock.seconds()
            info = self._publish.get(msg.topic)
            if info is None or not info.ok() or timeout <= 0:
                return Deferred.fromCoroutine(self._send_attempts(msg, mode, timeout, batch_ids, begin))
            mq = self.fault_strategy.select_one_message_queue(info, None)
        except Exception:
            return fail()
        args = (msg, mq, mode, timeout, batch_ids, begin)
        if self.fault_strategy.enabled or (mode is Mode.SYNC and self.retry_another_broker_when_not_store_ok):
            d = self._attempt(msg, mq, mode, timeout, batch_ids)
            return d.addCallbacks(self._first_sent, self._first_failed, callbackArgs=args, errbackArgs=args)
        return self._attempt(msg, mq, mode, timeout, batch_ids, first=args)

    def _first_sent(
        self, result: SendResult | None, msg: Message, mq: MessageQueue, mode: Mode, timeout: float,
        batch_ids: str | None, begin: float,
    ) -> Any:
        if self.fault_strategy.enabled:
            self.fault_strategy.update_fault_item(mq.broker_name, self._ms_since(begin), False)
        if self._retry_on_status(mode, result):
            return Deferred.fromCoroutine(
                self._send_attempts(msg, mode, timeout, batch_ids, begin, 1, mq.broker_name, result=result)
            )
        return result

    def _first_failed(
        self, failure: Failure, msg: Message, mq: MessageQueue, mode: Mode, timeout: float,
        batch_ids: str | None, begin: float,
    ) -> Any:
        error = failure.value
        if not isinstance(error, Exception) or not self._attempt_failed(mq, mode, begin, error, 1):
            return failure
        return Deferred.fromCoroutine(
            self._send_attempts(msg, mode, timeout, batch_ids, begin, 1, mq.broker_name, error)
        )

    def _attempt_failed(self, mq: MessageQueue, mode: Mode, start: float, error: Exception, made: int) -> bool:
        """Note a failed attempt against its broker; True if another attempt may follow."""
        self.fault_strategy.update_fault_item(mq.broker_name, self._ms_since(start), True)
        if not self._retriable(mode, error):
            return False
        self.log.info("send to {queue} failed, attempt {n}: {error}", queue=mq, n=made, error=error)
        return True

    def _retry_on_status(self, mode: Mode, result: SendResult | None) -> bool:
        return (
            mode is Mode.SYNC
            and result is not None
            and result.status is not SendStatus.SEND_OK
            and self.retry_another_broker_when_not_store_ok
        )

    async def _send_attempts(
        self, msg: Message, mode: Mode, timeout: float, batch_ids: str | None, begin: float, made: int = 0,
        last_broker: str | None = None, last_error: Exception | None = None, result: SendResult | None = None,
    ) -> Any:
        """The attempts of :meth:`_send_default` from attempt ``made + 1`` on, after a route look-up if needed."""
        info = self._publish.get(msg.topic)
        if info is None or not info.ok():
            info = await self._find_publish_info(msg.topic)
        attempts = 1 + (self.retry_times if mode is Mode.SYNC else self.retry_times_async if mode is Mode.ASYNC else 0)
        for made in range(made, attempts):
            elapsed = self._clock.seconds() - begin
            if elapsed >= timeout:  # a spent budget leaves nothing to wait on
                if result is not None:
                    return result
                raise RemotingTooMuchRequestError(_BUDGET_SPENT[mode]) from last_error
            mq = self.fault_strategy.select_one_message_queue(info, last_broker)
            last_broker = mq.broker_name
            start = self._clock.seconds()
            try:
                result = await self._attempt(msg, mq, mode, timeout - elapsed, batch_ids)
            except Exception as e:
                if not self._attempt_failed(mq, mode, start, e, made + 1):
                    if result is not None:
                        return result
                    raise
                last_error = e
                continue
            if self.fault_strategy.enabled:
                self.fault_strategy.update_fault_item(mq.broker_name, self._ms_since(start), False)
            if self._retry_on_status(mode, result):
                continue
            return result
        if result is not None:
            return result
        assert last_error is not None
        raise SendFailedError(msg.topic, attempts, self._clock.seconds() - begin, last_error) from last_error

    def _ms_since(self, start: float) -> float:
        return (self._clock.seconds() - start) * 1000

    async def _find_publish_info(self, topic: str) -> TopicPublishInfo:
        """Java's ``tryToFindTopicPublishInfo``: cache, name server, then the TBW102 template."""
        info = self._publish.get(topic)
        if info is not None and info.ok():
            return info
        self._publish.setdefault(topic, TopicPublishInfo(topic, TopicRouteData([], [])))
        try:
            route = await self.instance.update_topic_route(topic)
            if route is None:
                await self.instance.update_topic_route(topic, True, self.default_topic_queue_nums)
        except NoNameServerError:
            raise
        except (RemotingError, MQError) as e:
            raise NoRouteError(topic, f"name server: {e}") from e
        info = self._publish[topic]
        if not info.ok():
            raise NoRouteError(topic)
        return info

    def _send_select(
        self, msg: Message, choose: Callable[[list[MessageQueue]], MessageQueue], timeout: float
    ) -> Deferred[SendResult]:
        """Java's ``sendSelectImpl``: one SYNC attempt to a chosen queue (a cached route needs no coroutine)."""
        try:
            self._check_running()
            validate_message(msg, self.max_message_size)
            begin = self._clock.seconds()
            info = self._publish.get(msg.topic)
            if info is None or not info.ok():
                return Deferred.fromCoroutine(self._send_select_after_lookup(msg, choose, timeout, begin))
            return self._send_selected(msg, choose, info, timeout, begin)
        except Exception:
            return fail()

    async def _send_select_after_lookup(
        self, msg: Message, choose: Callable[[list[MessageQueue]], MessageQueue], timeout: float, begin: float
    ) -> SendResult:
        info = await self._find_publish_info(msg.topic)
        result: SendResult = await self._send_selected(msg, choose, info, timeout, begin)
        return result

    def _send_selected(
        self, msg: Message, choose: Callable[[list[MessageQueue]], MessageQueue], info: TopicPublishInfo,
        timeout: float, begin: float,
    ) -> Deferred[Any]:
        mq = choose(list(info.queues))
        if not isinstance(mq, MessageQueue) or mq.topic != msg.topic:
            raise MQClientError(-1, f"the selected queue {mq!r} is not a queue of topic {msg.topic!r}")
        elapsed = self._clock.seconds() - begin
        if elapsed >= timeout:
            raise RemotingTooMuchRequestError("sendSelectImpl call timeout")
        return self._attempt(msg, mq, Mode.SYNC, timeout - elapsed, None, may_batch=False)

    def _send_batch(self, msgs: list[Message], timeout: float) -> Deferred[SendResult]:
        """Validate and encode a batch; it then goes as a SYNC send of its own (never compressed)."""
        try:
            batch, ids = self._batch_of(msgs)
        except Exception:
            return fail()
        return self._send_default(batch, Mode.SYNC, timeout, ids)

    def _batch_of(self, msgs: list[Message]) -> tuple[Message, str]:
        """The batch message for ``msgs`` and their comma-joined UNIQ_KEYs (their ids made at one time)."""
        args = (msgs, self.max_message_size, self._uniq, self._clock.seconds())
        body, ids = _batch_body(*args) or batch_body(*args)
        props = {k: v for k, v in msgs[0].properties.items() if k == MessageConst.WAIT_STORE_MSG_OK}
        if len(body) > self.max_message_size:
            raise MessageInvalidError(f"the batch is {len(body)} bytes, over the limit of {self.max_message_size}")
        return Message(msgs[0].topic, body, 0, props), ids

    def _attempt(
        self, msg: Message, mq: MessageQueue, mode: Mode, timeout: float, batch_ids: str | None,
        may_batch: bool = True, first: tuple[Any, ...] | None = None,
    ) -> Deferred[SendResult | None]:
        """One attempt (Java's ``sendKernelImpl``); never raises: a failure is the Deferred's.

        :param may_batch: the message may join an automatic batch (not for chosen queues).
        :param first: :meth:`_first_failed`'s arguments: the first attempt of :meth:`_send_default`,
            whose failure may lead to more attempts.
        """
        try:
            addr = self.instance.master_address(mq.broker_name)
            if addr is None:
                d = Deferred.fromCoroutine(self._attempt_after_lookup(msg, mq, mode, timeout, batch_ids, may_batch))
            else:
                return self._send_kernel(addr, msg, mq, mode, timeout, batch_ids, may_batch, first)
        except Exception:
            d = fail()
        return d if first is None else d.addErrback(self._first_failed, *first)

    async def _attempt_after_lookup(
        self, msg: Message, mq: MessageQueue, mode: Mode, timeout: float, batch_ids: str | None, may_batch: bool
    ) -> SendResult | None:
        await self._find_publish_info(mq.topic)
        addr = self.instance.master_address(mq.broker_name)
        if addr is None:
            raise BrokerNotFoundError(mq.broker_name)
        result: SendResult | None = await self._send_kernel(addr, msg, mq, mode, timeout, batch_ids, may_batch)
        return result

    def _send_kernel(
        self, addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float, batch_ids: str | None,
        may_batch: bool, first: tuple[Any, ...] | None = None,
    ) -> Deferred[SendResult | None]:
        """One attempt to the broker at ``addr``: UNIQ_KEY, compression, hooks, then the request
        (or a place in the queue's next automatic batch). A failure goes to :meth:`_first_failed`
        with ``first`` when given (by the batcher for its sends: one callback fewer per send)."""
        wire, sys_flag, reconsume, max_reconsume = self._wire_message(msg, batch_ids is not None)
        batcher = self._batcher
        if (
            batcher is not None and may_batch and wire is msg and sys_flag == 0 and batch_ids is None
            and mode is not Mode.ONEWAY and batcher.fits(msg)
        ):  # ``wire is msg``: not compressed, not a retry topic, no hooks
            return batcher.send(addr, msg, mq, mode, timeout, first)
        context = None
        if self.check_forbidden_hooks or self.send_message_hooks:
            context = SendMessageContext(self.group, wire, mq, addr, mode)
            self._check_forbidden(context)
            self._run_hooks("send_message_before", context)
        d = self._request(addr, wire, mq, mode, timeout, batch_ids, sys_flag, reconsume, max_reconsume)
        if context is not None:
            d.addCallbacks(
                self._hooks_after_sent, self._hooks_after_failed, callbackArgs=(context,), errbackArgs=(context,)
            )
        return d if first is None else d.addErrback(self._first_failed, *first)

    def _request(
        self, addr: str, wire: Message, mq: MessageQueue, mode: Mode, timeout: float, batch_ids: str | None,
        sys_flag: int = 0, reconsume: int | None = None, max_reconsume: int | None = None,
    ) -> Deferred[SendResult | None]:
        """The send request for ``wire`` as it goes out (a batch body when ``batch_ids`` is given)."""
        batch = batch_ids is not None
        fields = send_header(
            self.group, wire, mq.queue_id, sys_flag, int(self._clock.seconds() * 1000),
            self.default_topic_queue_nums, reconsume, max_reconsume, batch, self.send_smart_msg or batch,
        )
        msg_id = batch_ids if batch_ids is not None else wire.properties[_UNIQ_KEY]
        return self.instance.api.send_message(addr, mq, wire, fields, mode, timeout, msg_id, batch, self.send_smart_msg)

    def _request_then(
        self, addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float, then: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> None:
        """:meth:`_request` of a message sent as it is (the batcher's lone sends), without a Deferred:
        ``then(result_or_failure, *args)`` gets the outcome."""
        fields = send_header(self.group, msg, mq.queue_id, 0, int(self._clock.seconds() * 1000),
                             self.default_topic_queue_nums, None, None, False, self.send_smart_msg)
        self.instance.api.send_message_then(addr, mq, msg, fields, mode, timeout, msg.properties[_UNIQ_KEY],
                                            self.send_smart_msg, then, args)

    def _hooks_after_sent(self, result: SendResult | None, context: SendMessageContext) -> SendResult | None:
        context.send_result = result
        self._run_hooks("send_message_after", context)
        return result

    def _hooks_after_failed(self, failure: Failure, context: SendMessageContext) -> Failure:
        context.exception = failure.value if isinstance(failure.value, Exception) else None
        self._run_hooks("send_message_after", context)
        return failure

    def _check_forbidden(self, context: SendMessageContext) -> None:
        for forbidden in self.check_forbidden_hooks:
            try:
                forbidden.check_forbidden(context)
            except MQClientError:
                raise
            except Exception as e:
                raise MQClientError(-1, f"send refused by check-forbidden hook {forbidden!r}: {e}") from e

    def _wire_message(self, msg: Message, batch: bool) -> tuple[Message, int, int | None, int | None]:
        """The message as sent: UNIQ_KEY set (on ``msg`` too), body compressed, retry counters moved out.

        ``msg`` itself when nothing changes and no hook is there to see a copy.
        """
        sys_flag = 0
        body = msg.body
        props = msg.properties
        if not batch:
            if _UNIQ_KEY not in props:
                props[_UNIQ_KEY] = self._uniq.next_id(self._clock.seconds())
            if len(body) >= self.compress_over:
                body = self._compress(body)
                sys_flag |= self._compressed_flags
            if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
                sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
        reconsume = max_reconsume = None
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props = dict(props)
            reconsume_text = props.pop(MessageConst.RECONSUME_TIME, None)
            max_text = props.pop(MessageConst.MAX_RECONSUME_TIMES, None)
            reconsume = int(reconsume_text) if reconsume_text else None
            max_reconsume = int(max_text) if max_text else None
        elif body is msg.body and not self.send_message_hooks and not self.check_forbidden_hooks:
            return msg, sys_flag, None, None
        else:
            props = dict(props)
        return Message(msg.topic, body, msg.flag, props), sys_flag, reconsume, max_reconsume

    def _run_hooks(self, method: str, context: SendMessageContext) -> None:
        for hook in self.send_message_hooks:
            try:
                getattr(hook, method)(context)
            except Exception:
                self.log.failure("send hook {hook} {method} failed", level=LogLevel.warn, hook=hook, method=method)


def _compiled_plain_send() -> Callable[[Producer, Message, Mode, float], Deferred[Any] | None] | None:
    """``rocketpy._speedups.plain_send``: :meth:`Producer._send_plain` in C when the send joins the next
    automatic batch of a queue with a request in flight, the Python method for anything else."""
    module = firing.compiled()
    if module is None:
        return None
    if not module.plain_setup(Mode.SYNC, Mode.ONEWAY, valid_topics, autobatch._Waiting, RoundRobinIndex, _UNIQ_KEY,
                              MASTER_ID, Message, MessageQueue, autobatch._Queue):
        return None
    if hasattr(module, "lone_setup"):  # a usual send to an idle queue alone in C, to the socket and back
        module.lone_setup(Producer._request_then, AutoBatcher, MQClientAPI, RemotingClient.invoke_then, Permits,
                          RemotingProtocol.invoke_then, RemotingProtocol._send_request, TBW102,
                          int(RequestCode.SEND_MESSAGE_V2), ROCKETPY_VERSION, Mode.ASYNC, module.lone_answered,
                          writenow.PLAIN_SEND)
    send: Callable[[Producer, Message, Mode, float], Deferred[Any] | None] = module.plain_send
    return send


#: :meth:`Producer._send_plain` (the reference), in C when built.
_plain_send = _compiled_plain_send() or Producer._send_plain
#: :func:`~rocketpy.client.message.batch_body` in C when built (after ``plain_setup``): None for an unusual batch
_batch_body: Callable[..., tuple[bytes, str] | None] = (
    getattr(firing.compiled(), "batch_body", autobatch._none) if _plain_send is not Producer._send_plain else autobatch._none)
