"""Tests for rocketpy.client.producer against a fake cluster at the remoting edge."""

from __future__ import annotations

import json
import random
import zlib
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from rocketpy.client import errors
from rocketpy.client.api import Mode, send_header
from rocketpy.client.hooks import ICheckForbiddenHook, ISendMessageHook, SendMessageContext
from rocketpy.client.message import new_message
from rocketpy.client.producer import Producer, select_by_hash
from rocketpy.client.results import SendStatus
from rocketpy.common.headers import expand_send_v2
from rocketpy.common.message import Message, decode_batch, string_to_properties
from rocketpy.common.route import MessageQueue
from rocketpy.interfaces import IRPCHook
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectError, RemotingTimeoutError

from .fakes import NAMESRV, FakeCluster


class ProducerTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.cluster = FakeCluster(self.clock)
        self.a = self.cluster.add_broker("broker-a", "10.0.0.1:10911", queues=2)
        self.b = self.cluster.add_broker("broker-b", "10.0.0.2:10911", queues=2)
        self.cluster.add_topic("T")
        self.remoting = self.cluster.remoting

    def producer(self, **kwargs: Any) -> Producer:
        p = Producer("PG", NAMESRV, self.clock, self.remoting, client_id="10.0.0.9@1", rng=random.Random(7), **kwargs)
        self.successResultOf(p.start())
        self.addCleanup(lambda: self.successResultOf(p.shutdown()))
        return p

    def sends(self) -> list[tuple[str, dict[str, str]]]:
        codes = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE)
        return [(a, expand_send_v2(r.ext_fields)) for k, a, r, _ in self.remoting.requests if r.code in codes]


class SendTests(ProducerTestCase):
    def test_sync_send(self) -> None:
        """A SYNC send uses SEND_MESSAGE_V2 one-letter keys and reports both message ids."""
        p = self.producer()
        msg = new_message("T", b"hello", tags="TagA")
        result = self.successResultOf(p.send(msg))
        self.assertEqual(result.status, SendStatus.SEND_OK)
        self.assertEqual(result.msg_id, msg.properties["UNIQ_KEY"])
        self.assertEqual(len(result.msg_id), 32)
        self.assertEqual(result.queue.topic, "T")
        self.assertEqual(result.queue_offset, 0)
        [(addr, request)] = self.remoting.sent(RequestCode.SEND_MESSAGE_V2)
        self.assertEqual(set(request.ext_fields), set("abcdefghijkm"))
        f = expand_send_v2(request.ext_fields)
        self.assertEqual(f["producerGroup"], "PG")
        self.assertEqual(f["defaultTopic"], "TBW102")
        self.assertEqual(f["bornTimestamp"], "1700000000000")
        self.assertEqual(f["sysFlag"], "0")
        self.assertEqual(f["batch"], "false")
        self.assertEqual(string_to_properties(f["properties"])["TAGS"], "TagA")
        broker = self.cluster.broker_at(addr)
        self.assertEqual(result.offset_msg_id, broker.store[("T", result.queue.queue_id)][0].msg_id)
        self.assertEqual(result.queue.broker_name, broker.name)

    def test_v1_names(self) -> None:
        """With send_smart_msg off, SEND_MESSAGE (10) carries long names."""
        p = self.producer(send_smart_msg=False)
        self.successResultOf(p.send(Message("T", b"x")))
        [(_, request)] = self.remoting.sent(RequestCode.SEND_MESSAGE)
        self.assertEqual(request.ext_fields["producerGroup"], "PG")

    def test_header_names(self) -> None:
        """The one-letter header is the long-name one renamed, field by field and in the same order."""
        msg = Message("T", b"x", 5, {"KEYS": "k"})
        for batch, reconsume, most in ((False, None, None), (True, 2, 16)):
            short = send_header("PG", msg, 3, 1, 1_700_000_000_000, 4, reconsume, most, batch)
            long = send_header("PG", msg, 3, 1, 1_700_000_000_000, 4, reconsume, most, batch, v2=False)
            self.assertEqual(list(expand_send_v2(short).items()), list(long.items()))
            self.assertEqual((long["flag"], long["reconsumeTimes"], long["batch"], long.get("maxReconsumeTimes")),
                             ("5", str(reconsume or 0), str(batch).lower(), most and str(most)))

    def test_compression(self) -> None:
        """Bodies of 4096 bytes and more go zlib-compressed with sysFlag 0x1; the caller's body is untouched."""
        p = self.producer()
        big = b"abc" * 2000
        msg = Message("T", big)
        self.successResultOf(p.send(msg))
        self.successResultOf(p.send(Message("T", b"x" * 4095)))
        (_, first), (_, second) = self.remoting.sent(RequestCode.SEND_MESSAGE_V2)
        self.assertEqual(first.ext_fields["f"], "1")
        self.assertEqual(zlib.decompress(first.body), big)
        self.assertEqual(msg.body, big)
        self.assertEqual((second.ext_fields["f"], len(second.body)), ("0", 4095))

    def test_retry_topic_counters_in_header(self) -> None:
        """For %RETRY% topics RECONSUME_TIME/MAX_RECONSUME_TIMES move from properties to the header."""
        self.cluster.add_topic("%RETRY%CG")
        p = self.producer()
        msg = Message("%RETRY%CG", b"x", properties={"RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "16"})
        self.successResultOf(p.send(msg))
        [(_, f)] = self.sends()
        self.assertEqual((f["reconsumeTimes"], f["maxReconsumeTimes"]), ("2", "16"))
        self.assertNotIn("RECONSUME_TIME", string_to_properties(f["properties"]))

    def test_not_started(self) -> None:
        """Sending before start fails; it does not raise."""
        p = Producer("PG", NAMESRV, self.clock, self.remoting)
        self.failureResultOf(p.send(Message("T", b"x")), errors.MQClientError)

    def test_invalid_message_not_sent(self) -> None:
        """Validation failures (code 13) fail at once and are never retried."""
        p = self.producer()
        f = self.failureResultOf(p.send(Message("T", b"")), errors.MessageInvalidError)
        self.assertEqual(f.value.code, 13)
        self.assertEqual(self.remoting.requests, [])


class RouteTests(ProducerTestCase):
    def test_no_route(self) -> None:
        """Neither the topic nor TBW102 known: NOT_FOUND_TOPIC_EXCEPTION 10005."""
        p = self.producer()
        f = self.failureResultOf(p.send(Message("Unknown", b"x")), errors.NoRouteError)
        self.assertEqual(f.value.code, 10005)

    def test_no_name_server(self) -> None:
        """No name server configured: 10004."""
        p = Producer("PG", [], self.clock, self.remoting)
        p.start()
        f = self.failureResultOf(p.send(Message("T", b"x")), errors.NoNameServerError)
        self.assertEqual(f.value.code, 10004)

    def test_name_server_down(self) -> None:
        """A name server that cannot be reached shows up in the NoRouteError."""
        p = Producer("PG", "down:9876", self.clock, self.remoting)
        p.start()
        f = self.failureResultOf(p.send(Message("T", b"x")), errors.NoRouteError)
        self.assertIn("down:9876", f.value.message)

    def test_tbw102_fallback(self) -> None:
        """A new topic is sent through the TBW102 brokers with min(4, their queues) queues."""
        self.cluster.add_topic("TBW102", "broker-a")
        self.a.queues = 8
        p = self.producer()
        for _ in range(8):
            self.successResultOf(p.send(Message("NewTopic", b"x")))
        qids = {int(f["queueId"]) for _, f in self.sends()}
        self.assertEqual(qids, {0, 1, 2, 3})
        self.assertEqual({f["defaultTopicQueueNums"] for _, f in self.sends()}, {"4"})

    def test_route_refresh_and_heartbeat(self) -> None:
        """Brokers first seen in a route get a heartbeat at once; then every 30 s the used topics'
        routes are refreshed and brokers get a producer heartbeat."""
        p = self.producer()
        self.successResultOf(p.send(Message("T", b"x")))
        routes = len(self.remoting.sent(RequestCode.GET_ROUTEINFO_BY_TOPIC))
        self.assertEqual(self.remoting.sent(RequestCode.HEART_BEAT), [])
        self.clock.advance(0)
        first = self.remoting.sent(RequestCode.HEART_BEAT)
        self.assertEqual(sorted(a for a, _ in first), ["10.0.0.1:10911", "10.0.0.2:10911"])
        self.clock.advance(30)
        self.assertEqual(len(self.remoting.sent(RequestCode.GET_ROUTEINFO_BY_TOPIC)), routes + 1)
        beats = self.remoting.sent(RequestCode.HEART_BEAT)[len(first):]  # the same brokers: no extra beat
        self.assertEqual(sorted(a for a, _ in beats), ["10.0.0.1:10911", "10.0.0.2:10911"])
        body = json.loads(beats[0][1].body)
        self.assertEqual(body, {"clientID": "10.0.0.9@1", "consumerDataSet": [], "producerDataSet": [{"groupName": "PG"}]})

    def test_shutdown_unregisters(self) -> None:
        """Shutdown unregisters the group from every broker and stops the timers."""
        p = Producer("PG", NAMESRV, self.clock, self.remoting, client_id="c")
        p.start()
        self.successResultOf(p.send(Message("T", b"x")))
        self.successResultOf(p.shutdown())
        self.assertEqual(len(self.remoting.sent(RequestCode.UNREGISTER_CLIENT)), 2)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class RetryTests(ProducerTestCase):
    def test_retry_on_retriable_code_avoids_broker(self) -> None:
        """SYSTEM_ERROR is retried, each time on the broker that did not fail last."""
        p = self.producer()
        self.a.send_script = [1]
        self.b.send_script = [1]
        result = self.successResultOf(p.send(Message("T", b"x")))
        addrs = [a for a, _ in self.sends()]
        self.assertEqual(len(addrs), 3)
        self.assertNotEqual(addrs[0], addrs[1])
        self.assertNotEqual(addrs[1], addrs[2])
        self.assertEqual(result.status, SendStatus.SEND_OK)
        self.assertEqual(result.queue.broker_name, self.cluster.broker_at(addrs[2]).name)

    def test_system_busy_not_retried(self) -> None:
        """SYSTEM_BUSY (2) fails at once with the broker's code, remark and address."""
        p = self.producer()
        self.a.send_script = [2]
        self.b.send_script = [2]
        f = self.failureResultOf(p.send(Message("T", b"x")), errors.MQBrokerError)
        self.assertEqual((f.value.code, f.value.remark), (2, "scripted failure"))
        self.assertEqual(len(self.sends()), 1)
        self.assertEqual(f.value.broker_addr, self.sends()[0][0])

    def test_transport_errors_exhaust_attempts(self) -> None:
        """Three connect failures: SendFailedError with code 10001 and the last error as cause."""
        p = self.producer()
        self.a.send_script = [RemotingConnectError("a", "refused")] * 3
        self.b.send_script = [RemotingConnectError("b", "refused")] * 3
        f = self.failureResultOf(p.send(Message("T", b"x")), errors.SendFailedError)
        self.assertEqual((f.value.code, f.value.attempts), (10001, 3))
        self.assertIsInstance(f.value.__cause__, RemotingConnectError)
        self.assertEqual(len(self.sends()), 3)

    def test_not_store_ok_returned(self) -> None:
        """FLUSH_DISK_TIMEOUT is a result, not an error, and is not retried by default."""
        p = self.producer()
        self.a.send_script = [10]
        self.b.send_script = [10]
        result = self.successResultOf(p.send(Message("T", b"x")))
        self.assertEqual(result.status, SendStatus.FLUSH_DISK_TIMEOUT)
        self.assertEqual(len(self.sends()), 1)

    def test_not_store_ok_retried_when_asked(self) -> None:
        """With retry_another_broker_when_not_store_ok, a non-OK status is retried; the last result returned."""
        p = self.producer(retry_another_broker_when_not_store_ok=True)
        self.a.send_script = [11, 11]
        self.b.send_script = [11, 11]
        result = self.successResultOf(p.send(Message("T", b"x")))
        self.assertEqual(result.status, SendStatus.SLAVE_NOT_AVAILABLE)
        self.assertEqual(len(self.sends()), 3)

    def test_one_timeout_budget(self) -> None:
        """Attempts share one budget: the second gets what is left, none starts once it is spent."""
        p = self.producer()

        def slow(request: Any) -> Exception:
            self.clock.advance(1.25)
            return RemotingTimeoutError("no response")

        self.a.send_script = [slow, slow, slow]
        self.b.send_script = [slow, slow, slow]
        f = self.failureResultOf(p.send(Message("T", b"x"), timeout=2.0), errors.RemotingTooMuchRequestError)
        self.assertIn("sendDefaultImpl call timeout", str(f.value))
        timeouts = [t for k, a, r, t in self.remoting.requests if r.code == RequestCode.SEND_MESSAGE_V2]
        self.assertEqual(timeouts, [2.0, 0.75])

    def test_async_retries_transport_only(self) -> None:
        """ASYNC: a network failure is retried on another broker, a broker error is not."""
        p = self.producer()
        self.a.send_script = [RemotingConnectError("a", "x")]
        self.b.send_script = [RemotingConnectError("b", "x")]
        result = self.successResultOf(p.send_async(Message("T", b"x")))
        self.assertEqual(result.status, SendStatus.SEND_OK)
        self.assertEqual([k for k, a, r, t in self.remoting.requests if r.code == 310], ["async"] * 3)
        self.a.send_script = [1]
        self.b.send_script = [1]
        self.failureResultOf(p.send_async(Message("T", b"x")), errors.MQBrokerError)

    def test_oneway(self) -> None:
        """ONEWAY writes once and fires with None."""
        p = self.producer()
        self.assertIsNone(self.successResultOf(p.send_oneway(Message("T", b"x"))))
        self.assertEqual([k for k, a, r, t in self.remoting.requests if r.code == 310], ["oneway"])

    def test_fault_strategy_isolates_failed_broker(self) -> None:
        """With latency fault tolerance on, a failed broker is skipped for 10 minutes."""
        p = self.producer(send_latency_fault_enable=True)
        failures = [RemotingConnectError("a", "down")]

        def fail_first(request: Any) -> Any:
            return failures.pop() if failures else 0

        self.a.send_script = [fail_first]
        self.b.send_script = [fail_first]
        self.successResultOf(p.send(Message("T", b"x")))
        failed = self.sends()[0][0]
        for _ in range(4):
            self.successResultOf(p.send(Message("T", b"x")))
        self.assertNotIn(failed, [a for a, _ in self.sends()[2:]])
        self.clock.advance(600)
        for _ in range(4):
            self.successResultOf(p.send(Message("T", b"x")))
        self.assertIn(failed, [a for a, _ in self.sends()[6:]])


class BatchAndSelectTests(ProducerTestCase):
    def test_batch(self) -> None:
        """A batch is one SEND_BATCH_MESSAGE with the batch flag, per-message UNIQ_KEYs, never compressed."""
        p = self.producer()
        msgs = [new_message("T", b"y" * 5000, tags="A"), new_message("T", b"z", keys="k")]
        result = self.successResultOf(p.send_batch(msgs))
        [(_, request)] = self.remoting.sent(RequestCode.SEND_BATCH_MESSAGE)
        f = expand_send_v2(request.ext_fields)
        self.assertEqual((f["batch"], f["sysFlag"]), ("true", "0"))
        inner = decode_batch(request.body, "T")
        self.assertEqual([m.body for m in inner], [b"y" * 5000, b"z"])
        self.assertEqual(result.msg_id, ",".join(m.properties["UNIQ_KEY"] for m in inner))

    def test_batch_rules(self) -> None:
        """Mixed topics, delays, retry topics and empty batches are refused."""
        p = self.producer()
        for msgs in ([Message("T", b"x"), Message("U", b"x")], [new_message("T", b"x", delay_level=2)],
                     [Message("%RETRY%G", b"x")], []):
            self.failureResultOf(p.send_batch(msgs), errors.MessageInvalidError)

    def test_orderly(self) -> None:
        """The same selector argument always lands on the same queue, with one attempt."""
        p = self.producer()
        queues = {self.successResultOf(p.send_orderly(Message("T", b"x"), select_by_hash, "order-7")).queue
                  for _ in range(5)}
        self.assertEqual(len(queues), 1)
        self.a.send_script = [1]
        self.b.send_script = [1]
        self.failureResultOf(p.send_orderly(Message("T", b"x"), select_by_hash, 3), errors.MQBrokerError)
        self.assertEqual(len(self.sends()), 6)

    def test_send_to_queue(self) -> None:
        """send_to_queue writes to exactly that queue; a queue of another topic is refused."""
        p = self.producer()
        mq = MessageQueue("T", "broker-b", 1)
        result = self.successResultOf(p.send_to_queue(Message("T", b"x"), mq))
        self.assertEqual(result.queue, mq)
        self.failureResultOf(p.send_to_queue(Message("T", b"x"), MessageQueue("U", "broker-b", 1)),
                             errors.MQClientError)


@implementer(ISendMessageHook)
class RecordingHook:
    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, SendMessageContext]] = []

    def send_message_before(self, context: SendMessageContext) -> None:
        self.calls.append(("before", context))

    def send_message_after(self, context: SendMessageContext) -> None:
        self.calls.append(("after", context))


@implementer(ICheckForbiddenHook)
class Forbid:
    name = "forbid"

    def check_forbidden(self, context: SendMessageContext) -> None:
        raise ValueError("not today")


class HookTests(ProducerTestCase):
    def test_interfaces(self) -> None:
        """The test hooks provide the hook interfaces (so they exercise the documented contract)."""
        self.assertTrue(verifyObject(ISendMessageHook, RecordingHook()))
        self.assertTrue(verifyObject(ICheckForbiddenHook, Forbid()))
        self.assertTrue(verifyObject(IRPCHook, NoopRPCHook()))

    def test_send_hooks(self) -> None:
        """Hooks see each attempt before and after, with the result or the error."""
        hook = RecordingHook()
        p = self.producer(send_message_hooks=[hook])
        failures = [RemotingConnectError("a", "x")]
        self.a.send_script = self.b.send_script = [lambda request: failures.pop() if failures else 0]
        result = self.successResultOf(p.send(Message("T", b"x")))
        self.assertEqual([c for c, _ in hook.calls], ["before", "after", "before", "after"])
        self.assertIsInstance(hook.calls[1][1].exception, RemotingConnectError)
        self.assertIs(hook.calls[3][1].send_result, result)
        self.assertEqual((hook.calls[0][1].producer_group, hook.calls[0][1].mode), ("PG", Mode.SYNC))

    def test_forbidden_hook_vetoes(self) -> None:
        """A check-forbidden hook's exception fails each attempt as an MQClientError; nothing is sent."""
        p = self.producer(check_forbidden_hooks=[Forbid()])
        f = self.failureResultOf(p.send(Message("T", b"x")), errors.SendFailedError)
        self.assertIn("not today", str(f.value))
        self.assertEqual(self.sends(), [])


@implementer(IRPCHook)
class NoopRPCHook:
    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        pass

    def after_response(self, remote_address: str, request: RemotingCommand, response: RemotingCommand) -> None:
        pass


class RemotingSetupTests(SynchronousTestCase):
    def test_rpc_hooks_and_serialize_type(self) -> None:
        """Without a remoting client, the producer makes one with its RPC hooks and serialize type."""
        hook = NoopRPCHook()
        p = Producer("PG", NAMESRV, Clock(), rpc_hooks=[hook], serialize_type=SerializeType.MSGPACK)
        remoting = p.instance.remoting
        self.assertIsInstance(remoting, RemotingClient)
        self.assertEqual(remoting.rpc_hooks, (hook,))  # type: ignore[union-attr]
        request = RemotingCommand.request(RequestCode.HEART_BEAT)
        remoting._stamp(request)  # type: ignore[union-attr]
        self.assertEqual(request.serialize_type, SerializeType.MSGPACK)


class ReactorInjectionTests(SynchronousTestCase):
    def test_reactor_is_required(self) -> None:
        """The Deferred client never falls back to the global reactor: no reactor and no instance is an error."""
        e = self.assertRaises(TypeError, Producer, "PG", NAMESRV)
        self.assertIn("rocketpy.blocking", str(e))

    def test_instance_supplies_the_reactor(self) -> None:
        """A member built on a shared ClientInstance takes that instance's reactor."""
        clock = Clock()
        first = Producer("PG", NAMESRV, clock, FakeCluster(clock).remoting)
        second = Producer("PG2", instance=first.instance)
        self.assertIs(second.instance, first.instance)
        self.assertIs(second.instance.reactor, clock)
