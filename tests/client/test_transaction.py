"""TransactionProducer against the scripted cluster: half send, END_TRANSACTION, answering check-backs."""

from __future__ import annotations

import random
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import Message, SendFailedError
from rocketpy.client.transaction import LocalTransactionState, TransactionProducer
from rocketpy.common.headers import expand_send_v2
from rocketpy.common.message import MessageConst, MessageExt, encode_record, string_to_properties
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from tests.client.fakes import NAMESRV, one_broker_cluster


class Listener:
    def __init__(self, state: Any = LocalTransactionState.COMMIT_MESSAGE) -> None:
        self.state = state
        self.executed: list[tuple[bytes, Any]] = []
        self.checked: list[bytes] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        self.executed.append((msg.body, arg))
        if isinstance(self.state, Exception):
            raise self.state
        return self.state

    def check_local_transaction(self, msg: MessageExt) -> Deferred[LocalTransactionState]:
        self.checked.append(msg.body)
        return succeed(LocalTransactionState.ROLLBACK_MESSAGE)


class Channel:
    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []
        self.remote_address = "10.0.0.1:10911"

    def invoke_oneway(self, request: RemotingCommand) -> Deferred[None]:
        self.sent.append(request)
        return succeed(None)


class TransactionProducerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster, self.broker = one_broker_cluster(self.clock)
        self.remoting = self.cluster.remoting
        self.remoting.on(RequestCode.END_TRANSACTION, lambda addr, request, timeout: None)  # oneway: no answer

    def producer(self, listener: Listener) -> TransactionProducer:
        p = TransactionProducer("TXG", NAMESRV, self.clock, self.remoting, listener=listener, client_id="c@1",
                                rng=random.Random(3), retry_times=0)
        self.successResultOf(p.start())
        self.addCleanup(lambda: self.successResultOf(p.shutdown()))
        return p

    def ends(self) -> list[RemotingCommand]:
        return [r for _, r in self.remoting.sent(RequestCode.END_TRANSACTION, "oneway")]

    def test_commit(self) -> None:
        """The half message carries TRAN_MSG, PGROUP and sysFlag PREPARED, no DELAY; commit ends it."""
        listener = Listener()
        p = self.producer(listener)
        result = self.successResultOf(p.send_message_in_transaction(Message("T", b"x", 0, {"DELAY": "2"}), "arg"))
        self.assertEqual(result.local_state, LocalTransactionState.COMMIT_MESSAGE)
        self.assertEqual(listener.executed, [(b"x", "arg")])
        [(_, send)] = self.remoting.sent(RequestCode.SEND_MESSAGE_V2)
        fields = expand_send_v2(send.ext_fields)
        props = string_to_properties(fields["properties"])
        self.assertEqual((fields["sysFlag"], props["TRAN_MSG"], props["PGROUP"]), ("4", "true", "TXG"))
        self.assertNotIn(MessageConst.DELAY_TIME_LEVEL, props)
        [end] = self.ends()
        ext = end.ext_fields
        self.assertEqual((ext["commitOrRollback"], ext["fromTransactionCheck"], ext["producerGroup"]),
                         ("8", "false", "TXG"))
        self.assertEqual((ext["tranStateTableOffset"], ext["commitLogOffset"], ext["msgId"]),
                         (str(result.send_result.queue_offset), "0", result.send_result.msg_id))
        self.assertEqual(len(self.remoting.sent(RequestCode.HEART_BEAT)), 1)  # announced once for check-backs

    def test_failing_local_transaction_is_unknown(self) -> None:
        """A local transaction that raises ends as UNKNOW (0) with the error as remark."""
        p = self.producer(Listener(ValueError("db down")))
        result = self.successResultOf(p.send_message_in_transaction(Message("T", b"x")))
        self.assertEqual(result.local_state, LocalTransactionState.UNKNOW)
        [end] = self.ends()
        self.assertEqual(end.ext_fields["commitOrRollback"], "0")
        self.assertIn("db down", end.remark or "")
        self.flushLoggedErrors(ValueError)

    def test_send_failure_skips_local_transaction(self) -> None:
        """When the half message cannot be sent the local transaction never runs."""
        listener = Listener()
        p = self.producer(listener)
        self.broker.send_script = [ConnectionError("gone")]
        self.failureResultOf(p.send_message_in_transaction(Message("T", b"x")), SendFailedError, ConnectionError)
        self.assertEqual((listener.executed, self.ends()), ([], []))

    def test_check_back_is_answered_on_the_channel(self) -> None:
        """CHECK_TRANSACTION_STATE for our group gets END_TRANSACTION fromTransactionCheck=true on that channel."""
        listener = Listener()
        self.producer(listener)
        half = MessageExt(topic="T", body=b"asked", properties={"PGROUP": "TXG", "UNIQ_KEY": "U1"},
                          queue_offset=4, commit_log_offset=900)
        fields = {"tranStateTableOffset": "4", "commitLogOffset": "900", "msgId": "U1", "transactionId": "U1",
                  "offsetMsgId": half.msg_id}
        check = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, bytes(encode_record(half)))
        channel = Channel()
        self.remoting.processors[RequestCode.CHECK_TRANSACTION_STATE].process_request(channel, check)
        [end] = channel.sent
        self.assertEqual(listener.checked, [b"asked"])
        self.assertEqual((end.ext_fields["commitOrRollback"], end.ext_fields["fromTransactionCheck"]), ("12", "true"))
        self.assertEqual((end.ext_fields["tranStateTableOffset"], end.ext_fields["commitLogOffset"]), ("4", "900"))
        self.assertTrue(end.is_oneway)
        other = MessageExt(topic="T", body=b"b", properties={"PGROUP": "OTHER"})
        self.remoting.processors[RequestCode.CHECK_TRANSACTION_STATE].process_request(
            channel, RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, bytes(encode_record(other))))
        self.assertEqual(len(channel.sent), 1)
