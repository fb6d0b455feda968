"""Consume queues: entry layout, duplicates, pre-fill, recovery, truncation, retention, dispatch."""

from __future__ import annotations

import os
import struct

from twisted.logger import LogLevel
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.consumequeue import PREFILL_SIZE, ConsumeQueue, ConsumeQueueStore
from rocketpy.store.dispatch import DispatchRequest
from tests.logs import assert_logs
from rocketpy.store.mappedfile import MappedFile

ENTRIES_PER_FILE = 10
FILE_SIZE = ENTRIES_PER_FILE * 20
SIZE = 100  # every fake record is 100 bytes long


def request(topic: str = "T", queue_id: int = 0, cq_offset: int = 0, sys_flag: int = 0,
            phy: int | None = None, store_timestamp: int = 1000) -> DispatchRequest:
    """A dispatch request for the ``cq_offset``-th 100-byte record of a queue."""
    return DispatchRequest(
        topic=topic, queue_id=queue_id, commit_log_offset=cq_offset * SIZE if phy is None else phy,
        msg_size=SIZE, tags_code=cq_offset + 7, store_timestamp=store_timestamp,
        consume_queue_offset=cq_offset, keys=None, uniq_key=None, sys_flag=sys_flag,
        prepared_transaction_offset=0,
    )


class ConsumeQueueTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = self.mktemp()
        self.cq = self.open()

    def open(self) -> ConsumeQueue:
        cq = ConsumeQueue("T", 3, self.root, FILE_SIZE)
        self.addCleanup(cq.close)
        return cq

    def fill(self, cq: ConsumeQueue, count: int, first: int = 0) -> None:
        for i in range(first, first + count):
            self.assertTrue(cq.put(i * SIZE, SIZE, i + 7, i))

    def reopen(self) -> ConsumeQueue:
        self.cq.close()
        cq = self.open()
        self.assertTrue(cq.load())
        cq.recover()
        return cq

    def test_entry_bytes(self) -> None:
        """Entries are i64 offset, i32 size, i64 tags code at offset × 20 in files named by byte offset."""
        self.fill(self.cq, 12)
        queue_dir = os.path.join(self.root, "T", "3")
        self.assertEqual(sorted(os.listdir(queue_dir)), ["%020d" % 0, "%020d" % FILE_SIZE])
        with open(os.path.join(queue_dir, "%020d" % FILE_SIZE), "rb") as f:
            data = f.read()
        self.assertEqual(len(data), FILE_SIZE)
        self.assertEqual(data[:20], struct.pack(">qiq", 1000, SIZE, 17))
        self.assertEqual(data[20:40], struct.pack(">qiq", 1100, SIZE, 18))
        self.assertEqual(data[40:], bytes(FILE_SIZE - 40))
        self.assertEqual((self.cq.min_offset, self.cq.max_offset), (0, 12))
        self.assertEqual(self.cq.get_entry(11), (1100, SIZE, 18))
        self.assertIsNone(self.cq.get_entry(12))

    def test_get_entries(self) -> None:
        """Up to ``count`` entries from an offset, within its file (QUERY_CONSUME_QUEUE)."""
        self.fill(self.cq, 12)  # 10 entries per file
        self.assertEqual(self.cq.get_entries(8, 5), [(800, SIZE, 15), (900, SIZE, 16)])
        self.assertEqual(self.cq.get_entries(10, 1), [(1000, SIZE, 17)])
        self.assertIsNone(self.cq.get_entries(12, 3))

    def test_duplicates_ignored(self) -> None:
        """A record at or below the newest one, or an already written position, is not written again."""
        self.fill(self.cq, 3)
        self.assertFalse(self.cq.put(200, SIZE, 9, 2))
        self.assertFalse(self.cq.put(100, SIZE, 9, 5))
        self.cq.max_physic_offset = 0  # as if rebuilt: the position check alone must hold
        self.assertFalse(self.cq.put(900, SIZE, 9, 1))
        self.assertEqual(self.cq.max_offset, 3)
        self.assertEqual(self.cq.get_entry(1), (100, SIZE, 8))

    def test_gap_appends_at_next_free_position(self) -> None:
        """A gap is logged and, as RocketMQ, the entry lands at the next free position."""
        self.fill(self.cq, 2)
        with assert_logs(self, "rocketpy.store.consumequeue", LogLevel.warn) as logged:
            self.assertTrue(self.cq.put(500, SIZE, 1, 5))
        self.assertIn("expected offset 100, next free is 40", logged[0])
        self.assertEqual(self.cq.get_entry(2), (500, SIZE, 1))
        self.assertEqual(self.cq.max_offset, 3)

    def test_prefill_for_non_zero_first_offset(self) -> None:
        """A queue whose first entry is offset 13 starts with (0, 0x7FFFFFFF, 0) fillers and min 13."""
        self.assertTrue(self.cq.put(5000, SIZE, 4, 13))
        self.assertEqual(os.listdir(os.path.join(self.root, "T", "3")), ["%020d" % FILE_SIZE])
        self.assertEqual((self.cq.min_offset, self.cq.max_offset), (13, 14))
        with open(os.path.join(self.root, "T", "3", "%020d" % FILE_SIZE), "rb") as f:
            data = f.read()
        self.assertEqual(data[:60], struct.pack(">qiq", 0, PREFILL_SIZE, 0) * 3)
        self.assertEqual(data[60:80], struct.pack(">qiq", 5000, SIZE, 4))
        self.assertEqual(self.cq.get_entry(13), (5000, SIZE, 4))
        self.assertIsNone(self.cq.get_entry(12))
        cq = self.reopen()
        self.assertEqual((cq.max_offset, cq.max_physic_offset), (14, 5100))
        cq.correct_min_offset(0)
        self.assertEqual(cq.min_offset, 13)

    def test_recovery_drops_torn_tail(self) -> None:
        """Recovery keeps entries up to the first one with size ≤ 0 and drops later files."""
        self.fill(self.cq, 14)
        self.cq.flush()
        path = os.path.join(self.root, "T", "3", "%020d" % FILE_SIZE)
        with open(path, "r+b") as f:  # entry 12 torn: its size never reached the disk
            f.seek(2 * 20 + 8)
            f.write(struct.pack(">i", 0))
        later = os.path.join(self.root, "T", "3", "%020d" % (2 * FILE_SIZE))
        with open(later, "wb") as f:
            f.write(struct.pack(">qiq", 9999, SIZE, 0).ljust(FILE_SIZE, b"\0"))
        cq = self.reopen()
        self.assertEqual((cq.max_offset, cq.max_physic_offset), (12, 1200))
        self.assertFalse(os.path.exists(later))
        with open(path, "rb") as f:
            self.assertEqual(f.read()[40:], bytes(FILE_SIZE - 40))
        self.assertTrue(cq.put(1200, SIZE, 0, 12))

    def test_recovery_of_full_files(self) -> None:
        """Exactly full files recover whole; the walk starts at the third-last file."""
        self.fill(self.cq, 4 * ENTRIES_PER_FILE)
        cq = self.reopen()
        self.assertEqual((cq.max_offset, cq.max_physic_offset), (40, 4000))
        self.assertTrue(cq.put(4000, SIZE, 0, 40))
        self.assertEqual(cq.max_offset, 41)

    def test_recovery_reads_only_entries_past_the_durable_offset(self) -> None:
        """Entries of records below the checkpoint's offset are durable: a binary search finds where
        they end and the walk reads entry by entry only from there, stopping at the first invalid
        entry as a walk from the third-last file does."""
        self.fill(self.cq, 25)
        self.cq.flush()
        path = os.path.join(self.root, "T", "3", "%020d" % FILE_SIZE)
        with open(path, "r+b") as f:  # entry 18 torn: a size of 0
            f.seek(8 * 20 + 8)
            f.write(struct.pack(">i", 0))
        self.cq.close()
        reads: list[tuple[int, int]] = []
        real_select = MappedFile.select

        def select(mf: MappedFile, position: int, size: int = -1) -> bytes | None:
            reads.append((mf.file_from_offset + position, size))
            return real_select(mf, position, size)
        self.patch(MappedFile, "select", select)
        for durable_below, first_read in ((0, 0), (1000, 10 * 20), (1500, 15 * 20), (1800, 18 * 20)):
            del reads[:]
            cq = self.open()
            self.assertTrue(cq.load())
            cq.recover(durable_below)
            self.assertEqual((cq.max_offset, cq.max_physic_offset), (18, 1800), durable_below)
            self.assertEqual(reads[0][0], first_read, durable_below)
            cq.close()

    def test_truncate_dirty(self) -> None:
        """Entries whose record starts at or after the log end go, even across files."""
        self.fill(self.cq, 25)
        self.cq.truncate_dirty(1450)
        self.assertEqual((self.cq.max_offset, self.cq.max_physic_offset), (15, 1500))
        self.assertEqual(len(self.cq.files.mapped_files), 2)
        self.cq.truncate_dirty(1000)
        self.assertEqual((self.cq.max_offset, self.cq.max_physic_offset), (10, 1000))
        self.assertIsNone(self.cq.get_entry(10))
        self.assertTrue(self.cq.put(1000, SIZE, 0, 10))
        self.cq.truncate_dirty(0)
        self.assertEqual((self.cq.max_offset, self.cq.max_physic_offset), (0, -1))

    def test_truncate_keeps_prefill(self) -> None:
        """Cutting every real entry leaves the fillers, and the newest record end is then unknown."""
        self.cq.put(5000, SIZE, 4, 3)
        self.cq.truncate_dirty(5000)
        self.assertEqual((self.cq.max_offset, self.cq.max_physic_offset), (3, -1))
        self.assertTrue(self.cq.put(100, SIZE, 4, 3))

    def test_offset_by_time(self) -> None:
        """The first offset stored at or after a time, by binary search over all files."""
        self.fill(self.cq, 25)
        times = {i * SIZE: 1000 + 10 * (i // 2) for i in range(25)}  # two records per 10 ms

        def store_time(phy: int, size: int) -> int:
            return times[phy]

        self.assertEqual(self.cq.offset_by_time(0, store_time), 0)
        self.assertEqual(self.cq.offset_by_time(1050, store_time), 10)
        self.assertEqual(self.cq.offset_by_time(1051, store_time), 12)
        self.assertEqual(self.cq.offset_by_time(9999, store_time), 25)
        self.assertEqual(self.cq.offset_by_time(0, store_time, min_physic_offset=700), 7)

    def test_correct_min_offset_and_delete_expired(self) -> None:
        """Files whose last entry is below the log minimum go (never the newest); min follows the log."""
        self.fill(self.cq, 25)
        self.assertEqual(self.cq.delete_expired(1900), 1)
        first = self.cq.files.first()
        assert first is not None
        self.assertEqual(first.file_from_offset, FILE_SIZE)
        self.assertEqual(self.cq.min_offset, 19)
        self.assertEqual(self.cq.delete_expired(99999), 1)
        self.assertEqual(len(self.cq.files.mapped_files), 1)
        self.assertEqual((self.cq.min_offset, self.cq.max_offset), (25, 25))

    def test_flush(self) -> None:
        """flush reports progress only when something new became durable."""
        self.assertFalse(self.cq.flush())
        self.fill(self.cq, 2)
        self.assertTrue(self.cq.flush())
        self.assertFalse(self.cq.flush())
        self.fill(self.cq, 1, first=2)
        self.assertFalse(self.cq.flush(least_pages=1))
        self.assertTrue(self.cq.flush(0))


class ConsumeQueueStoreTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.config = MessageStoreConfig(store_path_root_dir=self.mktemp(), mapped_file_size_consume_queue=FILE_SIZE)
        self.store = self.open()

    def open(self) -> ConsumeQueueStore:
        store = ConsumeQueueStore(self.config)
        self.addCleanup(store.close)
        return store

    def test_dispatch_routes_and_skips_prepared_and_rollback(self) -> None:
        """Records go to their (topic, queue); PREPARED and ROLLBACK ones do not, COMMIT ones do."""
        self.store.dispatch(request("A", 0, 0, store_timestamp=5))
        self.store.dispatch(request("A", 1, 0, phy=100))
        self.store.dispatch(request("B", 0, 0, phy=200, sys_flag=0x4))
        self.store.dispatch(request("B", 0, 0, phy=300, sys_flag=0xC))
        self.store.dispatch(request("B", 0, 0, phy=400, sys_flag=0x8 | 0x2, store_timestamp=9))
        self.assertEqual(self.store.find("A", 1).get_entry(0), (100, SIZE, 7))
        self.assertEqual(self.store.find("B", 0).get_entry(0), (400, SIZE, 7))
        self.assertEqual(self.store.find("B", 0).max_offset, 1)
        self.assertEqual(self.store.logics_msg_timestamp, 9)
        self.assertIsNone(self.store.get("C", 0))
        self.assertIs(self.store.find("C", 0), self.store.find("C", 0))

    def test_load_recover_and_tables(self) -> None:
        """A reopened store finds every queue on disk, its offsets and the highest record end."""
        for i in range(12):
            self.store.dispatch(request("A", 0, i, phy=i * 2 * SIZE))
            self.store.dispatch(request("B", 2, i, phy=(i * 2 + 1) * SIZE))
        self.store.close()
        store = self.open()
        self.assertTrue(store.load())
        store.recover()
        self.assertEqual(store.queue_offset_table(), {"A-0": 12, "B-2": 12})
        self.assertEqual(store.max_physic_offset, 24 * SIZE)
        store.truncate_dirty(20 * SIZE)
        self.assertEqual(store.queue_offset_table(), {"A-0": 10, "B-2": 10})
        self.assertEqual(store.max_physic_offset, 20 * SIZE)
        self.assertFalse(store.flush())
        store.dispatch(request("A", 0, 10, phy=20 * SIZE))
        self.assertTrue(store.flush())
        self.assertEqual(store.delete_expired(20 * SIZE), 2)
        self.assertEqual([(cq.min_offset, cq.max_offset) for cq in store.queues], [(10, 11), (10, 10)])

    def test_load_rejects_wrong_file_size(self) -> None:
        """A queue file of another size makes load fail."""
        queue_dir = os.path.join(self.config.consume_queue_dir, "A", "0")
        os.makedirs(queue_dir)
        with open(os.path.join(queue_dir, "%020d" % 0), "wb") as f:
            f.write(bytes(FILE_SIZE + 20))
        with assert_logs(self, "rocketpy.store.mappedfilequeue", LogLevel.error):
            self.assertFalse(self.open().load())

    def test_empty_store(self) -> None:
        """Without a consumequeue directory load succeeds and there is nothing to point at."""
        self.assertTrue(self.store.load())
        self.assertEqual(self.store.max_physic_offset, -1)
        self.assertEqual(self.store.queue_offset_table(), {})

    def test_destroy(self) -> None:
        """destroy deletes every queue file and forgets the queues."""
        self.store.dispatch(request("A", 0, 0))
        self.store.destroy()
        self.assertEqual(self.store.queues, [])
        self.assertEqual(os.listdir(os.path.join(self.config.consume_queue_dir, "A", "0")), [])
