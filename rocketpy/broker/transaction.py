"""Transactions: half messages, END_TRANSACTION (37) and the check-back service.

Java 4.9 ``TransactionalMessageServiceImpl`` / ``EndTransactionProcessor`` (doc/wire.md
§8). A PREPARED send is stored on
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (:func:`half_message`, called by the send
processor). END_TRANSACTION re-puts a committed message to its real topic and writes an
op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body = half queue offset) for
both outcomes. :class:`TransactionCheckService` walks the half queue every
``check_interval``: a message without an op record older than ``timeout`` is put back at
the end of the half queue with ``TRANSACTION_CHECK_TIMES`` + 1 and its producer group is
asked with CHECK_TRANSACTION_STATE (39); after ``check_max`` checks (or ``max_age`` after its
birth) it goes to ``TRANS_CHECK_MAX_TIME_TOPIC``. A message with ``CHECK_IMMUNITY_TIME_IN_SECONDS``
(a 5.x client's orphaned-transaction recovery duration) is instead put back unasked until that
time has passed, and its producer's own END_TRANSACTION after it is refused (ILLEGAL_OPERATION,
Java 5): the check decides it. Its two queue offsets live in ``consumerOffset.json``
(group ``CID_SYS_RMQ_TRANS``), so a restart resumes where it stopped.

Op records are read in Java 5's batched form too: several half offsets, each followed by a comma
(:func:`op_targets`).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from zope.interface import implementer

from rocketpy.broker.clients import ProducerManager
from rocketpy.broker.offsets import ConsumerOffsetManager
from rocketpy.broker.processors import Rejected
from rocketpy.broker.schedule import STORED
from rocketpy.common.headers import HeaderError, get_bool, get_int, get_str
from rocketpy.common.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    RecordError,
    decode_record,
    encode_record,
)
from rocketpy.common.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketpy.interfaces import IChannel, IRequestProcessor, IStoreService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import GetMessageStatus, PutMessageStatus

TRANS_GROUP = "CID_SYS_RMQ_TRANS"
MAX_REMEMBERED = 100_000
OP_TAG = "d"
_MASK = MessageSysFlag.TRANSACTION_MASK
#: END_TRANSACTION refusals of a header that names no half message of its group (Java's remarks)
NO_HALF_MESSAGE = "Find prepared transaction message failed"
WRONG_GROUP = "The producer group wrong"
WRONG_OFFSET = "The transaction state table offset wrong"
#: END_TRANSACTION's refusal of a producer's own decision after the message's immunity time
TOO_LATE = "the transaction outlived its check immunity time: the broker's check decides it"
_DROPPED = (MessageConst.TRANSACTION_PREPARED, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID,
            MessageConst.TRANSACTION_CHECK_TIMES)
_LONG = re.compile(r"-?[0-9]{1,18}")


def _immunity_seconds(half: MessageExt) -> int | None:
    """``CHECK_IMMUNITY_TIME_IN_SECONDS`` as a number: None when absent or empty, -1 when unreadable
    (Java's ``getLong``)."""
    text = half.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
    if not text:
        return None
    return int(text) if _LONG.fullmatch(text) else -1


def check_immunity_ms(half: MessageExt, timeout_ms: int) -> int | None:
    """How long after its birth the check leaves ``half`` unasked: its immunity seconds (-1 or
    unreadable: ``timeout_ms``), None without any (Java's ``TransactionalMessageServiceImpl.getImmunityTime``)."""
    seconds = _immunity_seconds(half)
    if seconds is None:
        return None
    return timeout_ms if seconds == -1 else seconds * 1000


def too_late_for_producer(half: MessageExt, now_ms: int, timeout_ms: int) -> bool:
    """A producer's own END_TRANSACTION for ``half`` comes after its immunity time (at least
    ``timeout_ms``): Java 5's ``EndTransactionProcessor.rejectCommitOrRollback``."""
    seconds = _immunity_seconds(half)
    if seconds is None:
        return False
    return now_ms - half.born_timestamp > max(seconds * 1000, timeout_ms)


def is_half(msg: MessageExt) -> bool:
    """A PREPARED send: ``TRAN_MSG=true`` or the PREPARED sysFlag."""
    return (msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true"
            or msg.sys_flag & _MASK == MessageSysFlag.TRANSACTION_PREPARED_TYPE)


def half_message(msg: MessageExt) -> MessageExt:
    """``msg`` as the store should keep it: a PREPARED send becomes a half message, others pass.

    The half message sits on the half topic, queue 0, with ``REAL_TOPIC``/``REAL_QID``, its
    sysFlag reset to NOT and no ``DELAY`` (the Java producer drops it too).
    """
    if not is_half(msg):
        return msg
    msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
    msg.properties[MessageConst.REAL_TOPIC] = msg.topic
    msg.properties[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
    msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
    msg.sys_flag &= ~_MASK
    msg.topic, msg.queue_id = TRANS_HALF_TOPIC, 0
    return msg


def _copy(msg: MessageExt, topic: str, queue_id: int, props: dict[str, str], sys_flag: int) -> MessageExt:
    return MessageExt(
        topic=topic, body=msg.body, flag=msg.flag, properties=props, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
        reconsume_times=msg.reconsume_times,
    )


def resumed_half(msg: MessageExt) -> MessageExt | None:
    """RESUME_CHECK_HALF_MESSAGE: a half message (given up after its checks, or still waiting) put
    back at the end of the half queue with its check count at 0; None for any other message."""
    if msg.topic not in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC):
        return None
    props = dict(msg.properties)
    props[MessageConst.TRANSACTION_CHECK_TIMES] = "0"
    props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return _copy(msg, TRANS_HALF_TOPIC, 0, props, msg.sys_flag)


def committed_message(half: MessageExt, commit_log_offset: int) -> MessageExt:
    """The real message of a committed half message (no TRAN_MSG/REAL_*, COMMIT sysFlag)."""
    props = {k: v for k, v in half.properties.items() if k not in _DROPPED}
    props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    queue_id = int(half.properties.get(MessageConst.REAL_QUEUE_ID, "0"))
    real = _copy(half, half.properties[MessageConst.REAL_TOPIC], queue_id, props,
                 (half.sys_flag & ~_MASK) | MessageSysFlag.TRANSACTION_COMMIT_TYPE)
    real.prepared_transaction_offset = commit_log_offset
    return real


def op_message(half_offset: int, store_host: tuple[str, int], first_offset: int | None = None) -> MessageExt:
    """The op record marking half queue offset ``half_offset`` as decided; a put-back copy's also
    names its transaction's first half offset (``TRAN_PREPARED_QUEUE_OFFSET``, rocketpy's)."""
    props = {MessageConst.TAGS: OP_TAG, MessageConst.WAIT_STORE_MSG_OK: "false"}
    if first_offset is not None and first_offset != half_offset:
        props[MessageConst.TRAN_PREPARED_QUEUE_OFFSET] = str(first_offset)
    return MessageExt(topic=TRANS_OP_HALF_TOPIC, body=str(half_offset).encode(), properties=props,
                      store_host=store_host)


@dataclass(slots=True)
class EndTransactionHeader:
    """``EndTransactionRequestHeader``."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool
    msg_id: str

    @classmethod
    def parse(cls, request: RemotingCommand) -> EndTransactionHeader:
        f = request.ext_fields
        return cls(get_str(f, "producerGroup"), get_int(f, "tranStateTableOffset"), get_int(f, "commitLogOffset"),
                   get_int(f, "commitOrRollback", bits=32), get_bool(f, "fromTransactionCheck"), get_str(f, "msgId", ""))


class TransactionStore(Service):
    """What END_TRANSACTION and the checker share: the store and the op records.

    Started on masters: it rebuilds :attr:`decided` from the newest ``MAX_REMEMBERED`` op records
    (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, where Java also keeps what ended), so a repeated or late
    END_TRANSACTION after a restart still finds its transaction ended; END_TRANSACTION waits for it.

    :param store: the ``StoreService``.
    :param store_host: written into op records.
    :ivar decided: half offsets of ended transactions (the newest ``MAX_REMEMBERED``): first
        offsets, and the offsets of copies named by op records written before op records named
        first offsets; a second END_TRANSACTION for one of them re-puts nothing.
    """

    log = Logger()

    def __init__(self, store: IStoreService, store_host: tuple[str, int]) -> None:
        self.store = store
        self.store_host = store_host
        self.decided: OrderedDict[int, None] = OrderedDict()
        self._loading: Deferred[None] | None = None
        self._waiting: list[Deferred[None]] = []

    def remember(self, first_offset: int) -> None:
        self.decided[first_offset] = None
        self.decided.move_to_end(first_offset)
        if len(self.decided) > MAX_REMEMBERED:
            self.decided.popitem(last=False)

    def has_ended(self, half: MessageExt) -> bool:
        """Whether the transaction of ``half`` (a first copy or a put-back one) has ended."""
        return _first_offset(half) in self.decided or half.queue_offset in self.decided

    def startService(self) -> None:
        super().startService()
        loading = Deferred.fromCoroutine(self._load_decided())
        if not loading.called:  # else done already (an empty op queue)
            self._loading = loading

    def stopService(self) -> Deferred[None]:
        """Waits for the rebuild to end (it reads the store, which stops after this)."""
        super().stopService()
        return self.when_loaded()

    def when_loaded(self) -> Deferred[None]:
        """Fires once :attr:`decided` holds what the op records tell (at once when not started)."""
        if self._loading is None:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._waiting.append(d)
        return d

    async def _load_decided(self) -> None:
        end = self.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        offset = start = max(self.store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0), end - MAX_REMEMBERED)
        try:
            while offset < end and self.running:
                ops, after = await self.read(TRANS_OP_HALF_TOPIC, offset, end)
                for op in ops:
                    for _, first in op_targets(op):
                        self.remember(first)
                if after <= offset:
                    break
                offset = after
            self.log.info("transactions: {count} ended ones read from op queue offsets {start} to {end}",
                          count=len(self.decided), start=start, end=offset)
        except Exception:
            self.log.failure("reading the transaction op records failed", level=LogLevel.error)
        finally:
            self._loading = None
            waiting, self._waiting = self._waiting, []
            for d in waiting:
                d.callback(None)

    async def put(self, msg: MessageExt) -> PutMessageStatus:
        return (await self.store.put_message(msg)).status

    async def mark_done(self, half_offset: int, first_offset: int | None = None) -> bool:
        """Write the op record of ``half_offset`` (a copy of ``first_offset``); False (logged) when it
        was not stored."""
        status = await self.put(op_message(half_offset, self.store_host, first_offset))
        if status not in STORED:
            self.log.error("op record of half message {offset} not stored: {status}", offset=half_offset,
                           status=status.name)
        return status in STORED

    async def read(self, topic: str, offset: int, limit: int) -> tuple[list[MessageExt], int]:
        """Messages of ``topic`` queue 0 from ``offset`` (below ``limit``) and the offset after them."""
        found = await self.store.get_message(TRANS_GROUP, topic, 0, offset, 32)
        if found.status is not GetMessageStatus.FOUND:
            return [], max(offset, min(found.next_begin_offset, limit))
        msgs = []
        for record in found.records:
            try:
                msg = decode_record(record)
            except RecordError:
                self.log.error("unreadable record on {topic}: skipped", topic=topic)
                continue
            if msg.queue_offset < limit:
                msgs.append(msg)
        return msgs, (msgs[-1].queue_offset + 1 if msgs else min(found.next_begin_offset, limit))


@implementer(IRequestProcessor)
class EndTransactionProcessor:
    """END_TRANSACTION (37): commit or roll back a half message.

    :param tx: the shared transaction store.
    :param clock: tells a producer's late decision (``too_late_for_producer``).
    :param writable: tells whether the broker takes writes (a slave answers SLAVE_NOT_AVAILABLE).
    :param timeout: the check's ``transaction_timeout`` in seconds, the least immunity time.
    """

    log = Logger()
    codes = (RequestCode.END_TRANSACTION,)

    def __init__(self, tx: TransactionStore, clock: IReactorTime, writable: Any = lambda: True,
                 timeout: float = 6.0) -> None:
        self._tx = tx
        self._clock = clock
        self._writable = writable
        self._timeout_ms = int(timeout * 1000)

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand | None]:
        return Deferred.fromCoroutine(self._process(request))

    async def _process(self, request: RemotingCommand) -> RemotingCommand | None:
        try:
            header = EndTransactionHeader.parse(request)
            if not self._writable():
                raise Rejected(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave: no transaction ends here")
            kind = header.commit_or_rollback
            if kind == MessageSysFlag.TRANSACTION_NOT_TYPE:
                return None  # unknown: the check-back will ask again
            if kind not in (MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE):
                raise Rejected(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {kind} is neither commit nor rollback")
            half = await self._half(header)
            await self._tx.when_loaded()
            first = _first_offset(half)
            if self._tx.has_ended(half):  # a late or repeated answer: the transaction already ended
                self.log.info("END_TRANSACTION {msg_id}: already ended", msg_id=header.msg_id)
            elif not header.from_transaction_check and too_late_for_producer(
                    half, int(self._clock.seconds() * 1000), self._timeout_ms):
                raise Rejected(ResponseCode.ILLEGAL_OPERATION, TOO_LATE)
            elif kind == MessageSysFlag.TRANSACTION_COMMIT_TYPE:
                result = await self._tx.store.put_message(committed_message(half, header.commit_log_offset))
                if result.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL:  # the timer applies on commit
                    raise Rejected(ResponseCode.MESSAGE_ILLEGAL, result.remark or "timer message illegal")
                if result.status not in STORED:
                    raise Rejected(ResponseCode.SYSTEM_ERROR,
                                   result.remark or f"commit of {header.msg_id} failed: {result.status.name}")
            self._tx.remember(first)
            await self._tx.mark_done(half.queue_offset, first)
        except HeaderError as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        except Rejected as e:
            self.log.warn("END_TRANSACTION {msg_id}: {remark}", msg_id=request.ext_fields.get("msgId"), remark=e.remark)
            return request.make_response(e.code, e.remark)
        return request.make_response(ResponseCode.SUCCESS, None)

    async def _half(self, header: EndTransactionHeader) -> MessageExt:
        """The half message the header names, checked as Java's ``checkPrepareMessage``."""
        half: MessageExt | None = await self._tx.store.look_message_by_offset(header.commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise Rejected(ResponseCode.SYSTEM_ERROR, NO_HALF_MESSAGE)
        if half.properties.get(MessageConst.PRODUCER_GROUP) != header.producer_group:
            raise Rejected(ResponseCode.SYSTEM_ERROR, WRONG_GROUP)
        if half.queue_offset != header.tran_state_table_offset:
            raise Rejected(ResponseCode.SYSTEM_ERROR, WRONG_OFFSET)
        return half


class TransactionCheckService(Service):
    """Asks producers about half messages left undecided (``TransactionalMessageCheckService``).

    :param tx: the shared transaction store.
    :param producers: live producer connections by group.
    :param offsets: keeps the half and op queue offsets (group ``CID_SYS_RMQ_TRANS``).
    :param clock: times the checks and measures message age.
    :param check_interval: seconds between checks (60).
    :param timeout: seconds a half message is left alone after it was born (6), unless it
        carries its own ``CHECK_IMMUNITY_TIME_IN_SECONDS``.
    :param check_max: checks before a message is given up (15).
    :param max_age: seconds after its birth a half message is given up unasked (the store's
        ``file_reserved_time``, 72 h: Java's ``needSkip``).
    """

    log = Logger()

    def __init__(self, tx: TransactionStore, producers: ProducerManager, offsets: ConsumerOffsetManager,
                 clock: IReactorTime, check_interval: float = 60.0, timeout: float = 6.0,
                 check_max: int = 15, max_age: float = 72 * 3600.0) -> None:
        self._tx = tx
        self._producers = producers
        self._offsets = offsets
        self._clock = clock
        self._timeout_ms = int(timeout * 1000)
        self._check_max = check_max
        self._max_age_ms = int(max_age * 1000)
        #: op queue offset → the half queue's end when the record was first read (since start)
        self._op_seen: dict[int, int] = {}
        self._interval = check_interval
        self._loop = LoopingCall(self.check)
        self._loop.clock = clock
        self._looping: Deferred[Any] | None = None

    def startService(self) -> None:
        super().startService()
        self._looping = self._loop.start(self._interval, now=False)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        return Deferred.fromCoroutine(self._stopped())

    async def _stopped(self) -> None:
        if self._looping is not None:
            await self._looping  # fires once a running check ends
            self._looping = None

    def _offset(self, topic: str) -> int:
        return max(0, self._offsets.query_offset(TRANS_GROUP, topic, 0),
                   self._tx.store.get_min_offset_in_queue(topic, 0))

    def half_backlog(self) -> int:
        """Half messages the checker has not passed yet (undecided, or decided but not yet skipped)."""
        return max(0, self._tx.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) - self._offset(TRANS_HALF_TOPIC))

    def _commit(self, topic: str, offset: int) -> None:
        self._offsets.commit_offset("broker", TRANS_GROUP, topic, 0, offset)

    async def check(self) -> None:
        """One pass over the half queue; errors are logged (the loop goes on)."""
        try:
            await self._check()
        except Exception:
            self.log.failure("transaction check failed", level=LogLevel.error)

    async def _check(self) -> None:
        store = self._tx.store
        half_end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)  # put-backs wait for the next pass
        half_offset = self._offset(TRANS_HALF_TOPIC)
        done, op_offset = await self._read_ops(half_offset, half_end)
        now_ms = int(self._clock.seconds() * 1000)
        while half_offset < half_end and self.running:
            if half_offset in done:
                half_offset += 1
                continue
            msgs, _ = await self._tx.read(TRANS_HALF_TOPIC, half_offset, half_offset + 1)
            if msgs and _first_offset(msgs[0]) not in done:  # else: a copy whose original was decided
                if not await self._visit(msgs[0], now_ms):
                    break
            half_offset += 1
        self._commit(TRANS_HALF_TOPIC, half_offset)
        self._commit(TRANS_OP_HALF_TOPIC, op_offset)

    async def _read_ops(self, half_offset: int, half_end: int) -> tuple[set[int], int]:
        """Half offsets with op records not yet passed over, and the new op queue offset.

        The op offset moves only over records the checker no longer needs (Java's
        ``calculateOpOffset``), so the others are read again next pass: a record is needed until
        a pass starts (``half_offset``) beyond the half queue's end when it was first read, since
        put-back copies of its message (which name its first offset) may lie anywhere before
        that end, also behind a young message where a pass stops.
        """
        store = self._tx.store
        start = offset = self._offset(TRANS_OP_HALF_TOPIC)
        end = store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        done: set[int] = set()
        passed: set[int] = set()
        while offset < end:
            ops, offset_after = await self._tx.read(TRANS_OP_HALF_TOPIC, offset, end)
            for op in ops:
                targets = op_targets(op)
                for target, first in targets:
                    done.update((target, first))
                if not targets or (max(t for t, _ in targets) < half_offset
                                   and self._op_seen.setdefault(op.queue_offset, half_end) <= half_offset):
                    passed.add(op.queue_offset)  # nothing in it (Java: done at once), or all of it behind
            if offset_after <= offset:
                break
            offset = offset_after
        new_op_offset = start
        while new_op_offset in passed:
            new_op_offset += 1
        for op_offset in [o for o in self._op_seen if o < new_op_offset]:
            del self._op_seen[op_offset]
        return done, new_op_offset

    async def _visit(self, half: MessageExt, now_ms: int) -> bool:
        """An undecided half message: given up, put back unasked, checked, or left for the next pass.

        As Java's ``TransactionalMessageServiceImpl.check``: one born ``max_age`` ago is given up;
        one with an immunity time is put back unasked (the pass goes on) until that time has passed;
        one without is left (with all later ones: the pass ends) until ``timeout`` has passed. Unlike
        Java, an unasked put-back is not counted as a check (apache/rocketmq#8311: there, 15 of them
        give a message up before its producer was ever asked).

        :return: False to end the pass (too young, or the store refused a put: tried again next pass).
        """
        age = now_ms - half.born_timestamp
        if age > self._max_age_ms:
            return await self._give_up(half, f"born {age // 3_600_000} h ago")
        immunity = check_immunity_ms(half, self._timeout_ms)
        if immunity is None:
            if 0 <= age <= self._timeout_ms:  # too young (a negative age, clock skew, is checked now, as Java)
                return False
        elif age <= immunity:
            return await self._put_back(half, dict(half.properties)) is not None
        return await self._resolve(half)

    async def _resolve(self, half: MessageExt) -> bool:
        """Put ``half`` back (one more check) and ask its producer, or give it up; False if not stored."""
        props = dict(half.properties)
        times = int(props.get(MessageConst.TRANSACTION_CHECK_TIMES, "0") or 0)
        if times >= self._check_max:
            return await self._give_up(half, f"undecided after {times} checks")
        props[MessageConst.TRANSACTION_CHECK_TIMES] = str(times + 1)
        copy = await self._put_back(half, props)
        if copy is None:
            return False
        self._ask(copy)
        return True

    async def _give_up(self, half: MessageExt, why: str) -> bool:
        """``half`` to ``TRANS_CHECK_MAX_TIME_TOPIC`` (RESUME_CHECK_HALF_MESSAGE brings it back)."""
        self.log.warn("half message {id} {why}: to {topic}", id=half.properties.get(
            MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), why=why, topic=TRANS_CHECK_MAX_TIME_TOPIC)
        given_up = _copy(half, TRANS_CHECK_MAX_TIME_TOPIC, 0, dict(half.properties), half.sys_flag)
        return await self._tx.put(given_up) in STORED

    async def _put_back(self, half: MessageExt, props: dict[str, str]) -> MessageExt | None:
        """A copy of ``half`` with ``props`` at the end of the half queue, naming its first copy; None if not stored."""
        props.setdefault(MessageConst.TRAN_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
        copy = _copy(half, TRANS_HALF_TOPIC, 0, props, half.sys_flag)
        result = await self._tx.store.put_message(copy)
        if result.status not in STORED or result.append is None:
            return None
        copy.queue_offset = result.append.queue_offset
        copy.commit_log_offset = result.append.wrote_offset
        copy.store_timestamp = result.append.store_timestamp
        return copy

    def _ask(self, half: MessageExt) -> None:
        """CHECK_TRANSACTION_STATE to one live producer of the half message's group."""
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        channel = self._producers.get_available_channel(group)
        if channel is None:
            self.log.info("no live producer of group {group} to check a transaction", group=group)
            return
        request = check_request(half)
        channel.invoke_oneway(request).addErrback(
            lambda f: self.log.failure("CHECK_TRANSACTION_STATE to {group} failed", f, LogLevel.warn, group=group)
        )


def op_targets(op: MessageExt) -> list[tuple[int, int]]:
    """The half offsets an op record marks decided, each with its transaction's first half offset.

    The body is one offset (rocketpy, Java 4.x) or several, each followed by a comma: Java 5 batches
    its op records (``TransactionalMessageServiceImpl.getOpMessage``, ``"12,13,"``; ``"12,"`` for
    one). A single-offset record may name its first offset (``TRAN_PREPARED_QUEUE_OFFSET``,
    rocketpy's); otherwise an offset is its own first. Unreadable or negative parts are skipped."""
    targets = []
    for part in op.body.split(b","):
        try:
            target = int(part)
        except ValueError:
            continue
        if target >= 0:
            targets.append(target)
    if len(targets) != 1:
        return [(target, target) for target in targets]
    [target] = targets
    try:
        return [(target, int(op.properties.get(MessageConst.TRAN_PREPARED_QUEUE_OFFSET, target)))]
    except ValueError:
        return [(target, target)]


def _first_offset(half: MessageExt) -> int:
    """The half queue offset of the first copy of a (put-back) half message."""
    try:
        return int(half.properties.get(MessageConst.TRAN_PREPARED_QUEUE_OFFSET, half.queue_offset))
    except ValueError:
        return half.queue_offset


def check_request(half: MessageExt) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE (39) for a stored half message: the body shows its real topic and queue."""
    uniq = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
    fields = {
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(half.commit_log_offset),
        "msgId": uniq,
        "transactionId": uniq,
        "offsetMsgId": half.msg_id,
    }
    shown = _copy(half, half.properties.get(MessageConst.REAL_TOPIC, half.topic),
                  int(half.properties.get(MessageConst.REAL_QUEUE_ID, "0")), dict(half.properties), half.sys_flag)
    shown.queue_offset, shown.commit_log_offset = half.queue_offset, half.commit_log_offset
    shown.store_timestamp, shown.prepared_transaction_offset = half.store_timestamp, half.prepared_transaction_offset
    request = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, bytes(encode_record(shown)))
    request.mark_oneway()
    return request
