"""The answer to a producer's lone send (``api.send_result_then``) and its C version
(rocketpy/_speedups_table.h ``send_result_then``) against the Python reference."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import api
from rocketpy.client.api import Mode, send_header
from rocketpy.client import autobatch
from rocketpy.client.autobatch import AutoBatcher
from rocketpy.client.errors import MQBrokerError
from rocketpy.client.results import SendResult, SendStatus
from rocketpy.common import speedups
from rocketpy.common.message import Message
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError

MQ = MessageQueue("T", "b", 3)
C_THEN = getattr(speedups.compiled, "send_result_then", None)
C_ANSWERED = getattr(speedups.compiled, "lone_answered", None)
NUMBERS = st.sampled_from(["3", "0", "-1", "17", " 3", "+3", "3_0", "٣", "x", "", "99999999999999999999"]) | st.integers(
    -(2**63), 2**63).map(str)
TEXT = st.sampled_from(["7F0000010000", "", "id,id"]) | st.text(max_size=6)


def outcome(then_function: Any, response: Any, mq: MessageQueue = MQ) -> Any:
    """What ``then`` got: the SendResult, or the failure's type and text."""
    seen: list[Any] = []
    then_function(response, "127.0.0.1:10911", mq, "UNIQ", lambda result, *args: seen.append((result, args)),
                  ("queue", "member"))
    ((result, args),) = seen
    assert args == ("queue", "member")
    return (type(result.value), str(result.value)) if isinstance(result, Failure) else result


def send_response(code: int = 0, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, flag=1, ext_fields=fields)


class SendResultThenTests(SynchronousTestCase):
    def test_result_and_failures(self) -> None:
        """The reference: a SendResult with the send's own id and queue; another queue id makes its own
        MessageQueue; an unknown code or a missing field is an MQBrokerError; a Failure passes through."""
        ok = outcome(api.send_result_then, send_response(0, msgId="S", queueId="3", queueOffset="41"))
        self.assertEqual(ok, SendResult(SendStatus.SEND_OK, "UNIQ", "S", MQ, 41))
        moved = outcome(api.send_result_then, send_response(10, msgId="S", queueId="1", queueOffset="2",
                                                            transactionId="t", MSG_REGION="r"))
        self.assertEqual(moved, SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "UNIQ", "S", MessageQueue("T", "b", 1), 2,
                                           "t", "r"))
        self.assertEqual(outcome(api.send_result_then, send_response(1)), (MQBrokerError, "broker 127.0.0.1:10911 answered SYSTEM_ERROR (1): no remark"))
        self.assertEqual(outcome(api.send_result_then, send_response(0, msgId="S"))[0], MQBrokerError)
        timed_out = Failure(RemotingTimeoutError("late"))
        self.assertEqual(outcome(api.send_result_then, timed_out), (RemotingTimeoutError, "late"))


class CompiledSendResultThenTests(SynchronousTestCase):
    skip = None if C_THEN is not None else speedups.why_not()

    @settings(max_examples=400, deadline=None)
    @given(st.sampled_from([0, 10, 11, 12, 1, 17]), st.fixed_dictionaries({}, optional={
        "msgId": TEXT, "queueId": NUMBERS, "queueOffset": NUMBERS, "transactionId": TEXT, "MSG_REGION": TEXT}),
        st.sampled_from([3, -1, 0, 2**70]))
    def test_same_outcome(self, code: int, fields: dict[str, str], queue_id: int) -> None:
        """Any code and fields, odd numbers and queue ids included: the C function gives what the
        reference gives."""
        response, mq = send_response(code, **fields), MessageQueue("T", "b", queue_id)
        self.assertEqual(outcome(C_THEN, response, mq), outcome(api.send_result_then, response, mq))

    def test_usual_answer_in_c(self) -> None:
        """The usual answer is built in C (the reference is not called); a Failure goes to the reference."""
        assert C_THEN is not None and speedups.compiled is not None
        calls: list[Any] = []
        reference = api.send_result_then
        self.patch(api, "send_result_then", lambda *args: calls.append(args))
        try:
            speedups.compiled.set_send_result(SendResult, api._SEND_STATUS, api.send_result_then)
            result = outcome(C_THEN, send_response(0, msgId="S", queueId="3", queueOffset="41"))
            self.assertEqual((result, calls), (SendResult(SendStatus.SEND_OK, "UNIQ", "S", MQ, 41), []))
            timed_out = Failure(RemotingTimeoutError("late"))
            C_THEN(timed_out, "a", MQ, "UNIQ", print, ())
            self.assertEqual([args[0] for args in calls], [timed_out])
        finally:
            speedups.compiled.set_send_result(SendResult, api._SEND_STATUS, reference)


class CompiledLoneAnsweredTests(SynchronousTestCase):
    """``lone_answered`` (rocketpy/_speedups_clientsend.h), the answer to a lone send made in C, against what
    the Python path does with it: ``send_result_then`` into ``AutoBatcher._answered_alone``."""

    skip = None if C_ANSWERED is not None else speedups.why_not()

    def answer(self, answered: Any, response: Any, mq: MessageQueue, waiting: int) -> Any:
        """What the caller's Deferred got, and the queue's state after it."""
        requests: list[Any] = []

        def send_request(*args: Any) -> Deferred[Any]:
            requests.append(args)
            return Deferred()

        batcher = AutoBatcher(Clock(), send_request, 1 << 20, 1000, 0.0)
        queue = autobatch._Queue("a", mq, Mode.SYNC)
        queue.in_flight = 1
        member = autobatch._Waiting()
        member.msg, member.size, member.deadline, member.retry = Message("T", b"m", 0, {"UNIQ_KEY": "UNIQ"}), 1, 9.0, None
        for n in range(waiting):  # sends that joined while it was in flight
            joined = autobatch._Waiting()
            joined.msg, joined.size, joined.deadline, joined.retry = Message("T", b"w", 0, {"UNIQ_KEY": f"W{n}"}), 1, 9.0, None
            queue.waiting.append(joined)
        seen: list[Any] = []
        member.addBoth(seen.append)
        answered(response, "127.0.0.1:10911", mq, "UNIQ", queue, member, batcher)
        (result,) = seen
        outcome = (type(result.value), str(result.value)) if isinstance(result, Failure) else result
        return outcome, queue.in_flight, len(queue.waiting), [args[5] for args in requests]

    @staticmethod
    def python(response: Any, addr: str, mq: MessageQueue, msg_id: str, queue: Any, member: Any, batcher: Any) -> None:
        api.send_result_then(response, addr, mq, msg_id, batcher._answered_alone, (queue, member))

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from([0, 10, 11, 12, 1, 17]), st.fixed_dictionaries({}, optional={
        "msgId": TEXT, "queueId": NUMBERS, "queueOffset": NUMBERS, "transactionId": TEXT, "MSG_REGION": TEXT}),
        st.sampled_from([3, -1, 2**70]), st.integers(0, 2), st.sampled_from(["usual", "usual", "any", "failed"]))
    def test_same_outcome(self, code: int, fields: dict[str, str], queue_id: int, waiting: int, kind: str) -> None:
        """Any answer (the usual one, odd fields) or a failure, with or without sends waiting: the caller
        gets what the Python path gives it, the queue is left as it leaves it and the same batch leaves."""
        if kind == "usual":  # the broker's usual answer, with the optional fields drawn
            fields.update(msgId="S", queueId=str(queue_id), queueOffset="41")
        response = Failure(RemotingTimeoutError("late")) if kind == "failed" else send_response(code, **fields)
        mq = MessageQueue("T", "b", queue_id)
        self.assertEqual(self.answer(C_ANSWERED, response, mq, waiting), self.answer(self.python, response, mq, waiting))


class DeferredOnlyRemoting:
    """A remoting client with the Deferred calls only (a test double or an older client)."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.calls: list[str] = []

    def answer(self, kind: str) -> Deferred[RemotingCommand]:
        self.calls.append(kind)
        return fail(self.outcome) if isinstance(self.outcome, Exception) else succeed(self.outcome)

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        return self.answer("sync")

    def invoke_async(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        return self.answer("async")


class SendMessageThenTests(SynchronousTestCase):
    def send(self, remoting: Any, mode: Mode) -> Any:
        seen: list[Any] = []
        msg = Message("T", b"body", 0, {"UNIQ_KEY": "UNIQ"})
        fields = send_header("PG", msg, 3, 0, 1_700_000_000_000, 4)
        api.MQClientAPI(remoting).send_message_then("127.0.0.1:10911", MQ, msg, fields, mode, 3.0, "UNIQ", True,
                                                    lambda outcome, tag: seen.append((outcome, tag)), ("tag",))
        ((outcome, tag),) = seen
        self.assertEqual(tag, "tag")
        return outcome

    def test_without_invoke_then(self) -> None:
        """A remoting client without invoke_then gets the Deferred calls (SYNC or ASYNC as asked);
        the outcome is the same."""
        remoting = DeferredOnlyRemoting(send_response(0, msgId="S", queueId="3", queueOffset="41"))
        self.assertEqual(self.send(remoting, Mode.SYNC), SendResult(SendStatus.SEND_OK, "UNIQ", "S", MQ, 41))
        self.assertEqual(self.send(remoting, Mode.ASYNC).queue_offset, 41)
        self.assertEqual(remoting.calls, ["sync", "async"])
        failed = self.send(DeferredOnlyRemoting(RemotingTimeoutError("late")), Mode.SYNC)
        self.assertIsInstance(failed.value, RemotingTimeoutError)


class LoneBatcherSendTests(SynchronousTestCase):
    """AutoBatcher's sends that go alone take ``send_then`` (no Deferred per request); the others
    ``send_request``."""

    def test_alone_then_batched(self) -> None:
        """An idle queue's send goes through send_then; the sends that waited for it go as a batch
        request; a send_then that raises fails its member, and the queue is idle again."""
        lone: list[tuple[Any, ...]] = []
        batches: list[tuple[Any, ...]] = []

        def send_then(addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float, then: Any,
                      args: tuple[Any, ...]) -> None:
            if msg.properties["UNIQ_KEY"] == "broken":
                raise ValueError("cannot send")
            lone.append((msg, then, args))

        def send_request(addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float,
                         ids: str | None) -> Deferred[Any]:
            d: Deferred[Any] = Deferred()
            batches.append((ids, d))
            return d

        batcher = AutoBatcher(Clock(), send_request, 1 << 20, 1000, 0.0, None, send_then)
        first = batcher.send("a", Message("T", b"1", 0, {"UNIQ_KEY": "U1"}), MQ, Mode.SYNC, 3.0)
        waiting = [batcher.send("a", Message("T", b"x", 0, {"UNIQ_KEY": f"U{n}"}), MQ, Mode.SYNC, 3.0)
                   for n in (2, 3)]
        ((msg, then, args),) = lone
        then(SendResult(SendStatus.SEND_OK, "U1", "S1", MQ, 7), *args)
        self.assertEqual(self.successResultOf(first).queue_offset, 7)
        ((ids, d),) = batches
        self.assertEqual(ids, "U2,U3")
        d.callback(SendResult(SendStatus.SEND_OK, ids, "S2,S3", MQ, 8))
        self.assertEqual([self.successResultOf(w).queue_offset for w in waiting], [8, 9])
        broken = batcher.send("a", Message("T", b"x", 0, {"UNIQ_KEY": "broken"}), MQ, Mode.SYNC, 3.0)
        self.failureResultOf(broken, ValueError)
        batcher.send("a", Message("T", b"x", 0, {"UNIQ_KEY": "U4"}), MQ, Mode.SYNC, 3.0)
        self.assertEqual(len(lone), 2)  # alone again: nothing was left in flight
