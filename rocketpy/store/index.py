"""The message index: hash files mapping ``topic#key`` to commit-log offsets (doc/wire.md §11).

Layout of one file, byte-compatible with RocketMQ's ``IndexFile``: a 40-byte header
``@0 beginTs, @8 endTs, @16 beginPhy, @24 endPhy (i64), @32 hashSlotCount, @36 indexCount (i32)``;
``slots`` i32 slots holding the newest entry number of their chain; entries numbered from 1 at
``40 + 4·slots + 20·n``: ``i32 keyHash, i64 phyOffset, i32 secondsSinceBegin, i32 prevEntry``.
Files are named by their local creation time ``yyyyMMddHHmmssSSS``. One writer thread dispatches;
queries from other threads see whole entries (an entry is written before its slot points at it).
"""

from __future__ import annotations

import operator
import os
import struct
import threading
import time
from typing import Callable, NamedTuple

from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.common import speedups
from rocketpy.common.message import MessageSysFlag, java_hash
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.dispatch import DispatchRequest, IDispatcher
from rocketpy.store.mappedfile import FAULT_IN_WINDOW, MappedFile

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
MAX_QUERY_NUM = 64  # RocketMQ's maxMsgsNumBatch
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_INT_MAX = 0x7FFFFFFF

_log = Logger()


def key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: ``|String.hashCode()|``, with ``Integer.MIN_VALUE`` → 0."""
    h = abs(java_hash(key))
    return 0 if h > _INT_MAX else h


_TAIL = 12  # a Java client's UNIQ_KEY: 20 hex digits fixed per producer, then 12 that change
_TAIL_POWER = pow(31, _TAIL, 1 << 32)
_CACHE_MAX = 4096


class KeyHasher:
    """:func:`key_hash` with the hash of a key's head cached (the index's per-key cost).

    ``String.hashCode`` composes: ``h(a + b) = h(a)·31^len(b) + h(b)`` (mod 2^32, with
    ``len`` in UTF-16 units). Keys of one topic share ``topic#`` and, for UNIQ_KEY, 20 more
    characters; so only the last 12 (ASCII) characters are hashed per key. Short keys are
    cached whole. The results are those of :func:`key_hash`, so files stay RocketMQ's.
    """

    def __init__(self) -> None:
        self._heads: dict[str, int] = {}

    def __call__(self, key: str) -> int:
        heads = self._heads
        if len(key) <= _TAIL + 4:
            h = heads.get(key)
            if h is None:
                h = self._remember(key, key_hash(key))
            return h
        tail = key[-_TAIL:]
        if not tail.isascii():
            return key_hash(key)
        head = key[:-_TAIL]
        hh = heads.get(head)
        if hh is None:
            hh = self._remember(head, java_hash(head) & 0xFFFFFFFF)
        h = (hh * _TAIL_POWER + sum(map(operator.mul, tail.encode()[::-1], _POW31_TAIL))) & 0xFFFFFFFF
        if h & 0x80000000:
            h = 0x100000000 - h  # |negative|; Integer.MIN_VALUE gives 2^31 → 0 below
            return 0 if h > _INT_MAX else h
        return h

    def _remember(self, key: str, h: int) -> int:
        if len(self._heads) >= _CACHE_MAX:
            self._heads.clear()
        self._heads[key] = h
        return h


_POW31_TAIL = [pow(31, i, 1 << 32) for i in range(_TAIL)]

#: key_hash's implementations: the Python reference, and the compiled one (None when not built).
PYTHON_KEY_HASH = key_hash
COMPILED_KEY_HASH: Callable[[str], int] | None = None
if speedups.compiled is not None:
    COMPILED_KEY_HASH = key_hash = speedups.compiled.key_hash  # whole keys in C beat KeyHasher's cache


def file_name_for(now_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of ``now_ms`` in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms / 1000)) + "%03d" % (now_ms % 1000)


class IndexQueryResult(NamedTuple):
    """Commit-log offsets found for a key, and where the index stood."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class IndexFile:
    """One index file.

    :param mapped: the mapped file (its positions are unused: entries go where the layout says).
    :param slots: hash slots.
    :param max_entries: the file holds entries 1 … ``max_entries − 1``.
    """

    def __init__(self, mapped: MappedFile, slots: int, max_entries: int) -> None:
        self.mapped = mapped
        self.slots = slots
        self.max_entries = max_entries
        self._entries_at = HEADER_SIZE + slots * SLOT_SIZE
        header: tuple[int, int, int, int, int, int] = _HEADER.unpack_from(mapped.data, 0)
        self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset = header[:4]
        self.hash_slot_count = header[4]
        self.index_count = max(header[5], 1)
        mapped.wrote_position = mapped.committed_position = mapped.file_size  # all of it is "written"
        self._dirty = False
        self._slots_faulted_in = False

    def populate_ahead(self) -> None:
        """Fault in the header and hash slots once, then the next entries' pages
        (:data:`FAULT_IN_WINDOW`; a pool thread): the slots are read, then written, at random."""
        mf = self.mapped
        if not self._slots_faulted_in:
            self._slots_faulted_in = True
            mf.fault_in_ahead(0, self._entries_at)
        mf.fault_in_ahead(self._entries_at + self.index_count * ENTRY_SIZE, FAULT_IN_WINDOW)

    @staticmethod
    def size_for(slots: int, max_entries: int) -> int:
        """Bytes of a file with ``slots`` slots and room for ``max_entries`` entries."""
        return HEADER_SIZE + slots * SLOT_SIZE + max_entries * ENTRY_SIZE

    @property
    def name(self) -> str:
        return os.path.basename(self.mapped.path)

    def is_full(self) -> bool:
        return self.index_count >= self.max_entries

    def start_after(self, end_phy_offset: int, end_timestamp: int) -> None:
        """Begin a new file where the previous (full) one ended."""
        if end_phy_offset > 0:
            self.begin_phy_offset = self.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            self.begin_timestamp = self.end_timestamp = end_timestamp
        self._write_header()

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` → ``phy_offset`` at the head of its slot's chain; False when the file is full."""
        if not self.put_hash(key_hash(key), phy_offset, store_timestamp):
            return False
        self.write_header()
        return True

    def put_hash(self, khash: int, phy_offset: int, store_timestamp: int) -> bool:
        """:meth:`put_key` for a key of :func:`key_hash` ``khash``, without writing the header
        (the caller calls :meth:`write_header` once after its keys)."""
        count = self.index_count
        if count >= self.max_entries:
            return False
        data = self.mapped.data
        slot_at = HEADER_SIZE + (khash % self.slots) * SLOT_SIZE
        prev = _SLOT.unpack_from(data, slot_at)[0]
        if prev <= 0 or prev > count:
            prev = 0
        if self.begin_timestamp <= 0:
            seconds = 0
        else:
            seconds = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), _INT_MAX)
        _ENTRY.pack_into(data, self._entries_at + count * ENTRY_SIZE, khash, phy_offset, seconds, prev)
        _SLOT.pack_into(data, slot_at, count)
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    def write_header(self) -> None:
        """Write the header fields (times, offsets, counts) into the file."""
        self._write_header()

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self.mapped.data, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, self.index_count,
        )
        self._dirty = True

    def time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """True when ``[begin_ms, end_ms]`` overlaps this file's time span."""
        begin, end = self.begin_timestamp, self.end_timestamp
        return (begin_ms < begin and end_ms > end) or begin <= begin_ms <= end or begin <= end_ms <= end

    def select(self, key: str, max_num: int, begin_ms: int, end_ms: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of ``key`` stored within ``[begin_ms, end_ms]``, newest first."""
        count = self.index_count
        khash = key_hash(key)
        data = self.mapped.data
        try:
            current = _SLOT.unpack_from(data, HEADER_SIZE + (khash % self.slots) * SLOT_SIZE)[0]
            if current <= 0 or current > count or count <= 1:
                return
            while len(out) < max_num:
                hash_read, phy, seconds, prev = _ENTRY.unpack_from(data, self._entries_at + current * ENTRY_SIZE)
                if seconds < 0:
                    return
                stored_at = self.begin_timestamp + seconds * 1000
                if hash_read == khash and begin_ms <= stored_at <= end_ms:
                    out.append(phy)
                if prev <= 0 or prev > count or prev == current or stored_at < begin_ms:
                    return
                current = prev
        except ValueError:  # unmapped by retention meanwhile
            return

    def flush(self) -> None:
        """Make everything written so far durable."""
        mf = self.mapped
        if self._dirty and not mf.closed:  # a deleted file is closed: never sync a reused descriptor
            self._dirty = False
            mf.flushed_position = 0
            mf.flush(0)


@implementer(IDispatcher)
class IndexService:
    """The index files of a store: the dispatcher that builds them and the key query.

    :param config: gives ``index_dir``, ``max_hash_slot_num`` and ``max_index_num``.
    :param now_ms: the wall clock in ms (names new files).
    """

    def __init__(self, config: MessageStoreConfig, now_ms: Callable[[], int] | None = None) -> None:
        self.store_path = config.index_dir
        self.slots = config.max_hash_slot_num
        self.max_entries = config.max_index_num
        self.file_size = IndexFile.size_for(self.slots, self.max_entries)
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.files: list[IndexFile] = []  # replaced, never mutated: safe to read from any thread
        self._unflushed_full: list[IndexFile] = []
        self._lock = threading.Lock()
        self._failed = False
        self._hash: Callable[[str], int] = KeyHasher() if COMPILED_KEY_HASH is None else COMPILED_KEY_HASH

    # -- lifecycle --

    def load(self, last_exit_ok: bool, checkpoint_index_timestamp: int) -> bool:
        """Open the index files; after a crash delete those ending after the checkpoint's index time.

        :returns: False when a file does not have the configured size.
        """
        if not os.path.isdir(self.store_path):
            return True
        files = []
        for name in sorted(os.listdir(self.store_path)):
            path = os.path.join(self.store_path, name)
            if not name.isdigit():
                continue
            if os.path.getsize(path) != self.file_size:
                _log.error("index file {file}: size {size} is not the configured {expected}", file=path,
                           size=os.path.getsize(path), expected=self.file_size)
                return False
            f = IndexFile(MappedFile(path, self.file_size, "mmap"), self.slots, self.max_entries)
            if not last_exit_ok and f.end_timestamp > checkpoint_index_timestamp:
                _log.info("index file {file} ends after the checkpoint: deleted", file=path)
                f.mapped.destroy()
                continue
            files.append(f)
        self.files = files
        return True

    def populate_ahead(self) -> None:
        """:meth:`IndexFile.populate_ahead` of the newest file (a pool thread)."""
        files = self.files
        if files:
            files[-1].populate_ahead()

    def flush(self) -> int:
        """Make every index file durable.

        :returns: the end time of the newest file that filled up since the last call (to become the
            checkpoint's index timestamp), or 0 when none did.
        """
        with self._lock:
            full, self._unflushed_full = self._unflushed_full, []
        for f in full + self.files[-1:]:
            f.flush()
        return full[-1].end_timestamp if full else 0

    def close(self) -> None:
        """Unmap every file, keeping them."""
        for f in self.files:
            f.mapped.close()

    def destroy(self) -> None:
        """Delete every index file."""
        with self._lock:
            files, self.files = self.files, []
        for f in files:
            f.mapped.destroy()

    def delete_expired(self, commit_log_min: int) -> int:
        """Delete the oldest files (never the newest) whose last offset is below ``commit_log_min``.

        :returns: how many files were deleted.
        """
        with self._lock:
            files = self.files
            count = 0
            for f in files[:-1]:
                if f.end_phy_offset >= commit_log_min:
                    break
                count += 1
            self.files = files[count:]
            self._unflushed_full = [f for f in self._unflushed_full if f not in files[:count]]
        for f in files[:count]:
            f.mapped.destroy()
        return count

    # -- building (the dispatch thread) --

    def can_append_inline(self, keys: int) -> bool:
        """True when the newest file has room for ``keys`` more keys: indexing creates no file."""
        files = self.files
        return bool(files) and files[-1].index_count + keys < files[-1].max_entries

    def dispatch(self, request: DispatchRequest) -> None:
        """Index ``request``'s UNIQ_KEY and each of its KEYS; rollback records are skipped."""
        f = self._writable_file()
        if f is None:
            return
        offset = request.commit_log_offset
        # Already indexed: below the file's newest offset, or that offset itself (a re-dispatch).
        if offset < f.end_phy_offset or (offset == f.end_phy_offset and f.end_timestamp > 0):
            return
        if request.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            return
        prefix = request.topic + "#"
        first = f
        if request.uniq_key is not None:
            f = self._put(f, prefix + request.uniq_key, request)
        if request.keys:
            for key in request.keys.split(" "):
                if key and f is not None:
                    f = self._put(f, prefix + key, request)
        first.write_header()  # once per record, not per key
        if f is not None and f is not first:
            f.write_header()

    def _put(self, f: IndexFile, key: str, request: DispatchRequest) -> IndexFile | None:
        khash = self._hash(key)
        if f.put_hash(khash, request.commit_log_offset, request.store_timestamp):
            return f
        f.write_header()
        new = self._writable_file()
        if new is None or not new.put_hash(khash, request.commit_log_offset, request.store_timestamp):
            return None
        return new

    def _writable_file(self) -> IndexFile | None:
        files = self.files
        last = files[-1] if files else None
        if last is not None and not last.is_full():
            return last
        try:
            new = self._create(last)
        except OSError:
            if not self._failed:
                _log.failure("index {dir}: cannot create a file; keys are not indexed", dir=self.store_path)
            self._failed = True
            return None
        self._failed = False
        with self._lock:
            if last is not None:
                self._unflushed_full.append(last)
            self.files = self.files + [new]
        return new

    def _create(self, previous: IndexFile | None) -> IndexFile:
        os.makedirs(self.store_path, exist_ok=True)
        now = self._now_ms()
        name = file_name_for(now)
        while (previous is not None and name <= previous.name) or os.path.exists(os.path.join(self.store_path, name)):
            now += 1  # names must stay unique and in creation order
            name = file_name_for(now)
        mapped = MappedFile(os.path.join(self.store_path, name), self.file_size, "mmap", create=True)
        f = IndexFile(mapped, self.slots, self.max_entries)
        if previous is not None:
            f.start_after(previous.end_phy_offset, previous.end_timestamp)
        return f

    # -- querying (any thread) --

    def query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> IndexQueryResult:
        """Commit-log offsets of messages of ``topic`` with ``key`` stored in ``[begin_ms, end_ms]``.

        Files are walked newest first, each chain newest first; at most 64 offsets.
        """
        max_num = min(max_num, MAX_QUERY_NUM)
        out: list[int] = []
        files = self.files
        if not files:
            return IndexQueryResult(out, 0, 0)
        full_key = topic + "#" + key
        for f in reversed(files):
            if f.time_matched(begin_ms, end_ms):
                f.select(full_key, max_num, begin_ms, end_ms, out)
            if f.begin_timestamp < begin_ms or len(out) >= max_num:
                break
        return IndexQueryResult(out, files[-1].end_timestamp, files[-1].end_phy_offset)
