"""Tests for rocketpy.client.autobatch, alone and inside the producer."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import errors
from rocketpy.client.api import Mode
from rocketpy.client import autobatch
from rocketpy.client.autobatch import AutoBatcher, batchable, entry_size
from rocketpy.client.hooks import ISendMessageHook, SendMessageContext
from rocketpy.client.message import UniqKeyGenerator, new_message, validate_message
from rocketpy.client.producer import Producer
from rocketpy.client.reply import create_reply_message
from rocketpy.client.results import SendResult, SendStatus
from rocketpy.common.headers import expand_send_v2
from rocketpy.common.message import Message, decode_batch, encode_batch
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.errors import RemotingConnectError, RemotingTimeoutError
from zope.interface import implementer

from .fakes import NAMESRV, hold_sends, one_broker_cluster

MQ = MessageQueue("T", "b", 0)


class Requests:
    """A stand-in for the producer's request method: records requests, answers when told."""

    def __init__(self) -> None:
        self.made: list[tuple[Message, float, str | None, Deferred[Any]]] = []

    def __call__(self, addr: str, msg: Message, mq: MessageQueue, mode: Mode, timeout: float,
                 ids: str | None) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.made.append((msg, timeout, ids, d))
        return d

    def answer(self, index: int, first_offset: int) -> None:
        msg, _, ids, d = self.made[index]
        count = 1 if ids is None else ids.count(",") + 1
        d.callback(SendResult(SendStatus.SEND_OK, ids or msg.properties["UNIQ_KEY"],
                              ",".join(f"S{first_offset + i}" for i in range(count)), MQ, first_offset))


def message(n: int, size: int = 10) -> Message:
    return Message("T", b"x" * size, 0, {"UNIQ_KEY": f"U{n}"})


class AutoBatcherTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.requests = Requests()

    def batcher(self, max_bytes: int = 1 << 20, max_count: int = 1000, linger: float = 0.0) -> AutoBatcher:
        return AutoBatcher(self.clock, self.requests, max_bytes, max_count, linger)

    def test_idle_queue_sends_at_once(self) -> None:
        """A lone send is one plain request at once: no batch, no waiting."""
        b = self.batcher()
        d = b.send("a", message(1), MQ, Mode.SYNC, 3.0)
        [(msg, timeout, ids, _)] = self.requests.made
        self.assertEqual((msg.properties["UNIQ_KEY"], timeout, ids), ("U1", 3.0, None))
        self.requests.answer(0, 7)
        self.assertEqual(self.successResultOf(d).queue_offset, 7)
        self.assertEqual([(q.in_flight, q.waiting) for q in b._queues.values()], [(0, [])])  # idle again

    def test_sends_wait_for_the_one_in_flight_then_go_as_one_batch(self) -> None:
        """Each member gets its own UNIQ_KEY, store id and queue offset."""
        b = self.batcher()
        first = b.send("a", message(0), MQ, Mode.ASYNC, 3.0)
        rest = [b.send("a", message(n), MQ, Mode.ASYNC, 3.0) for n in (1, 2, 3)]
        self.assertEqual(len(self.requests.made), 1)
        self.clock.advance(0.5)
        self.requests.answer(0, 10)
        self.successResultOf(first)
        [_, (batch, timeout, ids, _)] = self.requests.made
        self.assertEqual(ids, "U1,U2,U3")
        self.assertEqual(timeout, 2.5)  # what is left of the earliest member's budget
        self.assertEqual([m.properties["UNIQ_KEY"] for m in decode_batch(batch.body, "T")], ["U1", "U2", "U3"])
        self.requests.answer(1, 11)
        results = [self.successResultOf(d) for d in rest]
        self.assertEqual([(r.msg_id, r.offset_msg_id, r.queue_offset) for r in results],
                         [("U1", "S11", 11), ("U2", "S12", 12), ("U3", "S13", 13)])

    def test_batch_request_raising_fails_its_members_and_frees_the_queue(self) -> None:
        """A batch whose request raises at once fails each member; the queue is idle again."""
        b = self.batcher()
        first = b.send("a", message(0), MQ, Mode.ASYNC, 3.0)
        rest = [b.send("a", message(n), MQ, Mode.ASYNC, 3.0) for n in (1, 2)]
        made = self.requests.made

        def refuse(*args: Any) -> Deferred[Any]:
            raise ValueError("no route")

        b._send_request = refuse
        made[0][3].callback(SendResult(SendStatus.SEND_OK, "U0", "S0", MQ, 0))
        self.successResultOf(first)
        for d in rest:
            self.failureResultOf(d, ValueError)
        self.assertEqual([(q.in_flight, q.waiting) for q in b._queues.values()], [(0, [])])

    def test_member_chains_as_a_deferred(self) -> None:
        """The Deferred a send returns (the batch member itself) chains like any Deferred when a
        callback returns it."""
        b = self.batcher()
        outer: Deferred[Any] = Deferred()
        outer.addCallback(lambda _: b.send("a", message(1), MQ, Mode.SYNC, 3.0))
        outer.callback(None)
        self.assertNoResult(outer)
        self.requests.answer(0, 4)
        self.assertEqual(self.successResultOf(outer).queue_offset, 4)

    def test_queues_and_modes_batch_apart(self) -> None:
        b = self.batcher()
        other = MessageQueue("T", "b", 1)
        b.send("a", message(0), MQ, Mode.SYNC, 3.0)
        b.send("a", message(1), other, Mode.SYNC, 3.0)
        b.send("a", message(2), MQ, Mode.ASYNC, 3.0)
        self.assertEqual(len(self.requests.made), 3)

    def test_limits_split_batches_in_order(self) -> None:
        size = entry_size(message(0, 100))
        b = self.batcher(max_bytes=3 * size, max_count=2)
        b.send("a", message(0, 100), MQ, Mode.SYNC, 3.0)
        for n in range(1, 6):
            b.send("a", message(n, 100), MQ, Mode.SYNC, 3.0)
        self.requests.answer(0, 0)
        self.assertEqual([ids for _, _, ids, _ in self.requests.made[1:]], ["U1,U2", "U3,U4", None])
        self.assertEqual(self.requests.made[3][0].properties["UNIQ_KEY"], "U5")  # a chunk of one goes plain
        b = self.batcher(max_bytes=2 * size)
        self.requests.made.clear()
        b.send("a", message(0, 100), MQ, Mode.SYNC, 3.0)
        for n in range(1, 6):
            b.send("a", message(n, 100), MQ, Mode.SYNC, 3.0)
        self.requests.answer(0, 0)
        self.assertEqual([ids for _, _, ids, _ in self.requests.made[1:]], ["U1,U2", "U3,U4", None])
        self.assertLessEqual(len(encode_batch([message(1, 100), message(2, 100)])), 2 * size)

    def test_failed_batch_fails_every_member(self) -> None:
        b = self.batcher()
        b.send("a", message(0), MQ, Mode.SYNC, 3.0)
        rest = [b.send("a", message(n), MQ, Mode.SYNC, 3.0) for n in (1, 2)]
        self.requests.answer(0, 0)
        self.requests.made[1][3].errback(RemotingConnectError("a", "gone"))
        for d in rest:
            self.failureResultOf(d, RemotingConnectError)
        self.assertEqual([(q.in_flight, q.waiting) for q in b._queues.values()], [(0, [])])

    def test_failures_go_to_the_failure_handler(self) -> None:
        """With ``retry`` arguments a failed send's Deferred gets what ``on_failure`` makes of the failure:
        a retry's Deferred, a value, or a failure; without them the failure itself."""
        handled: list[tuple[Any, ...]] = []
        retried: Deferred[Any] = Deferred()

        def on_failure(failure: Any, name: str) -> Any:
            handled.append((failure.type, name))
            return {"retried": retried, "value": "recovered"}.get(name, failure)

        b = AutoBatcher(self.clock, self.requests, 1 << 20, 1000, 0.0, on_failure)
        lone = b.send("a", message(0), MQ, Mode.SYNC, 3.0, ("retried",))
        rest = [b.send("a", message(n), MQ, Mode.SYNC, 3.0, retry)
                for n, retry in ((1, ("value",)), (2, ("failed",)), (3, None))]
        self.requests.made[0][3].errback(RemotingConnectError("a", "gone"))  # the lone send fails...
        self.assertNoResult(lone)  # ...and waits for its retry
        self.requests.made[1][3].errback(RemotingConnectError("a", "gone"))  # then the batch of the rest
        self.assertEqual(handled, [(RemotingConnectError, name) for name in ("retried", "value", "failed")])
        self.assertEqual(self.successResultOf(rest[0]), "recovered")
        self.failureResultOf(rest[1], RemotingConnectError)
        self.failureResultOf(rest[2], RemotingConnectError)
        retried.callback("second attempt")
        self.assertEqual(self.successResultOf(lone), "second attempt")

    def test_member_past_its_deadline_times_out(self) -> None:
        b = self.batcher()
        b.send("a", message(0), MQ, Mode.SYNC, 3.0)
        short = b.send("a", message(1), MQ, Mode.SYNC, 1.0)
        long = b.send("a", message(2), MQ, Mode.SYNC, 3.0)
        self.clock.advance(2)
        self.requests.answer(0, 0)
        self.failureResultOf(short, RemotingTimeoutError)
        self.assertNoResult(long)
        [_, (msg, timeout, ids, _)] = self.requests.made
        self.assertEqual((msg.properties["UNIQ_KEY"], timeout, ids), ("U2", 1.0, None))

    def test_linger_holds_an_idle_queue(self) -> None:
        b = self.batcher(linger=0.01)
        ds = [b.send("a", message(n), MQ, Mode.ASYNC, 3.0) for n in range(3)]
        self.assertEqual(self.requests.made, [])
        self.clock.advance(0.01)
        [(_, _, ids, _)] = self.requests.made
        self.assertEqual(ids, "U0,U1,U2")
        self.requests.answer(0, 5)
        self.assertEqual([self.successResultOf(d).queue_offset for d in ds], [5, 6, 7])

    def test_flush_all_sends_what_lingers(self) -> None:
        b = self.batcher(linger=10)
        d = b.send("a", message(0), MQ, Mode.ASYNC, 3.0)
        b.flush_all()
        self.assertEqual(len(self.requests.made), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.requests.answer(0, 0)
        self.successResultOf(d)


@implementer(ISendMessageHook)
class CountingHook:
    name = "count"

    def __init__(self) -> None:
        self.calls = 0

    def send_message_before(self, context: SendMessageContext) -> None:
        self.calls += 1

    def send_message_after(self, context: SendMessageContext) -> None:
        pass


class ProducerAutoBatchTests(SynchronousTestCase):
    """The producer's sends through the batcher, against a fake cluster whose answers wait."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster, self.broker = one_broker_cluster(self.clock)
        self.remoting = self.cluster.remoting
        self.held: list[Deferred[Any]] = []
        hold_sends(self.remoting, self.held)

    def release(self) -> None:
        while self.held:
            self.held.pop(0).callback(None)

    def producer(self, **kwargs: Any) -> Producer:
        p = Producer("PG", NAMESRV, self.clock, self.remoting, client_id="10.0.0.9@1", rng=random.Random(7), **kwargs)
        self.successResultOf(p.start())
        self.addCleanup(lambda: self.successResultOf(p.shutdown()))
        warm = p.send(Message("T", b"warm"))  # the route is cached from here on
        self.release()
        self.successResultOf(warm)
        self.remoting.requests.clear()
        return p

    def codes(self) -> list[int]:
        return [r.code for _, _, r, _ in self.remoting.requests]

    def test_concurrent_sends_batch_with_their_own_results(self) -> None:
        p = self.producer()
        msgs = [new_message("T", f"m{n}".encode(), keys=f"k{n}") for n in range(5)]
        ds = [p.send_async(m) for m in msgs] + [p.send(new_message("T", b"sync"))]
        self.release()
        self.assertEqual(self.codes(), [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE_V2,
                                        RequestCode.SEND_BATCH_MESSAGE])  # SYNC and ASYNC batch apart
        results = [self.successResultOf(d) for d in ds]
        self.assertEqual([r.msg_id for r in results[:5]], [m.properties["UNIQ_KEY"] for m in msgs])
        self.assertEqual([r.queue_offset for r in results], [1, 3, 4, 5, 6, 2])
        stored = self.broker.store[("T", 0)]
        self.assertEqual([m.body for m in stored[1:]], [b"m0", b"sync", b"m1", b"m2", b"m3", b"m4"])
        self.assertEqual(stored[4].properties["KEYS"], "k2")
        self.assertEqual([r.offset_msg_id for r in results], [stored[r.queue_offset].msg_id for r in results])

    def test_never_batched(self) -> None:
        """Delayed, compressed, retry-topic, transactional, oneway and orderly sends go alone."""
        p = self.producer()
        p.send_async(new_message("T", b"first"))
        p.send_async(new_message("T", b"d", delay_level=2))
        p.send_async(new_message("T", b"z" * 5000))
        p.send_async(Message("T", b"no-wait", 0, {"WAIT": "false"}))
        p.send_oneway(new_message("T", b"oneway"))
        p.send_orderly(new_message("T", b"ordered"), lambda qs, m, a: qs[0], None)
        p.send_to_queue(new_message("T", b"chosen"), MessageQueue("T", "broker-a", 0))
        self.assertEqual(len(self.remoting.requests), 7)
        self.assertNotIn(RequestCode.SEND_BATCH_MESSAGE, self.codes())
        self.release()

    def test_auto_batch_off_and_hooks(self) -> None:
        for kwargs in ({"auto_batch": False}, {"send_message_hooks": [CountingHook()]}):
            self.remoting.requests.clear()
            p = self.producer(**kwargs)
            for n in range(3):
                p.send_async(new_message("T", b"x"))
            self.assertEqual(self.codes(), [RequestCode.SEND_MESSAGE_V2] * 3)
            self.release()

    def test_usual_sends_take_the_plain_path(self) -> None:
        """A usual send (SYNC, ASYNC, ONEWAY) is made by ``_send_plain``, batched or not; anything it leaves
        (a hook added later, a delayed message, an invalid one) goes to ``_send_default``, same outcome."""
        for kwargs in ({}, {"auto_batch": False}):
            p = self.producer(**kwargs)
            general: list[Message] = []

            def counted(msg: Message, *args: Any, send_default: Any = p._send_default) -> Deferred[Any]:
                general.append(msg)
                return send_default(msg, *args)

            self.patch(p, "_send_default", counted)
            usual = [p.send_async(new_message("T", b"a")), p.send(new_message("T", b"b"))]
            oneway = p.send_oneway(new_message("T", b"o"))
            self.assertEqual(general, [])
            p.send_async(new_message("T", b"d", delay_level=2))
            self.failureResultOf(p.send(Message("T", b"")), errors.MessageInvalidError)
            self.failureResultOf(p.send_async(None), AttributeError)  # type: ignore[arg-type]
            hook = CountingHook()
            p.send_message_hooks.append(hook)
            p.send_async(new_message("T", b"h"))
            self.assertEqual([m and m.body for m in general], [b"d", b"", None, b"h"])
            self.assertEqual(hook.calls, 1)
            self.release()
            for d in usual:
                self.assertEqual(self.successResultOf(d).status, SendStatus.SEND_OK)
            self.assertIsNone(self.successResultOf(oneway))

    def test_failed_batch_members_retry_alone(self) -> None:
        """A retriable broker code on the batch: every SYNC member retries as an unbatched send would."""
        p = self.producer()
        first = p.send(new_message("T", b"first"))
        ds = [p.send(new_message("T", f"m{n}".encode())) for n in range(3)]
        self.broker.send_script[:] = [0, ResponseCode.SYSTEM_ERROR]
        self.release()
        self.successResultOf(first)
        self.release()
        results = [self.successResultOf(d) for d in ds]
        self.assertEqual([r.status for r in results], [SendStatus.SEND_OK] * 3)
        bodies = [m.body for m in self.broker.store[("T", 0)]]
        self.assertEqual(bodies[1:], [b"first", b"m0", b"m1", b"m2"])

    def test_async_batch_failure_is_each_members(self) -> None:
        p = self.producer()
        p.send_async(new_message("T", b"first"))
        ds = [p.send_async(new_message("T", b"x")) for _ in range(2)]
        self.broker.send_script[:] = [0, ResponseCode.SYSTEM_BUSY]
        self.release()
        for d in ds:
            self.assertEqual(self.failureResultOf(d, errors.MQBrokerError).value.code, ResponseCode.SYSTEM_BUSY)

    def test_header_of_the_batch(self) -> None:
        p = self.producer()
        p.send_async(new_message("T", b"first"))
        p.send_async(new_message("T", b"a"))
        p.send_async(new_message("T", b"b"))
        self.release()
        [(_, request)] = self.remoting.sent(RequestCode.SEND_BATCH_MESSAGE)
        f = expand_send_v2(request.ext_fields)
        self.assertEqual((f["batch"], f["sysFlag"], f["producerGroup"], f["topic"]), ("true", "0", "PG", "T"))


class BatchableTests(SynchronousTestCase):
    def test_replies_and_delays_never_batch(self) -> None:
        """A reply (MSG_TYPE) must go as SEND_REPLY_MESSAGE to be pushed; delayed and WAIT=false messages
        cannot join a batch either."""
        request = Message("T", b"q", properties={"CLUSTER": "C", "CORRELATION_ID": "c", "REPLY_TO_CLIENT": "r"})
        self.assertTrue(batchable(Message("T", b"x")))
        self.assertFalse(batchable(create_reply_message(request, b"a")))
        self.assertFalse(batchable(Message("T", b"x", properties={"DELAY": "2"})))
        self.assertFalse(batchable(Message("T", b"x", properties={"WAIT": "false"})))


#: Messages near every rule of :func:`autobatch.plain_entry_size`: its tests here and in test_speedups_client.py.
PROPERTY_NAMES = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "DELAY", "WAIT", "MSG_TYPE", "TRAN_MSG"]) | st.text(max_size=4)
PROPERTY_VALUES = st.sampled_from(["false", "true", "k", ""]) | st.text(max_size=6)
TOPICS = st.sampled_from(["T", "%RETRY%G", "bad topic", "TBW102", ""])
BODIES = st.binary(max_size=45)
PROPERTIES = st.dictionaries(PROPERTY_NAMES, PROPERTY_VALUES, max_size=4)
#: plain_entry_size's limits in these tests: max_message_size, compress_over, max_bytes
LIMITS = (40, 30, 60)


def valid_names(*topics: str) -> set[str]:
    """The topics a producer may send to (what check_topic has accepted)."""
    valid = set()
    for topic in topics:
        try:
            validate_message(Message(topic, b"x"))
        except errors.MessageInvalidError:
            continue
        valid.add(topic)
    return valid


class PlainEntrySizeTests(SynchronousTestCase):
    """The Python reference (the C one is compared with it in test_speedups_client.py)."""

    def as_general_path_would(self, msg: Message) -> int:
        """What the producer's general path does with ``msg``: -1 unless it joins a batch as it is,
        else its entry size once the UNIQ_KEY is set."""
        max_size, compress_over, max_bytes = LIMITS
        try:
            validate_message(msg, max_size)
        except errors.MessageInvalidError:
            return -1
        b = AutoBatcher(Clock(), Requests(), max_bytes, 1000, 0.0)
        if (len(msg.body) >= compress_over or msg.topic.startswith("%RETRY%")
                or msg.properties.get("TRAN_MSG") == "true" or not b.fits(msg)):
            return -1
        props = dict(msg.properties)
        props.setdefault("UNIQ_KEY", UniqKeyGenerator(rng=random.Random(1)).next_id(1.0))
        return entry_size(Message(msg.topic, msg.body, 0, props))

    @settings(max_examples=200, deadline=None)
    @given(TOPICS, BODIES, PROPERTIES)
    def test_plain_exactly_when_the_general_path_batches_as_is(
        self, topic: str, body: bytes, properties: dict[str, str]
    ) -> None:
        msg = Message(topic, body, 0, properties)
        size = autobatch.PYTHON_PLAIN_ENTRY_SIZE(msg, valid_names(topic), *LIMITS)
        self.assertEqual(size, self.as_general_path_would(msg))
        self.assertEqual(msg.properties, properties)  # nothing set

    def test_unusual_input_takes_the_general_path(self) -> None:
        for msg in (Message("T", bytearray(b"x")),  # type: ignore[arg-type]
                    Message("T", b"x", 0, {"K": 1}),  # type: ignore[dict-item]
                    Message("T", b"x"), Message("T", b"x" * 50)):
            self.assertEqual(autobatch.PYTHON_PLAIN_ENTRY_SIZE(msg, {"T"} if msg.body != b"x" else set(), *LIMITS), -1)
