"""The store checkpoint: how far the commit log, the consume queues and the index are known durable.

A 4 KiB file (RocketMQ ``StoreCheckpoint``): ``@0 physicMsgTimestamp``, ``@8 logicsMsgTimestamp``,
``@16 indexMsgTimestamp``, big-endian i64 milliseconds. rocketpy adds ``@40 physicOffset`` (i64):
a commit-log record boundary below which the log and the consume queues were durable, where crash
recovery can start (0: unknown; RocketMQ 5.x uses @24 and @32, Java ignores @40). The values live
in memory and reach the disk on :meth:`StoreCheckpoint.flush` (``pwrite`` + ``fdatasync``).
"""

from __future__ import annotations

import os
import struct

CHECKPOINT_FILE_SIZE = 4096
RECOVERY_SAFETY_MS = 3000
_LAYOUT = struct.Struct(">qqq")
_OFFSET = struct.Struct(">q")
_OFFSET_AT = 40


class StoreCheckpoint:
    """Open (creating it zeroed when absent) the checkpoint file at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self._fd, _LAYOUT.size, 0)
        values: tuple[int, int, int] = (0, 0, 0)
        if len(data) == _LAYOUT.size:
            values = _LAYOUT.unpack(data)
        if os.fstat(self._fd).st_size < CHECKPOINT_FILE_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_FILE_SIZE)
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = values
        #: a record boundary of the commit log below which the log and the queues are durable (0: unknown)
        self.physic_offset: int = _OFFSET.unpack(os.pread(self._fd, _OFFSET.size, _OFFSET_AT))[0]

    def min_timestamp(self) -> int:
        """``min(physic, logics)`` less 3 s: records stored before it are in the log and the queues."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - RECOVERY_SAFETY_MS)

    def min_timestamp_index(self) -> int:
        """:meth:`min_timestamp`, also bounded by the index time."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def flush(self) -> None:
        """Write the three timestamps and the offset durably (one page, one ``fdatasync``)."""
        data = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
        os.pwrite(self._fd, data + bytes(_OFFSET_AT - len(data)) + _OFFSET.pack(self.physic_offset), 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        """Flush and close."""
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1
