"""POP consumption on a real store with a Clock: invisibility, redelivery, acks, offsets, DLQ, long polls."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.filter import build_tag_filter
from rocketpy.broker.offsets import ConsumerOffsetManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.topic import TopicConfig
from rocketpy.grpc.checkpoint import PopCheckpoint
from rocketpy.grpc.pop import PopService, Received
from rocketpy.grpc.receipts import AckOutcome, Lease, ReceiptTable
from rocketpy.util.configfile import ConfigFileError
from tests.broker.featurestore import new_clock, open_store, put, read_queue

ALL = build_tag_filter("*")


class ReceiptTableTests(SynchronousTestCase):
    """Leases by handle and by queue, with the outcomes the endpoint maps to status codes."""

    def test_ack_outcomes(self) -> None:
        """A live handle acks once; again it is OK (already acked); expired or garbage is not."""
        table = ReceiptTable()
        lease = table.lease("G", "T", 0, 5, 500, 1, now_ms=1000, invisible_ms=10_000)
        self.assertEqual(table.ack("G", "T", lease.handle, 2000), (AckOutcome.OK, lease))
        self.assertEqual(table.ack("G", "T", lease.handle, 2000), (AckOutcome.OK, None))
        self.assertEqual(table.ack("G", "T", lease.handle, 20_000)[0], AckOutcome.EXPIRED)
        self.assertEqual(table.ack("G", "T", "garbage", 2000)[0], AckOutcome.INVALID)
        self.assertEqual(len(table), 0)

    def test_renew_and_lowest_offset(self) -> None:
        """Renewing gives a new handle (the old one is dead); the lowest offset in flight holds progress."""
        table = ReceiptTable()
        first = table.lease("G", "T", 0, 5, 500, 1, 1000, 10_000)
        table.lease("G", "T", 0, 6, 600, 1, 1000, 10_000)
        old = first.handle
        outcome, renewed = table.renew("G", "T", old, 2000, 60_000)
        self.assertEqual(outcome, AckOutcome.OK)
        assert renewed is not None
        self.assertNotEqual(renewed.handle, old)
        self.assertEqual(renewed.expires_ms, 62_000)
        self.assertEqual(table.ack("G", "T", old, 2000), (AckOutcome.OK, None))  # nothing in flight under it
        self.assertEqual(table.lowest_offset("G", "T", 0), 5)
        table.ack("G", "T", renewed.handle, 3000)
        self.assertEqual(table.lowest_offset("G", "T", 0), 6)
        [due] = table.take_due(20_000)
        self.assertEqual((due.offset, due.reviving), (6, True))
        self.assertEqual(table.take_due(20_000), [])  # being revived: not handed out twice
        self.assertEqual(table.lowest_offset("G", "T", 0), 6)  # still holds progress until revived
        table.remove(due)
        self.assertIsNone(table.lowest_offset("G", "T", 0))

    @given(st.lists(st.tuples(st.sampled_from(["lease", "ack", "renew"]), st.integers(0, 20)), max_size=80))
    @settings(max_examples=150, deadline=None)
    def test_lowest_offset_is_the_smallest_in_flight(self, steps: list[tuple[str, int]]) -> None:
        """Whatever the order of leases, acks and renewals, lowest_offset is the smallest offset in flight."""
        table = ReceiptTable()
        live: dict[int, Lease] = {}
        for op, offset in steps:
            if op == "lease" and offset not in live:
                live[offset] = table.lease("G", "T", 0, offset, offset, 1, 1000, 10_000)
            elif op == "ack" and offset in live:
                table.ack("G", "T", live.pop(offset).handle, 2000)
            elif op == "renew" and offset in live:
                _, renewed = table.renew("G", "T", live[offset].handle, 2000, 10_000)
                assert renewed is not None
                live[offset] = renewed
            self.assertEqual(table.lowest_offset("G", "T", 0), min(live, default=None))

    def test_retry_and_fifo_leases(self) -> None:
        """A retry-topic lease is indexed under the group's retry topic; FIFO leases are never due."""
        table = ReceiptTable()
        retry = table.lease("G", "T", 0, 3, 300, 2, 1000, 10_000, retry=True)
        table.lease("G", "T", 0, 3, 400, 1, 1000, 10_000, orderly=True)
        self.assertEqual(retry.queue_topic, "%RETRY%G_T")
        self.assertEqual(table.lowest_offset("G", "%RETRY%G_T", 0), 3)
        self.assertEqual(table.take_due(20_000, ("G", "T")), [retry])


class PopServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.store = open_store(self, self.clock)
        self.topics = TopicConfigManager(self.clock)
        self.topics.update_topic_config(TopicConfig("T", 2, 2))
        self.offsets = ConsumerOffsetManager()
        self.dead: list[tuple[str, Lease]] = []
        self.pop = PopService(self.clock, self.store, self.topics, self.offsets, self._dead_letter)
        self.pop.listen_to(self.store)  # called only while a receive waits

    def _dead_letter(self, group: str, lease: Lease) -> Deferred[bool]:
        self.dead.append((group, lease))
        return succeed(True)

    def put(self, body: bytes, queue_id: int = 0, tag: str = "A") -> None:
        put(self, self.store, MessageExt(topic="T", body=body, queue_id=queue_id, properties={MessageConst.TAGS: tag}))

    def receive(self, batch: int = 10, max_attempts: int = 0, tag: str = "*") -> Received:
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", batch, 10_000, 0, build_tag_filter(tag), max_attempts))
        return self.successResultOf(d)

    def test_invisible_until_expiry_then_back(self) -> None:
        """A received message is invisible for its duration, then comes back with attempt 2."""
        self.put(b"one")
        self.put(b"two", queue_id=1)
        first = self.receive()
        self.assertEqual(sorted((m.body, lease.attempt) for m, lease in first), [(b"one", 1), (b"two", 1)])
        self.assertEqual(self.receive(), [])
        self.clock.advance(9)
        self.assertEqual(self.receive(), [])
        self.clock.advance(2)
        again = self.receive()
        self.assertEqual(sorted((m.body, lease.attempt) for m, lease in again), [(b"one", 2), (b"two", 2)])

    def test_ack_moves_the_group_offset(self) -> None:
        """The committed offset is the lowest offset in flight; acks move it, acked messages stay gone."""
        for i in range(3):
            self.put(b"m%d" % i)
        got = self.receive()
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 0)
        handles = [lease.handle for _, lease in got]
        self.assertEqual(self.pop.ack("G", "T", handles[1]), AckOutcome.OK)
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 0)
        self.assertEqual(self.pop.ack("G", "T", handles[0]), AckOutcome.OK)
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 2)
        self.pop.ack("G", "T", handles[2])
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 3)
        self.clock.advance(60)
        self.assertEqual(self.receive(), [])
        self.assertEqual(self.pop.ack("G", "T", handles[0]), AckOutcome.EXPIRED)

    def test_tag_filter_and_batch(self) -> None:
        """Only matching tags are leased; skipped ones still move the cursor; a batch is a maximum."""
        self.put(b"a1", tag="A")
        self.put(b"b1", tag="B")
        self.put(b"a2", tag="A")
        self.assertEqual([m.body for m, _ in self.receive(batch=1, tag="A")], [b"a1"])
        self.assertEqual([m.body for m, _ in self.receive(tag="A")], [b"a2"])

    def test_dead_letter_after_max_attempts(self) -> None:
        """A message not acked after the maximum deliveries goes to the DLQ, not back to the consumer:
        its retry-topic copy read once too often is what moves."""
        self.put(b"poison")
        for attempt in (1, 2):
            [(_, lease)] = self.receive(max_attempts=2)
            self.assertEqual(lease.attempt, attempt)
            self.clock.advance(11)
        self.assertEqual(self.receive(max_attempts=2), [])
        self.assertEqual([(group, lease.queue_topic, lease.offset, lease.attempt) for group, lease in self.dead],
                         [("G", "%RETRY%G_T", 1, 3)])
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 1)
        self.assertEqual(self.offsets.query_offset("G", "%RETRY%G_T", 0), 2)
        self.assertEqual(len(self.pop.receipts), 0)

    def test_change_invisible_and_forward(self) -> None:
        """ChangeInvisibleDuration(0) makes a message visible again; forwarding ends its lease."""
        self.put(b"x")
        [(_, lease)] = self.receive()
        outcome, _ = self.pop.change_invisible("G", "T", lease.handle, 0)
        self.assertEqual(outcome, AckOutcome.OK)
        self.clock.advance(0.002)
        [(_, again)] = self.receive()
        self.assertEqual(again.attempt, 2)
        forwarded = self.successResultOf(Deferred.fromCoroutine(
            self.pop.forward_to_dead_letter("G", "T", again.handle)))
        self.assertEqual(forwarded, AckOutcome.OK)
        self.assertEqual(len(self.dead), 1)
        self.clock.advance(60)
        self.assertEqual(self.receive(), [])

    def test_long_poll_woken_by_arrival(self) -> None:
        """A receive with nothing to take waits; a new message answers it before the poll ends."""
        arrival = self.pop._arrival
        self.assertFalse(arrival.wanted, "nothing waits: puts do not call the listener")
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", 10, 10_000, 5_000, ALL))
        self.assertNoResult(d)
        self.assertTrue(arrival.wanted)
        self.put(b"late")
        self.assertEqual([m.body for m, _ in self.successResultOf(d)], [b"late"])
        self.assertFalse(arrival.wanted)
        self.assertEqual([c for c in self.clock.getDelayedCalls() if "timed_out" in repr(c)], [])  # timer gone
        empty = Deferred.fromCoroutine(self.pop.receive("G", "T", 10, 10_000, 5_000, ALL))
        self.clock.advance(4.9)
        self.assertNoResult(empty)
        self.clock.advance(0.2)
        self.assertEqual(self.successResultOf(empty), [])

    def test_auto_renewal_until_acked_or_client_gone(self) -> None:
        """A PushConsumer's lease is renewed under the same handle; it runs out once its client is gone."""
        self.pop.start()
        self.addCleanup(self.pop.stop)
        self.put(b"held")
        self.put(b"acked")
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", 10, 60_000, 0, ALL, renew_for="client-1"))
        leases = {m.body: lease for m, lease in self.successResultOf(d)}
        for _ in range(40):  # 200 s: far past the 60 s invisibility
            self.clock.advance(5)
        self.assertEqual(self.receive(), [])
        self.assertEqual(self.pop.ack("G", "T", leases[b"acked"].handle), AckOutcome.OK)
        self.pop.client_gone("client-1")
        self.clock.advance(61)
        [(msg, lease)] = self.receive()
        self.assertEqual((msg.body, lease.attempt), (b"held", 2))

    def test_checkpoint_survives_a_restart(self) -> None:
        """Leases and cursors written to popReceipts.json come back: old handles ack, unacked ones return."""
        for i in range(3):
            self.put(b"m%d" % i)
        handles = {m.body: lease.handle for m, lease in self.receive()}
        self.pop.ack("G", "T", handles[b"m0"])
        path = self.mktemp()
        self.successResultOf(PopCheckpoint(self.pop, path).persist())

        restarted = PopService(self.clock, self.store, self.topics, self.offsets, self._dead_letter)
        PopCheckpoint(restarted, path).load()
        self.assertEqual(restarted.ack("G", "T", handles[b"m1"]), AckOutcome.OK)
        self.assertEqual(restarted.ack("G", "T", handles[b"m0"]), AckOutcome.OK)  # acked before the restart
        self.pop = restarted
        self.assertEqual(self.receive(), [])  # the cursor was kept: nothing is read twice
        self.clock.advance(11)
        self.assertEqual([(m.body, lease.attempt) for m, lease in self.receive()], [(b"m2", 2)])
        fresh = restarted.receipts.lease("G", "T", 0, 9, 0, 1, restarted.now_ms(), 10_000)
        self.assertNotIn(fresh.handle, handles.values())

    def test_malformed_checkpoint(self) -> None:
        """A checkpoint that is not one is a ConfigFileError (the broker refuses to start on it)."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"leases": [["G", "T", 0, 0, 0, 1, 5, "no-handle", 0]]}')
        self.assertRaises(ConfigFileError, PopCheckpoint(self.pop, path).load)
        with open(path, "w") as f:
            f.write('{"leases": [["G", "T", 0, 0, 0, 1, 5, "5_1_0_0", 0, 1]]}')  # 10 fields: neither old nor new
        self.assertRaises(ConfigFileError, PopCheckpoint(self.pop, path).load)

    def fifo(self, batch: int = 2) -> list[tuple[bytes, int]]:
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", batch, 10_000, 0, ALL, fifo=True))
        return [(m.body, lease.attempt) for m, lease in self.successResultOf(d)]

    def test_fifo_one_batch_in_flight_per_queue(self) -> None:
        """FIFO: a queue gives its next messages only once its batch is acked; expired, the batch
        comes back whole and in order; other queues go on meanwhile."""
        for i in range(5):
            self.put(b"a%d" % i, queue_id=0)
        self.put(b"b0", queue_id=1)
        self.assertEqual(self.fifo(), [(b"a0", 1), (b"a1", 1)])
        self.assertEqual(self.fifo(), [(b"b0", 1)])  # a0, a1 in flight: queue 0 waits, queue 1 goes on
        self.assertEqual(self.fifo(), [])
        [b0] = [lease for lease in self.pop.receipts.leases() if lease.queue_id == 1]
        self.pop.ack("G", "T", b0.handle)
        self.clock.advance(11)
        self.assertEqual(self.fifo(batch=1), [(b"a0", 2), (b"a1", 2)])  # the whole batch, in order
        leases = {lease.offset: lease for lease in self.pop.receipts.leases() if lease.queue_id == 0}
        self.pop.ack("G", "T", leases[0].handle)
        self.assertEqual(self.fifo(), [])  # a1 still in flight
        self.pop.ack("G", "T", leases[1].handle)
        self.assertEqual(self.fifo(batch=10), [(b"a2", 1), (b"a3", 1), (b"a4", 1)])

    def test_fifo_long_poll_woken_by_ack(self) -> None:
        """A FIFO receive waiting on a busy queue is answered when the queue's last lease is acked."""
        self.put(b"x0")
        self.put(b"x1")
        [(_, lease)] = self.successResultOf(Deferred.fromCoroutine(
            self.pop.receive("G", "T", 1, 10_000, 0, ALL, fifo=True)))
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", 1, 10_000, 5_000, ALL, fifo=True))
        self.assertNoResult(d)
        self.pop.ack("G", "T", lease.handle)
        self.assertEqual([m.body for m, _ in self.successResultOf(d)], [b"x1"])

    def test_new_group_starts_at_the_first_message(self) -> None:
        """A group without an offset starts at 0 while the queue still holds its first message."""
        self.put(b"before")
        self.assertEqual([m.body for m, _ in self.receive()], [b"before"])

    def test_expired_lease_revived_into_the_retry_topic(self) -> None:
        """Unacked past its invisibility, a message is copied to %RETRY%<group>_<topic> (one more
        reconsume time, same id, tag and body) by the reviver alone: the original queue's progress
        moves on and the lease table empties; the copy is received as the real topic, attempt 2."""
        self.pop.start()
        self.addCleanup(self.pop.stop)
        put(self, self.store, MessageExt(topic="T", body=b"fails", properties={
            MessageConst.TAGS: "A", MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "ID-1", "user": "u"}))
        self.put(b"next")
        first = dict((m.body, lease) for m, lease in self.receive())
        self.pop.ack("G", "T", first[b"next"].handle)
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 0)  # "fails" in flight holds it
        self.clock.advance(11)  # the reviver runs every second: no receive needed
        self.assertEqual(len(self.pop.receipts), 0)
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 2)
        [copy] = read_queue(self, self.store, "%RETRY%G_T")
        self.assertEqual((copy.body, copy.reconsume_times, copy.tags, copy.properties["user"]),
                         (b"fails", 1, "A", "u"))
        self.assertEqual(copy.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX], "ID-1")
        self.assertEqual(copy.properties[MessageConst.RETRY_TOPIC], "T")
        retry_config = self.topics.select_topic_config("%RETRY%G_T")
        self.assertEqual(retry_config.read_queue_nums if retry_config else None, 1)
        [(msg, lease)] = self.receive()
        self.assertEqual((msg.topic, msg.body, lease.attempt, lease.retry), ("T", b"fails", 2, True))
        self.assertEqual(self.offsets.query_offset("G", "%RETRY%G_T", 0), 0)
        self.assertEqual(self.pop.ack("G", "T", lease.handle), AckOutcome.OK)
        self.assertEqual(self.offsets.query_offset("G", "%RETRY%G_T", 0), 1)
        self.assertEqual(self.pop.ack("G", "T", first[b"fails"].handle), AckOutcome.EXPIRED)

    def test_revived_timer_message_is_not_timed_again(self) -> None:
        """A message the timer delivered keeps its timer properties on the retry topic (it is not parked
        again: TIMER_OUT_MS); one that asked for a timer without going through it loses them."""
        now_ms = self.pop.now_ms()
        put(self, self.store, MessageExt(topic="T", body=b"timed", properties={
            MessageConst.TIMER_DELIVER_MS: str(now_ms - 5), MessageConst.TIMER_OUT_MS: str(now_ms - 100)}))
        put(self, self.store, MessageExt(topic="T", body=b"zero", properties={MessageConst.TIMER_DELAY_SEC: "0"}))
        self.receive()
        self.clock.advance(11)
        self.successResultOf(Deferred.fromCoroutine(self.pop.revive_due()))
        copies = {m.body: m.properties for m in read_queue(self, self.store, "%RETRY%G_T")}
        self.assertEqual(copies[b"timed"][MessageConst.TIMER_DELIVER_MS], str(now_ms - 5))
        self.assertNotIn(MessageConst.TIMER_DELAY_SEC, copies[b"zero"])

    def test_retry_topic_read_first_one_time_in_five(self) -> None:
        """A receive reads the retry topic first when its draw is under 20, else after the queues."""
        self.put(b"old")
        [(_, lease)] = self.receive()
        self.clock.advance(11)
        self.successResultOf(Deferred.fromCoroutine(self.pop.revive_due()))
        self.put(b"new")
        for draw, expected in ((20, [b"new"]), (19, [b"old"])):
            self.pop = PopService(self.clock, self.store, self.topics, ConsumerOffsetManager(), self._dead_letter,
                                  rng=_Draw(draw))
            self.pop.restore({"cursors": [["G", "T", 0, 1]]})
            self.assertEqual([m.body for m, _ in self.receive(batch=1)], expected)

    def test_long_poll_answered_by_a_revived_message(self) -> None:
        """A receive waiting while the group's message is in flight gets it back once it expires."""
        self.put(b"x")
        self.receive()
        d = Deferred.fromCoroutine(self.pop.receive("G", "T", 10, 10_000, 20_000, ALL))
        self.clock.advance(9.9)
        self.assertNoResult(d)
        self.clock.advance(0.2)
        self.assertEqual([(m.body, lease.attempt) for m, lease in self.successResultOf(d)], [(b"x", 2)])

    def test_retry_lease_survives_a_restart(self) -> None:
        """A lease on the retry topic is checkpointed as one: after a restart its ack moves that topic's offset."""
        self.put(b"x")
        self.receive()
        self.clock.advance(11)
        [(_, lease)] = self.receive()
        path = self.mktemp()
        self.successResultOf(PopCheckpoint(self.pop, path).persist())
        restarted = PopService(self.clock, self.store, self.topics, self.offsets, self._dead_letter)
        PopCheckpoint(restarted, path).load()
        self.assertEqual(restarted.ack("G", "T", lease.handle), AckOutcome.OK)
        self.assertEqual(self.offsets.query_offset("G", "%RETRY%G_T", 0), 1)

    def test_checkpoint_from_before_retry_topics(self) -> None:
        """A lease row of 9 fields (a file written before retry topics) is a lease on its own topic."""
        self.pop.restore({"leases": [["G", "T", 0, 4, 400, 1, 5, "5_7_0_4", 0]]})
        [lease] = self.pop.receipts.leases()
        self.assertEqual((lease.queue_topic, lease.offset, lease.retry, lease.orderly), ("T", 4, False, False))

    def test_fifo_leases_not_revived(self) -> None:
        """FIFO leases stay where they are past their expiry (order must hold): no retry topic."""
        self.pop.start()
        self.addCleanup(self.pop.stop)
        self.put(b"f0")
        self.put(b"f1")
        self.assertEqual(self.fifo(), [(b"f0", 1), (b"f1", 1)])
        self.clock.advance(30)
        self.assertEqual(len(self.pop.receipts), 2)
        self.assertIsNone(self.topics.select_topic_config("%RETRY%G_T"))
        self.assertEqual(self.offsets.query_offset("G", "T", 0), 0)
        self.assertEqual(self.fifo(), [(b"f0", 2), (b"f1", 2)])

    def test_retry_topic_name_too_long(self) -> None:
        """When %RETRY%<group>_<topic> would pass 127 characters, an expired message comes back from its
        place, as before there were retry topics (the reviver leaves it to the group's receives)."""
        self.pop.start()
        self.addCleanup(self.pop.stop)
        topic = "L" * 120
        self.topics.update_topic_config(TopicConfig(topic, 1, 1))
        put(self, self.store, MessageExt(topic=topic, body=b"long", properties={MessageConst.TAGS: "A"}))

        def receive() -> list[tuple[bytes, int]]:
            d = Deferred.fromCoroutine(self.pop.receive("G", topic, 10, 10_000, 0, ALL, 2))
            return [(m.body, lease.attempt) for m, lease in self.successResultOf(d)]

        self.assertEqual(receive(), [(b"long", 1)])
        self.clock.advance(12)
        self.assertEqual(len(self.pop.receipts), 1)
        self.assertEqual(receive(), [(b"long", 2)])
        self.assertEqual(self.topics.select_topic_config(f"%RETRY%G_{topic}"), None)
        self.clock.advance(11)
        self.assertEqual(receive(), [])  # delivered twice: to the DLQ
        self.assertEqual([(lease.topic, lease.attempt) for _, lease in self.dead], [(topic, 2)])
        self.assertEqual(self.offsets.query_offset("G", topic, 0), 1)


class _Draw(random.Random):
    """A random source whose every draw is ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__()
        self.value = value

    def randrange(self, *args: Any, **kwargs: Any) -> int:
        return self.value
