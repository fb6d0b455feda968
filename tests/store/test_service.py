"""StoreService: batching hops, arrival listeners, flow control, lifecycle, reads and hooks."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.logger import capturedLogs
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase, TestCase

from rocketpy.common.message import decode_record
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.groupcommit import wants_wait
from rocketpy.store.pools import OneThread
from rocketpy.store.service import StoreService
from rocketpy.store.status import GetMessageStatus, PutMessageResult, PutMessageStatus
from tests.fakes import FakeMessageStore
from tests.store.fakes import (
    InlinePool,
    ManualPool,
    ThreadlessClock,
    as_thread_pool,
    make_service,
    make_stepped_service,
    message,
)


class BatchingTests(SynchronousTestCase):
    """Puts go to the pool in one hop per accumulated batch."""

    def test_one_hop_carries_everything_queued(self) -> None:
        """Puts queued while a hop runs all travel in the next single hop."""
        service, store, _, pool = make_stepped_service()
        first = service.put_message(message())
        self.assertEqual(pool.calls, 2)
        rest = [service.put_message(message()) for _ in range(9)]
        self.assertEqual(pool.calls, 2, "no hop while one runs")
        pool.run_one()
        self.successResultOf(first)
        self.assertEqual(pool.calls, 3)
        for d in rest:
            self.assertNoResult(d)
        pool.run_one()
        results = [self.successResultOf(d) for d in rest]
        self.assertEqual(pool.calls, 3)
        self.assertEqual(store.events.count("put"), 10)
        self.assertEqual([r.append.queue_offset for r in results if r.append], list(range(1, 10)))

    def test_puts_before_load_wait_for_it(self) -> None:
        """Puts made while the store loads are appended, in order, in the first hop."""
        pool = ManualPool()
        service, store, _, _ = make_service(pool=pool)
        ds = [service.put_message(message()) for _ in range(3)]
        self.assertEqual(pool.calls, 1)
        pool.run_all()
        self.assertEqual(pool.calls, 2)
        appends = [self.successResultOf(d).append for d in ds]
        self.assertEqual([a.queue_offset for a in appends if a], [0, 1, 2])
        self.assertEqual(store.events, ["load", "start", "put", "put", "put"])

    def test_batch_is_one_store_call(self) -> None:
        """put_messages hands the whole batch to the store's put_messages at once."""
        service, store, _, _ = make_service()
        result = self.successResultOf(service.put_messages([message(), message(), message()]))
        self.assertEqual(result.status, PutMessageStatus.PUT_OK)
        self.assertEqual(result.append.msg_num if result.append else 0, 3)
        self.assertEqual(store.events.count("put"), 1)

    def test_put_many_takes_the_hop(self) -> None:
        """A store with put_many gets the whole hop in one call, one result per put."""
        calls: list[int] = []

        class ManyStore(FakeMessageStore):
            def put_many(self, puts: list[list[Any]]) -> list[PutMessageResult]:
                calls.append(len(puts))
                return [self.put_messages(msgs) for msgs in puts]

        pool = ManualPool()
        service = StoreService(ManyStore(), ThreadlessClock(), as_thread_pool(pool))
        service.startService()
        ds = [service.put_message(message()), service.put_messages([message(), message()])]
        pool.run_all()
        offsets = [self.successResultOf(d).append.queue_offset for d in ds]  # type: ignore[union-attr]
        self.assertEqual((calls, offsets), ([2], [0, 1]))

    def test_put_many_one_result_per_put(self) -> None:
        """put_many: independent puts (single messages and a batch) in one hop, one Deferred
        firing with one result per put, in order."""
        service, store, _, pool = make_stepped_service()
        d = service.put_many([(message(),), [message(), message()], (message(queue_id=1),)])
        self.assertNoResult(d)
        self.assertEqual(pool.calls, 2, "one hop")
        pool.run_one()
        results = self.successResultOf(d)
        self.assertEqual([r.status for r in results], [PutMessageStatus.PUT_OK] * 3)
        self.assertEqual([(r.append.queue_offset, r.append.msg_num) for r in results if r.append],
                         [(0, 1), (1, 2), (0, 1)])
        self.assertEqual(store.events.count("put"), 3)
        self.assertEqual(self.successResultOf(service.put_many([])), [])

    def test_put_many_failures_stay_with_their_put(self) -> None:
        """A put the store raises on is UNKNOWN_ERROR; the others of the call are stored."""
        service, store, _, _ = make_service()

        def explode(msg: Any) -> None:
            if msg.queue_id == 1:
                raise OSError("bad sector")

        store.on_put = explode
        results = self.successResultOf(service.put_many([(message(),), (message(queue_id=1),), (message(),)]))
        self.assertEqual([r.status for r in results],
                         [PutMessageStatus.PUT_OK, PutMessageStatus.UNKNOWN_ERROR, PutMessageStatus.PUT_OK])
        self.flushLoggedErrors(OSError)

    def test_put_many_refused_as_a_whole(self) -> None:
        """Stopped or busy: every put of the call gets the refusal."""
        service = StoreService(FakeMessageStore(), reactor, as_thread_pool(InlinePool()))
        results = self.successResultOf(service.put_many([(message(),), (message(),)]))
        self.assertEqual([r.status for r in results], [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 2)
        service, _, _, pool = make_stepped_service(max_queued_messages=2)
        service.put_message(message())  # the running hop
        service.put_many([(message(),), (message(),)])
        results = self.successResultOf(service.put_many([(message(),)]))
        self.assertEqual([r.status for r in results], [PutMessageStatus.OS_PAGECACHE_BUSY])
        pool.run_all()

    def test_store_exception_is_unknown_error(self) -> None:
        """A put the store raises on answers UNKNOWN_ERROR, is logged, and the next put works."""
        service, store, _, _ = make_service()

        def explode(msg: Any) -> None:
            raise OSError("disk on fire")

        store.on_put = explode
        with capturedLogs() as events:
            result = self.successResultOf(service.put_message(message()))
        self.assertEqual(result.status, PutMessageStatus.UNKNOWN_ERROR)
        self.assertTrue(any("put failed" in e.get("log_format", "") for e in events))
        self.flushLoggedErrors(OSError)
        store.on_put = None
        self.assertTrue(self.successResultOf(service.put_message(message())).ok)


class InlineAppendTests(SynchronousTestCase):
    """ASYNC_FLUSH: a small put while the writer is idle is appended on the reactor thread,
    when the store vouches that nothing blocks."""

    def stepped(self, flush_disk_type: str = "ASYNC_FLUSH", inline_ok: bool = True) -> tuple[Any, Any, Any]:
        service, store, _, pool = make_stepped_service(flush_disk_type)
        store.inline_ok = inline_ok
        return service, store, pool

    def test_idle_writer_appends_inline(self) -> None:
        """No hop, no pool call: the Deferred has its result at once and arrivals are announced."""
        service, store, pool = self.stepped()
        arrivals: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda t, q, o: arrivals.append((t, q, o)))
        calls = pool.calls
        result = self.successResultOf(service.put_message(message()))
        self.assertTrue(result.ok)
        self.assertEqual((pool.calls, store.events.count("put")), (calls, 1))
        self.assertEqual(arrivals, [("T", 0, 1)])
        self.successResultOf(service.put_message(message()))
        self.assertEqual(pool.calls, calls)

    def test_pages_populated_ahead_on_the_flush_thread(self) -> None:
        """When an inline append leaves few faulted-in pages ahead, the next ones are faulted in
        in the flush pool (once at a time), not on the reactor thread."""
        service, store, pool = self.stepped()
        store.populate_wanted = True
        calls = pool.calls
        self.successResultOf(service.put_message(message()))
        self.successResultOf(service.put_message(message()))
        self.assertEqual(pool.calls, calls + 1, "one populate job, for both appends")
        self.assertNotIn("populate", store.events)
        pool.run_all()
        self.assertEqual(store.events.count("populate"), 1)

    def test_stop_waits_for_populate(self) -> None:
        """A stop shuts the store (and its mappings) down only after a running populate job."""
        service, store, pool = self.stepped()
        store.populate_wanted = True
        self.successResultOf(service.put_message(message()))
        calls = pool.calls
        stopped = service.stopService()
        self.assertEqual(pool.calls, calls, "nothing more submitted while pages are being faulted in")
        pool.run_all()
        self.successResultOf(stopped)
        self.assertLess(store.events.index("populate"), store.events.index("shutdown"))

    def test_hop_when_not_idle_or_not_vouched(self) -> None:
        """The store's refusal, a running hop or SYNC_FLUSH keep the pool path; a batch or a run
        of puts the store vouches for is appended inline too."""
        service, store, pool = self.stepped(inline_ok=False)
        self.assertNoResult(service.put_message(message()))  # refused: it hops
        store.inline_ok = True
        self.assertNoResult(service.put_messages([message(), message()]))  # and a hop runs
        pool.run_all()
        service, store, pool = self.stepped()
        self.assertTrue(self.successResultOf(service.put_messages([message(), message()])).ok)
        self.assertEqual([r.status for r in self.successResultOf(service.put_many([(message(),), (message(),)]))],
                         [PutMessageStatus.PUT_OK] * 2)
        service, store, pool = self.stepped("SYNC_FLUSH")
        self.assertNoResult(service.put_message(message()))

    def test_writer_pool_busy_keeps_the_pool_path(self) -> None:
        """Another writer-pool job (here a consume-queue flush) keeps appends off the reactor."""
        service, store, pool = self.stepped()
        service._in_pool(lambda: None)
        self.assertNoResult(service.put_message(message()))
        pool.run_all()
        self.successResultOf(service.put_message(message()))


class ArrivalTests(SynchronousTestCase):
    """Arrival listeners wake long polls after appends."""

    def test_listener_called_once_per_touched_queue(self) -> None:
        """After a hop each touched queue is reported once, with its new max offset."""
        pool = ManualPool()
        service, _, _, _ = make_service(pool=pool)
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        for queue_id in (0, 0, 1, 0):
            service.put_message(message(queue_id=queue_id))
        service.put_messages([message("U"), message("U")])
        self.assertEqual(seen, [])
        pool.run_all()
        self.assertEqual(seen, [("T", 0, 3), ("T", 1, 1), ("U", 0, 2)])

    def test_listeners_before_put_fires(self) -> None:
        """Long polls are woken before the producer's Deferred fires."""
        service, _, _, _ = make_service()
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        at_ack = self.successResultOf(service.put_message(message()).addCallback(lambda _: list(seen)))
        self.assertEqual(at_ack, [("T", 0, 1)])

    def test_failing_listener_does_not_stop_others(self) -> None:
        """A listener that raises is logged; the put still succeeds and later listeners run."""
        service, _, _, _ = make_service()
        seen: list[tuple[str, int, int]] = []

        def broken(*args: Any) -> None:
            raise ValueError("bad listener")

        service.add_arrival_listener(broken)
        service.add_arrival_listener(lambda *args: seen.append(args))
        self.assertTrue(self.successResultOf(service.put_message(message())).ok)
        self.assertEqual(seen, [("T", 0, 1)])
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)


class FlowControlTests(SynchronousTestCase):
    """Too much queued work makes the service busy and new puts fail fast."""

    def test_too_many_queued_messages(self) -> None:
        """Beyond max_queued_messages waiting for a hop, puts get OS_PAGECACHE_BUSY."""
        service, _, _, pool = make_stepped_service(max_queued_messages=3)
        service.put_message(message())  # in the running hop
        service.put_messages([message(), message()])
        self.assertFalse(service.is_busy())
        service.put_message(message())
        self.assertTrue(service.is_busy())
        refused = self.successResultOf(service.put_message(message()))
        self.assertEqual(refused.status, PutMessageStatus.OS_PAGECACHE_BUSY)
        self.successResultOf(service.put_many([[message()], [message(), message()]]))
        self.assertEqual(service.refused, {"OS_PAGECACHE_BUSY": 3})  # counted per put (/metrics)
        pool.run_all()
        self.assertFalse(service.is_busy())

    def test_oldest_queued_too_old(self) -> None:
        """Once the oldest queued put waited longer than max_queue_wait, the service is busy."""
        service, _, clock, pool = make_stepped_service()
        service.put_message(message())
        clock.advance(0.1)
        self.assertEqual(service.queue_wait(), 0)  # the first put is in the running hop: none waits
        service.put_message(message())
        clock.advance(0.15)
        self.assertAlmostEqual(service.queue_wait(), 0.15)
        self.assertFalse(service.is_busy(), "the queued put waited only 150 ms")
        clock.advance(0.1)
        self.assertTrue(service.is_busy())

    def test_long_running_hop(self) -> None:
        """A hop running longer than os_page_cache_busy_timeout makes the service busy."""
        service, _, clock, pool = make_stepped_service()
        service.put_message(message())
        clock.advance(0.9)
        self.assertFalse(service.is_busy())
        clock.advance(0.2)
        self.assertTrue(service.is_busy())


class LifecycleTests(SynchronousTestCase):
    """startService loads the store in the pool; stopService drains, flushes, shuts down, stops."""

    def test_not_running_refuses(self) -> None:
        """Before startService a put answers SERVICE_NOT_AVAILABLE."""
        store = FakeMessageStore()
        service = StoreService(store, reactor, as_thread_pool(InlinePool()))
        result = self.successResultOf(service.put_message(message()))
        self.assertEqual(result.status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        self.assertEqual(service.refused, {"SERVICE_NOT_AVAILABLE": 1})

    def test_load_failure_refuses_puts(self) -> None:
        """If load() fails, queued and later puts answer SERVICE_NOT_AVAILABLE."""
        pool = ManualPool()
        service, store, _, _ = make_service(pool=pool)
        store.load_result = False
        queued = service.put_message(message())
        pool.run_all()
        self.flushLoggedErrors()
        unavailable = PutMessageStatus.SERVICE_NOT_AVAILABLE
        self.assertEqual(self.successResultOf(queued).status, unavailable)
        self.assertEqual(self.successResultOf(service.put_message(message())).status, unavailable)
        self.assertEqual(store.events, ["load"])
        self.successResultOf(service.stopService())

    def test_stop_order(self) -> None:
        """Stop waits for the running hop, appends what is queued, flushes, shuts down, then stops the pool."""
        service, store, clock, pool = make_stepped_service()
        pool.stop = lambda: store.events.append("pool.stop")  # type: ignore[method-assign]
        running = service.put_message(message())
        queued = service.put_message(message())
        stopped = service.stopService()
        self.assertNoResult(stopped)
        pool.run_all()
        self.successResultOf(stopped)
        self.successResultOf(running)
        self.successResultOf(queued)
        self.assertEqual(
            store.events,
            ["load", "start", "put", "put", ("flush", 0), "shutdown", "pool.stop"],
        )
        self.assertEqual(clock.getDelayedCalls(), [])
        refused = self.successResultOf(service.put_message(message()))
        self.assertEqual(refused.status, PutMessageStatus.SERVICE_NOT_AVAILABLE)

    def test_stop_waits_for_running_flush(self) -> None:
        """A periodic flush running in the pool ends before the final flush and shutdown."""
        service, store, clock, pool = make_stepped_service()
        service.put_messages([message(body=b"x" * 5000) for _ in range(4)])
        pool.run_one()
        clock.advance(0.5)  # the loop hands a flush to the pool
        self.assertEqual(len(pool.pending), 1)
        stopped = service.stopService()
        self.assertEqual(len(pool.pending), 1, "shutdown waits for the running flush")
        pool.run_all()
        self.successResultOf(stopped)
        self.assertEqual(store.events[-3:], [("flush", 4), ("flush", 0), "shutdown"])
        self.assertFalse(pool.started)

    def test_stop_waits_for_group_commit(self) -> None:
        """A group-commit flush in flight ends, and fires its waiter, before shutdown."""
        flush_pool = ManualPool()
        service, store, clock, _ = make_service("SYNC_FLUSH", flush_pool=flush_pool)
        service.put_message(message(wait=False))
        clock.advance(0.5)  # a loop flush runs in the flush pool: the next put's flush queues behind it
        put = service.put_message(message())
        stopped = service.stopService()
        self.assertNoResult(stopped)
        self.assertNotIn("shutdown", store.events)
        flush_pool.run_all()
        self.assertTrue(self.successResultOf(put).ok)
        self.successResultOf(stopped)
        self.assertEqual(store.events[-1], "shutdown")
        self.assertFalse(flush_pool.started)

    def test_owned_pools(self) -> None:
        """Without a pool the service makes one-thread writer and flush pools and a read pool."""
        service = StoreService(FakeMessageStore(), reactor)
        writer, flush, read = service._pools.distinct()
        self.assertEqual([type(writer), type(flush)], [OneThread, OneThread])
        assert isinstance(read, ThreadPool)
        self.assertEqual((read.min, read.max), (1, 4))


class ReadAndHookTests(SynchronousTestCase):
    """Reads use the read pool; put hooks can hold and override a put's status."""

    def test_read_in_read_pool(self) -> None:
        """get_message runs in the read pool, not the writer pool."""
        reads = ManualPool()
        service, store, _, pool = make_service(read_pool=reads)
        d = service.get_message("g", "T", 0, 0, 32)
        self.assertNoResult(d)
        reads.run_one()
        self.assertEqual(self.successResultOf(d).status, GetMessageStatus.NO_MESSAGE_IN_QUEUE)
        self.assertEqual(pool.calls, 1)
        self.assertEqual(service.get_max_offset_in_queue("T", 0), 0)

    def test_every_read_reaches_the_store(self) -> None:
        """Each read wrapper calls the facade method of the same name with the same arguments, in the read pool."""
        calls: list[tuple[str, tuple[Any, ...]]] = []

        wanted = [
            ("get_offset_in_queue_by_time", ("T", 1, 5)),
            ("get_earliest_message_time", ("T", 1)),
            ("get_commit_log_offset_in_queue", ("T", 1, 7)),
            ("look_message_by_offset", (9,)),
            ("select_one_message_by_offset", (9,)),
            ("query_message", ("T", "k", 3, 1, 2)),
            ("get_commit_log_data", (9, 100)),
        ]
        recorded = {name for name, _ in wanted}

        class Recording(FakeMessageStore):
            def __getattribute__(self, name: str) -> Any:
                if name not in recorded:
                    return super().__getattribute__(name)

                def record(*args: Any) -> str:
                    calls.append((name, args))
                    return name
                return record

        reads = ManualPool()
        service = StoreService(Recording(), ThreadlessClock(), as_thread_pool(InlinePool()),
                               read_pool=as_thread_pool(reads))
        ds = [getattr(service, name)(*args) for name, args in wanted]
        self.assertEqual(calls, [])
        reads.run_all()
        self.assertEqual(calls, wanted)
        self.assertEqual([self.successResultOf(d) for d in ds], [name for name, _ in wanted])

    def test_put_hook_overrides_status(self) -> None:
        """A hook's Deferred delays the put; its non-OK status replaces PUT_OK."""
        service, _, _, _ = make_service()
        replica: Deferred[PutMessageStatus] = Deferred()
        seen: list[PutMessageResult] = []

        def hook(result: PutMessageResult) -> Deferred[PutMessageStatus]:
            seen.append(result)
            return replica

        service.add_put_hook(hook)
        d = service.put_message(message())
        self.assertNoResult(d)
        replica.callback(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        result = self.successResultOf(d)
        self.assertEqual(result.status, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.assertEqual(result.append, seen[0].append)

    def test_put_many_waits_for_each_hook(self) -> None:
        """put_many with a put hook fires once every put's hook answered, each status its own."""
        service, _, _, _ = make_service()
        replicas: list[Deferred[PutMessageStatus]] = []
        def hook(result: PutMessageResult) -> Deferred[PutMessageStatus]:
            replicas.append(Deferred())
            return replicas[-1]
        service.add_put_hook(hook)
        d = service.put_many([(message(),), (message(wait=False),), (message(),)])
        self.assertEqual(len(replicas), 2, "a put with WAIT=false does not wait")
        replicas[1].callback(PutMessageStatus.PUT_OK)
        self.assertNoResult(d)
        replicas[0].callback(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.assertEqual([r.status for r in self.successResultOf(d)],
                         [PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK])

    def test_failing_hook_is_unknown_error(self) -> None:
        """A hook whose Deferred fails gives UNKNOWN_ERROR, not a failed put Deferred."""
        service, _, _, _ = make_service()
        service.add_put_hook(lambda result: Deferred.fromCoroutine(_raise()))
        result = self.successResultOf(service.put_message(message()))
        self.assertEqual(result.status, PutMessageStatus.UNKNOWN_ERROR)
        self.flushLoggedErrors()

    def test_wants_wait(self) -> None:
        """WAIT absent or "true" in any case waits; anything else does not (Java parseBoolean)."""
        self.assertEqual(
            [wants_wait(message(wait=w)) for w in (None, True, False)], [True, True, False]
        )
        msg = message()
        msg.properties["WAIT"] = "TRUE"
        self.assertTrue(wants_wait(msg))


async def _raise() -> PutMessageStatus:
    raise RuntimeError("replication broke")


class CountingPool(ThreadPool):
    """A real thread pool that counts the work handed to it."""

    calls = 0

    def callInThreadWithCallback(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        super().callInThreadWithCallback(*args, **kwargs)


class RealThreadTests(TestCase):
    """The service on a real thread pool and the global reactor."""

    async def test_many_puts_few_hops(self) -> None:
        """200 puts made in one reactor turn take at most two append hops on a real thread."""
        config = MessageStoreConfig(store_path_root_dir="unused", flush_interval_commit_log=60,
                                    flush_interval_consume_queue=60, clean_resource_interval=60)
        pool = CountingPool(1, 1, "test-store")
        service = StoreService(FakeMessageStore(config), reactor, pool)
        await service.startService()
        self.addCleanup(service.stopService)
        loaded = pool.calls
        ds = [service.put_message(message()) for _ in range(200)]
        results = [await d for d in ds]
        self.assertTrue(all(r.ok for r in results))
        self.assertLessEqual(pool.calls - loaded, 2)
        self.assertEqual([r.append.queue_offset for r in results if r.append], list(range(200)))


class RealStoreTests(TestCase):
    """StoreService over the real MessageStore on real threads, in both flush modes."""

    async def started_service(self, flush_disk_type: str, completion: str) -> tuple[StoreService, MessageStoreConfig]:
        """A started service over a real store with small files, stopped at cleanup if still running."""
        root = os.path.abspath(self.mktemp())
        config = MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush_disk_type,
                                    mapped_file_size_commit_log=64 * 1024,
                                    mapped_file_size_consume_queue=1000 * 20,
                                    max_hash_slot_num=1000, max_index_num=4000)
        config.sync_flush_completion = completion
        service = StoreService(MessageStore(config), reactor)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        return service, config

    async def put_read_stop(self, flush_disk_type: str, completion: str = "native") -> None:
        service, config = await self.started_service(flush_disk_type, completion)
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        bodies = [b"body-%d" % i * 50 for i in range(100)]
        results = [await d for d in [service.put_message(message(body=b)) for b in bodies]]
        self.assertTrue(all(r.ok for r in results))
        if flush_disk_type == "SYNC_FLUSH":
            flushed = service._store.flushed_offset
            self.assertGreaterEqual(flushed, max(r.append.next_offset for r in results if r.append))
        self.assertEqual(seen[-1], ("T", 0, 100))
        self.assertEqual(service.get_max_offset_in_queue("T", 0), 100)
        got = await service.get_message("g", "T", 0, 98, 32)
        self.assertEqual([decode_record(r).body for r in got.records], bodies[98:])
        await service.stopService()
        self.assertFalse(os.path.exists(config.abort_path), "a clean stop removes the abort file")

    async def test_put_many_sync_flush(self) -> None:
        """SYNC_FLUSH: put_many fires once every put that waits is durable."""
        root = os.path.abspath(self.mktemp())
        config = MessageStoreConfig(store_path_root_dir=root, flush_disk_type="SYNC_FLUSH",
                                    mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=1000 * 20,
                                    max_hash_slot_num=1000, max_index_num=4000)
        service = StoreService(MessageStore(config), reactor)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        results = await service.put_many([(message(body=b"%d" % i * 100),) for i in range(50)])
        self.assertEqual([r.append.queue_offset for r in results if r.ok and r.append], list(range(50)))
        self.assertGreaterEqual(service._store.flushed_offset, results[-1].append.next_offset)  # type: ignore[union-attr]
        # an empty put is refused by the store, alone
        self.assertEqual((await service.put_messages([])).status, PutMessageStatus.MESSAGE_ILLEGAL)
        mixed = await service.put_many([[], (message(),)])
        self.assertEqual([r.status for r in mixed], [PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PUT_OK])
        await service.stopService()

    async def chained_puts(self, flush_disk_type: str, completion: str = "native") -> None:
        """Puts awaited one after another, then puts made from inside the previous put's callback
        (re-entrant, no reactor turn between when the first fires at once): all complete, in order."""
        service, _ = await self.started_service(flush_disk_type, completion)
        awaited = [await service.put_message(message(body=b"a" * 300)) for _ in range(150)]
        chained: list[PutMessageResult] = []
        done: Deferred[None] = Deferred()

        def put_next(result: PutMessageResult) -> None:
            chained.append(result)
            if len(chained) < 150:
                service.put_message(message(body=b"c" * 300)).addCallback(put_next)
            else:
                done.callback(None)

        service.put_message(message(body=b"c" * 300)).addCallback(put_next)
        await done
        offsets = [r.append.queue_offset for r in awaited + chained if r.ok and r.append]
        self.assertEqual(offsets, list(range(300)))
        await service.stopService()

    def test_chained_puts_async_flush(self) -> Deferred[None]:
        return Deferred.fromCoroutine(self.chained_puts("ASYNC_FLUSH"))

    def test_chained_puts_sync_flush(self) -> Deferred[None]:
        return Deferred.fromCoroutine(self.chained_puts("SYNC_FLUSH"))

    def test_chained_puts_sync_flush_on_the_flush_thread(self) -> Deferred[None]:
        return Deferred.fromCoroutine(self.chained_puts("SYNC_FLUSH", "thread"))

    def test_async_flush(self) -> Deferred[None]:
        """ASYNC_FLUSH: puts are appended, readable, announced, and the stop is clean."""
        return Deferred.fromCoroutine(self.put_read_stop("ASYNC_FLUSH"))

    def test_sync_flush(self) -> Deferred[None]:
        """SYNC_FLUSH: puts fire once flushed; readable; clean stop (the native sync where built)."""
        return Deferred.fromCoroutine(self.put_read_stop("SYNC_FLUSH"))

    def test_sync_flush_on_the_flush_thread(self) -> Deferred[None]:
        """SYNC_FLUSH on the Python threads (``sync_flush_completion="thread"``): the same behaviour."""
        return Deferred.fromCoroutine(self.put_read_stop("SYNC_FLUSH", "thread"))
