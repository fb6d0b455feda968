"""Fixed-size memory-mapped segment files (RocketMQ ``MappedFile``); their ordered queue is in
:mod:`rocketpy.store.mappedfilequeue`.

A segment is named by its 20-digit zero-padded start offset and created full size (``ftruncate`` +
``posix_fallocate``, so a later write cannot hit a full disk through the mmap). Writes go either
into the mmap (``"mmap"``) or through the file descriptor with ``os.pwrite`` (``"pwrite"``, the idea
of RocketMQ's transient store pool: durable writes are cheap; zeros are written a window ahead of
them, so an ``fdatasync`` converts no unwritten extent); reads always go through the mmap.
Durability is ``os.fdatasync`` on the descriptor: ``mmap.flush()`` would hold the GIL for the msync.

Positions are file-relative: ``wrote_position`` (readable limit), ``committed_position`` (equal to
it, no write buffer is ever attached) and ``flushed_position`` (durable). One writer thread;
readers on other threads only read below ``wrote_position`` and treat a closed file as missing.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
from typing import Any, Callable, Sequence

from twisted.logger import Logger

from rocketpy.common import speedups
from rocketpy.util.libc import libc_function

OS_PAGE_SIZE = 4096
WRITE_PATHS = ("mmap", "pwrite")
_ZERO_CHUNK = bytes(256 << 10)  # one pwrite of zeros (the folio size it makes: _write_zeros)
_CHECK_CHUNK = 1 << 20  # zero_from without ZERO_RANGE: read, and rewrite when not zeros, a MiB at a time
_IOV_MAX = 1024
TMP_SUFFIX = ".tmp"

_log = Logger()
#: ``append_many``'s copy loop in C (``rocketpy/_speedups_batch.h``), None when not built.
WRITE_BUFFERS: Callable[[Any, int, Sequence[bytes | bytearray]], int] | None = getattr(
    speedups.compiled, "write_buffers", None)
#: ``_write_zeros``'s loop in C (``rocketpy/_speedups_mapped.h``), None when not built.
WRITE_ZEROS: Callable[[int, int, int], bool] | None = getattr(speedups.compiled, "write_zeros", None)


def file_name(offset: int) -> str:
    """The 20-digit zero-padded name of the segment starting at ``offset``."""
    return "%020d" % offset


def _fallocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _zero_range(fd: int, offset: int, length: int) -> bool:
    """``fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, offset, length)``.

    :returns: False where the call or the flag is not supported.
    """
    if _libc_fallocate is None:
        return False
    if _libc_fallocate(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err))


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_ZERO_RANGE = 0x10
_libc_fallocate = libc_function("fallocate", ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)

#: Bytes of an mmap-written segment faulted in ahead of the write position at a time: at 100 MB/s
#: of appends, the quarter window a pool thread has to fault in the next one lasts 10 ms (two of
#: the GIL's 5 ms switch intervals, which that thread may wait to start and to finish).
POPULATE_WINDOW = 4 << 20
#: Bytes of a consume-queue or index file faulted in ahead of its writer (:meth:`MappedFile.fault_in_ahead`)
#: by each commit-log populate job, which comes every 3 MiB of log: at least half of it ahead
#: holds the entries of 3 MiB of records of ≥ 0.5 KiB in one queue.
FAULT_IN_WINDOW = 256 << 10
#: the pwrite path writes zeros this far ahead of its writes (:meth:`MappedFile._zero_ahead`)
ZERO_AHEAD_WINDOW = 1 << 20
ZEROS_DUE = (3 * ZERO_AHEAD_WINDOW) // 4  # populate_due on the pwrite path: less than this ahead
_MADV_POPULATE_WRITE = 23  # Linux 5.14+
_MS_SYNC = 4  # Linux's value

_MADV_DONTNEED = 4
_madvise = libc_function("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc_madvise = _madvise  # for MADV_POPULATE_WRITE: None once the kernel refused it
_libc_msync = libc_function("msync", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


class MappedFile:
    """One segment file, mapped whole.

    :param path: the file; its base name is the start offset.
    :param file_size: the size every segment of its queue has.
    :param write_path: ``"mmap"`` or ``"pwrite"``.
    :param create: create (and preallocate) the file; otherwise it must exist with ``file_size`` bytes.
    :raises OSError: when the file cannot be created (e.g. ``ENOSPC``) or opened; nothing is left behind.
    """

    def __init__(self, path: str, file_size: int, write_path: str = "pwrite", create: bool = False) -> None:
        if write_path not in WRITE_PATHS:
            raise ValueError(f"write path must be one of {WRITE_PATHS}, not {write_path!r}")
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        self.use_pwrite = write_path == "pwrite"
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0
        self._fd = self._create(path, file_size) if create else os.open(path, os.O_RDWR)
        try:
            self.data = mmap.mmap(self._fd, file_size)
        except BaseException:
            os.close(self._fd)
            if create:
                os.unlink(path)
            raise
        if create:
            _log.info("created {file} ({size} bytes)", file=path, size=file_size)
        self.closed = False
        self._populated = 0  # the mmap write path has pre-faulted the pages below this
        self._zeroed = 0  # the pwrite path has written the bytes below this (data, or zeros ahead)
        self._address = 0
        self._populate_lock = threading.Lock()  # one _populate at a time: its zeros never race an append

    @staticmethod
    def _create(path: str, file_size: int) -> int:
        # Sized under a temporary name, then linked into place: a crash never leaves a short
        # segment behind (a wrong size would stop the next load); linking refuses to overwrite.
        tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + TMP_SUFFIX)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, file_size)
            _fallocate(fd, file_size)
            os.link(tmp, path)
        except BaseException:
            os.close(fd)
            raise
        finally:
            os.unlink(tmp)
        return fd

    # -- writing (one writer thread) --

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at file-relative ``position`` without moving any position.

        :raises OSError: from ``pwrite`` (e.g. ``ENOSPC``); bytes at and after ``position`` are then undefined.
        """
        if self.use_pwrite:
            view = memoryview(data)
            while view:
                written = os.pwrite(self._fd, view, position)
                view = view[written:]
                position += written
        else:
            end = position + len(data)
            if end > self._populated:
                self._populate(position, end)
            self.data[position:end] = data

    def _populate(self, start: int, end: int) -> None:
        """Fault in the pages of ``[start, end)`` not yet faulted in, and a window beyond, with
        ``madvise(MADV_POPULATE_WRITE)``, after writing zeros over them with ``pwrite``.

        A first write to a page of a fresh segment costs a page fault (≈ 2 µs per 1 KiB record
        on the development VM, 10× the copy), taken while the writer holds the GIL. Through
        ctypes the GIL is released, so the reactor thread runs while the kernel allocates the
        pages; the copies that follow hit mapped pages. Faulting in a page of a preallocated
        (*unwritten*) extent reads it in as zeros, which cost 6–10 µs of kernel time per page
        on the development VM; zeros written first put the pages into the cache as a write does
        (≈ 1.3 µs), and the madvise then maps them (doc/benchmarks.md, "Twenty-first pass: the broker per
        batched message"). The zeros go only above the faulted-in end and the write position,
        where nothing valid lies and no append writes until this returns (``_populate_lock``
        keeps a pool thread's populate and the writer's apart); the contents do not change.
        Unsupported kernels (EINVAL) turn it off.
        """
        global _libc_madvise
        if _libc_madvise is None or self.closed:
            self._populated = self.file_size
            return
        address = self._mapped_address()
        with self._populate_lock:
            if self.closed:  # closed meanwhile (its descriptor's number may be another file's by now)
                return
            start = max(self._populated, start - start % OS_PAGE_SIZE)  # page-aligned, as madvise wants
            stop = end + POPULATE_WINDOW
            length = min(stop - stop % OS_PAGE_SIZE, self.file_size) - start
            if length > 0:
                self._write_zeros(max(start, self.wrote_position), start + length)
                if _libc_madvise(address + start, length, _MADV_POPULATE_WRITE) != 0:
                    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):
                        _libc_madvise = None
            # only once faulted in (another thread may be appending below): never more than is true
            self._populated = max(self._populated, start + length)

    def fault_in_ahead(self, position: int, window: int) -> None:
        """Fault in the pages up to ``position + window`` not yet faulted in (from ``position``'s
        page at the lowest) once less than half a window is faulted in ahead of ``position``, with
        ``madvise(MADV_POPULATE_WRITE)`` alone: no zeros, the contents never change, so a pool
        thread may do it while the file's writer writes. For the consume queues and the index,
        which the dispatch (on the reactor thread too) writes straight into the map: each first
        write to a page otherwise faults, the index's hash slots twice (read, then write)."""
        if _libc_madvise is None or self._populated >= self.file_size or position + window // 2 <= self._populated:
            return
        with self._populate_lock:
            if self.closed:
                return
            start = max(self._populated, position - position % OS_PAGE_SIZE)  # page-aligned, as madvise wants
            stop = min(position + window, self.file_size)
            stop += -stop % OS_PAGE_SIZE  # the next start's page (the map's last page is whole)
            if stop > start:
                _libc_madvise(self._mapped_address() + start, stop - start, _MADV_POPULATE_WRITE)
            self._populated = max(self._populated, stop)

    def _mapped_address(self) -> int:
        """The map's address (for ``madvise`` and ``msync``); raises ValueError once closed."""
        if not self._address:
            self._address = ctypes.addressof(ctypes.c_char.from_buffer(self.data))  # export dropped at once
        return self._address

    def _write_zeros(self, pos: int, stop: int) -> bool:
        """Zeros over ``[pos, stop)`` with ``pwrite``; False, writing no more, on an error (they
        are only a speed-up: e.g. no blocks reserved).

        256 KiB a ``pwrite``: the page cache's folios are no larger than the write that made them,
        and a flush write-protects the whole folio holding its end (:meth:`_sync`); with 1 MiB
        writes the writer re-faulted ~80 pages ahead after each flush, with 256 KiB ones ~18, with
        64 KiB ones ~4, but smaller folios cost the zeros and the populate more per page (1.05,
        1.2 and 1.6 µs here)."""
        if WRITE_ZEROS is not None:
            return WRITE_ZEROS(self._fd, pos, stop)  # the loop below without the GIL
        try:
            while pos < stop:
                pos += os.pwrite(self._fd, _ZERO_CHUNK[: min(len(_ZERO_CHUNK), stop - pos)], pos)
        except OSError:
            return False
        return True

    def populate_due(self) -> bool:
        """True when less than 3/4 of a window is faulted in (the pwrite path: written with zeros)
        ahead of the write position."""
        if self.use_pwrite:
            return self._zeroed < self.file_size and self.wrote_position > self._zeroed - ZEROS_DUE
        return (self._populated < self.file_size
                and self.wrote_position > self._populated - (3 * POPULATE_WINDOW) // 4)

    def populate_ahead(self) -> None:
        """Fault in a window after the write position: from a pool thread while the writer (or
        the reactor's inline appends, which stay below the faulted-in end) goes on.

        The pwrite path writes the zeros of :meth:`_zero_ahead` instead, which must not race an
        append: only from the writer thread, or while nothing else appends."""
        if self.use_pwrite:
            self._zero_ahead(self.wrote_position, ZEROS_DUE)
        elif self._populated < self.file_size:
            self._populate(self.wrote_position, self.wrote_position)

    def is_populated(self, end: int) -> bool:
        """True when writes up to ``end`` touch only faulted-in pages and start no
        :meth:`_populate` (mmap), or only blocks written before and start no :meth:`_zero_ahead`
        (pwrite): no block to allocate or convert, a copy into the page cache."""
        if self.use_pwrite:  # below the zeros, and far enough that _zero_ahead has nothing to do
            zeroed = self._zeroed
            return end <= zeroed and (end + ZERO_AHEAD_WINDOW // 2 <= zeroed or zeroed >= self.file_size)
        return end <= self._populated

    def fileno(self) -> int:
        """The descriptor writes and ``fdatasync`` go through."""
        return self._fd

    def _zero_ahead(self, end: int, due: int = ZERO_AHEAD_WINDOW // 2) -> None:
        """pwrite path: write zeros over a window after ``end`` (the new write position) once
        less than ``due`` bytes lie ahead (half a window after an append).

        ``posix_fallocate`` leaves *unwritten* extents, and a write into one makes the next
        ``fdatasync`` convert it, a metadata change that costs a journal commit: every
        SYNC_FLUSH put paid it. Blocks written once (here with the zeros they read as anyway)
        are overwritten in place, and ``fdatasync`` then writes only the data
        (doc/benchmarks.md, "Eleventh pass"). Only the writer thread writes beyond the write
        position, and nothing valid lies there (recovery zeroes torn bytes), so the contents do
        not change; the flush after the put that crossed a window writes the window too.
        """
        if end + due <= self._zeroed or self._zeroed >= self.file_size:
            return
        stop = min(end + ZERO_AHEAD_WINDOW, self.file_size)
        self._zeroed = stop if self._write_zeros(max(self._zeroed, end), stop) else self.file_size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the wrote position and advance it; returns the file-relative start."""
        start = self.wrote_position
        self.write_at(start, data)
        self.wrote_position = self.committed_position = start + len(data)
        if self.use_pwrite:
            self._zero_ahead(self.wrote_position)
        return start

    def append_many(self, buffers: Sequence[bytes | bytearray], total: int) -> int:
        """Write ``buffers`` (``total`` bytes together) back to back at the wrote position.

        The pwrite path writes them with one ``pwritev`` per 1024 buffers.

        :returns: the file-relative start.
        """
        start = pos = self.wrote_position
        if self.use_pwrite:
            for i in range(0, len(buffers), _IOV_MAX):
                chunk = buffers[i : i + _IOV_MAX]
                size = sum(map(len, chunk))
                written = os.pwritev(self._fd, chunk, pos)
                if written < size:  # short write: finish it the slow way
                    self.write_at(pos + written, memoryview(b"".join(chunk))[written:])
                pos += size
        else:
            if start + total > self._populated:
                self._populate(start, start + total)
            if WRITE_BUFFERS is not None:
                WRITE_BUFFERS(self.data, pos, buffers)  # the loop below in one call
            else:
                data = self.data
                for buf in buffers:
                    end = pos + len(buf)
                    data[pos:end] = buf
                    pos = end
        self.wrote_position = self.committed_position = start + total
        if self.use_pwrite:
            self._zero_ahead(self.wrote_position)
        return start

    def set_position(self, position: int) -> None:
        """Set wrote, committed and flushed positions (after load or recovery)."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    def zero_from(self, position: int) -> None:
        """Zero every byte from ``position`` to the end of the file.

        Recovery calls it at the cut after the last valid record so no torn bytes survive. The
        partial page is overwritten; the rest is zeroed with ``fallocate(FALLOC_FL_ZERO_RANGE)``,
        a metadata change that keeps the blocks allocated (the next flush of this file makes it
        durable). Where that is unsupported, non-zero chunks are overwritten and synced.
        """
        boundary = min(position - position % OS_PAGE_SIZE + OS_PAGE_SIZE, self.file_size)
        if os.pread(self._fd, boundary - position, position).strip(b"\0"):
            os.pwrite(self._fd, bytes(boundary - position), position)
        if boundary < self.file_size and not _zero_range(self._fd, boundary, self.file_size - boundary):
            self._overwrite_non_zero(boundary)

    def _overwrite_non_zero(self, position: int) -> None:
        dirty = False
        for pos in range(position, self.file_size, _CHECK_CHUNK):
            end = min(pos + _CHECK_CHUNK, self.file_size)
            if os.pread(self._fd, end - pos, pos).strip(b"\0"):
                os.pwrite(self._fd, bytes(end - pos), pos)
                dirty = True
        if dirty:
            os.fdatasync(self._fd)

    # -- flushing --

    def is_able_to_flush(self, least_pages: int) -> bool:
        """True when at least ``least_pages`` pages are dirty (any dirty byte for 0, or when full)."""
        flushed, wrote = self.flushed_position, self.wrote_position
        if wrote <= flushed:
            return False
        if least_pages <= 0 or self.is_full():
            return True
        return wrote // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE >= least_pages

    def flush(self, least_pages: int = 0) -> int:
        """Make written bytes durable when enough pages are dirty; returns the flushed position."""
        if self.is_able_to_flush(least_pages):
            target = self.wrote_position  # captured before the sync, as RocketMQ does
            self._sync(self.flushed_position, target)
            self.flushed_position = target
        return self.flushed_position

    def _sync(self, start: int, end: int) -> None:
        """Make ``[start, end)`` durable: ``fdatasync``, or on the mmap path ``msync(MS_SYNC)`` of
        the range's pages alone (the kernel's ``fdatasync`` of that range, journal commit included).

        ``fdatasync`` writes back every dirty page of the file, and writeback write-protects the
        mapped pages it cleans: also the pages :meth:`_populate` faulted in ahead of the writer
        (dirty with their zeros), which the writer then faults on again, one write-protect fault
        per page. The range's sync leaves them dirty and writable (doc/store.md, "Flush").
        """
        global _libc_msync
        if not self.use_pwrite and _libc_msync is not None and not self.closed:
            start -= start % OS_PAGE_SIZE  # msync wants a page-aligned address
            if _libc_msync(self._mapped_address() + start, end - start, _MS_SYNC) == 0:
                return
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOSYS):
                raise OSError(err, os.strerror(err))
            _libc_msync = None
        os.fdatasync(self._fd)

    def drop_cache(self, start: int, end: int) -> None:
        """Drop the pages of ``[start, end)`` (flushed bytes: clean pages) from the page cache, so
        that the kernel reuses them for the next pages it caches (doc/store.md, "Page cache
        behind the flushed position"): ``madvise(MADV_DONTNEED)`` unmaps them from this process
        (the kernel keeps mapped pages), ``posix_fadvise(POSIX_FADV_DONTNEED)`` drops them.
        Readers still read them, from the disk. Only whole pages inside the range."""
        start += -start % OS_PAGE_SIZE
        end -= end % OS_PAGE_SIZE
        if end <= start:
            return
        with self._populate_lock:  # never on a closed file's descriptor or map
            if self.closed:
                return
            if _madvise is not None:
                _madvise(self._mapped_address() + start, end - start, _MADV_DONTNEED)
            os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)

    # -- reading (any thread) --

    def select(self, position: int, size: int = -1) -> bytes | None:
        """A copy of ``size`` bytes at ``position`` (to the readable end when -1).

        None when the range is not entirely written or the file was closed meanwhile.
        """
        limit = self.wrote_position
        end = limit if size < 0 else position + size
        if position < 0 or position > limit or end > limit:
            return None
        try:
            return self.data[position:end]
        except ValueError:  # unmapped by retention while we looked
            return None

    # -- lifecycle --

    @property
    def last_modified(self) -> float:
        """The file's modification time in seconds (retention's age)."""
        return os.stat(self.path).st_mtime

    def close(self) -> None:
        """Unmap and close, keeping the file."""
        with self._populate_lock:  # never while a populate writes zeros through the descriptor
            if not self.closed:
                self.closed = True
                self.data.close()
                os.close(self._fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        _log.info("deleted {file}", file=self.path)
