"""Tests for segment files and their queue."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import struct

from twisted.logger import LogLevel
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from rocketpy.store import mappedfile
from rocketpy.store.mappedfile import OS_PAGE_SIZE, MappedFile, file_name
from rocketpy.store.mappedfilequeue import MappedFileQueue
from tests.logs import assert_logs

SIZE = 64 * 1024
_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_FLAG_SYNC = 1
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_FIEMAP_HEAD = struct.Struct("=QQIIII")
_FIEMAP_EXTENT = struct.Struct("=QQQQQI12x")


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def resident_pages(mf: MappedFile, first: int, count: int) -> list[bool]:
    """``mincore`` of pages ``first`` … ``first + count - 1`` of ``mf``'s map: in the page cache or not."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    vector = ctypes.create_string_buffer(count)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mf.data)) + first * OS_PAGE_SIZE
    if libc.mincore(address, count * OS_PAGE_SIZE, vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return [bool(b & 1) for b in vector.raw]


def unwritten_extents(path: str, length: int) -> list[tuple[int, int]] | None:
    """``(offset, length)`` of the unwritten (allocated, never written) extents in the first
    ``length`` bytes of the file, by the FIEMAP ioctl; None where the file system has no FIEMAP."""
    count = 64
    request = bytearray(_FIEMAP_HEAD.pack(0, length, _FIEMAP_FLAG_SYNC, 0, count, 0)
                        + bytes(count * _FIEMAP_EXTENT.size))
    with open(path, "rb") as f:
        try:
            fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, request)
        except OSError:
            return None
    mapped = _FIEMAP_HEAD.unpack_from(request)[3]
    extents = (_FIEMAP_EXTENT.unpack_from(request, _FIEMAP_HEAD.size + i * _FIEMAP_EXTENT.size)
               for i in range(mapped))
    return [(logical, size) for logical, _, size, _, _, flags in extents if flags & _FIEMAP_EXTENT_UNWRITTEN]


class MappedFileTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def create(self, offset: int = 0, write_path: str = "pwrite") -> MappedFile:
        mf = MappedFile(os.path.join(self.dir, file_name(offset)), SIZE, write_path, create=True)
        self.addCleanup(mf.close)
        return mf

    def test_named_by_offset_and_full_size(self) -> None:
        """A segment is named by its 20-digit start offset and exists at full size from the start."""
        mf = self.create(131072)
        self.assertEqual(os.path.basename(mf.path), "00000000000000131072")
        self.assertEqual(mf.file_from_offset, 131072)
        self.assertEqual(os.path.getsize(mf.path), SIZE)

    def test_append_reaches_file_both_paths(self) -> None:
        """Appended bytes are in the file and readable through the mmap, for both write paths."""
        for offset, path in [(0, "pwrite"), (SIZE, "mmap")]:
            mf = self.create(offset, path)
            self.assertEqual(mf.append(b"hello"), 0)
            self.assertEqual(mf.append(bytearray(b"world")), 5)
            self.assertEqual(mf.wrote_position, 10)
            self.assertEqual(mf.committed_position, 10)
            self.assertEqual(mf.select(0), b"helloworld")
            self.assertEqual(read_file(mf.path)[:10], b"helloworld")

    def test_append_many(self) -> None:
        """Several buffers are written back to back in one call, for both write paths."""
        for offset, path in [(0, "pwrite"), (SIZE, "mmap")]:
            mf = self.create(offset, path)
            mf.append(b"x")
            self.assertEqual(mf.append_many([b"ab", bytearray(b"cde")], 5), 1)
            self.assertEqual(mf.select(0, 6), b"xabcde")
            self.assertEqual(read_file(mf.path)[:6], b"xabcde")

    def test_append_many_same_bytes_with_and_without_the_compiled_copy(self) -> None:
        """The mmap path's compiled copy (write_buffers) writes what the Python loop writes, up to
        the file's last byte; past it it raises and writes nothing."""
        write = mappedfile.WRITE_BUFFERS
        if write is None:
            raise SkipTest("no compiled accelerator")
        rng = __import__("random").Random(7)
        buffers: list[bytes | bytearray] = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(40)]
        buffers = [bytearray(b) if i % 2 else b for i, b in enumerate(buffers)]
        total = sum(map(len, buffers))
        files: list[bytes | None] = []
        for compiled in (write, None):
            self.patch(mappedfile, "WRITE_BUFFERS", compiled)
            mf = self.create(len(files) * SIZE, "mmap")
            mf.append(b"x")
            self.assertEqual(mf.append_many(buffers, total), 1)
            mf.append_many([b"z" * (SIZE - 1 - total)], SIZE - 1 - total)  # to the last byte
            files.append(mf.select(0, SIZE))
        self.assertEqual(files[0], files[1])
        self.assertEqual((files[0] or b"")[1:1 + total], b"".join(buffers))
        data = bytearray(8)
        self.assertRaises(IndexError, write, data, 4, [b"ab", b"cde"])
        self.assertRaises(IndexError, write, data, -1, [b"a"])
        self.assertRaises(TypeError, write, data, 0, ["text"])
        self.assertEqual(data, bytearray(8))
        self.assertEqual(write(data, 3, [b"ab", bytearray(b"cde")]), 8)
        self.assertEqual(data, bytearray(b"\0\0\0abcde"))

    def test_mmap_writes_populate_ahead(self) -> None:
        """The mmap path faults pages in ahead of its writes (madvise), never changing contents;
        where madvise is missing it just writes."""
        self.patch(mappedfile, "POPULATE_WINDOW", 4 * OS_PAGE_SIZE)
        calls: list[tuple[int, int, int]] = []
        real = mappedfile._libc_madvise

        def madvise(address: int, length: int, advice: int) -> int:
            calls.append((address, length, advice))
            return real(address, length, advice) if real is not None else 0

        self.patch(mappedfile, "_libc_madvise", madvise)
        mf = self.create(0, "mmap")
        record = b"r" * 1000
        for _ in range(40):
            mf.append(record)
        mf.append_many([record] * 20, 20 * len(record))
        self.assertEqual(read_file(mf.path)[: 60 * len(record)], record * 60)
        self.assertEqual(mf.select(0, 60 * len(record)), record * 60)
        covered = [(address - calls[0][0], length) for address, length, _ in calls]
        self.assertEqual(covered[0][0], 0)
        for (start, length), (after, _) in zip(covered, covered[1:]):
            self.assertEqual(start + length, after)  # contiguous windows, each page once
        self.assertGreaterEqual(covered[-1][0] + covered[-1][1], 60 * len(record))
        self.assertEqual({advice for _, _, advice in calls}, {mappedfile._MADV_POPULATE_WRITE})
        self.patch(mappedfile, "_libc_madvise", None)
        other = self.create(SIZE, "mmap")
        other.append(record)
        self.assertEqual(other.select(0), record)

    def test_populate_ahead_from_another_thread(self) -> None:
        """populate_due once less than 3/4 of a window lies faulted in ahead of the writes;
        populate_ahead (a pool thread's job) faults in the next window; appends below it
        then need no populate of their own."""
        self.patch(mappedfile, "POPULATE_WINDOW", 8 * OS_PAGE_SIZE)
        mf = self.create(0, "mmap")
        mf.append(b"r" * 100)  # the first write faults in its window
        self.assertFalse(mf.populate_due())
        while not mf.populate_due():
            mf.append(b"r" * 1000)
        self.assertFalse(mf.is_populated(mf.wrote_position + 6 * OS_PAGE_SIZE))
        mf.populate_ahead()
        self.assertFalse(mf.populate_due())
        self.assertTrue(mf.is_populated(mf.wrote_position + 7 * OS_PAGE_SIZE))

    def test_fault_in_ahead(self) -> None:
        """fault_in_ahead faults pages in with madvise alone (no zeros: bytes another writer put
        there stay), from page boundaries, once less than half a window lies ahead, up to the
        file's end; a closed file is left alone."""
        calls: list[tuple[int, int, int]] = []
        real = mappedfile._libc_madvise

        def madvise(address: int, length: int, advice: int) -> int:
            calls.append((address - base, length, advice))
            return real(address, length, advice) if real is not None else 0

        self.patch(mappedfile, "_libc_madvise", madvise)
        mf = self.create(0, "mmap")
        base = mf._mapped_address()
        mf.data[0:5] = b"hello"  # as a consume queue's dispatch writes: straight into the map
        mf.data[9000:9003] = b"abc"
        mf.wrote_position = 5
        page, advice = OS_PAGE_SIZE, mappedfile._MADV_POPULATE_WRITE
        mf.fault_in_ahead(5, 4 * page)  # to the page holding 5 + 4 pages
        mf.fault_in_ahead(3 * page, 4 * page)  # two pages ahead: not due
        mf.fault_in_ahead(3 * page + 100, 4 * page)
        self.assertEqual(calls, [(0, 5 * page, advice), (5 * page, 3 * page, advice)])
        mf.fault_in_ahead(SIZE - 10, 4 * page)
        self.assertEqual(calls[-1], (SIZE - page, page, advice))  # from the position's page
        mf.fault_in_ahead(SIZE, 4 * page)
        self.assertEqual(len(calls), 3)
        self.assertEqual((mf.data[0:5], mf.data[9000:9003]), (b"hello", b"abc"))
        other = self.create(SIZE, "mmap")
        other.close()
        other.fault_in_ahead(0, 4 * page)
        self.assertEqual(len(calls), 3)

    def test_fault_in_ahead_spares_the_writer_its_faults(self) -> None:
        """Entries written into pages faulted in ahead take no page fault."""
        if mappedfile._libc_madvise is None or not hasattr(resource, "RUSAGE_THREAD"):
            raise SkipTest("no MADV_POPULATE_WRITE or no per-thread fault count here")
        size = 256 * OS_PAGE_SIZE
        mf = MappedFile(os.path.join(self.dir, file_name(0)), size, "mmap", create=True)
        self.addCleanup(mf.close)
        mf.fault_in_ahead(0, size)
        entry, data = b"e" * 20, mf.data
        positions = range(0, size - 20, 20 * 16)
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for position in positions:
            data[position : position + 20] = entry
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        self.assertLessEqual(faults, 8)  # 256 pages written (the interpreter's own allocations may fault)

    def test_drop_cache(self) -> None:
        """drop_cache takes the whole pages of a flushed range out of the page cache (and this
        process's map), as far as the kernel's folios (≤ 256 KiB, the zeros' writes) lie inside it;
        the bytes still read the same, from the disk."""
        mf = MappedFile(os.path.join(self.dir, file_name(0)), 256 * OS_PAGE_SIZE, "mmap", create=True)
        self.addCleanup(mf.close)
        data = bytes(range(256)) * (16 * 200)  # 200 pages
        mf.append(data)
        mf.flush(0)
        self.assertEqual(resident_pages(mf, 0, 200), [True] * 200)
        mf.drop_cache(100, 192 * OS_PAGE_SIZE + 5)  # pages 1 … 191
        mf.drop_cache(256 * OS_PAGE_SIZE, 256 * OS_PAGE_SIZE)  # nothing
        resident = resident_pages(mf, 0, 200)
        self.assertTrue(resident[0] and all(resident[192:]))
        self.assertFalse(any(resident[64:192]))
        self.assertEqual(mf.select(0), data)
        mf.close()
        mf.drop_cache(0, 200 * OS_PAGE_SIZE)  # closed: nothing to do

    def test_mmap_populate_writes_zeros_first(self) -> None:
        """Before faulting pages in, the mmap path writes zeros over them with pwrite (cheaper than
        reading a preallocated extent in as zeros), only above the faulted-in end and the write
        position: the bytes of a reopened file below its write position, mid-page, stay."""
        self.patch(mappedfile, "POPULATE_WINDOW", 4 * OS_PAGE_SIZE)
        mf = self.create(0, "mmap")
        old = b"o" * (OS_PAGE_SIZE + 100)
        mf.append(old)
        mf.close()
        mf = MappedFile(mf.path, SIZE, "mmap")
        self.addCleanup(mf.close)
        mf.set_position(len(old))  # as after recovery: valid bytes end mid-page
        zeros: list[tuple[int, int]] = []
        write_zeros = mf._write_zeros

        def spy(pos: int, stop: int) -> bool:
            zeros.append((pos, stop))
            self.assertEqual(read_file(mf.path)[pos:stop], bytes(stop - pos))  # nothing valid there
            return write_zeros(pos, stop)

        self.patch(mf, "_write_zeros", spy)
        record = b"r" * 1000
        for _ in range(40):
            mf.append(record)
        mf.populate_ahead()
        window_end = len(old) + len(record) + 4 * OS_PAGE_SIZE  # the first append's end and a window
        self.assertEqual(zeros[0], (len(old), window_end - window_end % OS_PAGE_SIZE))
        for (_, stop), (after, _) in zip(zeros, zeros[1:]):
            self.assertEqual(stop, after)  # contiguous, each byte once
        self.assertGreater(zeros[-1][1], mf.wrote_position)
        self.assertEqual(read_file(mf.path)[: mf.wrote_position], old + record * 40)

    def test_pwrite_populate_writes_zeros_ahead(self) -> None:
        """The pwrite path's populate: due once less than 3/4 of a window is written (with zeros)
        ahead; populate_ahead writes them; writes vouched for by is_populated start no zeros of
        their own (an inline append's pwrite is a page-cache copy) and the bytes stay as written."""
        window = mappedfile.ZERO_AHEAD_WINDOW
        mf = MappedFile(os.path.join(self.dir, file_name(0)), 4 * window, "pwrite", create=True)
        self.addCleanup(mf.close)
        self.assertTrue(mf.populate_due())  # nothing written ahead yet
        self.assertFalse(mf.is_populated(100))
        mf.append(b"a" * 100)  # an append writes zeros a window ahead
        self.assertFalse(mf.populate_due())
        self.assertTrue(mf.is_populated(window // 2 + 100))
        self.assertFalse(mf.is_populated(window // 2 + 101))
        record = b"r" * 1000
        while not mf.populate_due():
            mf.append(record)
        mf.populate_ahead()
        self.assertFalse(mf.populate_due())
        zeroed = mf._zeroed
        self.assertEqual(zeroed, mf.wrote_position + window)
        while mf.is_populated(mf.wrote_position + len(record)):
            mf.append(record)
            self.assertEqual(mf._zeroed, zeroed)  # no zeros of its own
        end = mf.wrote_position
        content = read_file(mf.path)
        self.assertEqual(content[:100], b"a" * 100)
        self.assertEqual(content[100:end], record * ((end - 100) // len(record)))
        self.assertEqual(content[end:], bytes(len(content) - end))
        small = self.create(SIZE, "pwrite")  # smaller than a window: zeros to its end at once
        small.append(b"s")
        self.assertTrue(small.is_populated(small.file_size))
        self.assertFalse(small.is_populated(small.file_size + 1))

    def test_select_bounds(self) -> None:
        """Only written bytes are readable; a closed file reads as missing."""
        mf = self.create()
        mf.append(b"abc")
        self.assertEqual(mf.select(1, 2), b"bc")
        self.assertIsNone(mf.select(1, 3))
        self.assertIsNone(mf.select(4))
        mf.close()
        self.assertIsNone(mf.select(0, 1))

    def test_flush_least_pages(self) -> None:
        """A flush waits for the configured number of dirty pages, except for 0 pages or a full file."""
        mf = self.create()
        mf.append(bytes(3 * OS_PAGE_SIZE))
        self.assertEqual(mf.flush(4), 0)
        mf.append(bytes(OS_PAGE_SIZE))
        self.assertEqual(mf.flush(4), 4 * OS_PAGE_SIZE)
        mf.append(b"x")
        self.assertEqual(mf.flush(4), 4 * OS_PAGE_SIZE)
        self.assertEqual(mf.flush(0), 4 * OS_PAGE_SIZE + 1)
        mf.append(bytes(mf.remaining))
        self.assertEqual(mf.flush(100), SIZE)

    def test_flush_uses_fdatasync(self) -> None:
        """Durability goes through ``os.fdatasync`` on the descriptor (the pwrite path, or the
        mmap path without ``msync``), never ``mmap.flush``."""
        synced: list[int] = []
        self.patch(os, "fdatasync", synced.append)
        for write_path in ("pwrite", "mmap"):
            if write_path == "mmap":
                self.patch(mappedfile, "_libc_msync", None)
            mf = MappedFile(os.path.join(self.dir, file_name(len(synced))), SIZE, write_path, create=True)
            self.addCleanup(mf.close)
            mf.append(b"abc")
            mf.flush(0)
        self.assertEqual(len(synced), 2)

    def test_mmap_flush_syncs_the_written_range(self) -> None:
        """The mmap path syncs the pages from the flushed position to the written end with
        ``msync(MS_SYNC)``, not the whole file; an unsupported ``msync`` falls back to
        ``fdatasync`` for good."""
        calls: list[tuple[int, int, int]] = []
        results = [0, 0, -1]

        def msync(address: int, length: int, flags: int) -> int:
            calls.append((address, length, flags))
            return results.pop(0)

        self.patch(mappedfile, "_libc_msync", msync)
        self.patch(mappedfile.ctypes, "get_errno", lambda: errno.EINVAL)
        synced: list[int] = []
        self.patch(os, "fdatasync", synced.append)
        mf = self.create(write_path="mmap")
        base = mf._mapped_address()
        mf.append(b"a" * 5000)
        self.assertEqual(mf.flush(0), 5000)
        mf.append(b"b" * 10000)
        self.assertEqual(mf.flush(0), 15000)
        self.assertEqual(calls, [(base, 5000, mappedfile._MS_SYNC), (base + OS_PAGE_SIZE, 15000 - OS_PAGE_SIZE, 4)])
        self.assertEqual(synced, [])
        mf.append(b"c")
        self.assertEqual(mf.flush(0), 15001)
        self.assertEqual(len(synced), 1)
        self.assertIsNone(mappedfile._libc_msync)

    def test_mmap_flush_leaves_pages_ahead_writable(self) -> None:
        """After a flush, the writer's next pages (faulted in ahead, dirty with zeros) take no
        page fault: the flush wrote back and write-protected only the written range (and the
        256 KiB folio holding its end)."""
        if mappedfile._libc_madvise is None or mappedfile._libc_msync is None or not hasattr(resource, "RUSAGE_THREAD"):
            raise SkipTest("no MADV_POPULATE_WRITE or msync here")
        mf = MappedFile(os.path.join(self.dir, file_name(0)), 8 << 20, "mmap", create=True)
        self.addCleanup(mf.close)
        mf.append(b"a" * 100)
        mf.flush(0)
        record = b"b" * OS_PAGE_SIZE
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for _ in range(256):
            mf.append(record)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        self.assertLessEqual(faults, 80)  # 256 with the file's fdatasync

    def test_pwrite_writes_zeros_ahead(self) -> None:
        """The pwrite path leaves no unwritten extent just ahead of its writes (so a SYNC_FLUSH
        ``fdatasync`` needs no extent conversion), and the bytes there stay zero."""
        size = 4 * mappedfile.ZERO_AHEAD_WINDOW
        mf = MappedFile(os.path.join(self.dir, file_name(0)), size, "pwrite", create=True)
        self.addCleanup(mf.close)
        before = unwritten_extents(mf.path, size)
        if not before:
            raise SkipTest("the file system has no FIEMAP or no unwritten extents after posix_fallocate")
        mf.append(b"a" * 1000)
        self.assertEqual(unwritten_extents(mf.path, mappedfile.ZERO_AHEAD_WINDOW), [])
        records = mappedfile.ZERO_AHEAD_WINDOW // 1000
        mf.append_many([b"b" * 1000] * records, 1000 * records)
        end = mf.wrote_position
        self.assertEqual(unwritten_extents(mf.path, end + mappedfile.ZERO_AHEAD_WINDOW // 2), [])
        self.assertTrue(unwritten_extents(mf.path, size))  # only a window ahead, not the whole file
        content = read_file(mf.path)
        self.assertEqual(content[:end], b"a" * 1000 + b"b" * (end - 1000))
        self.assertEqual(content[end:], bytes(size - end))

    def test_zero_from(self) -> None:
        """Zeroing from a position wipes every byte after it and keeps those before."""
        mf = self.create()
        mf.append(b"keep" + b"\xff" * 5000)
        mf.write_at(SIZE - 3, b"end")
        mf.write_at(3 * SIZE // 4, b"middle")
        mf.zero_from(4)
        content = read_file(mf.path)
        self.assertEqual(content[:4], b"keep")
        self.assertEqual(content[4:], bytes(SIZE - 4))
        self.assertEqual(mf.data[4:], bytes(SIZE - 4))  # the mapping sees it too

    def test_zero_from_without_zero_range(self) -> None:
        """Where fallocate cannot zero a range, the non-zero bytes are overwritten instead."""
        self.patch(mappedfile, "_libc_fallocate", None)
        self.test_zero_from()

    def test_create_failure_leaves_nothing(self) -> None:
        """When the disk is full at creation the error surfaces and no file is left behind."""
        def full(fd: int, offset: int, size: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.patch(os, "posix_fallocate", full)
        path = os.path.join(self.dir, file_name(0))
        error = self.assertRaises(OSError, MappedFile, path, SIZE, "pwrite", True)
        self.assertEqual(error.errno, errno.ENOSPC)
        self.assertFalse(os.path.exists(path))

    def test_create_never_overwrites(self) -> None:
        """Creating a segment whose name exists fails and keeps the existing file."""
        mf = self.create()
        mf.append(b"data")
        self.assertRaises(FileExistsError, MappedFile, mf.path, SIZE, "pwrite", True)
        self.assertEqual(read_file(mf.path)[:4], b"data")
        self.assertEqual(os.listdir(self.dir), [os.path.basename(mf.path)])

    def test_destroy(self) -> None:
        """Destroying a segment deletes its file."""
        mf = self.create()
        mf.destroy()
        self.assertFalse(os.path.exists(mf.path))

    def test_bad_write_path(self) -> None:
        """Only the two known write paths are accepted."""
        self.assertRaises(ValueError, MappedFile, os.path.join(self.dir, file_name(0)), SIZE, "direct", True)


class MappedFileQueueTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = self.mktemp()
        self.queue = MappedFileQueue(self.dir, SIZE)
        self.addCleanup(self.queue.close)

    def fill(self, count: int) -> list[MappedFile]:
        """Create ``count`` full segments."""
        files = []
        for _ in range(count):
            mf = self.queue.get_last_mapped_file()
            assert mf is not None
            mf.append(b"\x01" * SIZE)
            files.append(mf)
        return files

    def test_create_next_when_full(self) -> None:
        """The last segment is reused until full, then the next starts where it ended."""
        first = self.queue.get_last_mapped_file()
        assert first is not None
        self.assertIs(self.queue.get_last_mapped_file(), first)
        first.append(bytes(SIZE))
        second = self.queue.get_last_mapped_file()
        assert second is not None
        self.assertEqual(second.file_from_offset, SIZE)
        self.assertIsNone(MappedFileQueue(self.mktemp(), SIZE).get_last_mapped_file(need_create=False))

    def test_first_file_at_start_offset(self) -> None:
        """An empty queue starts at the segment boundary below the requested offset."""
        mf = self.queue.get_last_mapped_file(3 * SIZE + 100)
        assert mf is not None
        self.assertEqual(mf.file_from_offset, 3 * SIZE)
        self.assertEqual((self.queue.min_offset, self.queue.max_offset), (3 * SIZE, 3 * SIZE))

    def test_find_by_offset(self) -> None:
        """An offset maps to the segment containing it; outside any segment gives None."""
        files = self.fill(3)
        self.assertIs(self.queue.find_mapped_file_by_offset(SIZE + 5), files[1])
        self.assertIs(self.queue.find_mapped_file_by_offset(3 * SIZE - 1), files[2])
        self.assertIsNone(self.queue.find_mapped_file_by_offset(3 * SIZE))
        self.assertIs(self.queue.find_mapped_file_by_offset(10 * SIZE, True), files[0])
        self.assertEqual(self.queue.max_offset, 3 * SIZE)

    def test_load_sets_positions_to_size(self) -> None:
        """Loaded segments count as fully written until recovery cuts them."""
        self.fill(2)
        self.queue.close()
        loaded = MappedFileQueue(self.dir, SIZE)
        self.addCleanup(loaded.close)
        self.assertTrue(loaded.load())
        self.assertEqual([mf.wrote_position for mf in loaded.mapped_files], [SIZE, SIZE])
        self.assertEqual(loaded.max_offset, 2 * SIZE)

    def test_load_removes_interrupted_creations(self) -> None:
        """A temporary file left by a crash during creation is removed, not loaded."""
        self.fill(1)
        leftover = os.path.join(self.dir, "." + file_name(SIZE) + ".tmp")
        with open(leftover, "wb") as f:
            f.write(b"short")
        loaded = MappedFileQueue(self.dir, SIZE)
        self.addCleanup(loaded.close)
        self.assertTrue(loaded.load())
        self.assertEqual(len(loaded.mapped_files), 1)
        self.assertFalse(os.path.exists(leftover))

    def test_load_rejects_wrong_size(self) -> None:
        """A segment whose size differs from the configuration fails the load."""
        self.fill(1)
        with open(os.path.join(self.dir, file_name(SIZE)), "wb") as f:
            f.write(b"short")
        loaded = MappedFileQueue(self.dir, SIZE)
        with assert_logs(self, "rocketpy.store.mappedfilequeue", LogLevel.error):
            self.assertFalse(loaded.load())
        self.assertEqual(loaded.mapped_files, [])

    def test_flush_reports_advance(self) -> None:
        """flush returns True only when the flushed position moved, and walks into the next file."""
        self.assertFalse(self.queue.flush(0))
        mf = self.queue.get_last_mapped_file()
        assert mf is not None
        mf.store_timestamp = 42
        mf.append(b"a" * 100)
        self.assertFalse(self.queue.flush(4))
        self.assertTrue(self.queue.flush(0))
        self.assertEqual((self.queue.flushed_where, self.queue.store_timestamp), (100, 42))
        self.assertFalse(self.queue.flush(0))
        mf.append(bytes(mf.remaining))
        nxt = self.queue.get_last_mapped_file()
        assert nxt is not None
        nxt.append(b"b")
        self.assertTrue(self.queue.flush(0))
        self.assertEqual(self.queue.flushed_where, SIZE)
        self.assertTrue(self.queue.flush(0))
        self.assertEqual(self.queue.flushed_where, SIZE + 1)

    def test_truncate_dirty_files(self) -> None:
        """Truncation zeroes the rest of the cut segment and destroys the later ones."""
        files = self.fill(3)
        self.queue.truncate_dirty_files(SIZE + 10)
        self.assertEqual(self.queue.mapped_files, files[:2])
        self.assertFalse(os.path.exists(files[2].path))
        self.assertEqual(files[1].wrote_position, 10)
        self.assertEqual(read_file(files[1].path), b"\x01" * 10 + bytes(SIZE - 10))
        self.assertEqual(read_file(files[0].path), b"\x01" * SIZE)

    def test_delete_expired_oldest_first_never_last(self) -> None:
        """Old segments go oldest first; a young one stops the walk; the newest always stays."""
        files = self.fill(4)
        for mf, age_h in zip(files, [100, 10, 100, 100]):
            os.utime(mf.path, (1_000_000 - age_h * 3600, 1_000_000 - age_h * 3600))
        self.assertEqual(self.queue.delete_expired_files_by_time(1_000_000, 72 * 3600, False), 1)
        self.assertEqual(self.queue.mapped_files, files[1:])
        self.assertEqual(self.queue.delete_expired_files_by_time(1_000_000, 72 * 3600, True), 2)
        self.assertEqual(self.queue.mapped_files, files[3:])
        self.assertEqual(self.queue.delete_expired_files_by_time(1_000_000, 0, True), 0)
        self.assertFalse(any(os.path.exists(mf.path) for mf in files[:3]))

    def test_delete_expired_max_files(self) -> None:
        """At most ``max_files`` segments are deleted per run."""
        self.fill(5)
        self.assertEqual(self.queue.delete_expired_files_by_time(0, 0, True, max_files=2), 2)
        self.assertEqual(self.queue.min_offset, 2 * SIZE)

    def test_delete_files_below(self) -> None:
        """Leading segments whose last entry is below the offset are deleted, never the newest."""
        files = self.fill(3)
        last_entry = {files[0].path: 10, files[1].path: 500, files[2].path: 20}
        self.assertEqual(self.queue.delete_files_below(400, lambda mf: last_entry[mf.path]), 1)
        self.assertEqual(self.queue.mapped_files, files[1:])

    def test_destroy(self) -> None:
        """Destroying the queue deletes every segment."""
        files = self.fill(2)
        self.queue.destroy()
        self.assertEqual(self.queue.mapped_files, [])
        self.assertEqual(self.queue.min_offset, -1)
        self.assertFalse(any(os.path.exists(mf.path) for mf in files))
