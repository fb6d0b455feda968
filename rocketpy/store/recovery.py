"""Recovery of the store at load: the commit-log walks, the cut, and the order of the whole.

After a clean exit the walk starts at the third-last commit-log file and dispatches nothing. After
a crash it starts at the checkpoint's ``physic_offset``, a record boundary below which the log and
the consume queues were durable when the checkpoint was last written (every consume-queue flush,
about once a second), and dispatches every record from there: the time a crash recovery takes is
bounded by what was written since that checkpoint, not by the store's size. Without a usable
offset (a checkpoint written by RocketMQ or an older rocketpy, ``message_index_safe``, or an
offset that is not a record boundary of this log) it starts, as RocketMQ does, at the newest file
whose first record was stored at or before the checkpoint's timestamps (less 3 s).

When only the process died (the ``abort`` file holds this boot's id: the machine did not restart,
so the kernel's page cache still holds every write of the dead process), nothing written is in
doubt: the index keeps its files and the walk starts at the last record the consume queues hold.
What the dead process wrote after its last checkpoint may still be in the page cache only, so it
counts as unflushed: the flush services sync it, and the checkpoint advances only after them.

Plain blocking code for the store's thread, run before any put.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from twisted.logger import Logger

from rocketpy.common.message import MessageSysFlag, RecordError, check_record, decode_record
from rocketpy.store.mappedfile import MappedFile

if TYPE_CHECKING:
    from rocketpy.store.commitlog import CommitLog
    from rocketpy.store.messagestore import MessageStore

BLANK_SIZE = 8  # i32 remaining, i32 BLANK_MAGIC_CODE
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_log = Logger()


@dataclass(frozen=True)
class RecoveryReport:
    """What a recovery did.

    :ivar clean: the last exit was clean (no ``abort`` file).
    :ivar start: the commit-log offset the walk began at.
    :ivar end: the commit log's end after the cut.
    :ivar from_checkpoint_offset: a crash recovery began at the checkpoint's ``physic_offset``
        (or later, at the last record the queues hold, when ``page_cache_intact``).
    :ivar page_cache_intact: only the process died, not the machine.
    """

    clean: bool
    start: int
    end: int
    from_checkpoint_offset: bool = False
    page_cache_intact: bool = False


def boot_id() -> str:
    """This boot's id (Linux), or "" where there is none: the mark a crashed store compares."""
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return ""


def page_cache_intact(abort_path: str) -> bool:
    """The ``abort`` file (written by :meth:`MessageStore.start`) names this boot: the machine has
    not restarted since the store ran, so its page cache holds everything the store wrote."""
    current = boot_id()
    try:
        with open(abort_path) as f:
            return current != "" and f.read().strip() == current
    except OSError:
        return False


def walk(log: CommitLog, start: int, check_crc: bool, dispatch: bool, warn: bool = True) -> int:
    """Walk the valid records from record boundary ``start``, blank fillers leading to the next
    file, optionally dispatching each; ``warn`` logs an invalid record where the walk stops.

    :returns: the end of the last valid record (where a torn tail starts).
    """
    files = log.queue.mapped_files
    mf = log.queue.find_mapped_file_by_offset(start)
    if mf is None:
        return start
    index = files.index(mf)
    pos = start - mf.file_from_offset
    while True:
        size = check_record(mf.data, pos, mf.wrote_position, check_crc)
        if size > 0:
            if dispatch and not _redispatch(log, mf, pos):
                size = -1
            else:
                pos += size
                continue
        if size == 0 and index + 1 < len(files):
            index += 1
            mf, pos = files[index], 0
            continue
        if warn and size < 0 and pos + BLANK_SIZE <= mf.wrote_position and any(mf.data[pos : pos + BLANK_SIZE]):
            _log.warn("commit log {file}: invalid record at offset {offset}", file=mf.path,
                      offset=mf.file_from_offset + pos)
        return mf.file_from_offset + pos


def _redispatch(log: CommitLog, mf: MappedFile, pos: int) -> bool:
    try:
        msg = decode_record(mf.data, pos)  # type: ignore[arg-type]  # an mmap is a buffer
    except RecordError as e:  # a layout check_record accepts but cannot decode (bad UTF-8)
        _log.warn("commit log {file}: invalid record at offset {offset}: {error}", file=mf.path,
                  offset=mf.file_from_offset + pos, error=e)
        return False
    msg.commit_log_offset = mf.file_from_offset + pos
    log.dispatch(msg)
    return True


def recover_normally(log: CommitLog) -> RecoveryReport:
    """Clean-exit recovery: walk from the third-last file, cut after the last valid record."""
    files = log.queue.mapped_files
    if not files:
        return RecoveryReport(True, 0, 0)
    start = files[max(0, len(files) - 3)].file_from_offset
    end = walk(log, start, log.config.check_crc_on_recover, False)
    cut(log, end)
    return RecoveryReport(True, start, end)


def recover_abnormally(log: CommitLog, safe_timestamp_ms: int, safe_offset: int = 0) -> RecoveryReport:
    """Crash recovery: walk from ``safe_offset`` when it is a record boundary of this log, else from
    the newest file whose first record was stored at or before ``safe_timestamp_ms``; re-dispatch
    every valid record on the way and cut after the last one."""
    files = log.queue.mapped_files
    if not files:
        return RecoveryReport(False, 0, 0)
    check_crc = log.config.check_crc_on_recover
    if safe_offset > 0 and _is_boundary(log, safe_offset):
        end = walk(log, safe_offset, check_crc, True)
        _log.info("commit log {dir}: crash recovery re-dispatched {size} bytes, from offset {offset} to {end}",
                  dir=log.queue.store_path, size=end - safe_offset, offset=safe_offset, end=end)
        cut(log, end)
        return RecoveryReport(False, safe_offset, end, True)
    start = files[0]
    for mf in reversed(files):
        if check_record(mf.data, 0, mf.wrote_position) > 0:
            born_v6 = _I32.unpack_from(mf.data, 36)[0] & MessageSysFlag.BORNHOST_V6
            stored = _I64.unpack_from(mf.data, 68 if born_v6 else 56)[0]
            if 0 < stored <= safe_timestamp_ms:
                start = mf
                break
    end = walk(log, start.file_from_offset, check_crc, True)
    _log.info("commit log {dir}: crash recovery re-dispatched {size} bytes, from {file} (offset {offset}) to {end}",
              dir=log.queue.store_path, size=end - start.file_from_offset, file=start.path,
              offset=start.file_from_offset, end=end)
    cut(log, end)
    return RecoveryReport(False, start.file_from_offset, end)


def _is_boundary(log: CommitLog, offset: int) -> bool:
    """``offset`` starts a valid record or a blank filler, or is where the written log ends (zeros)."""
    mf = log.queue.find_mapped_file_by_offset(offset)
    if mf is None:
        if offset == log.queue.max_offset:  # the log ends exactly at a file's end
            return True
        _log.warn("commit log {dir}: the checkpoint's offset {offset} is outside the log [{min}, {max})",
                  dir=log.queue.store_path, offset=offset, min=log.min_offset, max=log.max_offset)
        return False
    pos = offset - mf.file_from_offset
    if check_record(mf.data, pos, mf.wrote_position) >= 0 or not any(mf.data[pos : pos + BLANK_SIZE]):
        return True
    _log.warn("commit log {dir}: the checkpoint's offset {offset} is not a record boundary",
              dir=log.queue.store_path, offset=offset)
    return False


def cut(log: CommitLog, end: int) -> None:
    """End the log at ``end``: zero the rest of its file, destroy later files."""
    if end < log.queue.max_offset:
        _log.info("commit log {dir} ends at offset {end} (its files' space ends at {files_end})",
                  dir=log.queue.store_path, end=end, files_end=log.queue.max_offset)
    log.queue.truncate_dirty_files(end)
    log.queue.flushed_where = log.queue.committed_where = end
    log.reput_offset = end


def recover_store(store: MessageStore) -> RecoveryReport:
    """RocketMQ's recovery order: the consume queues, then the commit log (normally, or from the
    checkpoint after a crash), the queues cut to the log, what they miss dispatched again."""
    log, queues, checkpoint = store.commit_log, store.consume_queues, store.checkpoint
    assert checkpoint is not None
    queues.recover(checkpoint.physic_offset)  # the entries below it are durable: not read one by one
    if not log.queue.mapped_files:
        queues.destroy()
        store.index.destroy()
        report = RecoveryReport(store.last_exit_ok, 0, 0)
    elif store.last_exit_ok:
        report = recover_normally(log)
    elif store.page_cache_intact:  # everything the queues point at is there: walk only past it
        start = max(checkpoint.physic_offset, queues.last_record_start())
        report = replace(recover_abnormally(log, checkpoint.min_timestamp(), start), page_cache_intact=True)
        # there, but durable only up to the checkpoint: the next flushes sync the rest
        log.queue.mark_unflushed(checkpoint.physic_offset)
        queues.mark_unflushed_from(checkpoint.physic_offset)
    elif store.config.message_index_safe:  # the index's time bounds the start: RocketMQ's rule only
        report = recover_abnormally(log, checkpoint.min_timestamp_index())
    else:
        report = recover_abnormally(log, checkpoint.min_timestamp(), checkpoint.physic_offset)
    end = report.end
    if queues.max_physic_offset >= end:
        queues.truncate_dirty(end)
    # What the queues miss past their newest entry (RocketMQ's reput at start-up).
    behind = max(queues.max_physic_offset, log.min_offset)
    if 0 <= behind < end:
        walk(log, behind, check_crc=False, dispatch=True)
    log.topic_queue_table = queues.queue_offset_table()
    queues.correct_min_offset(log.min_offset)
    return report
