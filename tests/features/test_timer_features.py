"""Timer messages end to end: rocketpy's Producer with RocketMQ 5's timer properties against a loopback
broker, a refusal, and a broker restart with a timer pending."""

from __future__ import annotations

import time

from rocketpy.client import Producer, new_message
from rocketpy.client.results import SendResult
from rocketpy.client.errors import MQBrokerError
from rocketpy.common.message import MessageConst
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.codes import ResponseCode
from tests.features.test_features import FeatureTestCase, until


def _now_ms() -> int:
    return int(time.time() * 1000)


async def send_soon_and_later(p: Producer, topic: str, soon: bytes, soon_ms: int, later: bytes,
                              later_s: int) -> SendResult:
    """Two timer messages to one queue of ``topic``: ``soon`` due in ``soon_ms`` ms, ``later`` in
    ``later_s`` s; the first one's send result."""
    first = new_message(topic, soon)
    first.properties[MessageConst.TIMER_DELAY_MS] = str(soon_ms)
    sent = await p.send(first)
    second = new_message(topic, later)
    second.properties[MessageConst.TIMER_DELAY_SEC] = str(later_s)
    await p.send_to_queue(second, sent.queue)
    return sent


class TimerFeatureTests(FeatureTestCase):
    async def test_producer_timer_properties(self) -> None:
        """TIMER_DELIVER_MS to a chosen queue: the send answers at once, the message reaches that queue not
        before its time with Java's properties; a timer 4 days ahead is refused (13, Java's remark)."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        deliver_ms = _now_ms() + 1200
        msg = new_message("Timed", b"at", tags="TagA", keys="k1")
        msg.properties[MessageConst.TIMER_DELIVER_MS] = str(deliver_ms)
        first = await p.send(new_message("Timed", b"warm-up"))
        queue = MessageQueue(first.queue.topic, first.queue.broker_name, (first.queue.queue_id + 1) % 4)
        sent = await p.send_to_queue(msg, queue)
        self.assertTrue(sent.msg_id)
        store = cluster.brokers["broker-a"].store
        self.assertEqual(store.get_max_offset_in_queue("Timed", queue.queue_id), 0)
        await until(lambda: store.get_max_offset_in_queue("Timed", queue.queue_id) == 1, "delivery", rounds=600)
        [got] = [m for m in await self.pull_all(cluster, "Timed") if m.body == b"at"]
        self.assertEqual(got.queue_id, queue.queue_id)
        self.assertGreaterEqual(got.store_timestamp, deliver_ms)
        props = got.properties
        self.assertEqual((props[MessageConst.TIMER_DELIVER_MS], props[MessageConst.TAGS], props[MessageConst.KEYS]),
                         (str(deliver_ms), "TagA", "k1"))
        for added in (MessageConst.TIMER_OUT_MS, MessageConst.TIMER_ENQUEUE_MS, MessageConst.TIMER_DEQUEUE_MS):
            self.assertIn(added, props)
        self.assertNotIn(MessageConst.REAL_TOPIC, props)
        far = new_message("Timed", b"far")
        far.properties[MessageConst.TIMER_DELAY_SEC] = str(4 * 86400)
        with self.assertRaises(MQBrokerError) as refused:
            await p.send(far)
        self.assertEqual(refused.exception.code, ResponseCode.MESSAGE_ILLEGAL)
        self.assertIn("max delay 259200000ms", refused.exception.remark or "")

    async def test_batch(self) -> None:
        """A batch (SEND_BATCH_MESSAGE) whose messages ask for different times: each waits for its own."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        now = _now_ms()
        msgs = [new_message("TimedB", b"b%d" % i) for i in range(3)]
        msgs[0].properties[MessageConst.TIMER_DELIVER_MS] = str(now + 1500)
        msgs[1].properties[MessageConst.TIMER_DELAY_MS] = "500"  # due first
        await p.send_batch(msgs)  # the third has no timer: stored at once
        broker = cluster.brokers["broker-a"]
        await until(lambda: broker.timer.backlog() == 0, "both delivered", rounds=600)
        stored = {m.body: m.store_timestamp for m in await self.pull_all(cluster, "TimedB")}
        self.assertEqual(sorted(stored), [b"b0", b"b1", b"b2"])
        # a loaded machine may deliver both timers in one millisecond: compare times, not a sorted order
        self.assertLessEqual(stored[b"b2"], stored[b"b1"])
        self.assertLessEqual(stored[b"b1"], stored[b"b0"])
        self.assertGreaterEqual(stored[b"b1"], now + 500)
        self.assertGreaterEqual(stored[b"b0"], now + 1500)

    async def test_restart_with_a_timer_pending(self) -> None:
        """A broker stopped with one timer delivered and one pending delivers each exactly once after
        its restart on the same store."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        sent = await send_soon_and_later(p, "TimedR", b"first", 500, b"second", 2)
        store = cluster.brokers["broker-a"].store
        queue_id = sent.queue.queue_id
        await until(lambda: store.get_max_offset_in_queue("TimedR", queue_id) == 1, "first delivery", rounds=600)
        await self.restart(cluster)
        broker = cluster.brokers["broker-a"]
        await until(lambda: broker.store.get_max_offset_in_queue("TimedR", queue_id) == 2, "second delivery",
                    rounds=600)
        await until(lambda: broker.timer.backlog() == 0, "nothing pending")
        await cluster.wait_for_route("TimedR")
        self.assertEqual(await self.bodies(cluster, "TimedR"), [b"first", b"second"])
