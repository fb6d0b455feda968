"""SendMessageProcessor: header shapes of real clients, batches, auto-create, status mapping, bad input."""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.message import (
    Message,
    MessageConst,
    MessageExt,
    decode_offset_msg_id,
    encode_batch,
    string_to_properties,
)
from rocketpy.common.topic import PERM_READ, TopicConfig
from rocketpy.interfaces import IBatchRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.fakes import FakeChannel, FakeStoreService

STORE_HOST = ("192.0.2.10", 10911)

#: SEND_MESSAGE exactly as the C++ client (PyPI rocketmq 0.4.4) sends it, after the
#: codec turned its JSON numbers into strings (doc/wire.md §14).
CPP_V1 = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "c2lnbmF0dXJl",
    "batch": "0",
    "bornTimestamp": "1795938014763",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "flag": "0",
    "producerGroup": "PID_EXPLORE",
    "properties": "KEYS\x01key-sync\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F0000F2070000ABB834970100"
    "\x02WAIT\x01true\x02color\x01red\x02",
    "queueId": "0",
    "reconsumeTimes": "0",
    "sysFlag": "0",
    "topic": "ExploreTopic",
    "unitMode": "0",
}

#: SEND_MESSAGE_V2 as ali-ons sends it (JSON false → "false").
ALI_V2 = {
    "a": "PID_ALI_EXPLORE",
    "b": "AliTopic",
    "c": "TBW102",
    "d": "4",
    "e": "1",
    "f": "0",
    "g": "1795938196636",
    "h": "7",
    "i": "TAGS\x01TagA\x02KEYS\x01ali-key-0\x02color\x01blue\x02",
    "j": "0",
    "k": "false",
}


def send_request(code: int, fields: dict[str, str], body: bytes = b"hello", version: int = 63) -> RemotingCommand:
    request = RemotingCommand.request(code, dict(fields), body)
    request.version = version
    request.opaque = 42
    return request


class SendMessageProcessorTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.store = FakeStoreService()
        self.topics = TopicConfigManager(self.clock)
        self.groups = SubscriptionGroupManager(self.clock)
        self.channel = FakeChannel("10.0.0.9:53211")
        self.processor = SendMessageProcessor(
            self.store, self.topics, STORE_HOST, cluster_name="TestCluster",
            max_message_size=1024, groups=self.groups, rng=random.Random(7),
        )

    def send(self, code: int, fields: dict[str, str], body: bytes = b"hello", version: int = 63) -> RemotingCommand:
        result = self.processor.process_request(self.channel, send_request(code, fields, body, version))
        if isinstance(result, RemotingCommand):
            return result
        response: RemotingCommand = self.successResultOf(result)
        return response

    def test_provides_interface(self) -> None:
        """The processor is an IBatchRequestProcessor."""
        self.assertTrue(verifyObject(IBatchRequestProcessor, self.processor))

    def test_cpp_v1_header(self) -> None:
        """The C++ client's SEND_MESSAGE is stored with its body, flags, properties and hosts."""
        self.topics.update_topic_config(TopicConfig("ExploreTopic", 4, 4))
        response = self.send(RequestCode.SEND_MESSAGE, CPP_V1, b"payload\x00with nul")
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        self.assertEqual(response.opaque, 42)
        [(batch, [msg])] = self.store.puts
        self.assertFalse(batch)
        self.assertEqual((msg.topic, msg.queue_id, msg.body), ("ExploreTopic", 0, b"payload\x00with nul"))
        self.assertEqual((msg.born_host, msg.store_host), (("10.0.0.9", 53211), STORE_HOST))
        self.assertEqual((msg.born_timestamp, msg.sys_flag, msg.flag), (1795938014763, 0, 0))
        self.assertEqual(
            msg.properties,
            {
                "KEYS": "key-sync",
                "TAGS": "TagA",
                "UNIQ_KEY": "0100007F0000F2070000ABB834970100",
                "color": "red",
                "CLUSTER": "TestCluster",
            },
        )
        self.assertEqual(
            response.ext_fields,
            {
                "msgId": msg.msg_id,
                "queueId": "0",
                "queueOffset": "0",
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )
        self.assertEqual(decode_offset_msg_id(response.ext_fields["msgId"]), (STORE_HOST, 0))

    def test_ali_ons_v2_header(self) -> None:
        """ali-ons' SEND_MESSAGE_V2 one-letter header is read like the long one."""
        self.topics.update_topic_config(TopicConfig("AliTopic", 4, 4))
        response = self.send(RequestCode.SEND_MESSAGE_V2, ALI_V2, version=121)
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        [(_, [msg])] = self.store.puts
        self.assertEqual((msg.topic, msg.queue_id, msg.flag), ("AliTopic", 1, 7))
        self.assertEqual(msg.properties["KEYS"], "ali-key-0")
        self.assertEqual(response.ext_fields["queueId"], "1")

    def test_second_send_gets_next_offset(self) -> None:
        """queueOffset counts up per queue."""
        self.send(RequestCode.SEND_MESSAGE, CPP_V1)
        response = self.send(RequestCode.SEND_MESSAGE, CPP_V1)
        self.assertEqual(response.ext_fields["queueOffset"], "1")

    def test_auto_create_from_tbw102(self) -> None:
        """An unknown topic is created from TBW102 with the requested queue count."""
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="NewTopic", defaultTopicQueueNums="3"))
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        config = self.topics.select_topic_config("NewTopic")
        assert config is not None
        self.assertEqual((config.read_queue_nums, config.write_queue_nums), (3, 3))

    def test_unknown_topic_without_template(self) -> None:
        """No usable template topic: TOPIC_NOT_EXIST, and nothing is stored."""
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="NewTopic", defaultTopic="Nope"))
        self.assertEqual(response.code, ResponseCode.TOPIC_NOT_EXIST)
        self.assertEqual(response.ext_fields["TRACE_ON"], "true")
        self.assertEqual(self.store.puts, [])

    def test_batch_flag_one_on_send_message(self) -> None:
        """The C++ send_batch (code 10, batch "1") stores each inner message."""
        body = encode_batch([
            Message("T", b"m%d" % i, 0, {"UNIQ_KEY": f"ID{i}", "TAGS": "TagB"}) for i in range(3)
        ])
        fields = dict(CPP_V1, topic="T", batch="1", properties="WAIT\x01true\x02")
        response = self.send(RequestCode.SEND_MESSAGE, fields, body)
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        [(batch, msgs)] = self.store.puts
        self.assertTrue(batch)
        self.assertEqual([m.body for m in msgs], [b"m0", b"m1", b"m2"])
        self.assertEqual(
            [m.properties for m in msgs],
            [{"UNIQ_KEY": f"ID{i}", "TAGS": "TagB", "CLUSTER": "TestCluster"} for i in range(3)],
        )
        self.assertEqual(response.ext_fields["msgId"], ",".join(m.msg_id for m in msgs))
        self.assertEqual(response.ext_fields["queueOffset"], "0")

    def test_run_of_requests_is_one_store_call(self) -> None:
        """process_requests: the requests of one read, good, bad and batches, in one put_many;
        each response as process_request would give it, in order."""
        body = encode_batch([Message("T", b"a"), Message("T", b"b")])
        v2 = {"a": "P", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}
        requests = [send_request(RequestCode.SEND_MESSAGE_V2, v2), send_request(RequestCode.SEND_MESSAGE_V2, {}),
                    send_request(RequestCode.SEND_BATCH_MESSAGE, dict(v2, m="true"), body),
                    send_request(RequestCode.SEND_MESSAGE_V2, dict(v2, e="9")),
                    send_request(RequestCode.SEND_MESSAGE_V2, dict(v2, e="1"))]
        for i, request in enumerate(requests):
            request.opaque = i
        calls: list[int] = []
        put_many = self.store.put_many

        def counted(puts: Sequence[Sequence[MessageExt]]) -> Deferred[list[PutMessageResult]]:
            calls.append(len(puts))
            return put_many(puts)
        self.store.put_many = counted  # type: ignore[method-assign]
        run = self.processor.process_requests(self.channel, requests)
        responses = run if isinstance(run, list) else self.successResultOf(run)
        self.assertEqual(calls, [3])
        self.assertEqual([(r.opaque, r.code) for r in responses],
                         [(0, ResponseCode.SUCCESS), (1, ResponseCode.SYSTEM_ERROR), (2, ResponseCode.SUCCESS),
                          (3, ResponseCode.SYSTEM_ERROR), (4, ResponseCode.SUCCESS)])
        self.assertEqual([(r.ext_fields.get("queueId"), r.ext_fields.get("queueOffset")) for r in responses],
                         [("0", "0"), (None, None), ("0", "1"), (None, None), ("1", "0")])
        self.assertEqual(len(responses[2].ext_fields["msgId"].split(",")), 2)
        self.assertEqual([(batch, len(msgs)) for batch, msgs in self.store.puts], [(False, 1), (True, 2), (False, 1)])

    def test_batch_decided_by_flag_not_code(self) -> None:
        """The flag decides: m=true or m=1 split the body (any code), m=false stores it as one message."""
        body = encode_batch([Message("T", b"a"), Message("T", b"b")])
        v2 = {"a": "P", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}
        self.send(RequestCode.SEND_BATCH_MESSAGE, dict(v2, m="true"), body)
        self.send(RequestCode.SEND_MESSAGE_V2, dict(v2, m="false"), body)
        self.send(RequestCode.SEND_MESSAGE_V2, dict(v2, m="1"), body)  # the C++ 2.x client's batch
        self.assertEqual([(b, len(msgs)) for b, msgs in self.store.puts], [(True, 2), (False, 1), (True, 2)])
        self.assertEqual(self.store.puts[1][1][0].body, body)

    def test_compressed_batch(self) -> None:
        """The C++ client compresses a large batch body as a whole (sysFlag 1): inflate, then split."""
        inner = [Message("T", b"x" * 300 + b"%d" % i, 0, {"UNIQ_KEY": f"ID{i}"}) for i in range(2)]
        body = zlib.compress(encode_batch(inner), 5)
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, batch="1", sysFlag="1"), body)
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        msgs = self.store.puts[0][1]
        self.assertEqual([(m.body, m.sys_flag) for m in msgs], [(m.body, 0) for m in inner])
        bomb = zlib.compress(encode_batch([Message("T", b"x" * 2000)]))
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, batch="1", sysFlag="1"), bomb)
        self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL)
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, batch="1", sysFlag="1"), b"not zlib")
        self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL)

    def test_malformed_batch(self) -> None:
        """A batch body that does not parse is MESSAGE_ILLEGAL."""
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, batch="1"), b"\x00\x00\x00\x30garbage")
        self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL)

    def test_batch_to_retry_topic(self) -> None:
        """Batches to %RETRY% topics are refused."""
        body = encode_batch([Message("%RETRY%G", b"a")])
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="%RETRY%G", batch="1"), body)
        self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL)

    def test_wait_property(self) -> None:
        """WAIT=true is dropped from the stored message; WAIT=false stays so the store does not wait."""
        self.send(RequestCode.SEND_MESSAGE, CPP_V1)
        self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, properties="WAIT\x01false\x02"))
        first, second = (msgs[0] for _, msgs in self.store.puts)
        self.assertNotIn(MessageConst.WAIT_STORE_MSG_OK, first.properties)
        self.assertEqual(second.properties, {"WAIT": "false", "CLUSTER": "TestCluster"})

    def test_negative_queue_id_picks_writable_queue(self) -> None:
        """queueId -1: the broker picks one of the writable queues."""
        self.topics.update_topic_config(TopicConfig("Wide", 8, 2))
        for _ in range(20):
            self.assertEqual(self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="Wide", queueId="-1")).code, 0)
        self.assertEqual({msgs[0].queue_id for _, msgs in self.store.puts}, {0, 1})

    def test_queue_id_out_of_range(self) -> None:
        """queueId ≥ max(read, write) queues: SYSTEM_ERROR."""
        self.topics.update_topic_config(TopicConfig("Small", 2, 3))
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="Small", queueId="2")).code, 0)
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="Small", queueId="3"))
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("queueId[3] is illegal", response.remark or "")

    def test_invalid_and_forbidden_topics(self) -> None:
        """Bad topic names and send-forbidden system topics: SYSTEM_ERROR."""
        for topic in ("bad topic", "x" * 128, "", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
            response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic=topic))
            self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR, topic)
        self.assertEqual(self.store.puts, [])

    def test_topic_not_writeable(self) -> None:
        """A read-only topic: NO_PERMISSION."""
        self.topics.update_topic_config(TopicConfig("RO", 4, 4, PERM_READ))
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="RO")).code, ResponseCode.NO_PERMISSION)

    def test_body_too_large(self) -> None:
        """A body over the maximum message size: MESSAGE_ILLEGAL, in a batch too."""
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE, CPP_V1, b"x" * 1025).code, ResponseCode.MESSAGE_ILLEGAL)
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE, CPP_V1, b"x" * 1024).code, ResponseCode.SUCCESS)
        for sizes in ([1025], [600, 600]):  # one inner body, or the batch as a whole, too large
            body = encode_batch([Message("T", b"x" * n) for n in sizes])
            response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, batch="1"), body)
            self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL, sizes)

    def test_properties_too_large(self) -> None:
        """Properties over 32767 bytes: MESSAGE_ILLEGAL."""
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, properties="k\x01" + "v" * 32800))
        self.assertEqual(response.code, ResponseCode.MESSAGE_ILLEGAL)

    def test_missing_and_non_numeric_fields(self) -> None:
        """A missing or unparsable required field: SYSTEM_ERROR naming it, never an exception."""
        fields = dict(CPP_V1)
        del fields["producerGroup"]
        response = self.send(RequestCode.SEND_MESSAGE, fields)
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("producerGroup", response.remark or "")
        response = self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, queueId="zero"))
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("queueId", response.remark or "")
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE_V2, {}).code, ResponseCode.SYSTEM_ERROR)

    def test_numbers_parsed_as_java_does(self) -> None:
        """Signs are accepted; spaces, underscores and non-ASCII digits are not (Java's parseLong)."""
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE_V2, dict(ALI_V2, e="+1")).code, ResponseCode.SUCCESS)
        self.assertEqual(self.store.puts[-1][1][0].queue_id, 1)
        for bad in (" 1", "1_0", "\uff11", "\u00b2"):
            response = self.send(RequestCode.SEND_MESSAGE_V2, dict(ALI_V2, e=bad))
            self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR, bad)
            self.assertIn("'queueId' is not a number", response.remark or "")

    def test_v2_header_with_long_names(self) -> None:
        """A SEND_MESSAGE_V2 header may carry long names too: each field is read by either name."""
        fields = {k: v for k, v in ALI_V2.items() if k not in ("b", "e")}
        fields.update(topic="AliTopic", queueId="1")
        response = self.send(RequestCode.SEND_MESSAGE_V2, fields)
        self.assertEqual((response.code, response.ext_fields["queueId"]), (ResponseCode.SUCCESS, "1"))
        self.assertEqual(self.store.puts[-1][1][0].topic, "AliTopic")

    def test_status_mapping(self) -> None:
        """Every PutMessageStatus maps to its code (doc/wire.md §3); stored ones carry msgId/queueId/queueOffset."""
        expected = {
            PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
            PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
            PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
            PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
            PutMessageStatus.CREATE_MAPEDFILE_FAILED: ResponseCode.SYSTEM_ERROR,
            PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
            PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
            PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_ERROR,
            PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
            PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
            PutMessageStatus.WHEEL_TIMER_NOT_ENABLE: ResponseCode.SYSTEM_ERROR,
        }
        self.assertEqual(set(expected), set(PutMessageStatus))
        for status, code in expected.items():
            self.store.put_status = status
            response = self.send(RequestCode.SEND_MESSAGE, CPP_V1)
            self.assertEqual(response.code, code, status)
            self.assertEqual(response.ext_fields["MSG_REGION"], "DefaultRegion")
            stored = code in (0, 10, 11, 12)
            self.assertEqual("msgId" in response.ext_fields, stored, status)
            self.assertEqual("queueOffset" in response.ext_fields, stored, status)
            if stored:
                self.assertTrue(all(isinstance(v, str) for v in response.ext_fields.values()))
        busy = self.store.put_status = PutMessageStatus.OS_PAGECACHE_BUSY
        self.assertIn("[PC_SYNCHRONIZED]", self.send(RequestCode.SEND_MESSAGE, CPP_V1).remark or "", busy)

    def test_stored_put_answers_at_once_pending_put_later(self) -> None:
        """A put the store completed already (inline) is answered by the call itself; one still
        pending through its Deferred, with the same response once stored."""
        now = self.processor.process_request(self.channel, send_request(RequestCode.SEND_MESSAGE, CPP_V1))
        assert isinstance(now, RemotingCommand)
        self.assertEqual((now.code, now.ext_fields["queueOffset"]), (ResponseCode.SUCCESS, "0"))
        stored = self.store.put_message
        held: list[tuple[Deferred[PutMessageResult], PutMessageResult]] = []

        def hold(msg: MessageExt) -> Deferred[PutMessageResult]:
            held.append((Deferred(), self.successResultOf(stored(msg))))
            return held[-1][0]
        self.patch(self.store, "put_message", hold)
        later = self.processor.process_request(self.channel, send_request(RequestCode.SEND_MESSAGE, CPP_V1))
        assert isinstance(later, Deferred)
        self.assertNoResult(later)
        pending, result = held[0]
        pending.callback(result)
        response = self.successResultOf(later)
        self.assertEqual((response.code, response.ext_fields["queueOffset"]), (ResponseCode.SUCCESS, "1"))

    def test_refused_puts_logged_once_per_ten_seconds(self) -> None:
        """A flood of refused puts logs one line per status every 10 s, naming the topic and how many
        refusals the line stands for."""
        processor = SendMessageProcessor(self.store, self.topics, STORE_HOST, clock=self.clock)
        self.topics.update_topic_config(TopicConfig("ExploreTopic", 4, 4))
        self.store.put_status = PutMessageStatus.SERVICE_NOT_AVAILABLE

        def refused_lines(sends: int) -> list[str]:
            with capturedLogs() as events:
                for _ in range(sends):
                    processor.process_request(self.channel, send_request(RequestCode.SEND_MESSAGE, CPP_V1))
            return [formatEvent(e) for e in events if "refused" in e["log_format"]]

        [first] = refused_lines(5)
        self.assertIn("put to topic ExploreTopic refused: SERVICE_NOT_AVAILABLE", first)
        self.assertIn("0 more refused", first)
        self.clock.advance(9)
        self.assertEqual(refused_lines(3), [])
        self.clock.advance(1)
        [later] = refused_lines(1)
        self.assertIn("7 more refused since the last such line", later)

    def test_retry_topic_to_dlq(self) -> None:
        """%RETRY%G with reconsumeTimes ≥ maxReconsumeTimes goes to %DLQ%G (header max honoured from V3_4_9)."""
        fields = dict(ALI_V2, b="%RETRY%G", j="3", l="3")
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE_V2, fields, version=121).code, ResponseCode.SUCCESS)
        self.assertEqual(self.send(RequestCode.SEND_MESSAGE_V2, fields, version=63).code, ResponseCode.SUCCESS)
        first, second = (msgs[0] for _, msgs in self.store.puts)
        self.assertEqual((first.topic, first.queue_id), ("%DLQ%G", 0))
        self.assertEqual(second.topic, "%RETRY%G")
        self.assertEqual(first.reconsume_times, 3)
        self.assertIsNotNone(self.topics.select_topic_config("%DLQ%G"))

    def test_retry_limit_from_group(self) -> None:
        """Without a header maximum, the group's retryMaxTimes decides."""
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("G", retry_max_times=2))
        self.send(RequestCode.SEND_MESSAGE_V2, dict(ALI_V2, b="%RETRY%G", j="2"), version=121)
        self.assertEqual(self.store.puts[0][1][0].topic, "%DLQ%G")

    def test_reject_request_when_store_busy(self) -> None:
        """reject_request follows the store's flow control."""
        self.assertFalse(self.processor.reject_request())
        self.store.busy = True
        self.assertTrue(self.processor.reject_request())

    def test_properties_parsed_tolerantly(self) -> None:
        """Trailing separators and empty values do not become properties."""
        self.send(RequestCode.SEND_MESSAGE, dict(CPP_V1, properties="A\x011\x02B\x01\x02\x02"))
        stored = self.store.puts[0][1][0].properties
        self.assertEqual(stored, string_to_properties("A\x011\x02CLUSTER\x01TestCluster"))
