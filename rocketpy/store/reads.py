"""Pull reads: a consume-queue slice turned into a batch of stored records (doc/wire.md §5).

Blocking and thread-safe against the one writer: it only reads consume queues
and commit-log bytes that were published before it looked.
"""

from __future__ import annotations

import os
import struct
from typing import Callable, Protocol

from rocketpy.common import speedups
from rocketpy.common.message import MAGIC_CODE, MessageExt, MessageSysFlag, RecordError, decode_record
from rocketpy.store.config import CQ_UNIT_SIZE, MessageStoreConfig
from rocketpy.store.consumequeue import ConsumeQueue, ConsumeQueueStore
from rocketpy.store.mappedfilequeue import MappedFileQueue
from rocketpy.store.status import GetMessageResult, GetMessageStatus

TagFilter = Callable[[int], bool]
#: Decides on the stored record itself (SQL92 subscriptions: its properties).
RecordFilter = Callable[[bytes], bool]

MIN_SCAN_BYTES = 16000  # doc/wire.md §5: at least 800 entries scanned per pull
_ENTRY = struct.Struct(">qiq")
_HEAD = struct.Struct(">ii")
_SYS_FLAG = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SYS_FLAG_POS = 36
_BORN_HOST_POS = 48
_STORE_TS_HEAD = 88  # enough bytes to reach STORETIMESTAMP with an IPv6 born host

#: The compiled per-entry loop of ``MessageReader._collect`` and mincore (None: Python only).
_pull_collect = getattr(speedups.compiled, "pull_collect", None)
_resident = getattr(speedups.compiled, "resident", None)
#: get_max_offset_in_queue in one call (rocketpy/_speedups_chunkput.h), None when not built
_queue_max_offset: Callable[..., int | None] | None = getattr(speedups.compiled, "queue_max_offset", None)
# pull_collect's states (rocketpy/_speedups_pull.h)
_SCANNED, _AT_LIMIT, _PYTHON_STEP, _ON_DISK = 0, 1, 2, 3
#: ``pull_collect``'s last physical offset when it looked at no entry
_NO_ENTRY = -(1 << 63)


class NotResident(Exception):
    """A read served on the caller's thread would touch pages that are not in memory."""


class CommitLogReader(Protocol):
    """What the reads need from the commit log."""

    @property
    def max_offset(self) -> int:
        """The end of the readable log."""

    def get_data(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset``, or None when they are gone or not yet readable."""

    def note_read(self, offset: int) -> None:
        """A pull reads from ``offset`` on (its pages stay cached a while)."""


def physical_memory() -> int:
    """Bytes of RAM on this machine (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def record_at(commit_log: CommitLogReader, offset: int) -> bytes | None:
    """The raw record at commit-log ``offset``, None if there is none."""
    head = commit_log.get_data(offset, 8)
    if head is None:
        return None
    size, magic = _HEAD.unpack(head)
    if magic != MAGIC_CODE or size <= 0:
        return None
    return commit_log.get_data(offset, size)


def message_at(commit_log: CommitLogReader, offset: int) -> MessageExt | None:
    """The decoded record at commit-log ``offset``, None if there is none (or it cannot be decoded)."""
    raw = record_at(commit_log, offset)
    if raw is None:
        return None
    try:
        return decode_record(raw)
    except RecordError:
        return None


def cq_resident(cq: ConsumeQueue, offset: int, max_bytes: int) -> bool:
    """True when the entries :meth:`ConsumeQueue.entries_from` would copy are in memory (also when
    there are none: it reads nothing then); False without the compiled module."""
    if _resident is None:
        return False
    position = offset * CQ_UNIT_SIZE
    mf = cq.files.find_mapped_file_by_offset(position)
    if mf is None:
        return True
    start = position - mf.file_from_offset
    size = min(mf.wrote_position - start, max_bytes)
    return size <= 0 or bool(_resident(mf.data, start, size))


def store_timestamp_of(commit_log: CommitLogReader, offset: int, size: int) -> int:
    """The STORETIMESTAMP of the record at ``offset`` (-1 when it cannot be read).

    :param size: the record size from the consume queue; only its head is read.
    """
    head = commit_log.get_data(offset, min(size, _STORE_TS_HEAD))
    if head is None or len(head) < _BORN_HOST_POS + 8:
        return -1
    sys_flag = _SYS_FLAG.unpack_from(head, _SYS_FLAG_POS)[0]
    pos = _BORN_HOST_POS + (20 if sys_flag & MessageSysFlag.BORNHOST_V6 else 8)
    if len(head) < pos + 8:
        return -1
    return int(_I64.unpack_from(head, pos)[0])


class MessageReader:
    """The reads of one store (the read half of ``MessageStore``, which is one): pulls, queue
    bounds and the time/offset look-ups, under the names of ``IMessageStore``.

    :param queues: the consume queues.
    :param commit_log: the log records are read from.
    :param config: batch limits and the in-memory ratio.
    :param total_memory: RAM in bytes (default: this machine's); decides "on disk".
    """

    def __init__(
        self,
        queues: ConsumeQueueStore,
        commit_log: CommitLogReader,
        config: MessageStoreConfig,
        total_memory: int | None = None,
    ) -> None:
        self._queues = queues
        self._log = commit_log
        self._config = config
        memory = physical_memory() if total_memory is None else total_memory
        self._memory_limit = memory * config.access_message_in_memory_max_ratio // 100
        self._log_file_size = config.mapped_file_size_commit_log

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        if _queue_max_offset is not None:  # this method in one call, for the usual queue
            found = _queue_max_offset(self._queues, ConsumeQueue, MappedFileQueue, topic, queue_id)
            if found is not None:
                return found
        cq = self._queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The first readable queue offset (0 for an unknown queue)."""
        cq = self._queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_filter: TagFilter | None = None,
        record_filter: RecordFilter | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_msg_nums`` records of a queue from ``offset`` (doc/wire.md §5 table).

        :param group: the consumer group (not used for the read itself).
        :param tag_filter: keeps entries whose tags code it accepts; None keeps all.
        :param record_filter: then keeps the records it accepts; None keeps all. A skipped entry
            still advances ``next_begin_offset`` (NO_MATCHED_MESSAGE when none is kept).
        """
        return self._get_message(topic, queue_id, offset, max_msg_nums, tag_filter, record_filter, False)

    def get_message_resident(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                             tag_filter: TagFilter | None = None,
                             record_filter: RecordFilter | None = None) -> GetMessageResult | None:
        """:meth:`get_message` when every page it reads is in memory now (mincore), so that it
        can run on the reactor thread without waiting for the disk; None when a page is not, or
        without the compiled module (then use :meth:`get_message` in a pool)."""
        if _resident is None:
            return None
        try:
            return self._get_message(topic, queue_id, offset, max_msg_nums, tag_filter, record_filter, True)
        except NotResident:
            return None

    def _get_message(
        self, topic: str, queue_id: int, offset: int, max_msg_nums: int, tag_filter: TagFilter | None,
        record_filter: RecordFilter | None, resident_only: bool,
    ) -> GetMessageResult:
        found = self._queues.get(topic, queue_id)
        if found is None and resident_only:
            raise NotResident()  # find() would create it: the lock it takes is the writer's too
        cq = self._queues.find(topic, queue_id) if found is None else found
        min_offset, max_offset = cq.min_offset, cq.max_offset
        if max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if offset < min_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset)
        scan = max(MIN_SCAN_BYTES, max_msg_nums * CQ_UNIT_SIZE)
        if resident_only and not cq_resident(cq, offset, scan):
            raise NotResident()
        entries = cq.entries_from(offset, scan)
        if entries is None:
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_offset, max_offset
            )
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
        scanned = self._collect(result, entries, max_msg_nums, tag_filter, record_filter, resident_only)
        result.next_begin_offset = offset + scanned
        return result

    def _collect(
        self, result: GetMessageResult, entries: bytes, max_msg_nums: int, tag_filter: TagFilter | None,
        record_filter: RecordFilter | None = None, resident_only: bool = False,
    ) -> int:
        """Fill ``result`` from CQ ``entries``; returns how many entries were scanned.

        With the compiled module, the entries whose records lie in one commit-log file are
        served by its loop (``pull_collect``, the same steps as the loop below); the loop below
        takes every entry it hands back. ``resident_only`` (compiled only) raises
        :class:`NotResident` rather than read a record whose pages are not in memory.
        """
        config = self._config
        max_phy = self._log.max_offset
        limit = len(entries)
        records = result.records
        total_bytes = 0
        next_file_start = -1
        last_phy = 0
        pos = 0
        files = getattr(self._log, "queue", None) if _pull_collect is not None else None
        if limit:
            self._log.note_read(_I64.unpack_from(entries, 0)[0])
        limits = (
            max_phy, self._memory_limit,
            config.max_transfer_bytes_on_message_in_disk, config.max_transfer_count_on_message_in_disk,
            config.max_transfer_bytes_on_message_in_memory, config.max_transfer_count_on_message_in_memory,
        )
        while pos < limit:
            if files is not None:
                mf = files.find_mapped_file_by_offset(_I64.unpack_from(entries, pos)[0])
                if mf is not None:
                    pos, total_bytes, next_file_start, seen, state = _pull_collect(  # type: ignore[misc]
                        entries, pos, records, total_bytes, next_file_start, max_msg_nums, tag_filter,
                        record_filter, limits, mf.data, mf.file_from_offset, mf.wrote_position, resident_only)
                    if seen != _NO_ENTRY:
                        last_phy = seen
                    if records:
                        result.status = GetMessageStatus.FOUND
                    if state == _ON_DISK:
                        raise NotResident()
                    if state != _PYTHON_STEP:
                        break
                if resident_only:  # the step below would read without looking
                    raise NotResident()
            phy, size, tags = _ENTRY.unpack_from(entries, pos)
            last_phy = phy
            if phy < next_file_start:
                pos += CQ_UNIT_SIZE
                continue
            if records:
                on_disk = max_phy - phy > self._memory_limit
                if on_disk:
                    max_bytes = config.max_transfer_bytes_on_message_in_disk
                    max_count = config.max_transfer_count_on_message_in_disk
                else:
                    max_bytes = config.max_transfer_bytes_on_message_in_memory
                    max_count = config.max_transfer_count_on_message_in_memory
                count = len(records)
                if count >= max_msg_nums or count >= max_count or total_bytes + size > max_bytes:
                    break
            pos += CQ_UNIT_SIZE
            if tag_filter is not None and not tag_filter(tags):
                continue
            data = self._log.get_data(phy, size)
            if data is None:
                if not records:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_file_start = phy + self._log_file_size - phy % self._log_file_size
                continue
            next_file_start = -1
            if record_filter is not None and not record_filter(data):
                continue
            records.append(data)
            total_bytes += size
            result.status = GetMessageStatus.FOUND
        result.suggest_pulling_from_slave = max_phy - last_phy > self._memory_limit
        return pos // CQ_UNIT_SIZE

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        return self._queues.find(topic, queue_id).offset_by_time(timestamp_ms, self._store_time)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest readable message of a queue, -1 if none."""
        cq = self._queues.find(topic, queue_id)
        entry = cq.get_entry(cq.min_offset)
        return -1 if entry is None else self._store_time(entry[0], entry[1])

    def query_consume_time_span(self, topic: str, queue_id: int, consumer_offset: int) -> tuple[int, int, int, int]:
        """QUERY_CONSUME_TIME_SPAN for one queue: the store times (ms, -1 when absent) of its oldest
        and newest messages, of the last one consumed (the oldest's when none was) and of the next
        one to consume (-1 when the group is at the end). A negative offset counts as the minimum."""
        cq = self._queues.find(topic, queue_id)

        def at(offset: int) -> int:
            entry = cq.get_entry(offset)
            return -1 if entry is None else self._store_time(entry[0], entry[1])

        low, end = cq.min_offset, cq.max_offset
        consumer_offset = max(consumer_offset, low)
        oldest = at(low)
        consumed = at(consumer_offset - 1) if consumer_offset > low else oldest
        return oldest, at(end - 1), consumed, at(consumer_offset) if consumer_offset < end else -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """The commit-log offset of a queue entry, 0 if absent (as RocketMQ)."""
        entry = self._queues.find(topic, queue_id).get_entry(cq_offset)
        return 0 if entry is None else entry[0]

    def query_consume_queue(self, topic: str, queue_id: int, index: int,
                            count: int) -> tuple[int, int, list[tuple[int, int, int]] | None] | None:
        """QUERY_CONSUME_QUEUE: ``(min index, max index, up to count entries from index)``; the
        entries are None when ``index`` is not readable; None when the queue does not exist."""
        cq = self._queues.get(topic, queue_id)
        if cq is None:
            return None
        return cq.min_offset, cq.max_offset, cq.get_entries(index, count)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        """The decoded record at a commit-log offset, None if there is none."""
        return message_at(self._log, commit_log_offset)

    def select_one_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        """The raw record at a commit-log offset, None if there is none."""
        return record_at(self._log, commit_log_offset)

    def get_commit_log_data(self, offset: int, size: int = -1) -> bytes | None:
        """``size`` bytes at ``offset`` (-1: to the readable end of its commit-log file); HA master side."""
        return self._log.get_data(offset, size)

    def _store_time(self, offset: int, size: int) -> int:
        return store_timestamp_of(self._log, offset, size)
