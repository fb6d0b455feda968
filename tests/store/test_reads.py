"""Pull reads: every getMessage status of doc/wire.md §5, next offsets, scan limits and batch caps."""

from __future__ import annotations

import struct

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.message import MessageExt, decode_record, encode_record, patch_record, tags_code
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.consumequeue import ConsumeQueueStore
from rocketpy.store.dispatch import DispatchRequest
from rocketpy.store.reads import MessageReader, TagFilter, store_timestamp_of
from rocketpy.store.status import GetMessageResult, GetMessageStatus

LOG_FILE_SIZE = 4096
T0 = 1_700_000_000_000


class FakeCommitLog:
    """An in-memory commit log: one bytearray; bytes below ``min_offset`` count as deleted."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.min_offset = 0
        self.reads = 0
        self.noted: list[int] = []  # note_read offsets

    @property
    def max_offset(self) -> int:
        return len(self.data)

    def get_data(self, offset: int, size: int) -> bytes | None:
        self.reads += 1
        if offset < self.min_offset or offset + size > len(self.data):
            return None
        return bytes(self.data[offset : offset + size])

    def note_read(self, offset: int) -> None:
        self.noted.append(offset)


class ReadTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.config = MessageStoreConfig(
            store_path_root_dir=self.mktemp(), mapped_file_size_consume_queue=1000 * 20,
            mapped_file_size_commit_log=LOG_FILE_SIZE,
        )
        self.log = FakeCommitLog()
        self.queues = ConsumeQueueStore(self.config)
        self.addCleanup(self.queues.close)
        self.reader = self.make_reader()

    def make_reader(self, total_memory: int = 1 << 40) -> MessageReader:
        return MessageReader(self.queues, self.log, self.config, total_memory=total_memory)

    def put(self, count: int, body_size: int = 10, tags: str = "A", queue_id: int = 0) -> None:
        """Append ``count`` records to the fake log and dispatch them to queue ``T``/``queue_id``."""
        for _ in range(count):
            cq = self.queues.find("T", queue_id)
            msg = MessageExt(topic="T", body=b"b" * body_size, queue_id=queue_id, properties={"TAGS": tags})
            record = encode_record(msg)
            offset, ts = len(self.log.data), T0 + cq.max_offset * 1000
            patch_record(record, cq.max_offset, offset, ts)
            self.log.data += record
            self.queues.dispatch(DispatchRequest(
                "T", queue_id, offset, len(record), tags_code(tags), ts, cq.max_offset, None, None, 0, 0,
            ))

    def get(self, offset: int, max_msg_nums: int = 32, tag_filter: TagFilter | None = None,
            queue_id: int = 0) -> GetMessageResult:
        return self.reader.get_message("G", "T", queue_id, offset, max_msg_nums, tag_filter)

    def assert_result(self, result: GetMessageResult, status: GetMessageStatus, next_offset: int, count: int) -> None:
        self.assertEqual((result.status, result.next_begin_offset, result.message_count),
                         (status, next_offset, count))

    def test_no_message_in_queue(self) -> None:
        """An empty queue: NO_MESSAGE_IN_QUEUE, next 0, whatever the requested offset."""
        self.assert_result(self.get(5), GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0)

    def test_offset_too_small(self) -> None:
        """Below the queue minimum: OFFSET_TOO_SMALL, next = min."""
        self.put(1)
        self.queues.find("T", 0).min_logic_offset = 20
        self.put(2)
        result = self.get(0)
        self.assert_result(result, GetMessageStatus.OFFSET_TOO_SMALL, 1, 0)
        self.assertEqual((result.min_offset, result.max_offset), (1, 3))

    def test_offset_overflow(self) -> None:
        """At max: OFFSET_OVERFLOW_ONE, next = offset; beyond: OFFSET_OVERFLOW_BADLY, next = max."""
        self.put(3)
        self.assert_result(self.get(3), GetMessageStatus.OFFSET_OVERFLOW_ONE, 3, 0)
        self.assert_result(self.get(9), GetMessageStatus.OFFSET_OVERFLOW_BADLY, 3, 0)

    def test_pull_notes_where_it_reads(self) -> None:
        """Each pull that finds entries tells the log where it reads (the page-cache trail keeps
        that chunk cached); one that finds none does not."""
        self.put(5, queue_id=0)
        self.put(5, queue_id=1)
        self.get(3, queue_id=1)
        self.get(5, queue_id=1)
        first_of_queue_1 = self.queues.find("T", 1).entries_from(3, 20)
        assert first_of_queue_1 is not None
        self.assertEqual(self.log.noted, [struct.unpack_from(">q", first_of_queue_1)[0]])

    def test_offset_found_null(self) -> None:
        """The queue file holding the offset is gone: OFFSET_FOUND_NULL, next = the next file's start."""
        self.put(1005)
        cq = self.queues.find("T", 0)
        cq.files.delete_files_below(10 ** 9, lambda mf: 0)  # without moving the minimum
        self.assert_result(self.get(7), GetMessageStatus.OFFSET_FOUND_NULL, 1000, 0)

    def test_found(self) -> None:
        """Readable records come back raw, in queue order; next is past the last one taken."""
        self.put(5)
        result = self.get(1, max_msg_nums=3)
        self.assert_result(result, GetMessageStatus.FOUND, 4, 3)
        self.assertEqual([decode_record(r).queue_offset for r in result.records], [1, 2, 3])
        self.assertEqual((result.min_offset, result.max_offset), (0, 5))
        self.assertFalse(result.suggest_pulling_from_slave)

    def test_tag_filter(self) -> None:
        """Entries the filter rejects are skipped but counted in next."""
        self.put(2, tags="A")
        self.put(2, tags="B")
        self.put(1, tags="A")
        wanted = tags_code("A")
        result = self.get(0, tag_filter=lambda code: code == wanted)
        self.assert_result(result, GetMessageStatus.FOUND, 5, 3)
        self.assertEqual([decode_record(r).queue_offset for r in result.records], [0, 1, 4])

    def test_no_matched_message_advances(self) -> None:
        """All scanned entries filtered out: NO_MATCHED_MESSAGE, next = offset + scanned (> offset)."""
        self.put(10, tags="B")
        result = self.get(3, tag_filter=lambda code: False)
        self.assert_result(result, GetMessageStatus.NO_MATCHED_MESSAGE, 10, 0)

    def test_scan_limit(self) -> None:
        """One pull scans at most max(16000, max_msg_nums × 20) bytes of queue."""
        self.put(900, body_size=1)
        self.assert_result(self.get(0, tag_filter=lambda code: False), GetMessageStatus.NO_MATCHED_MESSAGE, 800, 0)
        result = self.get(0, max_msg_nums=1000, tag_filter=lambda code: False)
        self.assert_result(result, GetMessageStatus.NO_MATCHED_MESSAGE, 900, 0)

    def test_scan_stops_at_queue_file_end(self) -> None:
        """The scan ends with the current queue file; the next pull continues in the next one."""
        self.put(1003, body_size=1)
        self.assert_result(self.get(990, tag_filter=lambda code: False), GetMessageStatus.NO_MATCHED_MESSAGE, 1000, 0)
        self.assert_result(self.get(1000), GetMessageStatus.FOUND, 1003, 3)

    def test_message_was_removing(self) -> None:
        """Records gone from the log: MESSAGE_WAS_REMOVING, next past the scanned entries."""
        self.put(6)
        self.log.min_offset = len(self.log.data)
        self.assert_result(self.get(0), GetMessageStatus.MESSAGE_WAS_REMOVING, 6, 0)

    def test_log_miss_jumps_to_next_log_file(self) -> None:
        """After a miss the rest of that log file is skipped without reads; later records are found."""
        self.put(60)
        cq = self.queues.find("T", 0)
        self.log.min_offset = LOG_FILE_SIZE
        first_kept = next(i for i in range(60) if cq.get_entry(i)[0] >= LOG_FILE_SIZE)  # type: ignore[index]
        self.log.reads = 0
        result = self.get(0, max_msg_nums=5)
        self.assert_result(result, GetMessageStatus.FOUND, first_kept + 5, 5)
        self.assertEqual(self.log.reads, 1 + 5)
        self.assertEqual(decode_record(result.records[0]).queue_offset, first_kept)

    def test_in_memory_caps(self) -> None:
        """In memory: at most 32 messages and 256 KiB per pull, but never less than one message."""
        self.put(40)
        self.assert_result(self.get(0, max_msg_nums=100), GetMessageStatus.FOUND, 32, 32)
        self.put(3, body_size=100 * 1024)
        self.assert_result(self.get(40, max_msg_nums=100), GetMessageStatus.FOUND, 42, 2)
        self.put(1, body_size=300 * 1024, queue_id=1)
        self.assert_result(self.get(0, queue_id=1), GetMessageStatus.FOUND, 1, 1)

    def test_on_disk_caps_and_slave_suggestion(self) -> None:
        """Far behind the log end (> 40 % of RAM): 8 messages / 64 KiB per pull, and pull from a slave."""
        self.put(20)
        self.put(5, body_size=30 * 1024)
        self.reader = self.make_reader(total_memory=1000)
        result = self.get(0, max_msg_nums=100)
        self.assert_result(result, GetMessageStatus.FOUND, 8, 8)
        self.assertTrue(result.suggest_pulling_from_slave)
        self.assert_result(self.get(20, max_msg_nums=100), GetMessageStatus.FOUND, 22, 2)
        self.assertFalse(self.make_reader().get_message("G", "T", 0, 0, 100).suggest_pulling_from_slave)

    def test_time_lookups(self) -> None:
        """Offset by time, earliest message time and commit-log offset of an entry read the log."""
        self.put(5)
        self.assertEqual(self.reader.get_offset_in_queue_by_time("T", 0, T0 + 2500), 3)
        self.assertEqual(self.reader.get_offset_in_queue_by_time("T", 0, T0 + 99_000), 5)
        self.assertEqual(self.reader.get_earliest_message_time("T", 0), T0)
        self.assertEqual(self.reader.get_earliest_message_time("T", 9), -1)
        offset = self.queues.find("T", 0).get_entry(2)[0]  # type: ignore[index]
        self.assertEqual(self.reader.get_commit_log_offset_in_queue("T", 0, 2), offset)
        self.assertEqual(self.reader.get_commit_log_offset_in_queue("T", 0, 7), 0)

    def test_consume_time_span(self) -> None:
        """Oldest, newest, last consumed and next store times of a queue (QUERY_CONSUME_TIME_SPAN)."""
        self.put(5)  # store times T0 + 0 s … T0 + 4 s
        self.assertEqual(self.reader.query_consume_time_span("T", 0, 2), (T0, T0 + 4000, T0 + 1000, T0 + 2000))
        self.assertEqual(self.reader.query_consume_time_span("T", 0, -1), (T0, T0 + 4000, T0, T0))  # none committed
        self.assertEqual(self.reader.query_consume_time_span("T", 0, 5), (T0, T0 + 4000, T0 + 4000, -1))  # at the end
        self.assertEqual(self.reader.query_consume_time_span("T", 7, 0), (-1, -1, -1, -1))  # an empty queue

    def test_store_timestamp_of_ipv6_born_host(self) -> None:
        """The store time sits 12 bytes further when the born host is IPv6."""
        record = bytearray(100)
        record[36:40] = (0x10).to_bytes(4, "big")
        record[68:76] = (T0 + 7).to_bytes(8, "big")
        self.log.data += record
        self.assertEqual(store_timestamp_of(self.log, 0, 100), T0 + 7)
        self.assertEqual(store_timestamp_of(self.log, 50, 100), -1)
