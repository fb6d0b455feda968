"""Tests for the shared store result types and the store configuration."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)


class ResultTests(SynchronousTestCase):
    def test_next_offset(self) -> None:
        """A flush or replica waiter waits for the end of the last record of the put."""
        result = AppendMessageResult(AppendMessageStatus.PUT_OK, wrote_offset=100, wrote_bytes=250)
        self.assertEqual(result.next_offset, 350)

    def test_ok(self) -> None:
        """Only PUT_OK counts as ok; a flush timeout does not."""
        self.assertTrue(PutMessageResult(PutMessageStatus.PUT_OK).ok)
        self.assertFalse(PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT).ok)

    def test_get_result_body(self) -> None:
        """A pull body is the records back to back, counted one per record."""
        result = GetMessageResult(GetMessageStatus.FOUND, records=[b"ab", b"c"])
        self.assertEqual((result.body, result.message_count), (b"abc", 2))


class ConfigTests(SynchronousTestCase):
    def test_derived_paths(self) -> None:
        """Every store file lives at RocketMQ's name under the root directory."""
        config = MessageStoreConfig(store_path_root_dir="/s")
        self.assertEqual(
            [config.commit_log_dir, config.consume_queue_dir, config.index_dir, config.config_dir,
             config.checkpoint_path, config.abort_path, config.lock_path],
            ["/s/commitlog", "/s/consumequeue", "/s/index", "/s/config", "/s/checkpoint", "/s/abort", "/s/lock"],
        )

    def test_consume_queue_size_rounded(self) -> None:
        """A consume-queue file size is rounded up to a multiple of the 20-byte entry."""
        self.assertEqual(MessageStoreConfig(mapped_file_size_consume_queue=1001).consume_queue_file_size, 1020)
        self.assertEqual(MessageStoreConfig().consume_queue_file_size, 6_000_000)

    def test_write_path_auto(self) -> None:
        """The "auto" write path is pwrite under SYNC_FLUSH and the mmap under ASYNC_FLUSH."""
        self.assertEqual(MessageStoreConfig(flush_disk_type="SYNC_FLUSH").write_path, "pwrite")
        self.assertEqual(MessageStoreConfig().write_path, "mmap")
        self.assertEqual(MessageStoreConfig(commit_log_write_path="pwrite").write_path, "pwrite")
