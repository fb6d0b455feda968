"""Flush: OffsetWaiters, the periodic flush loops, and SYNC_FLUSH group commit."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.flush import CommitLogFlush
from rocketpy.store.groupcommit import OffsetWaiters
from rocketpy.store.status import PutMessageStatus
from tests.fakes import PAGE, RECORD_OVERHEAD
from tests.store.fakes import ManualPool, make_service, make_stepped_service, message


def _body(pages: int) -> bytes:
    """A body whose fake record fills exactly ``pages`` pages."""
    return b"x" * (pages * PAGE - RECORD_OVERHEAD)


class OffsetWaitersTests(SynchronousTestCase):
    """The reusable offset-keyed waiter list."""

    def test_advance_fires_covered_waiters(self) -> None:
        """advance(p) fires exactly the waiters at offsets <= p, each once, with True."""
        waiters = OffsetWaiters()
        fired: list[tuple[int, bool]] = []

        def record(ok: bool, offset: int) -> None:
            fired.append((offset, ok))

        for offset in (30, 10, 20):
            waiters.add(offset, 100.0).addCallback(record, offset)
        self.assertEqual(waiters.advance(20), 2)
        self.assertEqual(fired, [(10, True), (20, True)])
        self.assertEqual(waiters.advance(20), 0)
        self.assertEqual(len(waiters), 1)
        waiters.advance(35)
        self.assertEqual(fired[-1], (30, True))
        self.assertEqual(len(waiters), 0)

    def test_already_covered_fires_at_once(self) -> None:
        """A waiter at or below the current position fires when added."""
        waiters = OffsetWaiters()
        waiters.advance(50)
        self.assertTrue(self.successResultOf(waiters.add(50, 0.0)))

    def test_expire_fires_false_once(self) -> None:
        """An expired waiter fires False; a later advance does not fire it again."""
        waiters = OffsetWaiters()
        late = waiters.add(10, 5.0)
        on_time = waiters.add(11, 9.0)
        self.assertEqual(waiters.expire(4.9), 0)
        self.assertEqual(waiters.expire(5.0), 1)
        self.assertFalse(self.successResultOf(late))
        self.assertEqual(waiters.advance(100), 1)
        self.assertTrue(self.successResultOf(on_time))

    def test_timer_follows_earliest_deadline(self) -> None:
        """With a clock, one timer expires waiters and is gone once nobody waits."""
        clock = Clock()
        waiters = OffsetWaiters(clock)
        first = waiters.add(10, 5.0)
        second = waiters.add(20, 7.0)
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        clock.advance(5)
        self.assertFalse(self.successResultOf(first))
        self.assertNoResult(second)
        waiters.advance(20)
        self.assertTrue(self.successResultOf(second))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_earlier_deadline_rearms(self) -> None:
        """A waiter with an earlier deadline than the armed timer moves the timer forward."""
        clock = Clock()
        waiters = OffsetWaiters(clock)
        slow = waiters.add(10, 9.0)
        fast = waiters.add(20, 2.0)
        clock.advance(2)
        self.assertFalse(self.successResultOf(fast))
        self.assertNoResult(slow)
        clock.advance(7)
        self.assertFalse(self.successResultOf(slow))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_reentrant_add_from_callback(self) -> None:
        """A callback may add a waiter while advance is firing others."""
        waiters = OffsetWaiters()
        inner: list[bool] = []
        waiters.add(10, 1.0).addCallback(lambda _: waiters.add(30, 1.0).addCallback(inner.append))
        waiters.advance(20)
        self.assertEqual((inner, len(waiters)), ([], 1))
        waiters.advance(30)
        self.assertEqual(inner, [True])


class AsyncFlushTests(SynchronousTestCase):
    """ASYNC_FLUSH: the 500 ms loop, its 4-page threshold and the 10 s thorough flush."""

    def flushes(self, events: list[object]) -> list[object]:
        return [e for e in events if isinstance(e, tuple) and e[0] == "flush"]

    def test_flush_only_at_four_pages(self) -> None:
        """Below 4 dirty pages a tick flushes nothing; at 4 it flushes; puts fire before flushing."""
        service, store, clock, _ = make_service()
        self.assertTrue(self.successResultOf(service.put_message(message(body=_body(3)))).ok)
        self.assertEqual(store.flushed_offset, 0)
        clock.advance(0.5)
        self.assertEqual(self.flushes(store.events), [("flush", 4)])
        self.assertEqual(store.flushed_offset, 0)
        service.put_message(message(body=_body(1)))
        clock.advance(0.5)
        self.assertEqual(store.flushed_offset, 4 * PAGE)

    def test_thorough_flush_every_ten_seconds(self) -> None:
        """A few dirty bytes stay unflushed until the tick at 10 s flushes with 0 pages."""
        service, store, clock, _ = make_service()
        service.put_message(message())
        for _ in range(19):
            clock.advance(0.5)
        self.assertEqual(store.flushed_offset, 0)
        clock.advance(0.5)
        self.assertEqual(self.flushes(store.events)[-1], ("flush", 0))
        self.assertEqual(store.flushed_offset, store.max_physical_offset)

    def test_nothing_dirty_no_hop(self) -> None:
        """With nothing written a tick does not hand work to the pool."""
        _, store, clock, pool = make_service()
        clock.advance(0.5)
        self.assertEqual(self.flushes(store.events), [])
        self.assertEqual(pool.calls, 1)

    def test_loop_survives_exception(self) -> None:
        """A flush that raises is logged and the next tick flushes again."""
        service, store, clock, _ = make_service()
        service.put_message(message(body=_body(4)))
        store.flush_error = OSError("EIO")
        clock.advance(0.5)
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        store.flush_error = None
        clock.advance(0.5)
        self.assertEqual(store.flushed_offset, 4 * PAGE)

    def test_consume_queue_flush_and_retention(self) -> None:
        """Consume queues flush every 1 s at 2 pages and all at 60 s; retention runs every 10 s."""
        _, store, clock, _ = make_service()
        for _ in range(60):
            clock.advance(1)
        cq = [e for e in store.events if isinstance(e, tuple) and e[0] == "flush_cq"]
        self.assertEqual(cq, [("flush_cq", 2)] * 59 + [("flush_cq", 0)])
        self.assertEqual(store.events.count("clean"), 6)

    def test_page_cache_trail_every_second(self) -> None:
        """The commit log's page-cache trail runs every second while ``commit_log_page_cache_keep``
        is set (the default), never when it is 0."""
        for keep, expected in ((1 << 30, 5), (0, 0)):
            _, store, clock, _ = make_service(config_args={"commit_log_page_cache_keep": keep})
            for _ in range(5):
                clock.advance(1)
            self.assertEqual(store.trails, expected)

    def test_retention_gets_consumer_positions(self) -> None:
        """Each retention check takes a fresh snapshot of the groups' offsets on the reactor."""
        service, store, clock, _ = make_service()
        snapshots = iter([[("G", "T", 0, 1)], [("G", "T", 0, 2)]])
        service.set_consumer_positions(lambda: next(snapshots))
        clock.advance(10)
        self.assertEqual(store.positions, [("G", "T", 0, 1)])
        clock.advance(10)
        self.assertEqual(store.positions, [("G", "T", 0, 2)])


class GroupCommitTests(SynchronousTestCase):
    """SYNC_FLUSH: waiters fire after the flush covering them, or time out once."""

    def test_waiter_fires_after_covering_flush(self) -> None:
        """A put fires only after a flush covered it; one arriving while that flush runs waits for the next."""
        service, store, _, pool = make_stepped_service("SYNC_FLUSH")
        first = service.put_message(message())
        self.assertNoResult(first)
        second = service.put_message(message())  # arrives while the first hop appends and flushes
        pool.run_one()  # append + flush in one hop: no flush runs elsewhere
        result = self.successResultOf(first)
        self.assertEqual(result.status, PutMessageStatus.PUT_OK)
        self.assertEqual(store.flushed_offset, result.append.next_offset)  # type: ignore[union-attr]
        self.assertNoResult(second)
        pool.run_one()
        self.assertTrue(self.successResultOf(second).ok)
        self.assertEqual(store.events[2:], ["put", ("flush", 0), "put", ("flush", 0)])
        self.assertEqual(pool.calls, 3, "load, then one hop per put")

    def test_appends_overlap_running_flush(self) -> None:
        """While a flush runs in the flush pool, appends go on; their waiters get one group flush."""
        flush_pool = ManualPool()
        service, store, clock, _ = make_service("SYNC_FLUSH", flush_pool=flush_pool)
        service.put_message(message(wait=False))
        clock.advance(0.5)  # the loop's flush now runs in the flush pool
        first = service.put_message(message())
        second = service.put_message(message())
        self.assertEqual(store.events.count("put"), 3, "appended while the flush runs")
        self.assertNotIn(("flush", 0), store.events)
        self.assertEqual(len(flush_pool.pending), 2, "the running flush, then one group flush")
        flush_pool.run_all()
        self.assertTrue(self.successResultOf(first).ok)
        self.assertTrue(self.successResultOf(second).ok)
        self.assertEqual(store.flushed_offset, store.max_physical_offset)

    def test_loop_skips_while_group_commit_flushes(self) -> None:
        """A loop tick during a hop that flushes hands no second flush to a pool."""
        service, store, clock, pool = make_stepped_service("SYNC_FLUSH")
        store.max_physical_offset = 100  # dirty bytes for the loop to see
        put = service.put_message(message())
        clock.advance(0.5)
        self.assertEqual(len(pool.pending), 1, "only the append + flush hop")
        pool.run_all()
        self.assertTrue(self.successResultOf(put).ok)

    def test_one_flush_serves_all_waiters(self) -> None:
        """Every waiter of one hop is served by a single flush."""
        pool = ManualPool()
        service, store, _, _ = make_service("SYNC_FLUSH", pool=pool)
        ds = [service.put_message(message()) for _ in range(5)]
        pool.run_all()
        self.assertTrue(all(self.successResultOf(d).ok for d in ds))
        self.assertEqual(store.events.count(("flush", 0)), 1)

    def test_no_wait_fires_after_append(self) -> None:
        """WAIT=false fires once appended; the loop flushes it at the next tick (any dirty byte)."""
        service, store, clock, _ = make_service("SYNC_FLUSH")
        self.assertTrue(self.successResultOf(service.put_message(message(wait=False))).ok)
        self.assertEqual(store.flushed_offset, 0)
        clock.advance(0.5)
        self.assertEqual(store.flushed_offset, store.max_physical_offset)

    def test_timeout_then_late_flush(self) -> None:
        """Without a covering flush for 5 s the put answers FLUSH_DISK_TIMEOUT, once, with its append."""
        service, store, clock, _ = make_service("SYNC_FLUSH")
        store.flush_error = OSError("EIO")
        d = service.put_message(message())
        self.assertNoResult(d)
        clock.advance(4)
        self.assertNoResult(d)
        store.flush_error = None
        clock.advance(0.5)  # the loop's tick at 4.5 s covers it
        result = self.successResultOf(d)
        self.assertEqual(result.status, PutMessageStatus.PUT_OK)

        store.flush_error = OSError("EIO")
        late = service.put_message(message())
        clock.advance(5)
        timed_out = self.successResultOf(late)
        self.assertEqual(timed_out.status, PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self.assertIsNotNone(timed_out.append)
        store.flush_error = None
        clock.advance(0.5)  # the late flush covers it; firing again would raise AlreadyCalledError
        self.assertEqual(store.flushed_offset, store.max_physical_offset)
        self.flushLoggedErrors(OSError)
        self.assertEqual(clock.getDelayedCalls().__len__(), 4, "only the four loops remain")


class CommitLogFlushTests(SynchronousTestCase):
    """CommitLogFlush on its own: one group-commit flush in flight, no retry after a failure, ticks
    skipped meanwhile, and a hop's claim only when no flush runs."""

    def setUp(self) -> None:
        self.waiters = OffsetWaiters()
        self.flushes: list[tuple[int, Deferred[int]]] = []
        self.idle = 0

        def flush(least_pages: int, target: int) -> Deferred[int]:
            d: Deferred[int] = Deferred()
            self.flushes.append((target, d))
            return d

        def idle() -> None:
            self.idle += 1

        self.group = CommitLogFlush(self.waiters, flush, self.waiters.advance, idle)

    def test_one_flush_then_the_next(self) -> None:
        """Waiters added during a flush start the next flush when it ends."""
        first = self.waiters.add(10, 99.0)
        self.group.kick()
        later = self.waiters.add(20, 99.0)
        self.group.kick()
        self.assertEqual([t for t, _ in self.flushes], [10])
        self.flushes[0][1].callback(12)
        self.assertTrue(self.successResultOf(first))
        self.assertNoResult(later)
        self.assertEqual([t for t, _ in self.flushes], [10, 20])
        self.flushes[1][1].callback(20)
        self.assertTrue(self.successResultOf(later))
        self.assertEqual((self.group.group_running, self.idle), (False, 2))

    def test_failure_is_logged_not_retried(self) -> None:
        """A failed flush is logged; the next kick starts a new one."""
        self.waiters.add(10, 99.0)
        self.group.kick()
        self.flushes[0][1].errback(OSError("EIO"))
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        self.assertEqual((len(self.flushes), self.group.group_running), (1, False))
        self.group.kick()
        self.assertEqual(len(self.flushes), 2)

    def test_tick_skipped_during_group_commit_and_claim_refused_during_tick(self) -> None:
        """A tick while a group-commit flush runs flushes nothing; a hop cannot claim the flush
        while a tick's runs, and can once it ended."""
        self.waiters.add(10, 99.0)
        self.group.kick()
        self.successResultOf(Deferred.fromCoroutine(self.group.tick(4)))
        self.assertEqual(len(self.flushes), 1)
        self.flushes[0][1].callback(10)
        ticking = Deferred.fromCoroutine(self.group.tick(4))
        self.assertFalse(self.group.claim())
        self.flushes[1][1].callback(12)
        self.successResultOf(ticking)
        self.assertEqual(self.waiters.position, 12)
        self.assertTrue(self.group.claim())
        self.assertFalse(self.group.claim())
        self.group.release()
        self.assertFalse(self.group.group_running)
