"""A lone send request answered by ``SendMessageProcessor.lone_request`` (rocketpy/_speedups_request.h
``lone_send``) against the full Python path (``RemotingNode.request_received`` → ``reject_request`` →
``process_request``): random requests, each arriving alone on a server channel, amid changes of the
topic table and the store (busy, refusing, answering later), write the same bytes and store the
same messages."""

from __future__ import annotations

import random
from typing import Any, Callable, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker import send
from rocketpy.broker.clients import ProducerManager
from rocketpy.broker.reply import ReplyMessageProcessor
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.headers import expand_send_v2
from rocketpy.common.message import MessageExt
from rocketpy.common.topic import PERM_READ, TopicConfig
from rocketpy.remoting import codec
from rocketpy.remoting.codes import ONEWAY_FLAG, RequestCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.server import RemotingServer
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.broker import test_send
from tests.broker.test_send_speedups import fields_of, requests
from tests.fakes import FakeStoreService
from tests.remoting.test_batch import WriteCounter

C_LONE = send._lone_send
C_SKIP = None if C_LONE is not None else "no compiled accelerator (send._lone_send is None)"


class LaterStore(FakeStoreService):
    """Puts that complete when the test says (``later`` True), as a store whose writer is busy."""

    later = False

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[tuple[Deferred[PutMessageResult], PutMessageResult]] = []

    def put_message(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        if not self.later:
            return super().put_message(msg)
        d: Deferred[PutMessageResult] = Deferred()
        self.waiting.append((d, self._put([msg], batch=False)))
        return d

    def complete(self) -> None:
        waiting, self.waiting = self.waiting, []
        for d, result in waiting:
            d.callback(result)


class AnsweringStore(LaterStore):
    """``put_lone_now`` / ``lone_answered`` as StoreService's: the result itself when the put completes
    at once (``lone_answered`` then due, once), None when busy, else the put's Deferred."""

    def __init__(self) -> None:
        super().__init__()
        self.due = self.answered = 0
        self.watch: Callable[[], object] = lambda: None  # called from lone_answered

    def put_lone_now(self, msg: MessageExt) -> PutMessageResult | Deferred[PutMessageResult] | None:
        if self.busy:
            return None
        d = self.put_message(msg)
        if not d.called:
            return d
        self.due += 1
        return cast(PutMessageResult, d.result)

    def lone_answered(self) -> None:
        self.answered += 1
        self.watch()


@st.composite
def usual_requests(draw: Any) -> RemotingCommand:
    """Sends of the kind lone_request takes (and a few it leaves): known topics, given queues, short
    properties, one-letter (V2) or long names."""
    fields = dict(test_send.ALI_V2)
    usual = [("TAGS", "TagA"), ("KEYS", "k1 k2"), ("WAIT", "false"), ("DELAY", "3"), ("UNIQ_KEY", "0A0B")]
    props = draw(st.lists(st.sampled_from(usual * 4 + [("TRAN_MSG", "true")]), max_size=4))
    fields.update(b=draw(st.sampled_from(["AliTopic", "T"])), e=draw(st.sampled_from(["0", "1", "2", "3", "5"])),
                  i="\x02".join(f"{k}\x01{v}" for k, v in props), j=draw(st.sampled_from(["0", "2"])),
                  f=draw(st.sampled_from(["0"] * 6 + ["4", "8"])), g=draw(st.sampled_from(["1795938196636"] * 6 + ["x"])))
    if draw(st.booleans()):
        fields = expand_send_v2(fields)
    request = test_send.send_request(draw(st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE])),
                                     fields, draw(st.sampled_from([b"", b"y" * 1024, b"y" * 1024, b"z" * 1025])))
    request.opaque = draw(st.integers(-(2**31), 2**31 - 1))
    return request


#: What happens between requests: the store busy or not, refusing or answering later, the topic
#: read-only, with fewer queues or deleted, the next request oneway (each now and then).
CHANGES = st.sampled_from(["store"] * 8 + [
    "busy", "not busy", "refuse", "flush timeout", "store", "later", "complete", "read-only", "one queue",
    "delete", "oneway",
])


class Broker:
    """A send processor on a server channel, fed one request per read."""

    def __init__(self, c: bool, test: SynchronousTestCase, answering: bool = False) -> None:
        test.patch(send, "_lone_send", C_LONE if c else None)
        clock = Clock()
        self.store = AnsweringStore() if answering else LaterStore()
        self.topics = TopicConfigManager(clock)
        groups = SubscriptionGroupManager(clock)
        groups.update_subscription_group_config(SubscriptionGroupConfig(group_name="G", retry_max_times=2))
        self.processor = SendMessageProcessor(self.store, self.topics, test_send.STORE_HOST, cluster_name="TestCluster",
                                              max_message_size=1024, groups=groups, rng=random.Random(7))
        self.server = RemotingServer(clock)
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            self.server.register_processor(code, self.processor)
        self.channel = self.server.build_channel()
        self.transport = WriteCounter(peerAddress=IPv4Address("TCP", "10.0.0.9", 53211))
        self.channel.makeConnection(self.transport)
        self.oneway = False

    def change(self, what: str) -> None:
        store, topics = self.store, self.topics
        if what in ("busy", "not busy"):
            store.busy = what == "busy"
        elif what in ("refuse", "flush timeout", "store"):
            store.put_status = {"refuse": PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                "flush timeout": PutMessageStatus.FLUSH_DISK_TIMEOUT}.get(what, PutMessageStatus.PUT_OK)
        elif what == "later":
            store.later = True
        elif what == "complete":
            store.later = False
            store.complete()
        elif what == "read-only":
            topics.update_topic_config(TopicConfig("AliTopic", 4, 4, PERM_READ))
        elif what == "one queue":
            topics.update_topic_config(TopicConfig("AliTopic", 1, 1))
        elif what == "delete":
            topics.delete_topic_config("AliTopic")
        else:
            self.oneway = True

    def receive(self, request: RemotingCommand) -> None:
        if self.oneway:
            request.flag |= ONEWAY_FLAG
            self.oneway = False
        self.channel.dataReceived(codec.encode(request))

    def outcome(self) -> Any:
        self.store.complete()
        return (self.transport.value(), self.transport.writes, self.channel._unanswered,
                self.server.busy_rejections, [(batch, fields_of(msgs)) for batch, msgs in self.store.puts])


class LoneSendTests(SynchronousTestCase):
    skip = C_SKIP

    last_store: LaterStore | None = None

    def run_steps(self, steps: list[Any], c: bool, answering: bool = False) -> Any:
        broker = Broker(c, self, answering)
        self.last_store = broker.store
        for step in steps:
            if isinstance(step, str):
                broker.change(step)
            else:
                broker.receive(RemotingCommand(step.code, step.language, step.version, step.opaque, step.flag,
                                               step.remark, dict(step.ext_fields), step.body, step.serialize_type))
        return broker.outcome()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(usual_requests(), usual_requests(), usual_requests(), requests(), CHANGES), min_size=3,
                    max_size=16))
    def test_same_answers_and_messages(self, steps: list[Any]) -> None:
        """Each request alone: the same bytes written (in as many writes), the same messages stored,
        the same busy refusals, every request answered, with lone_request and without."""
        self.assertEqual(self.run_steps(steps, True), self.run_steps(steps, False))
        self.flushLoggedErrors()

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(usual_requests(), usual_requests(), usual_requests(), requests(), CHANGES), min_size=3,
                    max_size=16))
    def test_same_answering_first(self, steps: list[Any]) -> None:
        """The same with a store that answers first (put_lone_now): the same bytes, messages and
        refusals as the full path, and lone_answered called once per put stored at once."""
        answering = self.run_steps(steps, True, answering=True)
        store = self.last_store
        self.assertEqual(answering, self.run_steps(steps, False))
        assert isinstance(store, AnsweringStore)
        self.assertEqual(store.answered, store.due)
        self.flushLoggedErrors()

    def test_answering_first_writes_and_calls_back(self) -> None:
        """A put stored at once: lone_request answers itself (True), the frame written (collected in
        the read on a test transport), then lone_answered."""
        broker = Broker(True, self, answering=True)
        store = broker.store
        assert isinstance(store, AnsweringStore)
        broker.receive(test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2))  # the full path first
        lone = broker.processor.lone_request
        assert lone is not None
        seen: list[tuple[int, int]] = []
        store.watch = lambda: seen.append((len(broker.channel._out), broker.channel._unanswered))
        broker.channel._reading = True  # inside a read, as requests_received calls it
        broker.channel._unanswered += 1
        self.assertIs(lone(broker.channel, test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2)),
                      True)
        self.assertEqual(seen, [(1, 0)], "the answer taken, then lone_answered")
        answer = codec.decode(broker.channel._out[0][4:])
        self.assertEqual((answer.code, answer.opaque, answer.ext_fields["queueOffset"]), (0, 42, "1"))
        broker.channel._out.clear()
        broker.channel._reading = False
        store.put_status = PutMessageStatus.SERVICE_NOT_AVAILABLE  # a refusal: the response, then lone_answered
        response = lone(broker.channel, test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2))
        assert isinstance(response, RemotingCommand)
        self.assertNotEqual(response.code, 0)
        self.assertEqual(len(seen), 2)
        store.busy = True  # nothing done: the full path refuses
        self.assertIsNone(lone(broker.channel, test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2)))
        self.assertEqual((len(seen), len(store.puts)), (2, 3))

    def test_usual_send_in_one_call(self) -> None:
        """A topic's first send takes the full path (it checks the topic and parses the peer); the
        next is stored and answered by lone_request alone, as a frame; a busy store, a oneway send,
        a batch, an unknown topic, a queue id out of range, a topic changed to fewer queues, made
        read-only or deleted are left to the full path untouched."""
        broker = Broker(True, self)
        lone = broker.processor.lone_request
        assert lone is not None
        request = test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2)
        self.assertIsNone(lone(broker.channel, request))
        broker.receive(request)
        self.assertEqual(len(broker.store.puts), 1)
        frame = lone(broker.channel, test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2))
        assert isinstance(frame, bytes)
        answer = codec.decode(frame[4:])
        self.assertEqual((answer.code, answer.opaque, answer.flag, answer.ext_fields["queueId"],
                          answer.ext_fields["queueOffset"]), (0, 42, 1, "1", "1"))
        self.assertEqual(len(broker.store.puts), 2)
        broker.store.busy = True
        self.assertIsNone(lone(broker.channel, request))
        broker.store.busy = False
        for fields in ({**test_send.ALI_V2, "m": "true"}, {**test_send.ALI_V2, "b": "Other"},
                       {**test_send.ALI_V2, "e": "-1"}, {**test_send.ALI_V2, "e": "4"}):
            self.assertIsNone(lone(broker.channel, test_send.send_request(RequestCode.SEND_MESSAGE_V2, fields)))
        oneway = test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2)
        oneway.flag |= ONEWAY_FLAG
        self.assertIsNone(lone(broker.channel, oneway))
        for change in ("one queue", "read-only", "delete"):  # the table as it is now, not as it was
            broker.change(change)
            self.assertIsNone(lone(broker.channel, request))
        self.assertEqual(len(broker.store.puts), 2)

    def test_answered_later(self) -> None:
        """A put that does not complete inline: lone_request gives its Deferred, and the answer is
        written when it fires."""
        broker = Broker(True, self)
        broker.receive(test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2))
        written = broker.transport.value()
        broker.store.later = True
        broker.receive(test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2))
        self.assertEqual((broker.transport.value(), broker.channel._unanswered), (written, 1))
        broker.store.complete()
        self.assertEqual(broker.channel._unanswered, 0)
        self.assertGreater(len(broker.transport.value()), len(written))

    def test_subclass_has_none(self) -> None:
        """A subclass (the reply processor) keeps its own process_request."""
        clock = Clock()
        reply = ReplyMessageProcessor(FakeStoreService(), TopicConfigManager(clock), test_send.STORE_HOST,
                                      producers=ProducerManager(clock), clock=clock)
        self.assertIsNone(reply.lone_request)
