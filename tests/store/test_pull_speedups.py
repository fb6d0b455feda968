"""The pull read's loop in C (``pull_collect``) against its Python reference, and the reads served
on the reactor thread when their pages are in memory (``resident``, ``get_message_resident``)."""

from __future__ import annotations

import mmap
import struct
from typing import Any, Callable

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.message import MessageExt, tags_code
from rocketpy.store import reads
from rocketpy.store.config import CQ_UNIT_SIZE, MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.reads import MessageReader
from rocketpy.store.status import GetMessageResult
from tests.common.implementations import C_SKIP

FILE_SIZE = 256


class FakeFile:
    def __init__(self, start: int, data: bytearray | mmap.mmap, wrote: int) -> None:
        self.file_from_offset, self.data, self.wrote_position = start, data, wrote


class FakeFiles:
    """``find_mapped_file_by_offset`` over fixed-size files; a missing index is a removed file."""

    def __init__(self, files: dict[int, FakeFile]) -> None:
        self.files = files

    def find_mapped_file_by_offset(self, offset: int, return_first: bool = False) -> FakeFile | None:
        return self.files.get(offset // FILE_SIZE) if offset >= 0 else None


class FilesLog:
    """A commit log of :class:`FakeFile` segments, read as ``CommitLog.get_data`` reads them."""

    def __init__(self, files: dict[int, FakeFile], end: int) -> None:
        self.queue = FakeFiles(files)
        self._end = end

    @property
    def max_offset(self) -> int:
        return self._end

    def get_data(self, offset: int, size: int) -> bytes | None:
        mf = self.queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        position = offset - mf.file_from_offset
        end = mf.wrote_position if size < 0 else position + size
        if position < 0 or position > mf.wrote_position or end > mf.wrote_position:
            return None
        return bytes(mf.data[position:end])


class Tags:
    def __init__(self, codes: set[int]) -> None:
        self.codes = codes

    def __call__(self, code: int) -> bool:
        return code in self.codes


def record_filter(data: bytes) -> bool:
    if data[:1] == b"\xff":
        raise ValueError("unreadable record")
    return data[0] % 3 != 0


#: mostly whole 16-byte records of the files, some anywhere with any size
ENTRY = st.one_of(
    st.tuples(st.integers(0, 3), st.integers(0, FILE_SIZE // 16 - 1), st.integers(0, 4)).map(
        lambda e: (e[0] * FILE_SIZE + e[1] * 16, 16, e[2])),
    st.tuples(st.integers(-8, 4 * FILE_SIZE + 40), st.integers(-2, 120), st.integers(0, 4)),
)
LIMIT = st.sampled_from([1 << 20, 1000]) | st.integers(0, 4000)
COUNT = st.sampled_from([32, 64]) | st.integers(0, 40)


def collect(files: dict[int, FakeFile], end: int, entries: list[tuple[int, int, int]], max_msg_nums: int,
            tag_filter: Callable[[int], bool] | None, records: Callable[[bytes], bool] | None,
            limits: tuple[int, int, int, int], memory: int) -> tuple[Any, ...]:
    """``_collect``'s result, or the exception type it raised."""
    config = MessageStoreConfig(
        mapped_file_size_commit_log=FILE_SIZE,
        max_transfer_bytes_on_message_in_disk=limits[0], max_transfer_count_on_message_in_disk=limits[1],
        max_transfer_bytes_on_message_in_memory=limits[2], max_transfer_count_on_message_in_memory=limits[3],
        access_message_in_memory_max_ratio=100,
    )
    reader = MessageReader(None, FilesLog(files, end), config, total_memory=memory)  # type: ignore[arg-type]
    result = GetMessageResult(reads.GetMessageStatus.NO_MATCHED_MESSAGE)
    raw = b"".join(struct.pack(">qiq", *entry) for entry in entries)
    try:
        scanned = reader._collect(result, raw, max_msg_nums, tag_filter, records)
    except Exception as e:
        return (type(e),)
    return scanned, result.status, result.records, result.suggest_pulling_from_slave


class PullCollectTests(SynchronousTestCase):
    skip = C_SKIP

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
        st.lists(ENTRY, max_size=40),
        st.integers(1, 40),
        st.none() | st.sets(st.integers(0, 4)),
        st.booleans(),
        st.tuples(LIMIT, COUNT, LIMIT, COUNT),
        st.sampled_from([1 << 30]) | st.integers(0, 2000),
        st.binary(min_size=1, max_size=64),
        st.integers(0, FILE_SIZE),
    )
    # a corrupt entry whose physical offset is -1 once looked like "no entry looked at" to the C loop
    @example(present=[0], entries=[(889, 0, 0), (0, 16, 0), (-1, 0, 0)], max_msg_nums=1, codes=None,
             filter_records=False, limits=(1048576, 32, 1048576, 32), memory=135, seed=b"\x00", last_wrote=0)
    def test_same_as_python(self, present: list[int], entries: list[tuple[int, int, int]], max_msg_nums: int,
                            codes: set[int] | None, filter_records: bool, limits: tuple[int, int, int, int],
                            memory: int, seed: bytes, last_wrote: int) -> None:
        """Random entries over present, removed and partly written files, torn and bad sizes,
        filters that keep, drop and raise, all the transfer limits: the same records, status,
        scanned count and slave suggestion, or the same exception."""
        files = {}
        for index in present:
            data = bytearray((seed * (FILE_SIZE // len(seed) + 1))[:FILE_SIZE])
            data[0] = index * 40 + 1
            wrote = last_wrote if index == max(present) else FILE_SIZE
            files[index] = FakeFile(index * FILE_SIZE, data, wrote)
        end = 4 * FILE_SIZE
        tag_filter = None if codes is None else Tags(codes)
        keep = record_filter if filter_records else None
        compiled = collect(files, end, entries, max_msg_nums, tag_filter, keep, limits, memory)
        c_loop, reads._pull_collect = reads._pull_collect, None
        try:
            reference = collect(files, end, entries, max_msg_nums, tag_filter, keep, limits, memory)
        finally:
            reads._pull_collect = c_loop
        self.assertEqual(compiled, reference)

    def test_refcounts(self) -> None:
        """No reference leaks over many calls (records, filters, the maps' buffers)."""
        import gc
        import sys

        files = {0: FakeFile(0, bytearray(b"r" * FILE_SIZE), FILE_SIZE)}
        entries = [(i * 8, 8, i % 3) for i in range(30)]
        tags = Tags({0, 1})

        def run() -> None:
            collect(files, FILE_SIZE, entries, 32, tags, record_filter, (4000, 40, 4000, 40), 1 << 30)

        for _ in range(200):
            run()
        gc.collect()
        before = sys.gettotalrefcount() if hasattr(sys, "gettotalrefcount") else None
        blocks = sys.getallocatedblocks()
        for _ in range(2000):
            run()
        gc.collect()
        self.assertLess(sys.getallocatedblocks() - blocks, 200)
        if before is not None:
            self.assertLess(sys.gettotalrefcount() - before, 200)

    def test_closed_map_goes_to_python(self) -> None:
        """A map closed by retention is not read: the Python step finds the file gone."""
        closed = mmap.mmap(-1, FILE_SIZE)
        closed.close()
        files = {0: FakeFile(0, closed, FILE_SIZE)}
        result = reads._pull_collect(struct.pack(">qiq", 0, 8, 0), 0, [], 0, -1, 32, None, None,  # type: ignore[misc]
                                     (0, 0, 0, 0, 0, 0), files[0].data, 0, FILE_SIZE, False)
        self.assertEqual(result, (0, 0, -1, reads._NO_ENTRY, reads._PYTHON_STEP))


class ResidentTests(SynchronousTestCase):
    skip = C_SKIP

    def test_resident_pages(self) -> None:
        """mincore: untouched anonymous pages are not in memory, written ones are; a range
        outside the map or a closed map is not."""
        page = mmap.PAGESIZE
        area = mmap.mmap(-1, 8 * page)
        self.addCleanup(area.close)
        resident = reads._resident
        assert resident is not None
        self.assertFalse(resident(area, 0, page))
        area[3 * page : 3 * page + 10] = b"x" * 10
        self.assertTrue(resident(area, 3 * page + 5, 100))
        self.assertFalse(resident(area, 3 * page, page + 1))
        self.assertFalse(resident(area, 7 * page, 2 * page))
        self.assertTrue(resident(area, 0, 0))
        closed = mmap.mmap(-1, page)
        closed.close()
        self.assertFalse(resident(closed, 0, 1))

    def test_store_reads_resident_as_from_the_pool(self) -> None:
        """On a real store, just-written records are in memory: the reactor-thread read returns
        what the pool's read returns, tag filters included."""
        config = MessageStoreConfig(store_path_root_dir=self.mktemp(), mapped_file_size_commit_log=1 << 20,
                                    mapped_file_size_consume_queue=1000 * CQ_UNIT_SIZE)
        store = MessageStore(config)
        store.load()
        store.start()
        self.addCleanup(store.shutdown)
        for i in range(50):
            store.put_message(MessageExt("T", b"m%d" % i, 0, {"TAGS": "A" if i % 2 else "B"}, queue_id=0))
        tag_a = Tags({tags_code("A")})
        for offset, nums, tags in ((0, 32, None), (10, 5, tag_a), (49, 32, None), (50, 32, None)):
            expected = store.get_message("g", "T", 0, offset, nums, tags)
            found = store.get_message_resident("g", "T", 0, offset, nums, tags)
            assert found is not None
            self.assertEqual((found.status, found.next_begin_offset, found.records),
                             (expected.status, expected.next_begin_offset, expected.records))
        self.assertIsNone(store.get_message_resident("g", "unknown", 0, 0, 32))
