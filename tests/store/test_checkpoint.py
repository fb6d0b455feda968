"""Tests for the store checkpoint file."""

from __future__ import annotations

import os
import struct

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint


class CheckpointTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = os.path.join(self.mktemp(), "checkpoint")

    def open(self) -> StoreCheckpoint:
        checkpoint = StoreCheckpoint(self.path)
        self.addCleanup(checkpoint.close)
        return checkpoint

    def test_new_file_is_zeroed_4k(self) -> None:
        """A new checkpoint is a 4 KiB file of zeros with all timestamps 0."""
        checkpoint = self.open()
        self.assertEqual(os.path.getsize(self.path), CHECKPOINT_FILE_SIZE)
        self.assertEqual((checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                          checkpoint.index_msg_timestamp), (0, 0, 0))

    def test_layout_and_reload(self) -> None:
        """Flushed timestamps sit at @0, @8 and @16 as big-endian i64 and are read back on open."""
        checkpoint = self.open()
        checkpoint.physic_msg_timestamp = 1_700_000_000_123
        checkpoint.logics_msg_timestamp = 1_700_000_000_100
        checkpoint.index_msg_timestamp = -2
        synced: list[int] = []
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            synced.append(fd)
            real(fd)
        self.patch(os, "fdatasync", fdatasync)
        checkpoint.flush()
        self.assertEqual(len(synced), 1)
        with open(self.path, "rb") as f:
            data = f.read()
        self.assertEqual(struct.unpack_from(">qqq", data), (1_700_000_000_123, 1_700_000_000_100, -2))
        self.assertEqual(len(data), CHECKPOINT_FILE_SIZE)
        self.assertEqual(self.open().physic_msg_timestamp, 1_700_000_000_123)

    def test_values_reach_disk_only_on_flush(self) -> None:
        """Until flushed, a reopened checkpoint sees the old values."""
        checkpoint = self.open()
        checkpoint.physic_msg_timestamp = 99
        self.assertEqual(self.open().physic_msg_timestamp, 0)

    def test_min_timestamps(self) -> None:
        """Recovery starts 3 s before the older of the log and queue times (and the index, if asked)."""
        checkpoint = self.open()
        checkpoint.physic_msg_timestamp = 10_000
        checkpoint.logics_msg_timestamp = 8_000
        checkpoint.index_msg_timestamp = 4_000
        self.assertEqual(checkpoint.min_timestamp(), 5_000)
        self.assertEqual(checkpoint.min_timestamp_index(), 4_000)
        checkpoint.logics_msg_timestamp = 1_000
        self.assertEqual(checkpoint.min_timestamp(), 0)

    def test_recovery_offset_at_40(self) -> None:
        """rocketpy's recovery offset is a big-endian i64 at @40, beside Java's fields; a file without
        one (RocketMQ's, or 24 bytes long) reads as 0."""
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "wb") as f:
            f.write(struct.pack(">qqq", 1, 2, 3))  # what a short, older file holds
        checkpoint = self.open()
        self.assertEqual((checkpoint.physic_msg_timestamp, checkpoint.physic_offset), (1, 0))
        self.assertEqual(os.path.getsize(self.path), CHECKPOINT_FILE_SIZE)
        checkpoint.physic_offset = 5 * 2**30 + 17
        checkpoint.flush()
        with open(self.path, "rb") as f:
            data = f.read()
        self.assertEqual(struct.unpack_from(">qqq", data), (1, 2, 3))
        self.assertEqual(struct.unpack_from(">q", data, 40), (5 * 2**30 + 17,))
        self.assertEqual(self.open().physic_offset, 5 * 2**30 + 17)
