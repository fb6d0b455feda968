"""Transactional messages of 5.x clients: the transaction id, EndTransaction and the orphaned-transaction check.

A TRANSACTION SendMessage is stored as a 4.x PREPARED send (a half message, rocketpy/broker/transaction.py).
The transaction id the client gets back names the half message itself, as the Java proxy's first
``TransactionId`` did: the broker name, the half message's commit log offset and its half queue offset
(``tranStateTableOffset``), in hex. EndTransaction needs nothing else, so an id stays valid across a
restart, and the id of a check (a put-back copy of the half message) names that copy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rocketpy.common.message import MessageExt, MessageSysFlag, decode_offset_msg_id
from rocketpy.grpc.commands import shown
from rocketpy.grpc.status import GrpcError
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

_LENGTH = struct.Struct(">i")
_OFFSETS = struct.Struct(">qq")
_RESOLUTIONS = {
    pb.TransactionResolution.COMMIT: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    pb.TransactionResolution.ROLLBACK: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
}


@dataclass(frozen=True, slots=True)
class TransactionId:
    """Where a half message is: what END_TRANSACTION needs besides the producer group."""

    broker_name: str
    commit_log_offset: int
    tran_state_table_offset: int

    def encode(self) -> str:
        """Upper-case hex of: broker name (int length, UTF-8), an empty broker transaction id (int 0),
        commit log offset, half queue offset (longs) — the Java proxy's former ``TransactionId`` layout."""
        name = self.broker_name.encode()
        raw = _LENGTH.pack(len(name)) + name + _LENGTH.pack(0) + _OFFSETS.pack(
            self.commit_log_offset, self.tran_state_table_offset)
        return raw.hex().upper()

    @classmethod
    def decode(cls, text: str) -> TransactionId:
        """:raises GrpcError: INVALID_TRANSACTION_ID for text that is not such an id."""
        try:
            raw = bytes.fromhex(text)
            (name_length,) = _LENGTH.unpack_from(raw, 0)
            if not 0 <= name_length <= len(raw):
                raise ValueError("bad length")
            name = raw[4:4 + name_length].decode()
            at = 4 + name_length
            (id_length,) = _LENGTH.unpack_from(raw, at)
            at += 4 + id_length
            if id_length < 0 or len(raw) != at + _OFFSETS.size:
                raise ValueError("bad length")
            commit_log_offset, queue_offset = _OFFSETS.unpack_from(raw, at)
        except (ValueError, struct.error, UnicodeDecodeError):
            raise GrpcError(pb.Code.INVALID_TRANSACTION_ID, f"transaction id {text!r} is invalid") from None
        return cls(name, commit_log_offset, queue_offset)


def sent_transaction_id(broker_name: str, response: RemotingCommand) -> str:
    """The id of a half message from its SEND_MESSAGE response (offset ``msgId``, ``queueOffset``)."""
    fields = response.ext_fields
    _host, commit_log_offset = decode_offset_msg_id(fields["msgId"])
    return TransactionId(broker_name, commit_log_offset, int(fields["queueOffset"])).encode()


def end_request(request: rpc.EndTransactionRequest, where: TransactionId) -> RemotingCommand:
    """The END_TRANSACTION of an EndTransaction (the topic is the producer group, as at the send);
    an unspecified resolution is the 4.x unknown state (nothing happens, the check asks again)."""
    fields = {
        "producerGroup": request.topic.name,
        "tranStateTableOffset": str(where.tran_state_table_offset),
        "commitLogOffset": str(where.commit_log_offset),
        "commitOrRollback": str(_RESOLUTIONS.get(request.resolution, MessageSysFlag.TRANSACTION_NOT_TYPE)),
        "fromTransactionCheck": "true" if request.source == pb.TransactionSource.SOURCE_SERVER_CHECK else "false",
        "msgId": request.message_id,
        "transactionId": request.transaction_id,
    }
    return RemotingCommand.request(RequestCode.END_TRANSACTION, fields)


def recover_command(broker_name: str, check: RemotingCommand, half: MessageExt) -> rpc.TelemetryCommand:
    """The RecoverOrphanedTransactionCommand of a CHECK_TRANSACTION_STATE (``half``: its body, shown
    with the real topic): the message as a consumer would see it, and the id of the checked copy."""
    fields = check.ext_fields
    where = TransactionId(broker_name, int(fields["commitLogOffset"]), int(fields["tranStateTableOffset"]))
    return rpc.TelemetryCommand(recover_orphaned_transaction_command=rpc.RecoverOrphanedTransactionCommand(
        message=shown(half), transaction_id=where.encode()))
