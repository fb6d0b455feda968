"""Tests for the commit log: record layout, rolls, queue offsets, statuses, recovery, HA append."""

from __future__ import annotations

import errno
import os
import struct
from typing import Any

from twisted.logger import LogLevel
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from rocketpy.common.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MessageExt,
    MessageSysFlag,
    body_crc,
    check_record,
    decode_offset_msg_id,
    encode_record,
    java_hash,
)
from rocketpy.common.topic import SCHEDULE_TOPIC
from rocketpy.store.commitlog import CommitLog
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.dispatch import DispatchRequest, IDispatcher
from rocketpy.store.recovery import recover_abnormally, recover_normally
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from rocketpy.store.reads import message_at, record_at
from tests.logs import assert_logs

SIZE = 64 * 1024
T0 = 1_700_000_000_000


class FakeClock:
    """A settable millisecond clock."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@implementer(IDispatcher)
class RecordingDispatcher:
    """Keeps every request; runs ``during`` inside each dispatch (i.e. inside the put lock)."""

    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []
        self.during: Any = None

    def dispatch(self, request: DispatchRequest) -> None:
        self.requests.append(request)
        if self.during is not None:
            self.during()


def small_config(root: str, **overrides: Any) -> MessageStoreConfig:
    """A store configuration with 64 KiB commit-log files and small queues and index."""
    settings: dict[str, Any] = dict(
        store_path_root_dir=root, mapped_file_size_commit_log=SIZE, mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64, max_index_num=256, store_host=("10.0.0.7", 10911),
    )
    settings.update(overrides)
    return MessageStoreConfig(**settings)


def message(topic: str = "TopicA", body: bytes = b"hello", queue_id: int = 0, sys_flag: int = 0,
            **properties: str) -> MessageExt:
    """A message as a broker would hand it to the store."""
    return MessageExt(topic=topic, body=body, queue_id=queue_id, sys_flag=sys_flag, properties=dict(properties),
                      born_timestamp=T0 - 5, born_host=("192.168.1.2", 50000))


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def put_ok(test: SynchronousTestCase, target: Any, msg: MessageExt) -> PutMessageResult:
    """Put ``msg`` and insist it was stored."""
    result: PutMessageResult = target.put_message(msg)
    test.assertEqual(result.status, PutMessageStatus.PUT_OK)
    return result


class CommitLogCase(SynchronousTestCase):
    """A fresh commit log with a recording dispatcher and a fake clock."""

    write_path = "pwrite"

    def setUp(self) -> None:
        self.clock = FakeClock()
        self.dispatcher = RecordingDispatcher()
        self.config = small_config(self.mktemp(), commit_log_write_path=self.write_path)
        self.log = self.open_log()

    def open_log(self) -> CommitLog:
        log = CommitLog(self.config, [self.dispatcher], self.clock)
        self.assertTrue(log.load())
        self.addCleanup(log.close)
        return log

    def file_bytes(self, index: int = 0) -> bytes:
        return read_file(self.log.queue.mapped_files[index].path)


class RecordLayoutTests(CommitLogCase):
    def test_every_field_at_its_offset(self) -> None:
        """A stored record has RocketMQ's v1 layout, checked field by field in the file itself."""
        put_ok(self, self.log, message(queue_id=3))
        msg = MessageExt(topic="TopicA", body=b"hello world", flag=7, queue_id=3, born_timestamp=T0 - 9,
                         born_host=("192.168.1.2", 50000), reconsume_times=2, prepared_transaction_offset=77,
                         properties={"TAGS": "tagA", "KEYS": "k1 k2"})
        self.clock.now = T0 + 1
        result = put_ok(self, self.log, msg)
        assert result.append is not None
        at = result.append.wrote_offset
        data = self.file_bytes()
        props = "TAGS\x01tagA\x02KEYS\x01k1 k2".encode()
        size = 91 + 11 + 6 + len(props)

        def field(fmt: str, offset: int) -> Any:
            return struct.unpack_from(">" + fmt, data, at + offset)[0]

        self.assertEqual(result.append.wrote_bytes, size)
        self.assertEqual(field("i", 0), size)
        self.assertEqual(field("i", 4), MAGIC_CODE)
        self.assertEqual(field("i", 8), body_crc(b"hello world"))
        self.assertEqual(field("i", 12), 3)
        self.assertEqual(field("i", 16), 7)
        self.assertEqual(field("q", 20), 1)  # second message of TopicA-3
        self.assertEqual(field("q", 28), at)
        self.assertEqual(field("i", 36), 0)
        self.assertEqual(field("q", 40), T0 - 9)
        self.assertEqual(data[at + 48 : at + 56], bytes([192, 168, 1, 2]) + struct.pack(">i", 50000))
        self.assertEqual(field("q", 56), T0 + 1)
        self.assertEqual(data[at + 64 : at + 72], bytes([10, 0, 0, 7]) + struct.pack(">i", 10911))
        self.assertEqual(field("i", 72), 2)
        self.assertEqual(field("q", 76), 77)
        self.assertEqual(field("i", 84), 11)
        self.assertEqual(data[at + 88 : at + 99], b"hello world")
        self.assertEqual(data[at + 99], 6)
        self.assertEqual(data[at + 100 : at + 106], b"TopicA")
        self.assertEqual(field("h", 106), len(props))
        self.assertEqual(data[at + 108 : at + size], props)
        self.assertEqual(data[at + size : at + size + 8], bytes(8))

    def test_message_id_is_store_host_and_offset(self) -> None:
        """The message id is the store host and the record's commit-log offset."""
        put_ok(self, self.log, message())
        result = put_ok(self, self.log, message())
        assert result.append is not None
        self.assertEqual(decode_offset_msg_id(result.append.msg_ids[0]),
                         (("10.0.0.7", 10911), result.append.wrote_offset))
        self.assertEqual(result.append.next_offset, self.log.max_offset)

    def test_message_updated_in_place(self) -> None:
        """The stored message learns its offsets, store time and size."""
        msg = message()
        self.clock.now = T0 + 50
        put_ok(self, self.log, message())
        put_ok(self, self.log, msg)
        self.assertEqual((msg.queue_offset, msg.store_timestamp, msg.store_host), (1, T0 + 50, ("10.0.0.7", 10911)))
        self.assertEqual(msg.commit_log_offset + msg.store_size, self.log.max_offset)

    def test_roll_with_blank_filler(self) -> None:
        """A record that does not fit leaves a blank filler (remaining, BLANK magic) and opens the next file."""
        body = b"b" * 1000
        starts, ends = [], []
        while self.log.max_offset < SIZE:
            append = put_ok(self, self.log, message(body=body)).append
            assert append is not None
            starts.append(append.wrote_offset)
            ends.append(append.next_offset)
        self.assertEqual(starts[-1], SIZE)
        end = ends[-2]
        data = self.file_bytes(0)
        self.assertEqual(struct.unpack_from(">ii", data, end), (SIZE - end, BLANK_MAGIC_CODE))
        self.assertEqual(data[end + 8 :], bytes(SIZE - end - 8))
        self.assertEqual(os.path.basename(self.log.queue.mapped_files[1].path), "00000000000000065536")
        self.assertEqual(struct.unpack_from(">ii", self.file_bytes(1), 0)[1], MAGIC_CODE)

    def test_queue_offsets_per_topic_queue(self) -> None:
        """Each topic-queue counts its own offsets from 0."""
        offsets = []
        for topic, qid in [("A", 0), ("A", 1), ("A", 0), ("B", 0), ("A", 0)]:
            result = put_ok(self, self.log, message(topic, queue_id=qid))
            assert result.append is not None
            offsets.append(result.append.queue_offset)
        self.assertEqual(offsets, [0, 0, 1, 0, 2])
        self.assertEqual(self.log.topic_queue_table, {"A-0": 3, "A-1": 1, "B-0": 1})

    def test_transaction_queue_offsets(self) -> None:
        """PREPARED and ROLLBACK records get queue offset 0 and do not advance the queue."""
        put_ok(self, self.log, message())
        prepared = put_ok(self, self.log, message(sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))
        rollback = put_ok(self, self.log, message(sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE))
        commit = put_ok(self, self.log, message(sys_flag=MessageSysFlag.TRANSACTION_COMMIT_TYPE))
        assert prepared.append and rollback.append and commit.append
        self.assertEqual([prepared.append.queue_offset, rollback.append.queue_offset, commit.append.queue_offset],
                         [0, 0, 1])
        self.assertEqual(self.log.topic_queue_table, {"TopicA-0": 2})
        self.assertEqual([r.sys_flag for r in self.dispatcher.requests[1:3]],
                         [MessageSysFlag.TRANSACTION_PREPARED_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE])


class BatchTests(CommitLogCase):
    def test_batch_one_result(self) -> None:
        """A batch is appended contiguously under one lock with one result and every message id."""
        put_ok(self, self.log, message())
        msgs = [message(body=b"m%d" % i, KEYS="k%d" % i) for i in range(3)]
        result = self.log.put_messages(msgs)
        assert result.append is not None
        self.assertEqual((result.status, result.append.msg_num, result.append.queue_offset),
                         (PutMessageStatus.PUT_OK, 3, 1))
        self.assertEqual([decode_offset_msg_id(i)[1] for i in result.append.msg_ids],
                         [m.commit_log_offset for m in msgs])
        self.assertEqual(result.append.wrote_bytes, sum(m.store_size for m in msgs))
        self.assertEqual([m.queue_offset for m in msgs], [1, 2, 3])
        self.assertEqual([r.keys for r in self.dispatcher.requests[1:]], ["k0", "k1", "k2"])
        decoded = [message_at(self.log, m.commit_log_offset) for m in msgs]
        self.assertEqual([(d.body, d.queue_offset) for d in decoded if d], [(b"m0", 1), (b"m1", 2), (b"m2", 3)])

    def test_batch_never_split_across_files(self) -> None:
        """A batch that does not fit the rest of a file goes whole into the next one."""
        while self.log.max_offset < SIZE - 3000:
            put_ok(self, self.log, message(body=b"x" * 900))
        result = self.log.put_messages([message(body=b"y" * 900) for _ in range(4)])
        assert result.append is not None
        self.assertEqual(result.append.wrote_offset, SIZE)
        self.assertEqual(self.log.max_offset, SIZE + result.append.wrote_bytes)

    def test_mixed_batch_queue_offsets(self) -> None:
        """A batch of several queues numbers each queue separately."""
        msgs = [message("A"), message("B"), message("A")]
        self.log.put_messages(msgs)
        self.assertEqual([m.queue_offset for m in msgs], [0, 0, 1])
        self.assertEqual(self.log.topic_queue_table, {"A-0": 2, "B-0": 1})

    def test_put_many_independent_results(self) -> None:
        """put_many appends several puts in order, each with its own result; a bad one fails alone."""
        batch = [message(body=b"b%d" % i) for i in range(2)]
        puts = [[message(body=b"one")], [message("t" * 128)], batch, [message("B")], []]
        results = self.log.put_many(puts)
        self.assertEqual([r.status for r in results], [PutMessageStatus.PUT_OK, PutMessageStatus.MESSAGE_ILLEGAL,
                                                       PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK,
                                                       PutMessageStatus.MESSAGE_ILLEGAL])
        first, _, second, third, _ = [r.append for r in results]
        assert first is not None and second is not None and third is not None
        self.assertEqual((first.wrote_offset, first.queue_offset), (0, 0))
        self.assertEqual((second.wrote_offset, second.msg_num, second.queue_offset), (first.next_offset, 2, 1))
        self.assertEqual((third.wrote_offset, third.queue_offset), (second.next_offset, 0))
        self.assertEqual(self.log.max_offset, third.next_offset)
        self.assertEqual(self.log.topic_queue_table, {"TopicA-0": 3, "B-0": 1})
        self.assertEqual([r.commit_log_offset for r in self.dispatcher.requests],
                         [0, batch[0].commit_log_offset, batch[1].commit_log_offset, third.wrote_offset])
        self.assertEqual((self.log.stats.puts, self.log.stats.records), (3, 4))
        decoded = [message_at(self.log, r.commit_log_offset) for r in self.dispatcher.requests]
        self.assertEqual([d.body for d in decoded if d], [b"one", b"b0", b"b1", b"hello"])

    def test_put_many_rolls_between_puts(self) -> None:
        """Puts of one put_many that do not fit the file go to the next one, behind a blank filler,
        byte for byte as the same puts made one by one."""
        def fill(log: CommitLog) -> None:
            while log.max_offset < SIZE - 3000:
                put_ok(self, log, message(body=b"x" * 900))
        fill(self.log)
        puts = [[message(body=b"y" * 900)] for _ in range(5)]
        results = self.log.put_many(puts)
        self.assertTrue(all(r.ok for r in results))
        rolled = [r.append.wrote_offset for r in results if r.append and r.append.wrote_offset >= SIZE]
        self.assertEqual(rolled[0], SIZE)
        many = [self.file_bytes(0), self.file_bytes(1)]
        self.config = small_config(self.mktemp(), commit_log_write_path=self.write_path)
        self.log = self.open_log()
        fill(self.log)
        for put in [[message(body=b"y" * 900)] for _ in range(5)]:
            put_ok(self, self.log, put[0])
        self.assertEqual([self.file_bytes(0), self.file_bytes(1)], many)


class MmapBatchTests(BatchTests):
    """The batch rules hold for the mmap write path too."""

    write_path = "mmap"


class StatusTests(CommitLogCase):
    def assertRefused(self, msgs: list[MessageExt], status: PutMessageStatus) -> None:
        before = self.log.max_offset
        result = self.log.put_messages(msgs)
        self.assertEqual((result.status, result.append), (status, None))
        self.assertEqual(self.log.max_offset, before)
        self.assertEqual(self.dispatcher.requests, [])

    def test_body_too_large(self) -> None:
        """A body over max_message_size is MESSAGE_ILLEGAL."""
        self.config.max_message_size = 1000
        self.assertRefused([message(body=b"x" * 1001)], PutMessageStatus.MESSAGE_ILLEGAL)
        put_ok(self, self.log, message(body=b"x" * 1000))

    def test_topic_too_long(self) -> None:
        """A topic over 127 characters (or UTF-8 bytes) is MESSAGE_ILLEGAL."""
        self.assertRefused([message("t" * 128)], PutMessageStatus.MESSAGE_ILLEGAL)
        self.assertRefused([message("é" * 64)], PutMessageStatus.MESSAGE_ILLEGAL)

    def test_properties_too_large(self) -> None:
        """Properties over 32767 bytes are PROPERTIES_SIZE_EXCEEDED."""
        self.assertRefused([message(KEYS="k" * 32767)], PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)

    def test_batch_larger_than_a_file(self) -> None:
        """A batch that cannot fit any file is MESSAGE_ILLEGAL, and one bad message refuses the batch."""
        self.assertRefused([message(body=b"x" * 20000) for _ in range(4)], PutMessageStatus.MESSAGE_ILLEGAL)
        self.assertRefused([message(), message("t" * 128)], PutMessageStatus.MESSAGE_ILLEGAL)
        self.assertEqual(self.log.stats.failures["MESSAGE_ILLEGAL"], 2)

    def test_disk_full_on_write(self) -> None:
        """ENOSPC from pwrite refuses the put with SERVICE_NOT_AVAILABLE; a later put lands in its place."""
        def full(*args: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")
        put_ok(self, self.log, message())
        end = self.log.max_offset
        patchers = [self.patch(os, "pwrite", full), self.patch(os, "pwritev", full)]
        with assert_logs(self, "rocketpy.store.commitlog", LogLevel.error):
            result = self.log.put_message(message())
        self.assertEqual(result.status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        self.assertEqual((self.log.max_offset, self.log.topic_queue_table), (end, {"TopicA-0": 1}))
        for patcher in patchers:
            patcher.restore()
        again = put_ok(self, self.log, message(body=b"later"))
        assert again.append is not None
        self.assertEqual((again.append.wrote_offset, again.append.queue_offset), (end, 1))
        self.assertEqual(len(self.dispatcher.requests), 2)

    def test_disk_full_on_new_file(self) -> None:
        """ENOSPC while creating the next file refuses the put and leaves no file; then puts work again."""
        def full(fd: int, offset: int, size: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        patcher = self.patch(os, "posix_fallocate", full)
        with assert_logs(self, "rocketpy.store.commitlog", LogLevel.error):
            result = self.log.put_message(message())
        self.assertEqual(result.status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        self.assertEqual(os.listdir(self.config.commit_log_dir), [])
        patcher.restore()
        put_ok(self, self.log, message())

    def test_create_failure(self) -> None:
        """Any other error creating a file is CREATE_MAPEDFILE_FAILED."""
        def broken(fd: int, size: int) -> None:
            raise OSError(errno.EIO, "I/O error")
        self.patch(os, "ftruncate", broken)
        with assert_logs(self, "rocketpy.store.commitlog", LogLevel.error):
            result = self.log.put_message(message())
        self.assertEqual(result.status, PutMessageStatus.CREATE_MAPEDFILE_FAILED)


class LockTests(CommitLogCase):
    def test_page_cache_busy_while_lock_held(self) -> None:
        """The lock holder counts as page-cache busy once it held the lock more than 1 s."""
        seen = []

        def stall() -> None:
            seen.append(self.log.is_os_page_cache_busy())
            self.clock.now += 1000
            seen.append(self.log.is_os_page_cache_busy())
            self.clock.now += 1
            seen.append(self.log.is_os_page_cache_busy())
        self.dispatcher.during = stall
        self.assertFalse(self.log.is_os_page_cache_busy())
        with assert_logs(self, "rocketpy.store.commitlog", LogLevel.warn) as logs:
            put_ok(self, self.log, message())
        self.assertEqual(seen, [False, False, True])
        self.assertFalse(self.log.is_os_page_cache_busy())
        self.assertIn("held the lock", logs[0])

    def test_stats(self) -> None:
        """Puts, records, bytes and latency buckets are counted."""
        self.dispatcher.during = lambda: setattr(self.clock, "now", self.clock.now + 20)
        put_ok(self, self.log, message())
        self.log.put_messages([message(), message(), message()])
        first_size = self.log.max_offset
        self.log.put_message(message(topic="TopicB"))
        stats = self.log.stats
        self.assertEqual((stats.puts, stats.records, stats.bytes), (3, 5, self.log.max_offset))
        self.assertEqual(stats.topic_bytes, {"TopicA": first_size, "TopicB": self.log.max_offset - first_size})
        self.assertEqual(stats.put_ms_total, 20 + 60 + 20)  # 20 ms per record dispatched under the lock
        self.assertEqual(stats.latency_distribution()["<=50ms"], 2)
        self.assertEqual(stats.latency_distribution()["<=100ms"], 1)
        self.assertEqual(stats.snapshot()["max_put_ms"], 60)


class DispatchTests(CommitLogCase):
    def test_dispatch_request_fields(self) -> None:
        """Each appended record is described to the dispatchers without re-parsing."""
        msg = message(queue_id=2, TAGS="tagA", KEYS="k1 k2", UNIQ_KEY="U1")
        msg.prepared_transaction_offset = 5
        put_ok(self, self.log, message(queue_id=2))
        put_ok(self, self.log, msg)
        self.assertEqual(self.dispatcher.requests[1], DispatchRequest(
            "TopicA", 2, msg.commit_log_offset, msg.store_size, java_hash("tagA"), T0, 1, "k1 k2", "U1", 0, 5))

    def test_delayed_message_waits_on_schedule_topic(self) -> None:
        """A delayed message is stored on SCHEDULE_TOPIC_XXXX queue level-1, tagged with its delivery time."""
        msg = message(queue_id=5, DELAY="3", TAGS="t")
        put_ok(self, self.log, msg)
        self.assertEqual((msg.topic, msg.queue_id), (SCHEDULE_TOPIC, 2))
        self.assertEqual((msg.properties["REAL_TOPIC"], msg.properties["REAL_QID"]), ("TopicA", "5"))
        self.assertEqual(self.dispatcher.requests[0].tags_code, T0 + 10_000)
        high = message(DELAY="99")
        put_ok(self, self.log, high)
        self.assertEqual((high.queue_id, high.properties["DELAY"]), (17, "18"))

    def test_prepared_message_not_delayed(self) -> None:
        """A PREPARED message keeps its topic even with a delay level."""
        msg = message(sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE, DELAY="3")
        put_ok(self, self.log, msg)
        self.assertEqual(msg.topic, "TopicA")

    def test_failing_dispatcher_is_reported(self) -> None:
        """A dispatcher error does not lose the record but marks the log as failed."""
        def boom() -> None:
            raise RuntimeError("disk gone")
        self.dispatcher.during = boom
        with assert_logs(self, "rocketpy.store.commitlog", LogLevel.error):
            put_ok(self, self.log, message())
        self.assertTrue(self.log.dispatch_failed)
        self.assertIsNotNone(record_at(self.log, 0))


class ReadTests(CommitLogCase):
    def test_reads_by_offset(self) -> None:
        """Records read back raw and decoded by offset; unwritten or filler offsets read as None."""
        first = put_ok(self, self.log, message(body=b"one"))
        put_ok(self, self.log, message(body=b"two"))
        assert first.append is not None
        raw = record_at(self.log, first.append.next_offset)
        assert raw is not None
        self.assertEqual(raw, self.log.get_data(first.append.next_offset, len(raw)))
        decoded = message_at(self.log, 0)
        assert decoded is not None
        self.assertEqual((decoded.body, decoded.topic, decoded.store_host), (b"one", "TopicA", ("10.0.0.7", 10911)))
        self.assertIsNone(record_at(self.log, self.log.max_offset))
        self.assertIsNone(self.log.get_data(self.log.max_offset - 1, 2))
        self.assertIsNone(message_at(self.log, 5 * SIZE))
        self.assertEqual(self.log.get_data(0), self.file_bytes()[: self.log.max_offset])


class RecoveryTests(CommitLogCase):
    def fill_files(self, count: int) -> list[int]:
        """Write records until ``count`` files exist; returns every record's offset."""
        offsets = []
        while len(self.log.queue.mapped_files) < count or self.log.max_offset % SIZE < 3000:
            offsets.append(put_ok(self, self.log, message(body=os.urandom(700))).append.wrote_offset)  # type: ignore
        return offsets

    def reopen(self) -> CommitLog:
        self.log.close()
        self.dispatcher.requests.clear()
        self.log = self.open_log()
        return self.log

    def test_clean_recovery_keeps_everything(self) -> None:
        """A normal recovery ends exactly at the last record and dispatches nothing."""
        self.fill_files(3)
        end = self.log.max_offset
        self.assertEqual(recover_normally(self.reopen()).end, end)
        self.assertEqual((self.log.max_offset, self.log.flushed_offset), (end, end))
        self.assertEqual(self.dispatcher.requests, [])
        put_ok(self, self.log, message())

    def test_torn_tail_cut_and_zeroed(self) -> None:
        """Garbage after the last record is cut off and zeroed to the end of the file."""
        self.fill_files(2)
        end = self.log.max_offset
        mf = self.log.queue.mapped_files[-1]
        mf.write_at(end - mf.file_from_offset, b"\x00\x00\x01\x00garbage-bytes" * 10)
        self.assertEqual(recover_normally(self.reopen()).end, end)
        self.assertEqual(self.file_bytes(1)[end - SIZE :], bytes(2 * SIZE - end))
        self.assertEqual(put_ok(self, self.log, message()).append.wrote_offset, end)  # type: ignore

    def test_truncated_record_cut(self) -> None:
        """A record whose tail never reached the disk is cut at its start."""
        offsets = self.fill_files(2)
        last = offsets[-1]
        mf = self.log.queue.mapped_files[-1]
        mf.write_at(last - mf.file_from_offset + 100, bytes(mf.wrote_position - (last - mf.file_from_offset) - 100))
        with assert_logs(self, "rocketpy.store.recovery", LogLevel.warn):
            self.assertEqual(recover_normally(self.reopen()).end, last)
        self.assertEqual(self.file_bytes(1)[last - SIZE :], bytes(2 * SIZE - last))

    def test_bad_crc_in_middle_stops_recovery(self) -> None:
        """A body CRC mismatch in an earlier file ends the log there; later files are destroyed."""
        offsets = self.fill_files(3)
        bad = next(o for o in offsets if o > SIZE + 5000)
        mf = self.log.queue.mapped_files[1]
        first_body_byte = mf.select(bad - SIZE + 88, 1)
        assert first_body_byte is not None
        mf.write_at(bad - SIZE + 88, bytes([first_body_byte[0] ^ 0xFF]))  # a random body may start with any byte
        with assert_logs(self, "rocketpy.store.recovery", LogLevel.warn) as logs:
            self.assertEqual(recover_normally(self.reopen()).end, bad)
        self.assertIn(f"invalid record at offset {bad}", logs[0])
        self.assertEqual(len(self.log.queue.mapped_files), 2)
        self.assertEqual(self.log.max_offset, bad)

    def test_bad_crc_ignored_when_not_checked(self) -> None:
        """With check_crc_on_recover off a corrupt body does not stop recovery."""
        offsets = self.fill_files(2)
        self.log.queue.mapped_files[0].write_at(offsets[1] + 88, b"X")
        end = self.log.max_offset
        self.config.check_crc_on_recover = False
        self.assertEqual(recover_normally(self.reopen()).end, end)

    def fill_three_files_100_s_apart(self) -> tuple[int, list[int]]:
        """Three files, the n-th written at T0 + n × 100 s; the log's end and every record's offset."""
        for i in range(3):
            self.clock.now = T0 + i * 100_000
            while len(self.log.queue.mapped_files) <= i:
                put_ok(self, self.log, message(body=b"z" * 800))
        return self.log.max_offset, [r.commit_log_offset for r in self.dispatcher.requests]

    def test_abnormal_recovery_redispatches_from_checkpoint(self) -> None:
        """After a crash every valid record from the file stored before the checkpoint is re-dispatched."""
        end, written = self.fill_three_files_100_s_apart()
        self.reopen()
        self.assertEqual(recover_abnormally(self.log, T0 + 150_000).end, end)
        self.assertEqual([r.commit_log_offset for r in self.dispatcher.requests],
                         [o for o in written if o >= SIZE])
        self.reopen()
        self.assertEqual(recover_abnormally(self.log, 0).end, end)
        self.assertEqual([r.commit_log_offset for r in self.dispatcher.requests], written)

    def test_abnormal_recovery_starts_at_the_checkpoint_offset(self) -> None:
        """A checkpoint offset on a record boundary is where the walk starts: only the records from it on
        are dispatched again. One inside a record is not trusted: the timestamp rule applies."""
        end, written = self.fill_three_files_100_s_apart()
        boundary = [o for o in written if o > SIZE][3]
        self.reopen()
        report = recover_abnormally(self.log, T0 + 150_000, boundary)
        self.assertEqual((report.start, report.end, report.from_checkpoint_offset), (boundary, end, True))
        self.assertEqual([r.commit_log_offset for r in self.dispatcher.requests], [o for o in written if o >= boundary])
        self.reopen()
        report = recover_abnormally(self.log, T0 + 150_000, boundary + 4)
        self.assertEqual((report.start, report.end, report.from_checkpoint_offset), (SIZE, end, False))
        self.reopen()
        report = recover_abnormally(self.log, 0, end)  # nothing written since the checkpoint
        self.assertEqual((report.start, report.end, self.dispatcher.requests), (end, end, []))

    def test_no_files(self) -> None:
        """Recovering an empty log ends at 0."""
        self.assertEqual((recover_normally(self.log).end, recover_abnormally(self.log, T0).end), (0, 0))


class CheckRecordTests(SynchronousTestCase):
    def test_valid_blank_and_invalid(self) -> None:
        """The fast recovery check accepts whole records and fillers and rejects any damage."""
        record = bytes(encode_record(message(body=b"body", KEYS="k")))
        size = len(record)
        data = record + struct.pack(">ii", 100, BLANK_MAGIC_CODE)
        self.assertEqual(check_record(data, 0, len(data), True), size)
        self.assertEqual(check_record(data, size, len(data)), 0)
        self.assertEqual(check_record(data, 0, size - 1), -1)  # beyond the readable limit
        self.assertEqual(check_record(data, size + 4, len(data)), -1)  # not at a record start

        def damaged(at: int, value: bytes) -> int:
            broken = bytearray(record)
            broken[at : at + len(value)] = value
            return check_record(bytes(broken), 0, size, True)
        self.assertEqual(damaged(4, b"\0"), -1)  # magic
        self.assertEqual(damaged(0, struct.pack(">i", size + 1)), -1)  # declared size
        self.assertEqual(damaged(84, struct.pack(">i", 5)), -1)  # body length
        self.assertEqual(damaged(88, b"B"), -1)  # body CRC
        self.assertEqual(check_record(bytes(record[:88]) + b"B" + record[89:], 0, size, False), size)


class AppendDataTests(CommitLogCase):
    def test_replica_is_byte_identical(self) -> None:
        """Master bytes streamed in odd chunks build an identical slave log that dispatches each record once."""
        while len(self.log.queue.mapped_files) < 2 or self.log.max_offset % SIZE < 2000:
            put_ok(self, self.log, message(body=os.urandom(600), KEYS="k"))
        slave_dispatcher = RecordingDispatcher()
        slave = CommitLog(small_config(self.mktemp()), [slave_dispatcher], self.clock)
        self.addCleanup(slave.close)
        slave.load()
        offset = 0
        while offset < self.log.max_offset:
            data = self.log.get_data(offset)
            assert data is not None
            for start in range(0, len(data), 777):
                self.assertTrue(slave.append_data(offset + start, data[start : start + 777]))
            offset += len(data)
        self.assertEqual(read_file(slave.queue.mapped_files[1].path), self.file_bytes(1))
        self.assertEqual(slave_dispatcher.requests, self.dispatcher.requests)
        self.assertFalse(slave.append_data(offset + 1, b"x"))
        self.assertFalse(CommitLog(small_config(self.mktemp()), []).append_data(10, b"x"))
