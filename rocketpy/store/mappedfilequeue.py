"""The segments of one directory, ordered by start offset (RocketMQ ``MappedFileQueue``)."""

from __future__ import annotations

import os
from typing import Callable

from twisted.logger import Logger

from rocketpy.store.mappedfile import TMP_SUFFIX, MappedFile, file_name

_log = Logger()

#: :meth:`MappedFileQueue.flush_begin`'s note of a flush run elsewhere: the segment, the position
#: the sync covers, the store timestamp of that position
FlushToken = tuple[MappedFile, int, int]


class MappedFileQueue:
    """The segments of one directory, ordered by start offset (RocketMQ ``MappedFileQueue``).

    The file list is replaced, never mutated in place, so a reader holding the old list stays safe.

    :param store_path: the directory.
    :param mapped_file_size: the size of every segment.
    :param write_path: ``"mmap"`` or ``"pwrite"``.
    """

    def __init__(self, store_path: str, mapped_file_size: int, write_path: str = "pwrite") -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.write_path = write_path
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0

    def load(self) -> bool:
        """Open the existing segments; every position is set to the file size (recovery truncates).

        :returns: False (and opens nothing) if a file does not have the configured size.
        """
        os.makedirs(self.store_path, exist_ok=True)
        for name in os.listdir(self.store_path):
            if name.startswith(".") and name.endswith(TMP_SUFFIX):  # creation cut short by a crash
                os.unlink(os.path.join(self.store_path, name))
        names = sorted(n for n in os.listdir(self.store_path) if len(n) == 20 and n.isdigit())
        paths = [os.path.join(self.store_path, n) for n in names]
        for path in paths:
            if os.path.getsize(path) != self.mapped_file_size:
                _log.error("{file}: size {size} is not the configured {expected}", file=path,
                           size=os.path.getsize(path), expected=self.mapped_file_size)
                return False
        files = []
        for path in paths:
            mf = MappedFile(path, self.mapped_file_size, self.write_path)
            mf.set_position(self.mapped_file_size)
            files.append(mf)
        self.mapped_files = files
        return True

    # -- lookup --

    def first(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self.mapped_files
        return files[-1] if files else None

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        """The segment containing absolute ``offset``, or None (or the first one, if asked)."""
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        index = offset // self.mapped_file_size - first.file_from_offset // self.mapped_file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The segment being written; a new one when there is none or it is full and ``need_create``.

        :param start_offset: where the first segment starts when the queue is empty.
        :raises OSError: when the new file cannot be created.
        """
        last = self.last()
        if not need_create or (last is not None and not last.is_full()):
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        os.makedirs(self.store_path, exist_ok=True)
        path = os.path.join(self.store_path, file_name(create_offset))
        mf = MappedFile(path, self.mapped_file_size, self.write_path, create=True)
        if last is None:
            self.flushed_where = self.committed_where = create_offset
        self.mapped_files = self.mapped_files + [mf]
        return mf

    @property
    def min_offset(self) -> int:
        """Start of the oldest segment, or -1 when there is none."""
        first = self.first()
        return first.file_from_offset if first is not None else -1

    @property
    def max_offset(self) -> int:
        """End of the readable bytes of the newest segment (0 when there is none)."""
        last = self.last()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    # -- flushing --

    def flush(self, least_pages: int = 0) -> bool:
        """Flush the segment that holds ``flushed_where``.

        :returns: True when the flushed position advanced.  (RocketMQ's ``MappedFileQueue.flush``
            returns the opposite, True when nothing advanced; every rocketpy caller uses this one.)
        """
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return False
        timestamp = mf.store_timestamp  # before the sync: later records may not be covered
        where = mf.file_from_offset + mf.flush(least_pages)
        advanced = where != self.flushed_where
        if advanced:
            self.store_timestamp = timestamp
        self.flushed_where = self.committed_where = where
        return advanced

    def drop_cache(self, start: int, end: int) -> None:
        """:meth:`MappedFile.drop_cache` of the absolute range ``[start, end)`` in every segment it spans."""
        for mf in self.mapped_files:
            begin = mf.file_from_offset
            if begin < end and start < begin + mf.file_size:
                mf.drop_cache(max(start, begin) - begin, min(end, begin + mf.file_size) - begin)

    def flush_begin(self) -> tuple[int, FlushToken] | None:
        """For a flush run elsewhere (the reactor's AIO ``fdatasync``): the descriptor to sync and
        what the sync will cover, when every unflushed byte lies in the newest segment (else
        None: :meth:`flush` it). Positions are taken before the sync, as :meth:`flush` does."""
        where = self.flushed_where
        mf = self.find_mapped_file_by_offset(where, where == 0)
        if mf is None or mf is not self.mapped_files[-1] or mf.wrote_position <= mf.flushed_position:
            return None
        return mf.fileno(), (mf, mf.wrote_position, mf.store_timestamp)

    def flush_end(self, token: FlushToken) -> int:
        """The sync of :meth:`flush_begin`'s ``token`` ended: advance the flushed positions as
        :meth:`flush` does; returns the flushed offset."""
        mf, target, timestamp = token
        mf.flushed_position = max(mf.flushed_position, target)
        where = mf.file_from_offset + mf.flushed_position
        if where > self.flushed_where:
            self.store_timestamp = timestamp
            self.flushed_where = self.committed_where = where
        return self.flushed_where

    def mark_unflushed(self, offset: int) -> None:
        """Count the bytes from absolute ``offset`` on as not durable (what a crashed process wrote
        may be in the page cache only), so that the next flushes sync them."""
        for mf in self.mapped_files:
            if mf.file_from_offset + self.mapped_file_size > offset:
                mf.flushed_position = min(mf.flushed_position, max(0, offset - mf.file_from_offset))
        self.flushed_where = min(self.flushed_where, max(offset, self.min_offset, 0))

    # -- truncation and deletion --

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the queue at absolute ``offset``: zero the rest of its segment, destroy later ones."""
        keep = []
        for mf in self.mapped_files:
            if mf.file_from_offset + self.mapped_file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                position = offset - mf.file_from_offset
                mf.set_position(position)
                mf.zero_from(position)
                keep.append(mf)
            else:
                mf.destroy()
        self.mapped_files = keep
        self.flushed_where = self.committed_where = min(self.flushed_where, offset)

    def delete_expired_files_by_time(self, now_s: float, reserved_s: float, clean_immediately: bool,
                                     max_files: int = 10, consumed_below: int = 0) -> int:
        """Destroy segments older than ``reserved_s``, oldest first, never the newest one.

        Stops at the first segment that is still young (unless ``clean_immediately``, or the
        segment ends at or below ``consumed_below``: every reader is past it).

        :returns: how many files were destroyed.
        """
        files = self.mapped_files
        doomed = []
        for mf in files[:-1][:max_files]:
            consumed = mf.file_from_offset + mf.file_size <= consumed_below
            if not clean_immediately and now_s < mf.last_modified + reserved_s and not consumed:
                break
            doomed.append(mf)
        if doomed:
            self.mapped_files = files[len(doomed):]
            for mf in doomed:
                mf.destroy()
        return len(doomed)

    def delete_files_below(self, offset: int, last_offset_of: Callable[[MappedFile], int]) -> int:
        """Destroy leading segments (never the newest) whose last entry's offset, as read by
        ``last_offset_of``, is below ``offset`` (consume-queue retention).

        :returns: how many files were destroyed.
        """
        files = self.mapped_files
        count = 0
        for mf in files[:-1]:
            if last_offset_of(mf) >= offset:
                break
            count += 1
        if count:
            self.mapped_files = files[count:]
            for mf in files[:count]:
                mf.destroy()
        return count

    def destroy(self) -> None:
        """Delete every segment."""
        files, self.mapped_files = self.mapped_files, []
        for mf in files:
            mf.destroy()
        self.flushed_where = self.committed_where = 0

    def close(self) -> None:
        """Unmap every segment, keeping the files."""
        for mf in self.mapped_files:
            mf.close()
