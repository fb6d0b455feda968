"""Consume queues: per (topic, queue id) arrays of 20-byte entries pointing into the commit log.

Entry ``cqOffset`` sits at byte ``cqOffset × 20``: ``i64 commitLogOffset ‖ i32 size ‖ i64 tagsCode``
(doc/wire.md §11). Files are :class:`~rocketpy.store.mappedfile.MappedFile` segments
named by their start byte offset under ``consumequeue/<topic>/<queueId>/``. One writer thread
dispatches; readers on other threads only look below a file's wrote position, which moves after
the entry bytes are in place.
"""

from __future__ import annotations

import os
import struct
import threading
from typing import Callable, Iterator

from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.common.message import MessageSysFlag
from rocketpy.store.config import CQ_UNIT_SIZE, MessageStoreConfig
from rocketpy.store.dispatch import DispatchRequest, IDispatcher
from rocketpy.store.mappedfile import FAULT_IN_WINDOW, MappedFile
from rocketpy.store.mappedfilequeue import MappedFileQueue

PREFILL_SIZE = 0x7FFFFFFF  # size of the filler entries before a queue's first real entry
_ENTRY = struct.Struct(">qiq")
POPULATE_QUEUES = 256  # ConsumeQueueStore.populate_ahead's queues per call
_PHY = struct.Struct(">q")
_PREFILL = _ENTRY.pack(0, PREFILL_SIZE, 0)

_log = Logger()

#: ``store_time(commit_log_offset, size)`` → the record's store timestamp in ms, -1 if unreadable.
StoreTimeReader = Callable[[int, int], int]


def _is_real(phy: int, size: int) -> bool:
    """True for an entry that points at a record (not a filler)."""
    return not (phy == 0 and size == PREFILL_SIZE)


class ConsumeQueue:
    """The consume queue of one topic and queue id.

    :param topic: the topic.
    :param queue_id: the queue id.
    :param store_path: the ``consumequeue`` directory.
    :param file_size: bytes per file, a multiple of 20.
    """

    def __init__(self, topic: str, queue_id: int, store_path: str, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.files = MappedFileQueue(os.path.join(store_path, topic, str(queue_id)), file_size, "mmap")
        #: end (offset + size) of the newest entry's record; -1 when there is none
        self.max_physic_offset = -1
        #: byte offset of the first readable entry
        self.min_logic_offset = 0

    # -- writing (the dispatch thread) --

    def put(self, commit_log_offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Write the entry for consume-queue offset ``cq_offset``.

        Duplicates (a record at or below the newest one, or a position already written) are ignored.
        As RocketMQ, a gap is logged and the entry goes to the next free position.

        :returns: True when the entry was written.
        :raises OSError: when a new file cannot be created.
        """
        if commit_log_offset + size <= self.max_physic_offset:
            return False
        expected = cq_offset * CQ_UNIT_SIZE
        files = self.files
        was_empty = not files.mapped_files
        mf = files.get_last_mapped_file(expected)
        assert mf is not None
        if was_empty and cq_offset != 0 and mf.wrote_position == 0:
            self._prefill(mf, expected)
        position = mf.wrote_position
        if cq_offset != 0:
            current = mf.file_from_offset + position
            if expected < current:
                return False
            if expected != current:
                _log.warn("[BUG] consume queue {topic}-{queue_id}: expected offset {expected}, next free is {current}",
                          topic=self.topic, queue_id=self.queue_id, expected=expected, current=current)
        _ENTRY.pack_into(mf.data, position, commit_log_offset, size, tags_code)
        mf.wrote_position = mf.committed_position = position + CQ_UNIT_SIZE
        self.max_physic_offset = commit_log_offset + size
        return True

    def _prefill(self, mf: MappedFile, until: int) -> None:
        # The first file of a queue that starts past 0: fill the head with filler entries.
        count = (until - mf.file_from_offset) // CQ_UNIT_SIZE
        mf.data[0 : count * CQ_UNIT_SIZE] = _PREFILL * count
        mf.wrote_position = mf.committed_position = count * CQ_UNIT_SIZE
        self.min_logic_offset = until

    # -- reading (any thread) --

    @property
    def min_offset(self) -> int:
        """The first readable consume-queue offset."""
        return self.min_logic_offset // CQ_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """The next consume-queue offset to be written (0 for an empty queue)."""
        return self.files.max_offset // CQ_UNIT_SIZE

    def entries_from(self, offset: int, max_bytes: int = -1) -> bytes | None:
        """Raw entries from ``offset`` to the end of the written part of its file.

        :param max_bytes: at most this many bytes (all when -1).
        :returns: None when the offset is below the minimum or its file is missing.
        """
        position = offset * CQ_UNIT_SIZE
        if offset < self.min_offset:
            return None
        mf = self.files.find_mapped_file_by_offset(position)
        if mf is None:
            return None
        start = position - mf.file_from_offset
        available = mf.wrote_position - start
        size = available if max_bytes < 0 else min(available, max_bytes)
        return mf.select(start, size) if size > 0 else None

    def get_entry(self, offset: int) -> tuple[int, int, int] | None:
        """``(commit_log_offset, size, tags_code)`` at ``offset``, or None if not readable."""
        data = self.entries_from(offset, CQ_UNIT_SIZE)
        if data is None or len(data) < CQ_UNIT_SIZE:
            return None
        phy, size, tags = _ENTRY.unpack_from(data)
        return phy, size, tags

    def get_entries(self, offset: int, count: int) -> list[tuple[int, int, int]] | None:
        """Up to ``count`` entries from ``offset`` (within its file), or None if not readable."""
        data = self.entries_from(offset, count * CQ_UNIT_SIZE)
        if data is None:
            return None
        return list(_ENTRY.iter_unpack(data[: len(data) - len(data) % CQ_UNIT_SIZE]))

    def roll_next_file(self, offset: int) -> int:
        """The first consume-queue offset of the file after the one holding ``offset``."""
        per_file = self.file_size // CQ_UNIT_SIZE
        return offset + per_file - offset % per_file

    def offset_by_time(self, timestamp_ms: int, store_time: StoreTimeReader, min_physic_offset: int = 0) -> int:
        """The first offset whose record was stored at or after ``timestamp_ms``.

        A binary search over the readable entries; entries below ``min_physic_offset`` or whose
        record cannot be read count as older. Returns the max offset when every record is older.

        :param store_time: reads a record's store time from the commit log.
        """
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            entry = self.get_entry(mid)
            older = (
                entry is None
                or entry[0] < min_physic_offset
                or store_time(entry[0], entry[1]) < timestamp_ms
            )
            if older:
                low = mid + 1
            else:
                high = mid
        return low

    # -- recovery and retention (the store's thread, writer stopped) --

    def load(self) -> bool:
        """Open this queue's files; :meth:`recover` must follow."""
        return self.files.load()

    def recover(self, durable_below: int = 0) -> None:
        """Find the end of the valid entries, starting at the third-last file, and cut there.

        An entry is valid iff its offset ≥ 0 and size > 0; the walk stops at the first invalid one.

        :param durable_below: a commit-log offset below which every entry of this queue is known
            durable (the checkpoint's): those are found by a binary search, not read one by one.
        """
        files = self.files.mapped_files
        if not files:
            return
        walked = files[max(0, len(files) - 3):]
        per_file = self.file_size // CQ_UNIT_SIZE
        known = self._durable_count(walked, per_file, durable_below)
        first, position = known // per_file, known % per_file * CQ_UNIT_SIZE
        self.max_physic_offset = -1
        if known:
            phy, size, _tags = self._entry(walked, per_file, known - 1)
            if _is_real(phy, size):
                self.max_physic_offset = phy + size
        if first == len(walked):  # every walked entry is durable: the files are full
            end = walked[-1].file_from_offset + self.file_size
        for mf in walked[first:]:
            valid = position
            for phy, size, _tags in _ENTRY.iter_unpack(mf.select(position, self.file_size - position) or b""):
                if phy < 0 or size <= 0:
                    break
                valid += CQ_UNIT_SIZE
                if _is_real(phy, size):
                    self.max_physic_offset = phy + size
            end = mf.file_from_offset + valid
            if valid < self.file_size:
                break
            position = 0
        self._cut(end)

    @staticmethod
    def _entry(walked: list[MappedFile], per_file: int, index: int) -> tuple[int, int, int]:
        phy, size, tags = _ENTRY.unpack_from(walked[index // per_file].data, index % per_file * CQ_UNIT_SIZE)
        return phy, size, tags

    def _durable_count(self, walked: list[MappedFile], per_file: int, durable_below: int) -> int:
        """How many entries from the start of ``walked`` point below ``durable_below``: valid and
        durable by the checkpoint's word, so they come first, before any hole a power loss left."""
        low, high = 0, len(walked) * per_file
        while low < high:
            mid = (low + high) // 2
            phy, size, _tags = self._entry(walked, per_file, mid)
            if 0 <= phy < durable_below and size > 0:
                low = mid + 1
            else:
                high = mid
        return low

    def truncate_dirty(self, commit_log_end: int) -> None:
        """Drop the entries whose record starts at or after ``commit_log_end`` (recovery cut the log)."""
        if self.max_physic_offset <= commit_log_end:
            return
        files = self.files.mapped_files
        cut = files[0].file_from_offset if files else 0
        self.max_physic_offset = -1
        for mf in reversed(files):
            cut = mf.file_from_offset
            kept, last_end = 0, -1
            for phy, size, _tags in self._entries(mf, mf.wrote_position):
                if phy >= commit_log_end:
                    break
                kept += CQ_UNIT_SIZE
                if _is_real(phy, size):
                    last_end = phy + size
            if kept:
                cut += kept
                self.max_physic_offset = last_end
                break
        self._cut(cut)
        self.min_logic_offset = min(self.min_logic_offset, cut)

    def _cut(self, end: int) -> None:
        self.files.truncate_dirty_files(end)
        self.files.flushed_where = self.files.committed_where = end

    def correct_min_offset(self, commit_log_min: int) -> None:
        """Move the minimum to the first entry of the oldest file whose record is still in the log."""
        mf = self.files.first()
        if mf is None:
            return
        position = mf.wrote_position
        for i, (phy, size, _tags) in enumerate(self._entries(mf, position)):
            if phy >= commit_log_min and _is_real(phy, size):
                position = i * CQ_UNIT_SIZE
                break
        self.min_logic_offset = mf.file_from_offset + position

    def delete_expired(self, commit_log_min: int) -> int:
        """Delete files (never the newest) whose last entry points below ``commit_log_min``.

        :returns: how many files were deleted.
        """
        count = self.files.delete_files_below(commit_log_min, self._last_physic_offset)
        self.correct_min_offset(commit_log_min)
        return count

    def _last_physic_offset(self, mf: MappedFile) -> int:
        data = mf.select(self.file_size - CQ_UNIT_SIZE, 8)
        return -1 if data is None else int(_PHY.unpack(data)[0])

    @staticmethod
    def _entries(mf: MappedFile, limit: int) -> Iterator[tuple[int, int, int]]:
        data = mf.select(0, limit)
        return _ENTRY.iter_unpack(data) if data else iter(())

    def flush(self, least_pages: int = 0) -> bool:
        """Make written entries durable when ``least_pages`` pages are dirty; True if it advanced."""
        return self.files.flush(least_pages)

    def first_unflushed(self) -> int:
        """The commit-log offset of the first entry not yet flushed; -1 when every entry is."""
        files = self.files
        where = files.flushed_where
        if where >= files.max_offset:
            return -1
        mf = files.find_mapped_file_by_offset(where, True)
        position = max(0, where - mf.file_from_offset) if mf is not None else 0
        while mf is not None:
            entry = mf.select(position, CQ_UNIT_SIZE)
            if entry is None:
                return -1
            phy, size, _tags = _ENTRY.unpack(entry)
            if _is_real(phy, size):
                return phy
            position += CQ_UNIT_SIZE  # fillers at a queue's head point nowhere
        return -1

    def mark_unflushed_from(self, commit_log_offset: int) -> None:
        """Count the entries of records at or after ``commit_log_offset`` as not durable."""
        low, high = self.min_offset, self.max_offset
        while low < high:  # entries are in commit-log order (fillers at the head point at 0)
            mid = (low + high) // 2
            entry = self.get_entry(mid)
            if entry is None or entry[0] < commit_log_offset:
                low = mid + 1
            else:
                high = mid
        if low < self.max_offset:
            self.files.mark_unflushed(low * CQ_UNIT_SIZE)

    def close(self) -> None:
        """Unmap the files, keeping them."""
        self.files.close()

    def destroy(self) -> None:
        """Delete every file of this queue and forget its offsets."""
        self.files.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0


@implementer(IDispatcher)
class ConsumeQueueStore:
    """All consume queues of a store, created on demand; the dispatcher that feeds them.

    :param config: gives ``consume_queue_dir`` and ``consume_queue_file_size``.
    """

    def __init__(self, config: MessageStoreConfig) -> None:
        self.store_path = config.consume_queue_dir
        self.file_size = config.consume_queue_file_size
        self._table: dict[str, dict[int, ConsumeQueue]] = {}
        self._all: list[ConsumeQueue] = []  # replaced, never mutated: safe to iterate from any thread
        self._populate_next = 0  # populate_ahead's first queue next time (round robin)
        self._lock = threading.Lock()
        #: store time of the newest dispatched entry (the checkpoint's logics timestamp)
        self.logics_msg_timestamp = 0

    def dispatch(self, request: DispatchRequest) -> None:
        """Append ``request``'s entry to its queue; transaction PREPARED/ROLLBACK records are skipped."""
        if request.sys_flag & MessageSysFlag.TRANSACTION_PREPARED_TYPE:  # 0x4: PREPARED or ROLLBACK
            return
        queues = self._table.get(request.topic)
        cq = queues.get(request.queue_id) if queues is not None else None
        if cq is None:
            cq = self.find(request.topic, request.queue_id)
        if cq.put(request.commit_log_offset, request.msg_size, request.tags_code, request.consume_queue_offset):
            self.logics_msg_timestamp = request.store_timestamp

    def can_append_inline(self, topic: str, queue_id: int, entries: int = 1) -> bool:
        """True when the queue exists and its newest file has room for ``entries``: they create no file."""
        cq = self.get(topic, queue_id)
        if cq is None:
            return False
        last = cq.files.last()
        return last is not None and last.remaining >= entries * CQ_UNIT_SIZE

    def find(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of ``topic``/``queue_id``, created (without files) when missing."""
        queues = self._table.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is not None:
            return cq
        with self._lock:
            return self._add(ConsumeQueue(topic, queue_id, self.store_path, self.file_size))

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue of ``topic``/``queue_id`` if it exists."""
        queues = self._table.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def _add(self, cq: ConsumeQueue) -> ConsumeQueue:
        # Under the lock: a concurrent reader may have added it first.
        queues = self._table.setdefault(cq.topic, {})
        existing = queues.get(cq.queue_id)
        if existing is not None:
            return existing
        queues[cq.queue_id] = cq
        self._all = self._all + [cq]
        return cq

    @property
    def queues(self) -> list[ConsumeQueue]:
        """Every queue (a snapshot)."""
        return self._all

    def load(self) -> bool:
        """Open every ``<topic>/<queueId>`` directory; False if a queue's files are inconsistent."""
        if not os.path.isdir(self.store_path):
            return True
        with self._lock:
            for topic in sorted(os.listdir(self.store_path)):
                topic_dir = os.path.join(self.store_path, topic)
                if not os.path.isdir(topic_dir):
                    continue
                for name in sorted(os.listdir(topic_dir)):
                    if not name.isdigit():
                        continue
                    cq = self._add(ConsumeQueue(topic, int(name), self.store_path, self.file_size))
                    if not cq.load():
                        return False
        return True

    def recover(self, durable_below: int = 0) -> None:
        """Recover every queue (see :meth:`ConsumeQueue.recover`)."""
        for cq in self._all:
            cq.recover(durable_below)

    @property
    def max_physic_offset(self) -> int:
        """The highest record end any queue points at; -1 when none."""
        return max((cq.max_physic_offset for cq in self._all), default=-1)

    def last_record_start(self) -> int:
        """The commit-log offset of the record the queues' newest entry points at; 0 when none.

        Records are dispatched in log order, so every record before it reached its queue."""
        newest = max(self._all, key=lambda cq: cq.max_physic_offset, default=None)
        if newest is None or newest.max_physic_offset < 0:
            return 0
        entry = newest.get_entry(newest.max_offset - 1)
        return entry[0] if entry is not None else 0

    def truncate_dirty(self, commit_log_end: int) -> None:
        """Drop entries at or after ``commit_log_end`` in every queue."""
        for cq in self._all:
            cq.truncate_dirty(commit_log_end)

    def queue_offset_table(self) -> dict[str, int]:
        """``{"topic-queueId": next offset}`` for the commit log's queue-offset table."""
        return {f"{cq.topic}-{cq.queue_id}": cq.max_offset for cq in self._all}

    def correct_min_offset(self, commit_log_min: int) -> None:
        """Set every queue's minimum to its first entry still in the log."""
        for cq in self._all:
            cq.correct_min_offset(commit_log_min)

    def populate_ahead(self) -> None:
        """Fault in the queues' next entries' pages (:data:`FAULT_IN_WINDOW`; a pool thread), at
        most :data:`POPULATE_QUEUES` queues a call, round robin: the call holds the GIL for
        its checks, and with thousands of queues each one gets few entries between two visits."""
        queues = self._all
        count = min(len(queues), POPULATE_QUEUES)
        first = self._populate_next % len(queues) if queues else 0
        self._populate_next = first + count
        for cq in queues[first : first + count] + queues[: max(0, first + count - len(queues))]:
            mf = cq.files.last()
            if mf is not None:
                mf.fault_in_ahead(mf.wrote_position, FAULT_IN_WINDOW)

    def flush(self, least_pages: int = 0) -> bool:
        """Flush every queue; True if any advanced."""
        advanced = False
        for cq in self._all:
            advanced = cq.flush(least_pages) or advanced
        return advanced

    def mark_unflushed_from(self, commit_log_offset: int) -> None:
        """:meth:`ConsumeQueue.mark_unflushed_from` for every queue."""
        for cq in self._all:
            cq.mark_unflushed_from(commit_log_offset)

    def flush_for_checkpoint(self, least_pages: int, behind: int) -> int:
        """:meth:`flush`, and every file of a queue whose first unflushed entry points below
        ``behind``; returns the lowest commit-log offset a queue still holds unflushed (-1: none)."""
        lowest = -1
        for cq in self._all:
            cq.flush(least_pages)
            first = cq.first_unflushed()
            if 0 <= first < behind:
                while cq.flush(0):
                    pass
                first = cq.first_unflushed()
            if first >= 0 and (lowest < 0 or first < lowest):
                lowest = first
        return lowest

    def delete_expired(self, commit_log_min: int) -> int:
        """Delete queue files wholly below ``commit_log_min``; returns how many."""
        return sum(cq.delete_expired(commit_log_min) for cq in self._all)

    def close(self) -> None:
        """Unmap every queue's files."""
        for cq in self._all:
            cq.close()

    def destroy(self) -> None:
        """Delete every queue file (the commit log is gone)."""
        with self._lock:
            for cq in self._all:
                cq.destroy()
            self._table = {}
            self._all = []
