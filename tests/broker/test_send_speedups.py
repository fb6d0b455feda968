"""The send processor's C functions against its Python code (rocketpy/_speedups_remoting.h):
``single_message`` (``_single_message`` + ``half_message``), ``send_run`` (``process_requests``' loop,
batches included), ``put_response`` and ``put_responses`` (``_put_response``). Random send requests,
usual and unusual, go through a processor with and without them: the same stored messages and the
same responses."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker import send
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.message import Message, encode_batch
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import PutMessageStatus
from tests.broker import test_send
from tests.fakes import FakeChannel, FakeStoreService

C_FUNCTIONS = {"_single_message_c": send._single_message_c, "_put_response_c": send._put_response_c,
               "_put_responses_c": send._put_responses_c, "_send_run": send._send_run,
               "_send_prepared": send._send_prepared}
C_SKIP = None if send._single_message_c is not None else "no compiled accelerator (send._single_message_c is None)"

PROPERTY = st.sampled_from([("TAGS", "TagA"), ("KEYS", "k1 k2"), ("WAIT", "true"), ("WAIT", "FALSE"), ("WAIT", "no"),
                            ("TRAN_MSG", "true"), ("TRAN_MSG", "false"), ("DELAY", "3"), ("CLUSTER", "theirs"),
                            ("UNIQ_KEY", "0A0B"), ("c", "\u00e9"), ("", "x"), ("y", "")])
TOPIC = st.sampled_from(["T", "AliTopic", "%RETRY%G", "%RETRY%missing", "%DLQ%G", "bad topic", "\u00e9t\u00e9"])


#: SEND_BATCH_MESSAGE bodies: rocketpy's entries (KEYS, TAGS, a UNIQ_KEY each), a WAIT, no properties, one
#: entry, and one over the 1024-byte limit below.
BATCH_BODIES = [encode_batch([Message("T", b"b" * n, 0, dict(props, UNIQ_KEY=f"U{n}{j}")) for j in range(count)])
                for n, count, props in ((10, 3, {"KEYS": "k", "TAGS": "TagA"}), (1, 1, {}), (5, 2, {"WAIT": "false"}),
                                        (400, 3, {"TAGS": "t"}))]


@st.composite
def requests(draw: Any) -> RemotingCommand:
    fields = dict(test_send.ALI_V2)
    props = draw(st.lists(PROPERTY, max_size=6))
    text = "\x02".join(f"{k}\x01{v}" for k, v in props)
    if draw(st.booleans()):
        text += draw(st.sampled_from(["\x02", "x" * 400, "\x01\x02", "\u00e9"]))
    fields.update(b=draw(TOPIC), i=text, e=draw(st.sampled_from(["0", "1", "-1", "9"])),
                  f=draw(st.sampled_from(["0", "4", "8", "12", "1", "5"])),
                  h=draw(st.sampled_from(["7", "-3", "2147483647"])), j=draw(st.sampled_from(["0", "3", "40"])))
    if draw(st.booleans()):
        fields["m"] = draw(st.sampled_from(["false", "true"]))  # the batch flag: not a batch body is refused
    body = draw(st.sampled_from([b"", b"x", b"y" * 1024, b"z" * 1025] + BATCH_BODIES))
    request = test_send.send_request(draw(st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE])),
                                     fields, body, version=draw(st.sampled_from([63, 317])))
    request.opaque = draw(st.integers(-(2**31), 2**31 - 1))
    return request


def fields_of(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return type(value).__name__, [(f.name, fields_of(getattr(value, f.name))) for f in dataclasses.fields(value)]
    if isinstance(value, dict):
        return [(k, fields_of(v)) for k, v in value.items()]  # order included
    return type(value).__name__, value


class SingleMessageTests(SynchronousTestCase):
    skip = C_SKIP

    def processed(self, run: list[RemotingCommand], status: PutMessageStatus, c: bool) -> Any:
        for name, function in C_FUNCTIONS.items():
            self.patch(send, name, function if c else None)
        clock = Clock()
        store = FakeStoreService()
        store.put_status = status
        groups = SubscriptionGroupManager(clock)
        groups.update_subscription_group_config(SubscriptionGroupConfig(group_name="G", retry_max_times=2))
        processor = SendMessageProcessor(store, TopicConfigManager(clock), test_send.STORE_HOST,
                                         cluster_name="TestCluster", max_message_size=1024, groups=groups,
                                         rng=random.Random(7))
        channel = FakeChannel("10.0.0.9:53211")
        lone = [processor.process_request(channel, request) for request in run]
        answers = [a if isinstance(a, RemotingCommand) else self.successResultOf(a) for a in lone]
        answers += self.answers(processor.process_requests(channel, run))
        return fields_of(answers), [(batch, fields_of(msgs)) for batch, msgs in store.puts]

    @settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(requests(), min_size=1, max_size=4),
           st.sampled_from([PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                            PutMessageStatus.SERVICE_NOT_AVAILABLE]))
    def test_same_messages_and_responses(self, run: list[RemotingCommand], status: PutMessageStatus) -> None:
        """Each request alone and the run together: the same puts and the same responses."""
        copies = [dataclasses.replace(r, ext_fields=dict(r.ext_fields)) for r in run]
        self.assertEqual(self.processed(run, status, True), self.processed(copies, status, False))
        self.flushLoggedErrors()

    def outcome(self, run: list[RemotingCommand], together: bool) -> Any:
        clock = Clock()
        store = FakeStoreService()
        processor = SendMessageProcessor(store, TopicConfigManager(clock), test_send.STORE_HOST,
                                         cluster_name="TestCluster", max_message_size=1024, rng=random.Random(7))
        channel = FakeChannel("10.0.0.9:53211")
        if together:
            answers = self.answers(processor.process_requests(channel, run))
        else:
            lone = [processor.process_request(channel, request) for request in run]
            answers = [a if isinstance(a, RemotingCommand) else self.successResultOf(a) for a in lone]
        return fields_of(answers), [fields_of(msgs) for _, msgs in store.puts]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(requests(), min_size=1, max_size=6))
    def test_run_as_requests_alone(self, run: list[RemotingCommand]) -> None:
        """A run (one born host, each topic checked once) answers and stores as the same requests
        one by one: auto-created topics, bad names, illegal queue ids mid-run included."""
        copies = [dataclasses.replace(r, ext_fields=dict(r.ext_fields)) for r in run]
        self.assertEqual(self.outcome(run, True), self.outcome(copies, False))
        self.flushLoggedErrors()

    def test_usual_send_in_c(self) -> None:
        """The usual send is built in C; a retry topic or a PREPARED send is left to Python."""
        assert send._single_message_c is not None
        header = send.SendHeader.parse(test_send.send_request(RequestCode.SEND_MESSAGE_V2, test_send.ALI_V2))
        args = (b"x", 1, ("10.0.0.9", 53211), test_send.STORE_HOST, "C", 1000, 1024)
        msg = send._single_message_c(header, *args)
        assert msg is not None
        self.assertEqual((msg.topic, msg.queue_id, msg.properties["CLUSTER"], msg.properties["TAGS"]),
                         ("AliTopic", 1, "C", "TagA"))
        self.assertIsNone(send._single_message_c(dataclasses.replace(header, topic="%RETRY%G"), *args))
        self.assertIsNone(send._single_message_c(dataclasses.replace(header, sys_flag=4), *args))
        self.assertIsNone(send._single_message_c(header, b"x" * 1025, *args[1:]))

    def prepare_counted(self, topics: TopicConfigManager) -> tuple[SendMessageProcessor, list[RemotingCommand]]:
        """A processor whose _prepare notes each request it is given, and that list."""
        processor = SendMessageProcessor(FakeStoreService(), topics, test_send.STORE_HOST, cluster_name="C",
                                         max_message_size=1024, rng=random.Random(7))
        prepared: list[RemotingCommand] = []
        prepare = processor._prepare

        def counted(request: RemotingCommand, *args: Any) -> Any:
            prepared.append(request)
            return prepare(request, *args)

        processor._prepare = counted  # type: ignore[method-assign,assignment]
        return processor, prepared

    def answers(self, result: list[RemotingCommand] | Deferred[list[RemotingCommand]]) -> list[RemotingCommand]:
        """process_requests' answers: the list, or what its Deferred gave."""
        return result if isinstance(result, list) else self.successResultOf(result)

    def test_batch_of_a_run_in_c(self) -> None:
        """A run's batch requests after its topic's first are built in C (send_run); with header properties,
        a retry topic or a compressed body they go to _prepare."""
        processor, prepared = self.prepare_counted(TopicConfigManager(Clock()))
        plain = [batch(), batch(), batch()]
        unusual = [batch(i="KEYS\x01k"), batch(f="1"), batch(b="%RETRY%G"), batch(b="%RETRY%G"), batch(b="%DLQ%G"),
                   batch(b="%DLQ%G")]  # the second of each: its topic checked in the run
        answers = self.answers(processor.process_requests(FakeChannel("10.0.0.9:53211"), plain + unusual))
        self.assertEqual(prepared, [plain[0]] + unusual)
        self.assertEqual([a.code for a in answers[:3]], [0, 0, 0])
        self.assertEqual(len(answers[0].ext_fields["msgId"].split(",")), 3)

    def test_first_of_a_run_in_c(self) -> None:
        """A run's first request of a topic checked earlier (by a lone request, or an earlier run) and
        still valid is built in C too, and so is such a request alone (send_prepared); a topic not checked
        yet, made read-only meanwhile, or a queue beyond its count goes to _prepare, which answers as before."""
        topics = TopicConfigManager(Clock())
        processor, prepared = self.prepare_counted(topics)
        channel = FakeChannel("10.0.0.9:53211")
        first = [batch(), batch(b="Other")]
        self.answers(processor.process_requests(channel, first))
        self.assertEqual(prepared, first, "not checked yet: _prepare, which auto-creates them")
        del prepared[:]
        again = [batch(), batch(b="Other"), batch(e="2")]
        answers = self.answers(processor.process_requests(channel, again))
        self.assertEqual((prepared, [a.code for a in answers]), ([], [0, 0, 0]))
        other = topics.select_topic_config("Other")
        assert other is not None
        topics.update_topic_config(dataclasses.replace(other, perm=4))  # read only
        refused = [batch(b="Other"), batch(e="99"), batch()]
        answers = self.answers(processor.process_requests(channel, refused))
        self.assertEqual(prepared, refused[:2])
        self.assertEqual([a.code for a in answers], [ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR, 0])
        del prepared[:]
        alone = [batch(), batch(b="Other"), batch(e="99")]  # process_request: send_prepared, else _prepare
        answers = [processor.process_request(channel, request) for request in alone]  # type: ignore[misc]
        self.assertEqual(prepared, alone[1:])
        self.assertEqual([a.code for a in answers], [0, ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR])


def batch(**fields: str) -> RemotingCommand:
    """A batch request of BATCH_BODIES[0] to AliTopic's queue 1, no header properties; fields replaced."""
    header = dict(test_send.ALI_V2, m="true", i="", e="1")
    header.update(fields)
    return test_send.send_request(RequestCode.SEND_MESSAGE_V2, header, BATCH_BODIES[0])


class PythonSendMessageProcessorTests(test_send.SendMessageProcessorTests):
    """The processor's tests with its Python message and response code."""

    def setUp(self) -> None:
        super().setUp()
        for name in C_FUNCTIONS:
            self.patch(send, name, None)
