"""Transactions: half messages through the send processor, END_TRANSACTION, the check-back service."""

from __future__ import annotations

from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker import transaction

from rocketpy.broker.clients import ClientChannelInfo, ProducerManager
from rocketpy.broker.offsets import ConsumerOffsetManager
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.broker.transaction import (
    EndTransactionProcessor,
    TransactionCheckService,
    TransactionStore,
    op_message,
    resumed_half,
)
from rocketpy.common.headers import to_fields
from rocketpy.common.message import MessageConst, MessageExt, MessageSysFlag, decode_record, properties_to_string
from rocketpy.common.topic import TIMER_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.fakes import FakeChannel
from tests.broker.featurestore import STORE_HOST, new_clock, open_store, put, read_queue

COMMIT, ROLLBACK = MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


class TransactionTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.root = self.mktemp()
        self.store = open_store(self, self.clock, self.root)
        self.topics = TopicConfigManager(self.clock)
        self.send = SendMessageProcessor(self.store, self.topics, STORE_HOST)
        self.tx = TransactionStore(self.store, STORE_HOST)
        self.end = EndTransactionProcessor(self.tx, self.clock)
        self.channel = FakeChannel()

    def send_half(self, body: bytes = b"order", delay: bool = False, immunity: str | None = None,
                  born_in: float = 0, **more: str) -> dict[str, str]:
        """A PREPARED send as the Java client makes it (``immunity``: its CHECK_IMMUNITY_TIME_IN_SECONDS;
        born ``born_in`` seconds from now; ``more`` properties); the response's ext fields."""
        props = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "PG",
                 MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "UNIQ" + body.decode(), MessageConst.TAGS: "T", **more}
        if delay:
            props[MessageConst.DELAY_TIME_LEVEL] = "3"
        if immunity is not None:
            props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = immunity
        fields = to_fields(
            producerGroup="PG", topic="Orders", defaultTopic="TBW102", defaultTopicQueueNums=4, queueId=2,
            sysFlag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
            bornTimestamp=int((self.clock.seconds() + born_in) * 1000),
            flag=0, properties=properties_to_string(props),
        )
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)
        result = self.send.process_request(self.channel, request)
        response = result if isinstance(result, RemotingCommand) else self.successResultOf(result)
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        return response.ext_fields

    def end_tx(self, sent: dict[str, str], kind: int, group: str = "PG", check: bool = False) -> RemotingCommand | None:
        offset = int(sent.get("commitLogOffset") or int(sent["msgId"][16:], 16))
        table_offset = sent.get("tranStateTableOffset", sent.get("queueOffset"))
        fields = to_fields(producerGroup=group, tranStateTableOffset=table_offset, commitLogOffset=offset,
                           commitOrRollback=kind, fromTransactionCheck=check, msgId="x")
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields)
        response: RemotingCommand | None = self.successResultOf(self.end.process_request(self.channel, request))
        return response

    def end_code(self, sent: dict[str, str], kind: int, group: str = "PG", check: bool = False) -> int:
        """The response code of an END_TRANSACTION that gets an answer."""
        response = self.end_tx(sent, kind, group, check)
        assert response is not None
        return response.code

    def real(self) -> list[MessageExt]:
        return read_queue(self, self.store, "Orders", 2)

    def ops(self) -> list[bytes]:
        return [m.body for m in read_queue(self, self.store, TRANS_OP_HALF_TOPIC)]


class HalfAndEndTests(TransactionTestCase):
    def test_prepared_send_is_a_half_message(self) -> None:
        """A PREPARED send waits on the half topic with REAL_TOPIC/REAL_QID, sysFlag NOT, no DELAY."""
        sent = self.send_half(delay=True)
        self.assertEqual(sent["queueId"], "2")
        self.assertEqual(self.real(), [])
        [half] = read_queue(self, self.store, TRANS_HALF_TOPIC)
        self.assertEqual((half.properties[MessageConst.REAL_TOPIC], half.properties[MessageConst.REAL_QUEUE_ID]),
                         ("Orders", "2"))
        self.assertEqual(half.sys_flag & MessageSysFlag.TRANSACTION_MASK, 0)
        self.assertNotIn(MessageConst.DELAY_TIME_LEVEL, half.properties)

    def test_commit(self) -> None:
        """Commit stores the real message (no TRAN_MSG/REAL_*, COMMIT flag) and an op record "0"."""
        sent = self.send_half()
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        [msg] = self.real()
        self.assertEqual(msg.body, b"order")
        for gone in (MessageConst.TRANSACTION_PREPARED, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID):
            self.assertNotIn(gone, msg.properties)
        self.assertEqual(msg.sys_flag & MessageSysFlag.TRANSACTION_MASK, COMMIT)
        self.assertEqual(msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX], "UNIQorder")
        self.assertEqual(self.ops(), [b"0"])
        [op] = read_queue(self, self.store, TRANS_OP_HALF_TOPIC)
        self.assertEqual(op.properties[MessageConst.TAGS], "d")

    def test_timer_applies_on_commit(self) -> None:
        """A half message keeps its timer properties and waits on the half topic; the commit parks it on
        the timer topic (TIMER_DELAY_SEC counted from the commit). A timer beyond the maximum is
        refused at commit with MESSAGE_ILLEGAL and the half message stays undecided (checks go on)."""
        sent = self.send_half(TIMER_DELAY_SEC="5")
        [half] = read_queue(self, self.store, TRANS_HALF_TOPIC)
        self.assertEqual(half.properties[MessageConst.TIMER_DELAY_SEC], "5")
        self.assertEqual(read_queue(self, self.store, TIMER_TOPIC), [])
        self.clock.advance(2)
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.assertEqual(self.real(), [])
        [parked] = read_queue(self, self.store, TIMER_TOPIC)
        self.assertEqual((parked.properties[MessageConst.REAL_TOPIC], parked.properties[MessageConst.REAL_QUEUE_ID]),
                         ("Orders", "2"))
        self.assertEqual(parked.properties[MessageConst.TIMER_OUT_MS], str(int(self.clock.seconds() * 1000) + 4000))
        far = self.send_half(b"far", TIMER_DELAY_SEC=str(4 * 86400))
        response = self.end_tx(far, COMMIT)
        assert response is not None
        self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL)
        self.assertIn("max delay 259200000ms", response.remark or "")
        self.assertEqual(self.ops(), [b"0"])  # only the first one is decided

    def test_rollback(self) -> None:
        """Rollback writes only the op record."""
        self.send_half()
        sent = self.send_half(b"second")
        self.assertEqual(self.end_code(sent, ROLLBACK), ResponseCode.SUCCESS)
        self.assertEqual((self.real(), self.ops()), ([], [b"1"]))

    def test_repeated_end_commits_once(self) -> None:
        """A second END_TRANSACTION (a late check answer, a retry) re-puts nothing, nor does one for a copy."""
        sent = self.send_half()
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.assertEqual(len(self.real()), 1)

    def test_unknown_state_is_no_op(self) -> None:
        """commitOrRollback 0 (UNKNOW) answers nothing and writes nothing."""
        self.assertIsNone(self.end_tx(self.send_half(), 0))
        self.assertEqual(self.ops(), [])

    def test_mismatches_are_refused(self) -> None:
        """Wrong group, wrong half offset, no half message there, not a slave: SYSTEM_ERROR / SLAVE_NOT_AVAILABLE."""
        sent = self.send_half()
        self.assertEqual(self.end_code(sent, COMMIT, group="other"), ResponseCode.SYSTEM_ERROR)
        self.assertEqual(self.end_code({**sent, "queueOffset": "5"}, COMMIT),
                         ResponseCode.SYSTEM_ERROR)
        self.assertEqual(self.end_code({**sent, "commitLogOffset": "999999"}, COMMIT),
                         ResponseCode.SYSTEM_ERROR)
        self.end = EndTransactionProcessor(self.tx, self.clock, writable=lambda: False)
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SLAVE_NOT_AVAILABLE)
        self.assertEqual((self.real(), self.ops()), ([], []))


class CheckBackTestCase(TransactionTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.producers = ProducerManager(self.clock)
        self.producers.register_producer("PG", ClientChannelInfo(self.channel, "client-1"))
        self.offsets = ConsumerOffsetManager()

    def checker(self, check_max: int = 15, max_age: float = 72 * 3600.0) -> TransactionCheckService:
        service = TransactionCheckService(self.tx, self.producers, self.offsets, self.clock, 60.0, 6.0, check_max,
                                          max_age)
        service.startService()
        self.addCleanup(service.stopService)
        return service

    def checks(self) -> list[RemotingCommand]:
        return [r for r in self.channel.sent if r.code == RequestCode.CHECK_TRANSACTION_STATE]

    def checked(self) -> list[bytes]:
        return [decode_record(c.body).body for c in self.checks()]


class CheckBackTests(CheckBackTestCase):
    def test_undecided_message_is_checked(self) -> None:
        """After 60 s an undecided half message is put back (check 1) and its producer asked, oneway."""
        self.send_half()
        self.checker()
        self.clock.advance(59)
        self.assertEqual(self.checks(), [])
        self.clock.advance(1)
        [check] = self.checks()
        self.assertTrue(check.is_oneway)
        ext = check.ext_fields
        self.assertEqual((ext["tranStateTableOffset"], ext["msgId"], ext["transactionId"]),
                         ("1", "UNIQorder", "UNIQorder"))
        shown = decode_record(check.body)
        self.assertEqual((shown.topic, shown.queue_id, shown.body), ("Orders", 2, b"order"))
        self.assertEqual(shown.properties[MessageConst.TRANSACTION_CHECK_TIMES], "1")
        self.assertEqual(ext["offsetMsgId"][16:], format(int(ext["commitLogOffset"]), "016X"))
        self.assertEqual(self.offsets.query_offset("CID_SYS_RMQ_TRANS", TRANS_HALF_TOPIC, 0), 1)

    def test_answer_to_check_commits_once(self) -> None:
        """END_TRANSACTION answering a check commits; later passes ask nothing more."""
        self.send_half()
        self.checker()
        self.clock.advance(60)
        [check] = self.checks()
        self.assertEqual(self.end_code(check.ext_fields, COMMIT, check=True), ResponseCode.SUCCESS)
        self.clock.pump([60] * 3)
        self.assertEqual((len(self.checks()), len(self.real())), (1, 1))
        self.assertEqual(self.offsets.query_offset("CID_SYS_RMQ_TRANS", TRANS_HALF_TOPIC, 0), 2)
        self.assertEqual(self.offsets.query_offset("CID_SYS_RMQ_TRANS", TRANS_OP_HALF_TOPIC, 0), 1)

    def test_late_answer_to_the_original_ends_the_checks(self) -> None:
        """A commit of the first copy after a put-back stops the checks; the copy's answer re-puts nothing."""
        sent = self.send_half()
        self.checker()
        self.clock.advance(60)
        self.end_tx(sent, COMMIT)
        [check] = self.checks()
        self.assertEqual(self.end_code(check.ext_fields, COMMIT, check=True), ResponseCode.SUCCESS)
        self.clock.pump([60] * 3)
        self.assertEqual((len(self.checks()), len(self.real())), (1, 1))
        [_, copy] = read_queue(self, self.store, TRANS_HALF_TOPIC)
        self.assertEqual(copy.properties[MessageConst.TRAN_PREPARED_QUEUE_OFFSET], "0")

    def test_answer_to_an_earlier_copy_ends_the_checks(self) -> None:
        """Asked twice (two copies) and answered for the first copy only: the second copy, which
        names the same first offset, is not asked about again."""
        self.send_half()
        self.checker()
        self.clock.pump([60, 60])
        first_check = self.checks()[0]
        self.assertEqual(len(self.checks()), 2)
        self.assertEqual(self.end_code(first_check.ext_fields, COMMIT, check=True), ResponseCode.SUCCESS)
        self.clock.pump([60] * 3)
        self.assertEqual((len(self.checks()), len(self.real())), (2, 1))

    def test_young_and_decided_messages_are_not_checked(self) -> None:
        """A decided half message is passed over; one younger than 6 s waits for a later pass."""
        self.end_tx(self.send_half(b"a"), ROLLBACK)
        self.checker()
        self.clock.advance(57)
        self.send_half(b"b")
        self.clock.advance(3)
        self.assertEqual(self.checks(), [])
        self.assertEqual(self.offsets.query_offset("CID_SYS_RMQ_TRANS", TRANS_HALF_TOPIC, 0), 1)
        self.clock.advance(60)
        self.assertEqual([decode_record(c.body).body for c in self.checks()], [b"b"])

    def test_given_up_after_check_max(self) -> None:
        """After check_max checks the message moves to TRANS_CHECK_MAX_TIME_TOPIC and is not asked about again."""
        self.send_half()
        self.checker(check_max=2)
        self.clock.pump([60] * 5)
        self.assertEqual(len(self.checks()), 2)
        [dropped] = read_queue(self, self.store, TRANS_CHECK_MAX_TIME_TOPIC)
        self.assertEqual(dropped.properties[MessageConst.TRANSACTION_CHECK_TIMES], "2")

    def test_resumed_after_check_max(self) -> None:
        """RESUME_CHECK_HALF_MESSAGE's copy of a given-up half message is checked again from zero."""
        self.send_half()
        self.checker(check_max=1)
        self.clock.pump([60] * 3)
        self.assertEqual(len(self.checks()), 1)
        [dropped] = read_queue(self, self.store, TRANS_CHECK_MAX_TIME_TOPIC)
        resumed = resumed_half(dropped)
        assert resumed is not None
        self.assertEqual((resumed.topic, resumed.queue_id, resumed.properties[MessageConst.TRANSACTION_CHECK_TIMES]),
                         (TRANS_HALF_TOPIC, 0, "0"))
        self.assertTrue(self.successResultOf(self.store.put_message(resumed)).ok)
        self.clock.pump([60] * 3)
        self.assertEqual(len(self.checks()), 2)
        self.assertIsNone(resumed_half(MessageExt(topic="Orders")))

    def test_no_live_producer(self) -> None:
        """Without a live producer of the group the check is still counted (Java does the same)."""
        self.producers.unregister_producer("PG", self.channel)
        self.send_half()
        self.checker()
        self.clock.advance(60)
        [half, copy] = read_queue(self, self.store, TRANS_HALF_TOPIC)
        self.assertEqual(copy.properties[MessageConst.TRANSACTION_CHECK_TIMES], "1")

    def test_restart_resumes_from_persisted_offsets(self) -> None:
        """A new checker over the same offsets and store neither re-asks decided messages nor forgets pending ones."""
        self.end_tx(self.send_half(b"a"), COMMIT)
        self.send_half(b"b")
        first = self.checker()
        self.clock.advance(60)
        self.assertEqual(len(self.checks()), 1)
        self.successResultOf(first.stopService())
        self.successResultOf(self.store.stopService())
        self.store = open_store(self, self.clock, self.root)
        self.tx = TransactionStore(self.store, STORE_HOST)
        self.checker()
        self.clock.advance(60)
        self.assertEqual([decode_record(c.body).body for c in self.checks()], [b"b", b"b"])


class ImmunityTests(CheckBackTestCase):
    """``CHECK_IMMUNITY_TIME_IN_SECONDS`` (4.x producers; a 5.x client's orphaned-transaction recovery duration)."""

    def test_first_check_waits_for_the_immunity_time(self) -> None:
        """Put back unasked and uncounted each pass until 300 s have passed; later messages are checked meanwhile."""
        self.send_half(b"immune", immunity="300")
        self.checker()
        self.clock.advance(10)
        self.send_half(b"plain")
        self.clock.pump([50] + [60] * 4)  # passes at 60 .. 300 s
        self.assertEqual(self.checked(), [b"plain"] * 5)  # undecided: asked every pass
        copies = [m for m in read_queue(self, self.store, TRANS_HALF_TOPIC) if m.body == b"immune"]
        self.assertEqual(len(copies), 6)  # the original and one unasked put-back per pass
        for copy in copies[1:]:
            self.assertEqual(copy.properties[MessageConst.TRAN_PREPARED_QUEUE_OFFSET], "0")
            self.assertNotIn(MessageConst.TRANSACTION_CHECK_TIMES, copy.properties)
        self.clock.advance(60)
        [shown] = [m for m in map(decode_record, (c.body for c in self.checks())) if m.body == b"immune"]
        self.assertEqual(shown.properties[MessageConst.TRANSACTION_CHECK_TIMES], "1")

    def test_producer_decides_within_the_immunity_time(self) -> None:
        """The producer's own commit of the first copy, after put-backs, ends the put-backs: never asked."""
        sent = self.send_half(immunity="600")
        self.checker()
        self.clock.pump([60] * 2)
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        before = self.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        self.clock.pump([60] * 12)
        self.assertEqual((self.checks(), len(self.real())), ([], 1))
        self.assertEqual(self.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0), before)

    def test_immunity_shorter_than_the_timeout(self) -> None:
        """1 s of immunity checks a message born 3 s before the pass, which the 6 s timeout would leave;
        -1 (and an unreadable value) means the timeout."""
        self.checker()
        self.clock.advance(57)
        self.send_half(b"short", immunity="1")
        self.send_half(b"default", immunity="-1")
        self.send_half(b"garbage", immunity="soon")
        self.clock.advance(3)
        self.assertEqual(self.checked(), [b"short"])
        self.clock.advance(60)
        self.assertEqual(self.checked(), [b"short", b"short", b"default", b"garbage"])  # short: asked again

    def test_late_producer_decision_is_refused(self) -> None:
        """After the immunity time (at least the 6 s timeout) the producer's own END_TRANSACTION gets
        ILLEGAL_OPERATION and changes nothing; an answer to a check still commits (Java 5)."""
        late = self.send_half(b"late", immunity="120")
        short = self.send_half(b"short", immunity="1")
        plain = self.send_half(b"plain")
        self.clock.advance(5)
        self.assertEqual(self.end_code(short, ROLLBACK), ResponseCode.SUCCESS)  # 5 s < the 6 s timeout
        self.clock.advance(116)
        self.assertEqual(self.end_code(late, COMMIT), ResponseCode.ILLEGAL_OPERATION)
        self.assertEqual(self.end_code(late, ROLLBACK), ResponseCode.ILLEGAL_OPERATION)
        self.assertEqual((self.real(), self.ops()), ([], [b"1"]))
        self.assertEqual(self.end_code(plain, COMMIT), ResponseCode.SUCCESS)  # no immunity: never late
        self.assertEqual(self.end_code(late, COMMIT, check=True), ResponseCode.SUCCESS)
        self.assertEqual([m.body for m in self.real()], [b"plain", b"late"])

    def test_given_up_unasked_after_max_age(self) -> None:
        """A half message born longer ago than the store keeps files is given up without a check (needSkip)."""
        self.send_half(immunity="3600")
        self.checker(max_age=100)
        self.clock.pump([60] * 3)
        self.assertEqual(self.checks(), [])
        [dropped] = read_queue(self, self.store, TRANS_CHECK_MAX_TIME_TOPIC)
        self.assertEqual(dropped.body, b"order")

    def test_born_in_the_future_is_checked_at_once(self) -> None:
        """A producer clock ahead of the broker's does not hold the check back (Java checks a negative age)."""
        self.send_half(b"ahead", born_in=600)
        self.checker()
        self.clock.advance(60)
        self.assertEqual(self.checked(), [b"ahead"])

    def test_decision_reaches_a_copy_behind_a_young_message(self) -> None:
        """A decision read while the pass stops at a young message before the live copy still ends the
        put-backs: its op record is passed over only once a pass started beyond every copy there was
        when it was first read (checks every 2 s, 6 s timeout)."""
        service = TransactionCheckService(self.tx, self.producers, self.offsets, self.clock, 2.0, 6.0)
        service.startService()
        self.addCleanup(service.stopService)
        sent = self.send_half(b"immune", immunity="100")
        self.clock.advance(2)  # put back unasked (offset 1)
        self.clock.advance(1)
        self.send_half(b"plain")  # offset 2
        self.clock.advance(1)  # offset 1 put back again (3); the pass stops at offset 2, 1 s old
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.clock.pump([2] * 60)
        self.assertEqual(self.checked().count(b"immune"), 0)
        halves = read_queue(self, self.store, TRANS_HALF_TOPIC)
        self.assertEqual([m.body for m in halves].count(b"immune"), 3)  # no put-back after the commit
        self.assertEqual(self.offsets.query_offset("CID_SYS_RMQ_TRANS", TRANS_OP_HALF_TOPIC, 0), 1)


def java5_op(*half_offsets: int) -> MessageExt:
    """An op record as Java 5 writes it (``TransactionalMessageServiceImpl.getOpMessage``): tag ``d``
    and the decided half offsets, each followed by a comma, batched into one body."""
    body = "".join(f"{offset}," for offset in half_offsets).encode()
    return MessageExt(topic=TRANS_OP_HALF_TOPIC, body=body,
                      properties={MessageConst.TAGS: "d", MessageConst.WAIT_STORE_MSG_OK: "true"})


class Java5OpRecordTests(CheckBackTestCase):
    """A store written by Apache RocketMQ 5, whose op records batch several half offsets."""

    def test_batched_op_record_decides_each_offset(self) -> None:
        """Every offset of a batched op record counts as decided: only the other half message is
        checked, and the record is passed over once the pass is beyond all of its offsets."""
        for body in (b"a", b"b", b"c", b"open"):
            self.send_half(body)
        put(self, self.store, java5_op(0, 2))
        put(self, self.store, java5_op(1))  # one offset: "1,"
        self.checker()
        self.clock.advance(60)
        self.assertEqual(self.checked(), [b"open"])
        self.clock.pump([60] * 3)
        self.assertEqual(set(self.checked()), {b"open"})
        self.assertEqual(self.offsets.query_offset("CID_SYS_RMQ_TRANS", TRANS_OP_HALF_TOPIC, 0), 2)

    def test_unreadable_parts_are_skipped(self) -> None:
        """Parts that are no offset are skipped, the readable ones of the same record still count."""
        self.send_half(b"a")
        self.send_half(b"b")
        put(self, self.store, MessageExt(topic=TRANS_OP_HALF_TOPIC, body=b"x,1,,-3,",
                                         properties={MessageConst.TAGS: "d"}))
        self.checker()
        self.clock.advance(60)
        self.assertEqual(self.checked(), [b"a"])


class EndedAfterRestartTests(CheckBackTestCase):
    """The ended transactions are rebuilt from the op queue when the broker starts."""

    def restart(self) -> None:
        """Stop the store and open it again with a new, started, transaction store."""
        self.successResultOf(self.store.stopService())
        self.store = open_store(self, self.clock, self.root)
        self.send = SendMessageProcessor(self.store, self.topics, STORE_HOST)
        self.tx = TransactionStore(self.store, STORE_HOST)
        with capturedLogs() as events:
            self.tx.startService()
        self.addCleanup(self.tx.stopService)
        self.rebuilt = [e for e in events if "ended ones read" in e["log_format"]]
        self.end = EndTransactionProcessor(self.tx, self.clock)

    def test_repeated_commit_after_restart(self) -> None:
        """A commit repeated after a restart is answered SUCCESS (as Java answers a commit) and stores
        no second copy."""
        sent = self.send_half()
        self.send_half(b"open")
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.restart()
        self.assertEqual([(e["count"], e["start"], e["end"]) for e in self.rebuilt], [(1, 0, 1)])
        with capturedLogs() as events:
            self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
            self.assertEqual(self.end_code(sent, ROLLBACK), ResponseCode.SUCCESS)
        self.assertEqual([m.body for m in self.real()], [b"order"])
        self.assertEqual(len([e for e in events if "already ended" in e["log_format"]]), 2)

    def test_commit_of_a_copy_then_the_original_after_restart(self) -> None:
        """A commit answering the check of a put-back copy writes an op record naming the first half
        offset too; after a restart a late commit of the original is recognised."""
        sent = self.send_half()
        self.checker()
        self.clock.advance(60)
        [_half, copy] = read_queue(self, self.store, TRANS_HALF_TOPIC)
        by_copy = {"commitLogOffset": str(copy.commit_log_offset), "queueOffset": str(copy.queue_offset)}
        self.assertEqual(self.end_code(by_copy, COMMIT, check=True), ResponseCode.SUCCESS)
        [op] = read_queue(self, self.store, TRANS_OP_HALF_TOPIC)
        self.assertEqual((op.body, op.properties[MessageConst.TRAN_PREPARED_QUEUE_OFFSET]), (b"1", "0"))
        self.restart()
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.assertEqual(len(self.real()), 1)

    def test_op_records_without_the_first_offset(self) -> None:
        """Op records written before they named first offsets (body only) still mark their copy ended."""
        sent = self.send_half()
        put(self, self.store, op_message(0, STORE_HOST))
        self.restart()
        self.assertEqual(self.end_code(sent, COMMIT), ResponseCode.SUCCESS)
        self.assertEqual(self.real(), [])

    def test_batched_op_records_after_restart(self) -> None:
        """A store with Java 5's batched op records: after a restart every transaction they name has
        ended, and a repeated commit of one stores nothing."""
        sent = [self.send_half(b"a"), self.send_half(b"b"), self.send_half(b"c")]
        put(self, self.store, java5_op(0, 2))
        self.restart()
        self.assertEqual(sorted(self.tx.decided), [0, 2])
        self.assertEqual(self.end_code(sent[2], COMMIT), ResponseCode.SUCCESS)
        self.assertEqual(self.real(), [])
        self.assertEqual(self.end_code(sent[1], COMMIT), ResponseCode.SUCCESS)
        self.assertEqual([m.body for m in self.real()], [b"b"])

    def test_only_the_newest_are_read(self) -> None:
        """The rebuild reads the newest MAX_REMEMBERED op records."""
        for offset in range(5):
            put(self, self.store, op_message(offset, STORE_HOST))
        self.patch(transaction, "MAX_REMEMBERED", 3)
        self.restart()
        self.assertEqual((list(self.tx.decided), self.rebuilt[0]["start"]), ([2, 3, 4], 2))
