"""Transactional producer: Java's ``TransactionMQProducer`` on Deferreds.

:meth:`TransactionProducer.send_message_in_transaction` sends a half message
(``TRAN_MSG=true``, ``PGROUP``), runs the local transaction and ends it with
END_TRANSACTION (37). When the broker asks later with CHECK_TRANSACTION_STATE (39)
the listener's ``check_local_transaction`` answers, and END_TRANSACTION goes back on
the same connection with ``fromTransactionCheck=true`` (doc/wire.md §8).
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger, LogLevel
from zope.interface import implementer

from rocketpy.client.errors import MQClientError
from rocketpy.client.producer import Producer
from rocketpy.client.results import SendResult, SendStatus
from rocketpy.common.headers import get_str, to_fields
from rocketpy.common.compression import DecompressionError, inflate_body
from rocketpy.common.message import (
    Message,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    RecordError,
    decode_offset_msg_id,
    decode_record,
)
from rocketpy.interfaces import IChannel, IRequestProcessor
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand


class LocalTransactionState(enum.Enum):
    """The outcome of a local transaction; the value is END_TRANSACTION's ``commitOrRollback``."""

    COMMIT_MESSAGE = MessageSysFlag.TRANSACTION_COMMIT_TYPE
    ROLLBACK_MESSAGE = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    UNKNOW = MessageSysFlag.TRANSACTION_NOT_TYPE  # Java's spelling: ask again later


class TransactionListener(Protocol):
    """What the application supplies; both methods may return a Deferred."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        """Run the local transaction for the half message just sent; a :class:`LocalTransactionState`."""

    def check_local_transaction(self, msg: MessageExt) -> Any:
        """The state of an earlier local transaction the broker asks about."""


@dataclass(slots=True)
class TransactionSendResult:
    """The half message's send result and how its local transaction ended."""

    send_result: SendResult
    local_state: LocalTransactionState


def end_transaction_request(
    group: str, state: LocalTransactionState, tran_state_table_offset: int, commit_log_offset: int,
    msg_id: str, transaction_id: str | None, from_check: bool, remark: str | None = None,
) -> RemotingCommand:
    """END_TRANSACTION, oneway, as the Java client sends it."""
    fields = to_fields(
        producerGroup=group, tranStateTableOffset=tran_state_table_offset, commitLogOffset=commit_log_offset,
        commitOrRollback=state.value, fromTransactionCheck=from_check, msgId=msg_id, transactionId=transaction_id,
    )
    request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields)
    request.remark = remark
    request.mark_oneway()
    return request


class TransactionProducer(Producer):
    """A :class:`Producer` that also sends messages in transactions.

    :param listener: runs and checks local transactions.
    Other arguments as :class:`Producer`.
    """

    log = Logger()

    def __init__(self, group: str, namesrv_addrs: Any = (), reactor: Any = None, remoting_client: Any = None, *,
                 listener: TransactionListener, **kwargs: Any) -> None:
        super().__init__(group, namesrv_addrs, reactor, remoting_client, **kwargs)
        self.listener = listener

    def start(self) -> Deferred[None]:
        _checker_of(self.instance.remoting).producers[self.group] = self
        return super().start()

    def shutdown(self) -> Deferred[None]:
        _checker_of(self.instance.remoting).producers.pop(self.group, None)
        return super().shutdown()

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> Deferred[TransactionSendResult]:
        """Send ``msg`` as a half message, run the local transaction, then commit or roll back.

        Fails (before running the local transaction) when the send fails; a local
        transaction that raises counts as UNKNOW, so the broker asks again later.
        """
        return Deferred.fromCoroutine(self._in_transaction(msg, arg))

    async def _in_transaction(self, msg: Message, arg: Any) -> TransactionSendResult:
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)  # transactions are never delayed
        msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        result = await self.send(msg)
        await self.instance.announce()  # check-backs need our connection known now, not after 30 s
        state = LocalTransactionState.ROLLBACK_MESSAGE
        remark = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = LocalTransactionState(await maybeDeferred(self.listener.execute_local_transaction, msg, arg))
            except Exception as e:
                self.log.failure("local transaction of {id} failed", level=LogLevel.warn, id=result.msg_id)
                state, remark = LocalTransactionState.UNKNOW, f"executeLocalTransactionBranch exception: {e}"
        await self._end(result, state, remark)
        return TransactionSendResult(result, state)

    async def _end(self, result: SendResult, state: LocalTransactionState, remark: str | None) -> None:
        """END_TRANSACTION to the master that holds the half message (oneway; errors logged)."""
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id or result.msg_id)
        addr = self.instance.master_address(result.queue.broker_name)
        if addr is None:
            raise MQClientError(-1, f"no address of broker {result.queue.broker_name!r} to end the transaction")
        request = end_transaction_request(self.group, state, result.queue_offset, commit_log_offset,
                                          result.msg_id, result.transaction_id or result.msg_id, False, remark)
        try:
            await self.instance.remoting.invoke_oneway(addr, request, self.send_timeout)
        except Exception:
            self.log.failure("END_TRANSACTION of {id} not sent; the broker will check back", level=LogLevel.warn,
                             id=result.msg_id)

    async def answer_check(self, channel: IChannel, request: RemotingCommand) -> None:
        """Ask the listener about a half message and answer on ``channel``."""
        fields = request.ext_fields
        msg = decode_record(request.body)
        try:
            inflate_body(msg)  # as Java's MessageDecoder.decode
        except DecompressionError as e:
            self.log.warn("half message {id} left compressed: {error}", id=fields.get("msgId"), error=e)
        try:
            state = LocalTransactionState(await maybeDeferred(self.listener.check_local_transaction, msg))
            remark = None
        except Exception as e:
            self.log.failure("check of local transaction {id} failed", level=LogLevel.warn, id=fields.get("msgId"))
            state, remark = LocalTransactionState.UNKNOW, f"checkLocalTransactionState exception: {e}"
        uniq = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or get_str(fields, "msgId", "")
        response = end_transaction_request(
            self.group, state, int(get_str(fields, "tranStateTableOffset")), int(get_str(fields, "commitLogOffset")),
            uniq, fields.get("transactionId") or uniq, True, remark,
        )
        await channel.invoke_oneway(response)


@implementer(IRequestProcessor)
class _CheckProcessor:
    """CHECK_TRANSACTION_STATE on one remoting client: handed to the producer of the message's group."""

    log = Logger()

    def __init__(self) -> None:
        self.producers: dict[str, TransactionProducer] = {}

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> None:
        try:
            group = decode_record(request.body).properties.get(MessageConst.PRODUCER_GROUP, "")
        except RecordError:
            self.log.warn("CHECK_TRANSACTION_STATE with an unreadable message from {peer}",
                          peer=getattr(channel, "remote_address", "?"))
            return
        producer = self.producers.get(group)
        if producer is None:
            self.log.info("CHECK_TRANSACTION_STATE for group {group}, which no producer here serves", group=group)
            return
        Deferred.fromCoroutine(producer.answer_check(channel, request)).addErrback(
            lambda f: self.log.failure("answering a transaction check failed", f, LogLevel.warn)
        )


_checkers: weakref.WeakKeyDictionary[Any, _CheckProcessor] = weakref.WeakKeyDictionary()


def _checker_of(remoting: Any) -> _CheckProcessor:
    """The check processor of a remoting client, registered on first use."""
    checker = _checkers.get(remoting)
    if checker is None:
        checker = _checkers[remoting] = _CheckProcessor()
        remoting.register_processor(RequestCode.CHECK_TRANSACTION_STATE, checker)
    return checker
