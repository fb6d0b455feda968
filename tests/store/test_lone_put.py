"""The compiled lone put (``MessageStore.put_lone``, ``rocketpy/_speedups_storeput.h``): one message
appended in one call leaves the same files, results, message fields, queue offsets and stats as
``put_many`` (the Python path, the reference); anything unusual is left to that path untouched;
``StoreService.put_message`` uses it for a lone send with the same notices and completion
(doc/store.md, "Compiled accelerator")."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import SynchronousTestCase, TestCase

from rocketpy.common.message import MessageConst, MessageExt, decode_record
from rocketpy.store.commitlog import wall_clock_ms
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import COMPILED_LONE_PUT, INLINE_MAX_BODY, MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.common.implementations import C_SKIP
from tests.store.test_commitlog import T0, FakeClock, small_config
from tests.store.test_store_speedups import MESSAGE, Spec, StorePair, build, files_under, message_fields, result_fields

SKIP = C_SKIP if COMPILED_LONE_PUT is None or C_SKIP else None

USUAL: Spec = ("T", 0, 0, b"x" * 300, {"KEYS": "a b", "TAGS": "t", "UNIQ_KEY": "7F00000100AB"})


def lone_or_many(store: MessageStore, msg: MessageExt) -> tuple[PutMessageResult, bool]:
    """``put_lone`` after faulting pages in as the service does, else ``put_many``; and which ran."""
    if store.populate_due():
        store.populate_ahead()
    stored = store.put_lone(msg)
    if stored is None:
        return store.put_many([[msg]])[0], False
    result, max_offset, _due = stored
    if max_offset is not None:
        assert max_offset == store.get_max_offset_in_queue(msg.topic, msg.queue_id)
    return result, True


def state(store: MessageStore, root: str) -> Any:
    """What a put can change: the files, queue offsets, stats and dispatch state."""
    log = store.commit_log
    return (files_under(root), dict(log.topic_queue_table), log.reput_offset, log.dispatch_failed,
            store.stats.snapshot(), dict(store.stats.topic_bytes), store.consume_queues.logics_msg_timestamp,
            [(q.topic, q.queue_id, q.max_physic_offset, q.max_offset) for q in store.consume_queues.queues])


class LonePair(StorePair):
    """A :class:`StorePair` whose compiled store puts one message at a time through ``put_lone``."""

    lone = 0
    lone_fallbacks = 0  # Python dispatches during lone puts

    def put(self, test: SynchronousTestCase, spec: Spec) -> None:
        compiled, python = self.stores
        msgs = [build(spec, spec), build(spec, spec)]
        fallbacks = self.fallbacks
        result, lone = lone_or_many(compiled, msgs[0])
        self.lone += lone
        self.lone_fallbacks += lone and self.fallbacks - fallbacks
        reference = python.put_many([[msgs[1]]])[0]
        test.assertEqual((result_fields(result), result.remark, message_fields(msgs[0])),
                         (result_fields(reference), reference.remark, message_fields(msgs[1])))

    def assert_same(self, test: SynchronousTestCase) -> None:
        super().assert_same(test)
        python = self.stores[1]
        test.assertEqual(_log_state(self.stores[0]), _log_state(python))


def _log_state(store: MessageStore) -> Any:
    log = store.commit_log
    return (store.stats.snapshot(), store.stats.topic_bytes, log.reput_offset,
            [(mf.wrote_position, mf.committed_position, mf.store_timestamp) for mf in log.queue.mapped_files])


class LonePutTests(SynchronousTestCase):
    skip = SKIP

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(MESSAGE, min_size=1, max_size=60), st.lists(st.integers(0, 3000), min_size=60, max_size=60))
    def test_same_as_put_many(self, specs: list[Spec], steps: list[int]) -> None:
        """Random messages (transactions, delays, timers, the schedule and timer topics, keys with
        spaces and astral characters, new queue and index files, full commit-log files), one at a
        time: the same results, message fields, files and stats as ``put_many``."""
        pair = LonePair(self)
        for spec, step in zip(specs, steps):
            pair.clock.now += step
            pair.put(self, spec)
        pair.assert_same(self)

    def test_usual_messages_take_one_call(self) -> None:
        """Past the files a queue and the index need first (and each roll), usual messages go in one call,
        dispatched in C; the same files as put_many, across commit-log, queue and index files."""
        pair = LonePair(self)
        for n in range(600):
            topic, queue_id, sys_flag, body, props = USUAL
            pair.put(self, (topic, n % 3, 0x8 if n % 7 == 0 else sys_flag, body[: 50 + n % 250],
                            {**props, "UNIQ_KEY": f"U{n}", "KEYS": f"k{n} j{n % 5}"}))
        pair.assert_same(self)
        self.assertGreater(len(pair.stores[0].commit_log.queue.mapped_files), 2)
        self.assertGreater(len(pair.stores[0].index.files), 1)
        self.assertGreater(pair.lone, 540)
        self.assertEqual(pair.lone_fallbacks, 0, "nothing the C dispatch declined")

    def test_commit_log_attributes_replaced(self) -> None:
        """The commit log's attributes lone_put keeps between puts (while its instance dict is unchanged) are
        read again once replaced: a new clock, host, queue table and lock take effect at the next put."""
        pair = LonePair(self)
        clocks = [FakeClock(T0 + 10_000), FakeClock(T0 + 10_000)]
        changes: list[Callable[[MessageStore, int], None]] = [
            lambda store, i: setattr(store.commit_log, "now_ms", clocks[i]),
            lambda store, i: setattr(store.commit_log, "_host_hex", "0A0B0C0D" + store.commit_log._host_hex[8:]),
            lambda store, i: setattr(store.commit_log, "topic_queue_table",
                                     {**store.commit_log.topic_queue_table, "T-0": 40}),
            lambda store, i: setattr(store.commit_log, "_lock", threading.Lock()),
            lambda store, i: setattr(store.commit_log, "reput_offset", store.commit_log.reput_offset),
        ]
        for _ in range(3):  # the queue's and the index's first files: the Python path
            pair.put(self, USUAL)
        for change in [None, *changes, None]:
            if change is not None:
                for i, store in enumerate(pair.stores):
                    change(store, i)
            for n in range(3):
                lone = pair.lone
                pair.put(self, USUAL)
                self.assertEqual(pair.lone, lone + 1)
        pair.assert_same(self)
        self.assertEqual(pair.stores[0].commit_log.topic_queue_table["T-0"], 40 + 3 * 4)
        held = pair.stores[0].commit_log._lock
        held.acquire()  # a writer holds the new lock: the put is the Python path's
        self.assertIsNone(pair.stores[0].put_lone(build(USUAL, USUAL)))
        held.release()

    def test_size_refusals(self) -> None:
        """With a 300-byte body limit, bodies over it are refused by put_many, as without put_lone."""
        pair = LonePair(self, max_message_size=300)
        for n in range(40):
            pair.put(self, (USUAL[0], n % 2, 0, b"s" * (n * 10), {"KEYS": "k", "P": "v" * n}))
        pair.assert_same(self)
        self.assertEqual(pair.stores[0].stats.failures["MESSAGE_ILLEGAL"], 9)
        self.assertGreater(pair.lone, 25)

    def test_stats_of_slow_puts(self) -> None:
        """A put that held the lock for a while counts in its latency bucket and the maximum, in C
        as in Python; past LOCK_WARN_MS it is logged too, by both."""
        pair = LonePair(self)
        for store in pair.stores:
            store.commit_log.now_ms = _Ticking()
        for n, tick in enumerate([0, 0, 0, 3, 10, 11, 60, 0, 501, 2, 4000, 1]):
            for store in pair.stores:
                store.commit_log.now_ms.tick = tick  # type: ignore[attr-defined]
            pair.put(self, (USUAL[0], n % 2) + USUAL[2:])
        pair.assert_same(self)
        self.assertGreater(pair.lone, 8)
        self.assertEqual(pair.stores[0].stats.max_put_ms, 4000)

    def test_unusual_cases_are_left_untouched(self) -> None:
        """Whatever the compiled call does not take returns None and changes nothing but the
        message's store host; put_many then stores it as before."""
        pair = LonePair(self)
        store, root = pair.stores[0], pair.roots[0]
        for queue_id in (0, 1):
            pair.put(self, USUAL[:1] + (queue_id,) + USUAL[2:])
        self.assertIsNotNone(store.put_lone(build(USUAL, USUAL)), "the usual message goes in one call")
        pair.stores[1].put_many([[build(USUAL, USUAL)]])
        self.assertEqual(pair.lone, 0, "the first of each queue creates its files")

        def unusual(spec: Spec) -> MessageExt:
            return build(spec, spec)

        topic, queue_id, flag, body, props = USUAL
        cases: list[tuple[str, Callable[[], MessageExt], Callable[[], object]]] = [
            ("a delay level", lambda: unusual((topic, 0, 0, body, {**props, MessageConst.DELAY_TIME_LEVEL: "2"})), _no),
            ("a timer", lambda: unusual((topic, 0, 0, body, {MessageConst.TIMER_DELAY_SEC: "5"})), _no),
            ("PREPARED", lambda: unusual((topic, 0, 0x4, body, props)), _no),
            ("ROLLBACK", lambda: unusual((topic, 0, 0xC, body, props)), _no),
            ("a body over the inline bound", lambda: unusual((topic, 0, 0, b"b" * (INLINE_MAX_BODY + 1), {})), _no),
            ("a new queue", lambda: unusual((topic, 2, 0, body, props)), _no),
            ("a new topic", lambda: unusual(("V", 0, 0, body, props)), _no),
            ("a subclass", lambda: _Marked(topic=topic, body=body, properties={}, born_timestamp=T0,
                                           born_host=("1.2.3.4", 1)), _no),
            ("KEYS not text", lambda: unusual((topic, 0, 0, body, {"KEYS": 5})), _no),  # type: ignore[dict-item]
        ]

        def hold_lock() -> Callable[[], None]:
            store.commit_log._lock.acquire()
            return store.commit_log._lock.release

        def setting(obj: Any, name: str, value: Any) -> Callable[[], None]:
            old = getattr(obj, name)
            setattr(obj, name, value)
            return lambda: setattr(obj, name, old)

        usual = lambda: unusual(USUAL)  # noqa: E731
        cq_file = store.consume_queues.get(topic, 0).files.last()  # type: ignore[union-attr]
        mf = store.commit_log.queue.last()
        index_file = store.index.files[-1]
        cases += [
            ("the lock taken (a writer)", usual, hold_lock),
            ("pages not faulted in", usual, lambda: setting(mf, "_populated", mf.wrote_position + 100)),  # type: ignore[union-attr]
            ("no room in the commit-log file", usual, lambda: setting(mf, "file_size", mf.wrote_position + 300)),  # type: ignore[union-attr]
            ("the consume queue's file full", usual, lambda: setting(cq_file, "file_size", cq_file.wrote_position)),  # type: ignore[union-attr]
            ("the index file full", usual, lambda: setting(index_file, "max_entries", index_file.index_count + 2)),
            ("pwrite: no zeros written ahead", usual, lambda: setting(mf, "use_pwrite", True)),
            ("a slave", usual, lambda: setting(store.config, "broker_role", "SLAVE")),
            ("the disk full", usual, lambda: setting(store.retention, "disk_full", True)),
            ("a failed dispatch", usual, lambda: setting(store.commit_log, "dispatch_failed", True)),
            ("not running", usual, lambda: setting(store, "running", False)),
            ("the Python put path chosen", usual, lambda: setting(store.commit_log, "speedups", None)),
        ]
        for name, make, arrange in cases:
            msg = make()
            undo = arrange()
            before = state(store, root)
            fields = message_fields(msg)
            self.assertIsNone(store.put_lone(msg), name)
            self.assertEqual((state(store, root), message_fields(msg)), (before, fields), name)
            if callable(undo):
                undo()
        self.assertIsNotNone(store.put_lone(usual()), "all undone: one call again")

    def test_wall_clock(self) -> None:
        """With the store's own clock the compiled call reads the wall clock itself, in ms."""
        root = self.mktemp()
        store = MessageStore(small_config(root, commit_log_write_path="mmap"))
        self.addCleanup(store.shutdown)
        self.assertTrue(store.load())
        store.start()
        store.put_many([[build(USUAL, USUAL)]])
        msg = build(USUAL, USUAL)
        before = wall_clock_ms()
        result, _ok = lone_or_many(store, msg)
        after = wall_clock_ms()
        self.assertTrue(_ok)
        assert result.append is not None
        self.assertTrue(before <= result.append.store_timestamp == msg.store_timestamp <= after)
        stored = decode_record(store.commit_log.get_data(msg.commit_log_offset, msg.store_size) or b"")
        self.assertEqual((stored.store_timestamp, stored.queue_offset, stored.commit_log_offset),
                         (msg.store_timestamp, 1, msg.commit_log_offset))
        self.assertEqual(store.stats.puts, 2)

    def test_pwrite_path(self) -> None:
        """The pwrite write path (SYNC_FLUSH's default): the same files; a failed pwrite changes
        nothing and leaves the put to put_many."""
        pair = LonePair(self, commit_log_write_path="pwrite")
        for n in range(300):
            pair.put(self, (USUAL[0], n % 3, 0, b"p" * (100 + n), {"KEYS": f"k{n}", "UNIQ_KEY": f"U{n}"}))
        pair.assert_same(self)
        self.assertGreater(pair.lone, 280)
        store = pair.stores[0]
        mf = store.commit_log.queue.last()
        assert mf is not None
        read_only = os.open(os.devnull, os.O_RDONLY)
        self.addCleanup(os.close, read_only)
        fd, mf._fd = mf._fd, read_only
        msg = build(USUAL, USUAL)
        before, fields = state(store, pair.roots[0]), message_fields(msg)
        self.assertIsNone(store.put_lone(msg))
        mf._fd = fd
        self.assertEqual((state(store, pair.roots[0]), message_fields(msg)), (before, fields))
        pair.put(self, USUAL)
        pair.assert_same(self)


class _Ticking:
    """A ms clock that moves ``tick`` ms at each reading (a put reads it before and after)."""

    def __init__(self) -> None:
        self.now = T0
        self.tick = 0

    def __call__(self) -> int:
        self.now += self.tick
        return self.now


class _Marked(MessageExt):
    pass


def _no() -> None:
    return None


class ServiceLonePutTests(TestCase):
    """StoreService.put_message over the real store: lone puts in one call, the same notices,
    completion (put hooks) and page faulting-in as the inline append (without the compiled
    module: the same, through the inline append)."""

    async def test_lone_sends(self) -> None:
        await self.lone_sends("ASYNC_FLUSH")

    async def test_lone_sends_sync_flush(self) -> None:
        """SYNC_FLUSH (pwrite): with its sync ended on the reactor the put is appended in one call
        too, and fires once durable."""
        await self.lone_sends("SYNC_FLUSH")

    async def lone_sends(self, flush_disk_type: str) -> None:
        root = os.path.abspath(self.mktemp())
        config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                                    mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1000,
                                    max_index_num=4000, flush_disk_type=flush_disk_type)
        store = MessageStore(config)
        service = StoreService(store, reactor)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        lone = service._put_lone
        assert lone is not None
        calls: list[bool] = []

        def counted(msg: MessageExt, *sync: Any) -> Any:
            stored = lone(msg, *sync)
            calls.append(stored is not None)
            return stored

        service._put_lone = counted
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        hooked: list[int] = []
        service.add_put_hook(lambda result: hooked.append(result.append.queue_offset))  # type: ignore[union-attr]
        results = []
        for i in range(400):
            d = service.put_message(build(("T", 0, 0, b"%d" % i * 100, {"UNIQ_KEY": f"U{i}"}), USUAL))
            results.append(await d)
            await deferLater(reactor, 0)  # the next put from a reactor turn, not from inside this one's completion
        self.assertEqual([r.append.queue_offset for r in results if r.ok and r.append], list(range(400)))
        if COMPILED_LONE_PUT is not None and service._inline:
            self.assertGreater(calls.count(True), 390, "past the first files, each put in one call")
        else:
            self.assertEqual(calls.count(True), 0)
        if flush_disk_type == "SYNC_FLUSH":
            self.assertGreaterEqual(store.flushed_offset, max(r.append.next_offset for r in results if r.append))
        self.assertEqual(seen, [("T", 0, i + 1) for i in range(400)])
        self.assertEqual(hooked, list(range(400)))
        self.assertGreater(len(store.commit_log.queue.mapped_files), 1, "rolled to a second file")
        got = await service.get_message("g", "T", 0, 398, 32)
        self.assertEqual([decode_record(r).body for r in got.records], [b"398" * 100, b"399" * 100])
        await service.stopService()

    async def test_a_raising_store_fails_the_put_alone(self) -> None:
        root = os.path.abspath(self.mktemp())
        service = StoreService(MessageStore(MessageStoreConfig(store_path_root_dir=root)), reactor)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())

        def broken(msg: MessageExt) -> Any:
            raise RuntimeError("store bug")

        service._put_lone = broken
        result = await service.put_message(build(USUAL, USUAL))
        self.assertEqual(result.status, PutMessageStatus.UNKNOWN_ERROR)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        service._put_lone = None
        self.assertTrue((await service.put_message(build(USUAL, USUAL))).ok)
        await service.stopService()
