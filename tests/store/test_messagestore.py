"""Tests for the blocking MessageStore facade: lifecycle, lock and abort files, recovery, reads, HA."""

from __future__ import annotations

import os
import shutil
import struct
import threading
from typing import Any

from twisted.logger import LogLevel
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from rocketpy.common.message import MessageExt, decode_record
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store import commitlog, consumequeue, mappedfile, pagecache, recovery
from rocketpy.store.mappedfile import OS_PAGE_SIZE
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.status import GetMessageStatus, PutMessageStatus
from tests.logs import assert_logs
from tests.store.test_commitlog import SIZE, T0, FakeClock, RecordingDispatcher, message, put_ok, small_config
from tests.store.test_mappedfile import resident_pages


class InlineCheckTests(SynchronousTestCase):
    """MessageStore.can_append_inline: only appends that create no file and fault no page, for
    one message or a run of them."""

    def test_rules(self) -> None:
        clock = FakeClock()
        store = MessageStore(small_config(self.mktemp(), commit_log_write_path="mmap"), clock, total_memory=1 << 30)
        self.addCleanup(store.shutdown)
        self.assertTrue(store.load())
        store.start()
        msg = message("T", b"x" * 100, KEYS="a b")

        def inline(*msgs: MessageExt) -> bool:
            return store.can_append_inline([(m,) for m in msgs])

        self.assertFalse(inline(msg), "no commit-log file yet")
        put_ok(self, store, message("T", b"x" * 100))
        self.assertTrue(inline(msg), "file, queue and index exist, pages faulted in")
        self.assertTrue(inline(*[message("T", b"x" * 1024) for _ in range(20)]), "a run of sends")
        self.assertFalse(inline(msg, message("T", b"x" * 100, queue_id=1)), "no such queue yet")
        self.assertFalse(inline(message("T", b"x" * 9000)), "body over 8 KiB")
        self.assertFalse(inline(message("T", b"x", DELAY="3")), "a delay moves it")
        self.assertFalse(inline(*[message("T", b"x" * 1024) for _ in range(60)]), "more than the 64 KiB file holds")
        cq = store.consume_queues.get("T", 0)
        assert cq is not None
        cq.files.last().wrote_position = cq.file_size - 20 * 2  # type: ignore[union-attr]  # room for 2 entries
        self.assertTrue(inline(msg, msg))
        self.assertFalse(inline(msg, msg, msg), "the third entry would create a consume-queue file")
        store.commit_log.queue.last().wrote_position = SIZE - 200  # type: ignore[union-attr]
        self.assertFalse(inline(msg), "no room: the next file would be created")

    def test_pwrite_path_below_the_zeros(self) -> None:
        """The pwrite path: inline only into blocks its zeros ahead have written (a page-cache
        copy), never where the append would write zeros or create a file."""
        store = MessageStore(small_config(self.mktemp(), commit_log_write_path="pwrite"), FakeClock(),
                             total_memory=1 << 30)
        self.addCleanup(store.shutdown)
        self.assertTrue(store.load())
        store.start()
        msg = message("T", b"x")
        self.assertFalse(store.can_append_inline([(msg,)]), "no commit-log file yet")
        put_ok(self, store, message("T", b"x"))  # the first append writes zeros to the small file's end
        self.assertTrue(store.can_append_inline([(msg,)]))
        mf = store.commit_log.queue.last()
        assert mf is not None
        mf._zeroed = mf.wrote_position + 100  # as if its zeros ahead ran out
        self.assertFalse(store.can_append_inline([(msg,)]), "the append would write zeros")


def kill(store: MessageStore) -> None:
    """Stop ``store`` like a killed process: no flush, abort file left, lock released."""
    store.commit_log.close()
    store.consume_queues.close()
    store.index.close()
    os.close(store._lock_fd)  # the OS releases the lock of a dead process
    store._lock_fd = -1
    store.running = False
    store.checkpoint = None


class StoreCase(SynchronousTestCase):
    """A started store with 64 KiB commit-log files and a fake clock."""

    def setUp(self) -> None:
        self.clock = FakeClock()
        self.config = small_config(self.mktemp())
        self.store = self.open_store()

    def open_store(self, config: MessageStoreConfig | None = None, start: bool = True) -> MessageStore:
        store = MessageStore(config or self.config, self.clock, total_memory=1 << 30)
        self.addCleanup(store.shutdown)
        self.assertTrue(store.load())
        if start:
            store.start()
        return store

    def restart(self) -> MessageStore:
        """A clean shutdown, then a new store on the same directory."""
        self.store.shutdown()
        self.store = self.open_store()
        return self.store

    def crash(self) -> MessageStore:
        """Stop like a killed process (no flush, abort file left, lock released), then reopen."""
        kill(self.store)
        self.store = self.open_store()
        return self.store

    def put_many(self, count: int, topic: str = "T", queues: int = 2, size: int = 500) -> list[MessageExt]:
        msgs = []
        for i in range(count):
            msg = message(topic, os.urandom(size), queue_id=i % queues, KEYS=f"key{i}")
            self.clock.now += 10
            put_ok(self, self.store, msg)
            msgs.append(msg)
        return msgs

    def queue_bodies(self, topic: str, queue_id: int, store: MessageStore | None = None) -> list[bytes]:
        """Every body of a queue, pulled in batches from offset 0."""
        store = store or self.store
        bodies: list[bytes] = []
        offset = 0
        while True:
            result = store.get_message("g", topic, queue_id, offset, 32)
            if result.status is not GetMessageStatus.FOUND:
                return bodies
            bodies += [decode_record(r).body for r in result.records]
            offset = result.next_begin_offset


class LifecycleTests(StoreCase):
    def test_clean_restart_keeps_everything(self) -> None:
        """After a clean shutdown every record, queue offset and key is back, and puts continue."""
        msgs = self.put_many(300)
        end = self.store.max_physical_offset
        self.assertGreater(end, 2 * SIZE)
        store = self.restart()
        self.assertTrue(store.last_exit_ok)
        self.assertEqual(store.max_physical_offset, end)
        self.assertEqual(store.commit_log.topic_queue_table, {"T-0": 150, "T-1": 150})
        self.assertEqual(self.queue_bodies("T", 1), [m.body for m in msgs[1::2]])
        found = store.query_message("T", "key7", 10, 0, T0 * 2)
        self.assertEqual([decode_record(r).body for r in found.records], [msgs[7].body])
        result = put_ok(self, store, message("T", queue_id=1))
        self.assertEqual(result.append.queue_offset, 150)  # type: ignore[union-attr]

    def test_abort_and_lock_files(self) -> None:
        """The abort file exists while running and a clean shutdown removes it; the lock file says "lock"."""
        self.assertTrue(os.path.exists(self.config.abort_path))
        with open(self.config.lock_path, "rb") as f:
            self.assertEqual(f.read(), b"lock")
        self.store.shutdown()
        self.assertFalse(os.path.exists(self.config.abort_path))

    def test_second_store_refused(self) -> None:
        """A second store cannot open a directory in use; it can once the first shut down."""
        other = MessageStore(self.config, self.clock)
        self.addCleanup(other.shutdown)
        with assert_logs(self, "rocketpy.store.messagestore", LogLevel.error) as logs:
            self.assertFalse(other.load())
        self.assertIn("Lock failed", logs[0])
        self.store.shutdown()
        self.assertTrue(other.load())

    def test_wrong_file_size_refuses_load(self) -> None:
        """A commit-log file of another size fails the load and leaves the directory unlocked."""
        self.put_many(3)
        end = self.store.max_physical_offset
        self.store.shutdown()
        self.config.mapped_file_size_commit_log = 2 * SIZE
        other = MessageStore(self.config, self.clock)
        self.addCleanup(other.shutdown)
        with assert_logs(self, "rocketpy.store.mappedfilequeue", LogLevel.error):
            self.assertFalse(other.load())
        self.config.mapped_file_size_commit_log = SIZE
        self.assertEqual(self.open_store().max_physical_offset, end)

    def test_empty_batch_refused(self) -> None:
        """An empty batch is MESSAGE_ILLEGAL."""
        self.assertEqual(self.store.put_messages([]).status, PutMessageStatus.MESSAGE_ILLEGAL)

    def test_unwritable_store_leaves_abort(self) -> None:
        """A store that became unwritable exits as if it crashed, so the next start re-dispatches."""
        self.store.commit_log.dispatch_failed = True
        with assert_logs(self, "rocketpy.store.messagestore", LogLevel.warn):
            self.store.shutdown()
        self.assertTrue(os.path.exists(self.config.abort_path))
        self.assertFalse(self.open_store().last_exit_ok)

    def test_flush_and_checkpoint(self) -> None:
        """flush reports progress once, and the checkpoint records the flushed log and queue times."""
        self.put_many(3)
        self.assertTrue(self.store.flush(0))
        self.assertFalse(self.store.flush(0))
        self.assertEqual(self.store.flushed_offset, self.store.max_physical_offset)
        stats = self.store.stats  # only the flush that made bytes durable is timed
        self.assertEqual((stats.flushes, sum(stats.flush_buckets)), (1, 1))
        self.assertGreater(stats.flush_seconds_total, 0)
        self.store.flush_consume_queues(0)
        with open(self.config.checkpoint_path, "rb") as f:
            physic, logics, _index = struct.unpack(">qqq", f.read(24))
        self.assertEqual((physic, logics), (self.clock.now, self.clock.now))

    def test_flush_covers_rolled_files(self) -> None:
        """One flush makes every file filled since the last flush durable."""
        self.put_many(300)
        self.assertTrue(self.store.flush(0))
        self.assertEqual(self.store.flushed_offset, self.store.max_physical_offset)


class RecoveryTests(StoreCase):
    def test_torn_tail_after_crash(self) -> None:
        """After a crash garbage past the last record is cut and zeroed; queues match the log."""
        self.put_many(200)
        end = self.store.max_physical_offset
        last = self.store.commit_log.queue.mapped_files[-1]
        last.write_at(end - last.file_from_offset, struct.pack(">ii", 400, -626843481) + b"torn" * 30)
        with assert_logs(self, "rocketpy.store.recovery", LogLevel.warn):
            store = self.crash()
        self.assertFalse(store.last_exit_ok)
        self.assertEqual(store.max_physical_offset, end)
        with open(last.path, "rb") as f:
            self.assertEqual(f.read()[end - last.file_from_offset :], bytes(SIZE - (end - last.file_from_offset)))
        self.assertEqual(store.get_max_offset_in_queue("T", 0), 100)
        self.assertEqual(put_ok(self, store, message("T")).append.queue_offset, 100)  # type: ignore[union-attr]

    def test_corrupt_record_truncates_queues(self) -> None:
        """A corrupt record mid-log ends the log there; queue entries beyond it go and offsets follow."""
        msgs = self.put_many(300)
        bad = next(m for m in msgs if m.commit_log_offset > SIZE + 1000)
        mf = self.store.commit_log.queue.find_mapped_file_by_offset(bad.commit_log_offset)
        assert mf is not None
        mf.write_at(bad.commit_log_offset - mf.file_from_offset + 90, b"XX")
        with assert_logs(self, "rocketpy.store.recovery", LogLevel.warn):
            store = self.restart()
        self.assertEqual(store.max_physical_offset, bad.commit_log_offset)
        kept = msgs[: msgs.index(bad)]
        self.assertEqual(self.queue_bodies("T", bad.queue_id), [m.body for m in kept if m.queue_id == bad.queue_id])
        self.assertEqual(store.get_max_offset_in_queue("T", bad.queue_id), bad.queue_offset)
        self.assertEqual(store.commit_log.topic_queue_table["T-%d" % bad.queue_id], bad.queue_offset)
        self.assertIsNone(store.look_message_by_offset(bad.commit_log_offset))

    def test_process_crash_keeps_the_index_and_walks_from_the_last_queued_record(self) -> None:
        """The abort file names this boot (only the process died): the index keeps its files and the
        walk starts at the last record the queues hold, whatever the checkpoint says."""
        msgs = self.put_many(100)
        self.store.flush(0)
        self.store.flush_consume_queues(2)  # a tick: the checkpoint follows the flushed log
        checkpointed = self.store.max_physical_offset
        msgs += self.put_many(100, topic="U")
        with open(self.config.abort_path) as f:
            self.assertEqual(f.read(), recovery.boot_id())
        store = self.crash()
        report = store.recovery
        assert report is not None
        self.assertTrue(report.page_cache_intact)
        self.assertEqual((report.start, report.end), (msgs[-1].commit_log_offset, store.max_physical_offset))
        self.assertEqual(len(store.query_message("T", "key3", 10, 0, T0 * 2).records), 1)  # stored long before
        self.assertEqual(self.queue_bodies("U", 0, store), [m.body for m in msgs[100::2]])
        # what the dead process wrote after its checkpoint is not counted durable until flushed again
        assert store.checkpoint is not None
        self.assertEqual((store.flushed_offset, store.checkpoint.physic_offset), (checkpointed, checkpointed))
        queue = store.consume_queues.get("U", 0)
        assert queue is not None
        self.assertEqual(queue.first_unflushed(), msgs[100].commit_log_offset)
        self.assertTrue(store.flush(0))
        store.flush_consume_queues(2)
        self.assertEqual(store.checkpoint.physic_offset, store.max_physical_offset)

    def test_crash_after_a_reboot_walks_from_the_checkpoint(self) -> None:
        """The abort file names another boot (the machine restarted): recovery trusts only what the
        checkpoint says was durable and dispatches every record from its offset again."""
        first = self.put_many(100)
        self.store.flush(0)
        self.store.flush_consume_queues(2)  # a tick: the checkpoint follows the flushed log
        checkpointed = self.store.max_physical_offset
        later = self.put_many(50, topic="U")
        with open(self.config.abort_path, "w") as f:
            f.write("another-boot")
        store = self.crash()
        report = store.recovery
        assert report is not None
        self.assertEqual((report.page_cache_intact, report.from_checkpoint_offset, report.start),
                         (False, True, checkpointed))
        self.assertEqual(self.queue_bodies("T", 1, store), [m.body for m in first[1::2]])
        self.assertEqual(self.queue_bodies("U", 1, store), [m.body for m in later[1::2]])
        self.assertEqual(len(store.query_message("U", "key20", 10, 0, T0 * 2).records), 1)  # indexed again

    def test_crash_rebuilds_lost_queues(self) -> None:
        """After a crash that lost the consume queues, recovery re-dispatches the log into new ones."""
        msgs = self.put_many(200)
        shutil.rmtree(self.config.consume_queue_dir)
        store = self.crash()
        self.assertEqual(self.queue_bodies("T", 0, store), [m.body for m in msgs[::2]])
        self.assertEqual(store.commit_log.topic_queue_table, {"T-0": 100, "T-1": 100})

    def test_clean_start_catches_up_lagging_queues(self) -> None:
        """A normal start dispatches the records the queues are missing (RocketMQ's reput)."""
        msgs = self.put_many(50)
        self.store.shutdown()
        shutil.rmtree(self.config.consume_queue_dir)
        self.store = self.open_store()
        self.assertEqual(self.queue_bodies("T", 1), [m.body for m in msgs[1::2]])

    def test_no_commit_log_drops_queues(self) -> None:
        """Without commit-log files the consume queues are destroyed and offsets restart at 0."""
        self.put_many(10)
        self.store.shutdown()
        shutil.rmtree(self.config.commit_log_dir)
        store = self.open_store()
        self.assertEqual(store.get_max_offset_in_queue("T", 0), 0)
        self.assertEqual([files for _, _, files in os.walk(self.config.consume_queue_dir) if files], [])
        self.assertEqual(put_ok(self, store, message("T")).append.queue_offset, 0)  # type: ignore[union-attr]


class PutStatusTests(StoreCase):
    def test_not_started(self) -> None:
        """A store that is loaded but not started, or shut down, refuses puts."""
        self.store.shutdown()
        self.assertEqual(self.store.put_message(message()).status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        config = small_config(self.mktemp())
        idle = self.open_store(config, start=False)
        self.assertEqual(idle.put_message(message()).status, PutMessageStatus.SERVICE_NOT_AVAILABLE)

    def test_slave_refuses_puts(self) -> None:
        """A slave store takes no puts."""
        slave = self.open_store(small_config(self.mktemp(), broker_role="SLAVE"))
        self.assertEqual(slave.put_message(message()).status, PutMessageStatus.SERVICE_NOT_AVAILABLE)

    def test_page_cache_busy(self) -> None:
        """A put arriving while the writer has held the lock over 1 s is OS_PAGECACHE_BUSY."""
        seen = []
        stall = RecordingDispatcher()

        def second_writer() -> None:
            self.clock.now += 1500
            seen.append(self.store.put_message(message()).status)
        stall.during = second_writer
        self.store.commit_log.dispatchers.append(stall)
        with assert_logs(self, "rocketpy.store.commitlog", LogLevel.warn):
            put_ok(self, self.store, message())
        self.assertEqual(seen, [PutMessageStatus.OS_PAGECACHE_BUSY])
        self.assertEqual(self.store.stats.failures["OS_PAGECACHE_BUSY"], 1)

    def test_disk_full_refuses_until_freed(self) -> None:
        """Over 90 % disk use puts get SERVICE_NOT_AVAILABLE until a later check sees space again."""
        self.store.retention.measure = lambda path: 0.95
        with assert_logs(self, "rocketpy.store.retention", LogLevel.error):
            self.store.clean_expired_files()
        self.assertEqual(self.store.put_message(message()).status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        self.store.retention.measure = lambda path: 0.50
        self.store.clean_expired_files()
        put_ok(self, self.store, message())

    def test_disk_usage_ratio(self) -> None:
        """The disk usage is a ratio of the store's partition."""
        self.assertTrue(0 < self.store.disk_usage_ratio() <= 1)


class ReadTests(StoreCase):
    def test_queue_lookups(self) -> None:
        """Offsets, times and commit-log positions of a queue are answered from its consume queue."""
        msgs = self.put_many(6, queues=1)
        store = self.store
        self.assertEqual((store.get_min_offset_in_queue("T", 0), store.get_max_offset_in_queue("T", 0)), (0, 6))
        self.assertEqual((store.get_min_offset_in_queue("X", 0), store.get_max_offset_in_queue("X", 0)), (0, 0))
        self.assertEqual(store.get_offset_in_queue_by_time("T", 0, msgs[3].store_timestamp), 3)
        self.assertEqual(store.get_earliest_message_time("T", 0), msgs[0].store_timestamp)
        self.assertEqual(store.get_commit_log_offset_in_queue("T", 0, 2), msgs[2].commit_log_offset)
        raw = store.select_one_message_by_offset(msgs[4].commit_log_offset)
        looked = store.look_message_by_offset(msgs[4].commit_log_offset)
        assert raw is not None and looked is not None
        self.assertEqual((decode_record(raw).body, looked.body), (msgs[4].body, msgs[4].body))
        self.assertEqual((store.min_physical_offset, store.max_physical_offset),
                         (0, msgs[-1].commit_log_offset + msgs[-1].store_size))

    def test_tag_filter(self) -> None:
        """A pull's tag filter sees the tag hash codes of the queue entries."""
        put_ok(self, self.store, message(TAGS="a"))
        put_ok(self, self.store, message(TAGS="b"))
        result = self.store.get_message("g", "TopicA", 0, 0, 10, lambda code: code == 98)  # hash("b")
        self.assertEqual([decode_record(r).properties["TAGS"] for r in result.records], ["b"])

    def test_reads_during_writes(self) -> None:
        """A reader thread pulling while the writer appends and rolls files sees only whole records."""
        errors: list[Any] = []
        done = threading.Event()

        def read() -> None:
            try:
                while not done.is_set():
                    for body in self.queue_bodies("T", 0):
                        if len(body) != 300:
                            errors.append(body)
            except Exception as e:  # any exception in the reader is a failure
                errors.append(e)
        reader = threading.Thread(target=read)
        reader.start()
        try:
            self.put_many(1000, queues=1, size=300)
        finally:
            done.set()
            reader.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(len(self.queue_bodies("T", 0)), 1000)


class FlushThreadTests(StoreCase):
    def test_flush_while_writing(self) -> None:
        """A flusher thread running beside the writer never claims more than was written."""
        errors: list[Any] = []
        done = threading.Event()

        def flush() -> None:
            try:
                while not done.is_set():
                    self.store.flush(0)
                    if self.store.flushed_offset > self.store.max_physical_offset:
                        errors.append((self.store.flushed_offset, self.store.max_physical_offset))
            except Exception as e:  # any exception in the flusher is a failure
                errors.append(e)
        flusher = threading.Thread(target=flush)
        flusher.start()
        try:
            self.put_many(500, size=700)
        finally:
            done.set()
            flusher.join(30)
        self.assertEqual(errors, [])
        self.store.flush(0)
        self.assertEqual(self.store.flushed_offset, self.store.max_physical_offset)


class PageCacheTests(StoreCase):
    """The commit log's pages behind the flushed offset, the queues' and the index's ahead of their writers."""

    def test_pages_dropped_behind_the_flushed_offset(self) -> None:
        """With ``commit_log_page_cache_keep``, ``trail_page_cache`` drops the log's whole chunks
        more than that far behind the flushed offset, across files, but not a chunk a pull just
        read; what was dropped still reads the same. 0 drops nothing."""
        chunk = 2 * OS_PAGE_SIZE
        self.patch(pagecache, "CHUNK", chunk)
        for keep in (0, 3 * OS_PAGE_SIZE):
            store = self.open_store(small_config(self.mktemp(), commit_log_write_path="mmap",
                                                 commit_log_page_cache_keep=keep))
            dropped: list[tuple[int, int]] = []
            real = store.commit_log.queue.drop_cache

            def drop_cache(start: int, end: int, real: Any = real, dropped: list[tuple[int, int]] = dropped) -> None:
                dropped.append((start, end))
                real(start, end)

            self.patch(store.commit_log.page_cache, "_drop", drop_cache)
            self.store = store
            self.put_many(10, size=500)  # ~1 page
            store.flush(0)
            store.trail_page_cache()
            self.assertEqual(dropped, [])
            self.put_many(200, size=500)  # past the first 64 KiB file
            store.flush(0)
            read = store.get_message("G", "T", 1, 0, 1)  # a pull of queue 1's first record
            self.assertEqual(read.status, GetMessageStatus.FOUND)
            held = decode_record(read.records[0]).commit_log_offset // chunk
            store.trail_page_cache()
            line = (store.flushed_offset - keep) // chunk
            if keep == 0:
                self.assertEqual(dropped, [])
            else:
                self.assertGreater(line * chunk, SIZE)
                expected = [c for c in range(line) if c != held]
                self.assertEqual([c for start, end in dropped for c in range(start // chunk, end // chunk)],
                                 expected)
            bodies = self.queue_bodies("T", 0, store) + self.queue_bodies("T", 1, store)
            self.assertEqual(len(bodies), 210)

    def test_queues_and_index_faulted_in_ahead(self) -> None:
        """populate_ahead faults in (MADV_POPULATE_WRITE) each consume queue's next pages and the
        index's hash slots and next entries; not again while enough lies ahead."""
        calls: list[tuple[int, int]] = []

        def madvise(address: int, length: int, advice: int) -> int:
            calls.append((address, length))
            return 0

        self.patch(mappedfile, "_libc_madvise", madvise)
        store = self.open_store(small_config(self.mktemp(), commit_log_write_path="mmap",
                                             mapped_file_size_consume_queue=100_000 * 20,
                                             max_hash_slot_num=100_000, max_index_num=100_000))
        self.store = store
        self.put_many(2)
        cq = store.consume_queues.get("T", 0)
        assert cq is not None
        queue_file, index = cq.files.last(), store.index.files[-1]
        assert queue_file is not None
        del calls[:]
        store.populate_ahead()
        window = mappedfile.FAULT_IN_WINDOW
        slots_end = index._entries_at
        self.assertIn((queue_file._mapped_address(), window + OS_PAGE_SIZE), calls)  # from page 0 to 20 + a window
        base = index.mapped._mapped_address()
        self.assertIn((base, slots_end - slots_end % OS_PAGE_SIZE + OS_PAGE_SIZE), calls)
        count = len(calls)
        store.populate_ahead()
        self.assertEqual(len(calls), count)
        self.assertEqual(len(self.queue_bodies("T", 0, store)), 1)

    def test_queues_faulted_in_round_robin(self) -> None:
        """populate_ahead visits at most POPULATE_QUEUES queues a call, taking up where it stopped."""
        self.patch(consumequeue, "POPULATE_QUEUES", 3)
        visited: list[tuple[str, int]] = []
        self.patch(mappedfile.MappedFile, "fault_in_ahead",
                   lambda mf, position, window: visited.append(tuple(mf.path.split(os.sep)[-3:-1])))
        for queue_id in range(4):
            put_ok(self, self.store, message("T", queue_id=queue_id))
        rounds = []
        for _ in range(3):
            del visited[:]
            self.store.consume_queues.populate_ahead()
            rounds.append([queue for _, queue in visited])
        self.assertEqual(rounds, [["0", "1", "2"], ["3", "0", "1"], ["2", "3", "0"]])


class ReplicationTests(StoreCase):
    def test_slave_follows_master(self) -> None:
        """A slave fed the master's commit-log bytes has identical files and serves the same queues."""
        msgs = self.put_many(250)
        slave = self.open_store(small_config(self.mktemp(), broker_role="SLAVE"))
        offset = 0
        while offset < self.store.max_physical_offset:
            data = self.store.get_commit_log_data(offset)
            assert data is not None
            for start in range(0, len(data), 32 * 1024):
                self.assertTrue(slave.append_to_commit_log(offset + start, data[start : start + 32 * 1024]))
            offset += len(data)
        self.assertEqual(slave.max_physical_offset, self.store.max_physical_offset)
        for mine, theirs in zip(self.store.commit_log.queue.mapped_files, slave.commit_log.queue.mapped_files):
            with open(mine.path, "rb") as a, open(theirs.path, "rb") as b:
                self.assertEqual(a.read(), b.read())
        self.assertEqual(self.queue_bodies("T", 1, slave), [m.body for m in msgs[1::2]])
        self.assertFalse(slave.append_to_commit_log(offset + 5, b"gap"))

    def test_slave_restart_mid_record_resumes_with_every_queue_entry(self) -> None:
        """A slave stopped (cleanly, then killed) after a block ending inside a record reopens at
        that record's start; fed the rest of the log from there, its queues hold every message."""
        msgs = self.put_many(150)
        data = self.store.get_commit_log_data(0)  # the first file
        assert data is not None
        config = small_config(self.mktemp(), broker_role="SLAVE")
        slave = self.open_store(config)
        self.assertTrue(slave.append_to_commit_log(0, data[: msgs[40].commit_log_offset + 30]))
        slave.shutdown()
        slave = self.open_store(config)
        self.assertEqual(slave.max_physical_offset, msgs[40].commit_log_offset)
        self.assertEqual(slave.get_max_offset_in_queue("T", 0), 20)
        self.assertTrue(slave.append_to_commit_log(slave.max_physical_offset, data[
            msgs[40].commit_log_offset : msgs[80].commit_log_offset + 30]))
        kill(slave)
        slave = self.open_store(config)
        self.assertEqual((slave.last_exit_ok, slave.max_physical_offset), (False, msgs[80].commit_log_offset))
        self.assertEqual(slave.get_max_offset_in_queue("T", 0), 40)
        self.assertTrue(slave.append_to_commit_log(slave.max_physical_offset, data[msgs[80].commit_log_offset :]))
        self.assertEqual(slave.max_physical_offset, SIZE)
        held = [m for m in msgs if m.commit_log_offset < SIZE]
        self.assertEqual(self.queue_bodies("T", 0, slave), [m.body for m in held if m.queue_id == 0])
        self.assertEqual(self.queue_bodies("T", 1, slave), [m.body for m in held if m.queue_id == 1])
