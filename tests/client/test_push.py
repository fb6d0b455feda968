"""Tests for rocketpy.client.push.PushConsumer against a fake cluster, timers on a Clock."""

from __future__ import annotations

import json
import os
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import errors
from rocketpy.client.consumer import ConsumeFromWhere, MessageModel
from rocketpy.client.offsets import decode_offsets, encode_offsets
from rocketpy.client.process import ConsumeContext
from rocketpy.client.push import PushConsumer
from rocketpy.client.results import ConsumeResult
from rocketpy.common.headers import expand_send_v2
from rocketpy.common.message import MessageExt, string_to_properties
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectError

from .fakes import NAMESRV, FakeCluster, FakeRemotingClient, response


class PushTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.cluster = FakeCluster(self.clock)
        self.cluster.add_broker("broker-a", "10.0.0.1:10911", queues=2)
        self.cluster.add_topic("T")
        self.cluster.add_topic("%RETRY%CG")
        self.cluster.consumer_ids = ["me"]
        self.remoting = self.cluster.remoting
        self.received: list[tuple[str, bytes, int]] = []
        self.result: Any = ConsumeResult.CONSUME_SUCCESS

    def listener(self, msgs: list[MessageExt], context: ConsumeContext) -> Any:
        self.received += [(m.topic, m.body, m.queue_offset) for m in msgs]
        return self.result() if callable(self.result) else self.result

    def consumer(self, start: bool = True, **kwargs: Any) -> PushConsumer:
        c = PushConsumer("CG", NAMESRV, self.clock, self.remoting, client_id="me", **kwargs)
        c.subscribe("T", "*")
        c.register_listener(self.listener)
        if start:
            self.successResultOf(c.start())
            self.addCleanup(self.stop, c)
        return c

    def stop(self, c: PushConsumer) -> None:
        self.successResultOf(c.shutdown())
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def pulls(self, queue_id: int | None = None) -> list[dict[str, str]]:
        return [r.ext_fields for _, r in self.remoting.sent(RequestCode.PULL_MESSAGE)
                if r.ext_fields["topic"] == "T" and queue_id in (None, int(r.ext_fields["queueId"]))]


def _new_pending(pending: list[Deferred[ConsumeResult]]) -> Deferred[ConsumeResult]:
    """A listener result that the test fires later."""
    pending.append(Deferred())
    return pending[-1]


class StartTests(PushTestCase):
    def test_heartbeat_and_subscriptions(self) -> None:
        """Start heartbeats with enum names and the implicit retry subscription, then pulls every queue."""
        c = self.consumer()
        [(_, beat)] = self.remoting.sent(RequestCode.HEART_BEAT)[:1]
        data = json.loads(beat.body)["consumerDataSet"][0]
        self.assertEqual((data["consumeType"], data["messageModel"], data["consumeFromWhere"]),
                         ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET"))
        self.assertEqual(sorted(s["topic"] for s in data["subscriptionDataSet"]), ["%RETRY%CG", "T"])
        self.assertEqual(sorted(mq.queue_id for mq in c.rebalancer.process_queues if mq.topic == "T"), [0, 1])
        f = self.pulls(0)[0]
        self.assertEqual((f["suspendTimeoutMillis"], f["sysFlag"], f["maxMsgNums"]), ("15000", "6", "32"))

    def test_needs_listener(self) -> None:
        """Starting without a listener fails."""
        c = PushConsumer("CG", NAMESRV, self.clock, self.remoting)
        self.failureResultOf(c.start(), errors.MQClientError)

    def test_consume_from_where(self) -> None:
        """No stored offset: LAST starts at the max offset, FIRST at 0; a stored offset wins."""
        for _ in range(3):
            self.cluster.publish("broker-a", "T", 0, b"old")
        self.cluster.brokers["broker-a"].offsets[("CG", "T", 1)] = 0
        self.cluster.publish("broker-a", "T", 1, b"kept")
        c = self.consumer()
        self.assertEqual(self.pulls(0)[0]["queueOffset"], "3")
        self.assertEqual(self.received, [("T", b"kept", 0)])
        self.stop(c)
        self.cluster.brokers["broker-a"].offsets.clear()
        self.received.clear()
        self.consumer(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.assertEqual(len([r for r in self.received if r[1] == b"old"]), 3)


    def test_consume_from_timestamp(self) -> None:
        """CONSUME_FROM_TIMESTAMP starts at the first message at or after consume_timestamp."""
        for i, born in enumerate((1000, 2000, 3000)):
            self.cluster.publish("broker-a", "T", 0, b"m%d" % i, born=born)
        self.consumer(consume_from_where=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, consume_timestamp=1.5)
        [(_, search)] = [(a, r) for a, r in self.remoting.sent(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
                         if r.ext_fields["queueId"] == "0"]
        self.assertEqual(search.ext_fields["timestamp"], "1500")
        self.assertEqual([b for _, b, _ in self.received], [b"m1", b"m2"])


class ConsumeTests(PushTestCase):
    def test_long_poll_and_offsets(self) -> None:
        """A held pull answers when a message lands; offsets are persisted every 5 s."""
        self.consumer()
        self.assertEqual(self.received, [])
        self.cluster.publish("broker-a", "T", 1, b"hello", TAGS="x")
        self.clock.advance(0)
        self.assertEqual(self.received, [("T", b"hello", 0)])
        self.clock.advance(5)
        updates = [r.ext_fields for _, r in self.remoting.sent(RequestCode.UPDATE_CONSUMER_OFFSET, "oneway")]
        self.assertIn({"consumerGroup": "CG", "topic": "T", "queueId": "1", "commitOffset": "1"}, updates)
        self.assertEqual(self.pulls(1)[-1]["sysFlag"], "7")  # commit flag once an offset is known

    def test_reconsume_later_sends_back(self) -> None:
        """RECONSUME_LATER sends the message back by commit-log offset, and the offset moves on."""
        c = self.consumer()
        self.result = ConsumeResult.RECONSUME_LATER
        msg = self.cluster.publish("broker-a", "T", 0, b"fail")
        self.clock.advance(0)
        [back] = self.cluster.sent_back
        self.assertEqual((back["offset"], back["group"], back["delayLevel"], back["maxReconsumeTimes"]),
                         (str(msg.commit_log_offset), "CG", "0", "16"))
        self.assertEqual(c.offset_store.read(MessageQueue("T", "broker-a", 0)), 1)

    def test_send_back_falls_back_to_retry_topic(self) -> None:
        """When CONSUMER_SEND_MSG_BACK fails, the message is republished to %RETRY%CG."""
        self.remoting.on(RequestCode.CONSUMER_SEND_MSG_BACK, lambda a, r, t: response(1, "boom"))
        self.consumer()
        outcomes = [ConsumeResult.RECONSUME_LATER]
        self.result = lambda: outcomes.pop() if outcomes else ConsumeResult.CONSUME_SUCCESS
        self.cluster.publish("broker-a", "T", 0, b"fail", UNIQ_KEY="U1")
        self.clock.advance(0)
        sends = [expand_send_v2(r.ext_fields) for _, r in self.remoting.sent(RequestCode.SEND_MESSAGE_V2)]
        retry = [f for f in sends if f["topic"] == "%RETRY%CG"][0]
        props = string_to_properties(retry["properties"])
        self.assertEqual((props["RETRY_TOPIC"], props["ORIGIN_MESSAGE_ID"], props["DELAY"]), ("T", "U1", "3"))
        self.assertEqual((retry["reconsumeTimes"], retry["maxReconsumeTimes"]), ("1", "16"))
        self.assertEqual(self.received[-1], ("T", b"fail", 0))  # redelivered from %RETRY%CG as topic T

    def test_failed_send_back_reconsumed_locally(self) -> None:
        """If both send-back paths fail, the message stays cached and is consumed again 5 s later."""
        self.remoting.on(RequestCode.CONSUMER_SEND_MSG_BACK, lambda a, r, t: response(1, "boom"))
        self.cluster.brokers["broker-a"].send_script = [RemotingConnectError("a", "down")] * 3
        c = self.consumer()
        self.result = ConsumeResult.RECONSUME_LATER
        self.cluster.publish("broker-a", "T", 0, b"again")
        self.clock.advance(0)
        self.assertEqual(len(self.received), 1)
        self.assertEqual(c.offset_store.read(MessageQueue("T", "broker-a", 0)), 0)  # held at the failed message
        self.result = ConsumeResult.CONSUME_SUCCESS
        self.clock.advance(5)
        self.assertEqual(len(self.received), 2)
        self.assertEqual(c.offset_store.read(MessageQueue("T", "broker-a", 0)), 1)

    def test_retry_topic_restored(self) -> None:
        """Messages from %RETRY%CG reach the listener under their original topic."""
        self.consumer()
        self.cluster.publish("broker-a", "%RETRY%CG", 0, b"retried", RETRY_TOPIC="T")
        self.clock.advance(0)
        self.assertIn(("T", b"retried", 0), self.received)

    def test_flow_control(self) -> None:
        """Over the cached-message threshold the queue stops pulling until messages are consumed."""
        pending: list[Deferred[ConsumeResult]] = []
        self.result = lambda: _new_pending(pending)
        self.consumer(pull_threshold_for_queue=2, pull_batch_size=2)
        for i in range(6):
            self.cluster.publish("broker-a", "T", 0, b"m%d" % i)
        self.clock.advance(0)
        self.assertEqual(len(self.received), 4)  # two pulls of 2, then paused at 4 > 2 cached
        before = len(self.pulls(0))
        self.clock.advance(1)
        self.assertEqual(len(self.pulls(0)), before)
        for d in pending:
            d.callback(ConsumeResult.CONSUME_SUCCESS)
        self.clock.advance(0.05)
        self.assertEqual(len(self.received), 6)


class RebalanceTests(PushTestCase):
    def test_allocation_and_periodic_rebalance(self) -> None:
        """Queues are shared averagely; a new member 20 s later takes half, and offsets of given-up queues persist."""
        c = self.consumer()
        t_queues = lambda: sorted(mq.queue_id for mq in c.rebalancer.process_queues if mq.topic == "T")  # noqa: E731
        self.assertEqual(t_queues(), [0, 1])
        self.cluster.publish("broker-a", "T", 1, b"x")
        self.clock.advance(0)
        self.cluster.consumer_ids = ["me", "other"]
        self.clock.advance(20)
        self.assertEqual(t_queues(), [0])
        updates = [r.ext_fields for _, r in self.remoting.sent(RequestCode.UPDATE_CONSUMER_OFFSET)]
        self.assertIn({"consumerGroup": "CG", "topic": "T", "queueId": "1", "commitOffset": "1"}, updates)

    def test_notify_consumer_ids_changed(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (code 40) from a broker rebalances at once."""
        c = self.consumer()
        self.cluster.consumer_ids = ["a-first", "me"]
        processor = self.remoting.processors[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
        request = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG"})
        self.assertIsNone(processor.process_request(None, request))
        self.assertEqual(sorted(mq.queue_id for mq in c.rebalancer.process_queues if mq.topic == "T"), [1])


class OrderlyTests(PushTestCase):
    def test_locks_and_one_at_a_time(self) -> None:
        """Orderly: queues are locked before pulling, consumed one message at a time, unlocked at shutdown."""
        self.cluster.locks[("T", "broker-a", 1)] = "someone-else"
        pending: list[Deferred[ConsumeResult]] = []
        self.result = lambda: _new_pending(pending)
        c = self.consumer(start=False, orderly=True)
        self.successResultOf(c.start())
        self.assertEqual(sorted(mq.queue_id for mq in c.rebalancer.process_queues if mq.topic == "T"), [0])
        self.assertEqual(self.pulls(1), [])
        self.cluster.publish("broker-a", "T", 0, b"1")
        self.cluster.publish("broker-a", "T", 0, b"2")
        self.clock.advance(0)
        self.assertEqual([b for _, b, _ in self.received], [b"1"])
        pending[0].callback(ConsumeResult.CONSUME_SUCCESS)
        self.assertEqual([b for _, b, _ in self.received], [b"1", b"2"])
        locks = len(self.remoting.sent(RequestCode.LOCK_BATCH_MQ))
        self.clock.advance(20)
        self.assertGreater(len(self.remoting.sent(RequestCode.LOCK_BATCH_MQ)), locks)
        pending[1].callback(ConsumeResult.CONSUME_SUCCESS)
        self.stop(c)
        self.assertEqual(self.cluster.locks, {("T", "broker-a", 1): "someone-else"})

    def test_orderly_retry_in_place(self) -> None:
        """RECONSUME_LATER in orderly mode retries the same message after a pause, no send-back."""
        self.result = ConsumeResult.RECONSUME_LATER
        self.consumer(orderly=True)
        self.cluster.publish("broker-a", "T", 0, b"1")
        self.clock.advance(0)
        self.result = ConsumeResult.CONSUME_SUCCESS
        self.clock.advance(1)
        self.assertEqual([b for _, b, _ in self.received], [b"1", b"1"])
        self.assertEqual(self.cluster.sent_back, [])


class OffsetIllegalTests(PushTestCase):
    def test_offset_moved(self) -> None:
        """OFFSET_ILLEGAL drops the queue, stores the broker's next offset after 10 s; rebalance re-adds it."""
        self.cluster.brokers["broker-a"].offsets[("CG", "T", 0)] = 9
        self.cluster.publish("broker-a", "T", 0, b"a")
        c = self.consumer()
        mq = MessageQueue("T", "broker-a", 0)
        self.assertTrue(c.rebalancer.process_queues[mq].dropped)
        self.clock.advance(10)
        self.assertNotIn(mq, c.rebalancer.process_queues)
        self.assertEqual(self.cluster.brokers["broker-a"].offsets[("CG", "T", 0)], 1)
        self.clock.advance(10)
        self.assertIn(mq, c.rebalancer.process_queues)
        self.assertEqual(self.pulls(0)[-1]["queueOffset"], "1")
        self.assertEqual(self.received, [])


class OrderlyDeadLetterTests(PushTestCase):
    def test_orderly_gives_up_after_max_reconsume_times(self) -> None:
        """Orderly with max_reconsume_times=1: the second failure sends the message to the DLQ and moves on."""
        self.result = ConsumeResult.RECONSUME_LATER
        c = self.consumer(orderly=True, max_reconsume_times=1)
        self.cluster.publish("broker-a", "T", 0, b"poison")
        self.cluster.publish("broker-a", "T", 0, b"next")
        self.clock.advance(0)
        self.assertEqual(self.cluster.sent_back, [])
        self.result = lambda: (ConsumeResult.CONSUME_SUCCESS if self.received[-1][1] == b"next"
                               else ConsumeResult.RECONSUME_LATER)
        self.clock.advance(1)
        [back] = self.cluster.sent_back
        self.assertEqual((back["delayLevel"], back["maxReconsumeTimes"]), ("-1", "1"))
        self.assertEqual([b for _, b, _ in self.received], [b"poison", b"poison", b"next"])
        self.assertEqual(c.offset_store.read(MessageQueue("T", "broker-a", 0)), 2)


class ListenerResultTests(PushTestCase):
    def test_exception_and_bad_value_mean_reconsume_later(self) -> None:
        """A listener that raises, or returns something else than a ConsumeResult, gets its message sent back."""
        outcomes: list[Any] = [None, ValueError("bug")]

        def result() -> Any:
            outcome = outcomes.pop()
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        self.result = result
        self.consumer()
        self.cluster.publish("broker-a", "T", 0, b"a")
        self.cluster.publish("broker-a", "T", 0, b"b")
        self.clock.advance(0)
        self.assertEqual(len(self.cluster.sent_back), 2)
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_coroutine_listener(self) -> None:
        """An async def listener is awaited."""
        async def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            self.received.extend((m.topic, m.body, m.queue_offset) for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        c = self.consumer(start=False)
        c.register_listener(listener)
        self.successResultOf(c.start())
        self.addCleanup(self.stop, c)
        self.cluster.publish("broker-a", "T", 0, b"co")
        self.clock.advance(0)
        self.assertEqual(self.received, [("T", b"co", 0)])
        self.assertEqual(self.cluster.sent_back, [])


class BroadcastingTests(PushTestCase):
    """Broadcasting: every queue, offsets this client's own, kept in a local file across restarts."""

    def broadcast(self, directory: str | None, **kwargs: Any) -> PushConsumer:
        return self.consumer(message_model=MessageModel.BROADCASTING, local_offset_dir=directory, **kwargs)

    def test_offsets_survive_a_restart(self) -> None:
        directory = self.mktemp()
        path = os.path.join(directory, "me", "CG", "offsets.json")  # client_id "me"
        c = self.broadcast(directory, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.cluster.publish("broker-a", "T", 0, b"one")
        self.cluster.publish("broker-a", "T", 0, b"two")
        self.clock.advance(5)
        with open(path, "rb") as f:
            written = decode_offsets(f.read())
        self.assertEqual(written[MessageQueue("T", "broker-a", 0)], 2)
        self.assertEqual(self.remoting.sent(RequestCode.UPDATE_CONSUMER_OFFSET, "oneway"), [])
        self.stop(c)
        self.cluster.publish("broker-a", "T", 0, b"three")
        self.received.clear()
        self.broadcast(directory, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.assertEqual(self.received, [("T", b"three", 2)])

    def test_memory_only_or_unreadable_file(self) -> None:
        """No directory: nothing is written; a damaged file: a warning, and consume-from-where rules."""
        directory = self.mktemp()
        self.cluster.publish("broker-a", "T", 0, b"old")
        self.stop(self.broadcast(None, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET))
        self.assertFalse(os.path.exists(directory))
        os.makedirs(os.path.join(directory, "me", "CG"))
        with open(os.path.join(directory, "me", "CG", "offsets.json"), "wb") as f:
            f.write(b"{not json")
        self.received.clear()
        self.broadcast(directory, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.assertEqual(self.received, [("T", b"old", 0)])

    def test_file_format(self) -> None:
        offsets = {MessageQueue("T", "b", 1): 7, MessageQueue("A", "b", 0): 3}
        data = encode_offsets(offsets)
        self.assertEqual(json.loads(data)["offsetTable"][0], {"brokerName": "b", "offset": 3, "queueId": 0, "topic": "A"})
        self.assertEqual(decode_offsets(data), offsets)
        self.assertEqual(decode_offsets(None), {})
        for bad in (b"[]", b'{"offsetTable":[{"topic":"T"}]}', b"\xff"):
            self.assertRaises(ValueError, decode_offsets, bad)


class ResetOffsetTests(PushTestCase):
    """RESET_CONSUMER_CLIENT_OFFSET (220) from a broker: the queue is taken again from the new offset."""

    def tell(self, c: PushConsumer, body: bytes, group: str = "CG") -> None:
        processor = cast(FakeRemotingClient, c.instance.remoting).processors[RequestCode.RESET_CONSUMER_CLIENT_OFFSET]
        ext = {"topic": "T", "group": group, "timestamp": "0"}
        request = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext, body, language="JAVA")
        self.assertIsNone(processor.process_request(None, request))  # oneway: no reply
        self.clock.advance(0)

    def test_consumes_again_from_the_new_offset(self) -> None:
        c = self.consumer(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        for i in range(4):
            self.cluster.publish("broker-a", "T", 0, b"m%d" % i)
        self.clock.advance(0)
        self.assertEqual([b for _, b, _ in self.received], [b"m0", b"m1", b"m2", b"m3"])
        self.received.clear()
        other = MessageQueue("T", "broker-a", 1)
        pulls_of_other = len(self.pulls(1))
        self.tell(c, b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:1}}')
        self.assertEqual([b for _, b, _ in self.received], [b"m1", b"m2", b"m3"])
        commits = [r.ext_fields for _, r in self.remoting.sent(RequestCode.UPDATE_CONSUMER_OFFSET, "oneway")]
        self.assertIn({"consumerGroup": "CG", "topic": "T", "queueId": "0", "commitOffset": "1"}, commits)
        self.assertIn(other, c.rebalancer.process_queues)
        self.assertEqual(len(self.pulls(1)), pulls_of_other, "a queue not named keeps its pull")

    def test_cpp_body_other_group_and_bad_body(self) -> None:
        c = self.consumer(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.cluster.publish("broker-a", "T", 1, b"x")
        self.clock.advance(0)
        self.received.clear()
        cpp = b'{"offsetTable":[{"brokerName":"broker-a","offset":0,"queueId":1,"topic":"T"}]}'
        self.tell(c, cpp, group="OTHER")
        self.tell(c, b"{broken")
        self.assertEqual(self.received, [])
        self.tell(c, cpp)
        self.assertEqual(self.received, [("T", b"x", 0)])
