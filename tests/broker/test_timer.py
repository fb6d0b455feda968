"""Timer messages on a real store and a Clock: parking, delivery in time order, refusals, cancel,
checkpoint and restart (clean and after a crash), and rolling long-pending entries."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.timer import TimerCheckpoint, TimerMessageService
from rocketpy.common.message import MessageConst, MessageExt, decode_record
from rocketpy.common.topic import TIMER_TOPIC
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from rocketpy.store.timer import delete_key
from tests.broker.featurestore import T0, new_clock, open_store, put, read_queue

NOW_MS = int(T0 * 1000)


def timed(body: bytes, *props: dict[str, str]) -> MessageExt:
    """A message for queue 1 of Orders with these properties."""
    properties = {MessageConst.KEYS: "k", MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: body.hex()}
    for more in props:
        properties.update(more)
    return MessageExt(topic="Orders", body=body, queue_id=1, properties=properties)


def at(ms: int) -> dict[str, str]:
    return {MessageConst.TIMER_DELIVER_MS: str(ms)}


class TimerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.root = self.mktemp()
        self.store = self.open()
        self.path = os.path.join(self.root, "config", "timerCheckpoint.json")

    def open(self, **overrides: Any) -> StoreService:
        """The store, flushing whatever was written every 0.5 s (deliveries count once flushed)."""
        return open_store(self, self.clock, self.root, flush_commit_log_least_pages=0, **overrides)

    def service(self, roll_span: int = 100_000) -> TimerMessageService:
        service = TimerMessageService(self.store, self.clock, TimerCheckpoint(self.path), roll_span)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        return service

    def send(self, msg: MessageExt) -> PutMessageResult:
        return self.successResultOf(self.store.put_message(msg))

    def bodies(self, topic: str = "Orders", queue_id: int = 1) -> list[bytes]:
        out: list[bytes] = []
        while True:
            found = self.successResultOf(self.store.get_message("T", topic, queue_id, len(out), 32))
            if not found.records:
                return out
            out += [decode_record(r).body for r in found.records]

    def restart_store(self) -> None:
        self.successResultOf(self.store.stopService())
        self.store = self.open()

    # -- the store's part ---------------------------------------------------

    def test_parked_on_the_timer_topic(self) -> None:
        """TIMER_DELIVER_MS in 5.5 s: queue 0 of rmq_sys_wheel_timer, TIMER_OUT_MS the second before,
        REAL_TOPIC/REAL_QID set, tags code the due time; the send result names the timer queue."""
        result = put(self, self.store, timed(b"a", at(NOW_MS + 5500)))
        [parked] = read_queue(self, self.store, TIMER_TOPIC, 0)
        self.assertEqual(parked.properties[MessageConst.TIMER_OUT_MS], str(NOW_MS + 5000))
        self.assertEqual(parked.properties[MessageConst.REAL_TOPIC], "Orders")
        self.assertEqual(parked.properties[MessageConst.REAL_QUEUE_ID], "1")
        assert result.append is not None
        self.assertEqual(result.append.queue_offset, 0)
        found = self.successResultOf(self.store.query_consume_queue(TIMER_TOPIC, 0, 0, 1))
        assert found is not None and found[2] is not None
        self.assertEqual(found[2][0][2], NOW_MS + 6000)  # due when Java's wheel reaches the slot
        self.assertEqual(self.bodies(), [])

    def test_exact_second_is_due_on_time(self) -> None:
        """A delivery time on a whole second is due at that very time (Java's slot rule)."""
        put(self, self.store, timed(b"a", at(NOW_MS + 3000)))
        [parked] = read_queue(self, self.store, TIMER_TOPIC, 0)
        self.assertEqual(parked.properties[MessageConst.TIMER_OUT_MS], str(NOW_MS + 2000))

    def test_past_time_is_stored_at_once(self) -> None:
        """A delivery time not in the future goes straight to its topic, properties kept."""
        put(self, self.store, timed(b"now", at(NOW_MS)))
        [msg] = read_queue(self, self.store, "Orders", 1)
        self.assertEqual(msg.properties[MessageConst.TIMER_DELIVER_MS], str(NOW_MS))
        self.assertNotIn(MessageConst.TIMER_OUT_MS, msg.properties)

    def test_refusals(self) -> None:
        """Beyond timerMaxDelaySec (3 days), a malformed value, a cancel in the past: WHEEL_TIMER_MSG_ILLEGAL
        with Java's remark; with timerWheelEnable false: WHEEL_TIMER_NOT_ENABLE."""
        three_days = 3 * 86400 * 1000
        for props in (at(NOW_MS + three_days + 1), {MessageConst.TIMER_DELAY_SEC: "x"},
                      {MessageConst.TIMER_DELAY_MS: str(three_days + 1)},
                      {**at(NOW_MS - 1), MessageConst.TIMER_DEL_UNIQKEY: "Orders+x"}):
            result = self.send(timed(b"a", props))
            self.assertEqual(result.status, PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, props)
            self.assertIn("the max delay 259200000ms", result.remark or "")
        self.assertEqual(self.send(timed(b"ok", at(NOW_MS + three_days))).status, PutMessageStatus.PUT_OK)
        self.restart_store_with(timer_wheel_enable=False)
        result = self.send(timed(b"a", at(NOW_MS + 1000)))
        self.assertEqual(result.status, PutMessageStatus.WHEEL_TIMER_NOT_ENABLE)
        self.assertEqual(result.remark, "accurate timer message is not enabled, timerWheelEnable is false")

    def restart_store_with(self, **overrides: Any) -> None:
        self.successResultOf(self.store.stopService())
        self.store = self.open(**overrides)

    def test_delay_level_wins(self) -> None:
        """With DELAY set the timer properties are dropped and the delay level applies (Java)."""
        put(self, self.store, timed(b"a", at(NOW_MS + 5000), {MessageConst.DELAY_TIME_LEVEL: "1"}))
        self.assertEqual(read_queue(self, self.store, TIMER_TOPIC, 0), [])
        [parked] = read_queue(self, self.store, "SCHEDULE_TOPIC_XXXX", 0)
        self.assertNotIn(MessageConst.TIMER_DELIVER_MS, parked.properties)

    def test_half_message_is_not_parked(self) -> None:
        """A PREPARED (half) message keeps its timer for the commit."""
        msg = timed(b"half", at(NOW_MS + 5000))
        msg.sys_flag = 0x4
        put(self, self.store, msg)
        self.assertEqual(read_queue(self, self.store, TIMER_TOPIC, 0), [])

    # -- the service --------------------------------------------------------------

    def test_delivered_when_due_in_time_order(self) -> None:
        """Messages sent in any order reach their real queue in due-time order, not before their time;
        TIMER_DELAY_SEC and TIMER_DELAY_MS count from the store time."""
        put(self, self.store, timed(b"c", at(NOW_MS + 7000)))
        put(self, self.store, timed(b"a", {MessageConst.TIMER_DELAY_SEC: "3"}))
        put(self, self.store, timed(b"b", {MessageConst.TIMER_DELAY_MS: "5000"}))
        self.service()
        self.clock.advance(2.999)
        self.assertEqual(self.bodies(), [])
        self.clock.advance(0.001)
        self.assertEqual(self.bodies(), [b"a"])
        self.clock.advance(1.999)
        self.assertEqual(self.bodies(), [b"a"])
        self.clock.advance(0.001)
        self.assertEqual(self.bodies(), [b"a", b"b"])
        self.clock.advance(2.0)
        self.assertEqual(self.bodies(), [b"a", b"b", b"c"])

    def test_delivered_properties(self) -> None:
        """As Java's TimerMessageStore.convert leaves them: REAL_* gone, TIMER_OUT_MS kept,
        TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS added, WAIT false, user properties and tags kept."""
        msg = timed(b"a", at(NOW_MS + 2000), {MessageConst.TAGS: "TagA", "user": "v"})
        put(self, self.store, msg)
        self.service()
        self.clock.advance(2.0)
        [got] = read_queue(self, self.store, "Orders", 1)
        props = got.properties
        self.assertNotIn(MessageConst.REAL_TOPIC, props)
        self.assertNotIn(MessageConst.REAL_QUEUE_ID, props)
        self.assertEqual(props[MessageConst.TIMER_DELIVER_MS], str(NOW_MS + 2000))
        self.assertEqual(props[MessageConst.TIMER_OUT_MS], str(NOW_MS + 1000))
        self.assertEqual(props[MessageConst.TIMER_ENQUEUE_MS], str(NOW_MS))
        self.assertEqual(props[MessageConst.TIMER_DEQUEUE_MS], str(NOW_MS + 2000))
        self.assertEqual(props[MessageConst.WAIT_STORE_MSG_OK], "false")
        self.assertEqual((props[MessageConst.TAGS], props["user"], props[MessageConst.KEYS]), ("TagA", "v", "k"))
        self.assertEqual(got.queue_id, 1)

    def test_two_days_ahead(self) -> None:
        """A timer 2 days ahead (beyond the 18 delay levels) is delivered then, not a second before."""
        put(self, self.store, timed(b"later", at(NOW_MS + 2 * 86400 * 1000)))
        service = self.service()
        self.assertEqual(service.backlog(), 1)
        self.clock.pump([3600.0] * 47 + [3599.0])
        self.assertEqual(self.bodies(), [])
        self.clock.advance(1.0)
        self.assertEqual(self.bodies(), [b"later"])
        self.assertEqual(service.backlog(), 0)

    def test_cancel(self) -> None:
        """A TIMER_DEL_UNIQKEY message for the same time cancels the message (RecallMessage)."""
        put(self, self.store, timed(b"keep", at(NOW_MS + 2000)))
        put(self, self.store, timed(b"drop", at(NOW_MS + 2000)))
        put(self, self.store, timed(b"x", at(NOW_MS + 2000),
                                    {MessageConst.TIMER_DEL_UNIQKEY: delete_key("Orders", b"drop".hex())}))
        service = self.service()
        self.clock.advance(2.0)
        self.assertEqual(self.bodies(), [b"keep"])
        self.assertEqual(service.cancelled, 1)

    def test_clean_restart(self) -> None:
        """Stop with one delivered and one pending: after a restart only the pending one comes."""
        put(self, self.store, timed(b"first", at(NOW_MS + 1000)))
        put(self, self.store, timed(b"second", at(NOW_MS + 60_000)))
        service = self.service()
        self.clock.advance(1.0)
        self.successResultOf(service.stopService())
        with open(self.path) as f:
            self.assertEqual(json.load(f)["lowOffset"], 1)
        timer_calls = [c for c in self.clock.getDelayedCalls() if "TimerMessageService" in repr(c)]
        self.assertEqual(timer_calls, [])  # neither the delivery timer nor the checkpoint loop is left
        self.restart_store()
        with capturedLogs() as events:
            self.service()
        [recovered] = [e for e in events if "pending, read from" in e["log_format"]]
        self.assertEqual((recovered["pending"], recovered["start"], recovered["end"]), (1, 1, 2))
        self.clock.pump([1.0] * 60)
        self.assertEqual(self.bodies(), [b"first", b"second"])

    def test_checkpoint_beyond_the_queue(self) -> None:
        """A checkpoint from an older store (its files deleted, config kept) does not hide new timers."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w") as f:
            json.dump({"lowOffset": 50, "scanOffset": 60, "pendingFromMs": 0, "pendingFromOffset": 0}, f)
        put(self, self.store, timed(b"new", at(NOW_MS + 1000)))
        self.service()
        self.clock.advance(1.0)
        self.assertEqual(self.bodies(), [b"new"])

    def test_crash_loses_nothing(self) -> None:
        """A crash (no final checkpoint) after the last 1 s write: what was pending then comes, and what
        was parked since; what was delivered before that write does not come again; what was
        delivered after it comes again (at least once)."""
        for i in range(5):
            put(self, self.store, timed(b"m%d" % i, at(NOW_MS + 1000 * (i + 1))))
        self.clock.advance(0.7)
        crashed = self.service()  # checkpoints at 1.7 s, 2.7 s, …; the store flushes every 0.5 s
        self.clock.pump([0.1] * 15)  # m0 delivered at 1 s and flushed, checkpoint at 1.7 s, m1 delivered at 2 s
        self.assertEqual(self.bodies(), [b"m0", b"m1"])
        crashed._loop.stop()  # the process dies: nothing more is written, nothing more delivered
        crashed.running = 0
        put(self, self.store, timed(b"new", at(NOW_MS + 4000)))
        self.restart_store()
        self.service()
        self.clock.pump([0.5] * 10)
        self.assertEqual(self.bodies(), [b"m0", b"m1", b"m1", b"m2", b"m3", b"new", b"m4"])

    def test_roll_bounds_recovery(self) -> None:
        """A message pending for a day under many delivered ones is re-parked at the queue's end:
        the checkpoint's low offset moves past the delivered history and the message still comes."""
        put(self, self.store, timed(b"day", at(NOW_MS + 86400 * 1000)))
        for i in range(40):
            put(self, self.store, timed(b"s%d" % i, at(NOW_MS + 1000)))
        service = self.service(roll_span=10)
        self.clock.pump([0.5] * 8)
        self.assertEqual(service.rolled, 1)
        with open(self.path) as f:
            self.assertEqual(json.load(f)["lowOffset"], 41)  # the copy
        found = self.successResultOf(self.store.get_message("T", TIMER_TOPIC, 0, 41, 1))
        copy = decode_record(found.records[0])
        self.assertEqual(copy.properties[MessageConst.TIMER_ROLL_TIMES], "1")
        self.successResultOf(service.stopService())
        self.restart_store()
        self.service(roll_span=10)
        self.clock.pump([3600.0] * 24)
        self.assertEqual(self.bodies()[-1:], [b"day"])
        self.assertEqual(len(self.bodies()), 41)

    def test_refused_put_is_retried(self) -> None:
        """While the real topic's puts are refused the message stays pending and comes once they work."""
        put(self, self.store, timed(b"a", at(NOW_MS + 1000)))
        real_put_many = self.store.put_many
        refusing = [True]

        def put_many(puts: Any) -> Any:
            if refusing[0]:
                from twisted.internet.defer import succeed
                return succeed([PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY) for _ in puts])
            return real_put_many(puts)

        self.store.put_many = put_many  # type: ignore[method-assign]
        service = self.service()
        self.clock.pump([0.1] * 20)
        self.assertEqual((self.bodies(), service.backlog()), ([], 1))
        refusing[0] = False
        self.clock.advance(0.1)
        self.assertEqual(self.bodies(), [b"a"])
