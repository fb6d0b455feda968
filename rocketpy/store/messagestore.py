"""The blocking message store facade of doc/store-api.md: commit log, consume queues, index,
checkpoint, lock and abort files, recovery and retention.

Plain blocking code for the store's pool threads: one writer thread at a time; reads are safe
from other threads concurrently with it.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any, Callable, Iterable, Sequence

from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.common import speedups
from rocketpy.common.message import MessageConst, MessageExt, properties_length_bound
from rocketpy.interfaces import IMessageStore
from rocketpy.store.checkpoint import StoreCheckpoint
from rocketpy.store.commitlog import LOCK_WARN_MS, RECORD_SLACK, CommitLog, wall_clock_ms
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.consumequeue import ConsumeQueueStore
from rocketpy.store.dispatch import QueueRecorder, SupportsDispatch
from rocketpy.store.index import IndexService
from rocketpy.store.mappedfile import POPULATE_WINDOW, ZERO_AHEAD_WINDOW, ZEROS_DUE
from rocketpy.store.mappedfilequeue import FlushToken
from rocketpy.store.reads import MessageReader
from rocketpy.store.recovery import BLANK_SIZE, RecoveryReport, boot_id, page_cache_intact, recover_store
from rocketpy.store.retention import ConsumerPosition, Retention, used_ratio
from rocketpy.store.stats import LATENCY_BOUNDS_MS, StoreStats
from rocketpy.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from rocketpy.store.timer import is_timer_request

_log = Logger()


def _exit_name(clean: bool, process_only: bool = False) -> str:
    if clean:
        return "a clean shutdown"
    return "a crash of the process (abort file names this boot)" if process_only else "a crash (abort file present)"


#: :meth:`MessageStore.can_append_inline`: largest body, and a bound of a record's fixed fields
#: (header, IPv6 hosts, length fields).
INLINE_MAX_BODY = 8 * 1024
INLINE_RECORD_FIXED = 256


def inline_bound(puts: Sequence[Sequence[MessageExt]], max_body: int,
                 fixed: int) -> tuple[int, int, dict[tuple[str, int], int]] | None:
    """For :meth:`MessageStore.can_append_inline`: a bound of the records' bytes, the number of
    index keys, and the consume-queue entries per ``(topic, queue_id)`` of ``puts``; None when a
    body is over ``max_body`` or a message has a delay level or asks for a timer."""
    size = keys = 0
    entries: dict[tuple[str, int], int] = {}
    for msgs in puts:
        for msg in msgs:
            body = len(msg.body)
            props = msg.properties
            if body > max_body or MessageConst.DELAY_TIME_LEVEL in props or is_timer_request(props):
                return None
            # the record: fixed fields, body, topic, and ≤ 4 UTF-8 bytes per properties character
            size += fixed + body + len(msg.topic) + 4 * properties_length_bound(props)
            found = props.get(MessageConst.KEYS)
            keys += 2 + (found.count(" ") if found else 0)
            where = (msg.topic, msg.queue_id)
            entries[where] = entries.get(where, 0) + 1
    return size, keys, entries


#: inline_bound's implementations: the Python reference, and the compiled one (None when not built).
PYTHON_INLINE_BOUND = inline_bound
COMPILED_INLINE_BOUND: Callable[..., tuple[int, int, dict[tuple[str, int], int]] | None] | None = None
if speedups.compiled is not None:
    speedups.compiled.set_inline_bound(PYTHON_INLINE_BOUND)
    COMPILED_INLINE_BOUND = inline_bound = speedups.compiled.inline_bound


#: :meth:`MessageStore.can_append_inline` in one call (rocketpy/_speedups_chunkput.h ``inline_room``: True,
#: False, or None for the Python code), None when not built.
COMPILED_INLINE_ROOM: Callable[..., bool | None] | None = (
    speedups.compiled.inline_room if speedups.compiled is not None else None)

#: The compiled lone put (rocketpy/_speedups_storeput.h: :meth:`MessageStore.put_lone`), None when not built.
LonePut = Callable[[CommitLog, MessageExt], "tuple[PutMessageResult, int | None, bool] | None"]
COMPILED_LONE_PUT: LonePut | None = None
if speedups.compiled is not None and speedups.compiled.set_lone_put(
        ConsumeQueueStore, IndexService, PutMessageResult, AppendMessageResult, PutMessageStatus.PUT_OK,
        AppendMessageStatus.PUT_OK, wall_clock_ms, LATENCY_BOUNDS_MS, INLINE_MAX_BODY, BLANK_SIZE, RECORD_SLACK,
        POPULATE_WINDOW, LOCK_WARN_MS, ZERO_AHEAD_WINDOW, ZEROS_DUE):
    COMPILED_LONE_PUT = speedups.compiled.lone_put


class StoreLockedError(RuntimeError):
    """Another store holds the lock file of this store directory."""


@implementer(IMessageStore)
class MessageStore(MessageReader):
    """One broker's message store; its reads are :class:`MessageReader`'s.

    :param config: the store configuration.
    :param now_ms: the clock in ms (store timestamps, page-cache-busy, retention); tests inject one.
    :param total_memory: RAM in bytes for the reads' "on disk" rule (default: this machine's).
    """

    def __init__(self, config: MessageStoreConfig, now_ms: Callable[[], int] = wall_clock_ms,
                 total_memory: int | None = None) -> None:
        self.config = config
        self.now_ms = now_ms
        self.stats = StoreStats()
        self.consume_queues = ConsumeQueueStore(config)
        self.index = IndexService(config, now_ms)
        dispatchers: list[SupportsDispatch] = [self.consume_queues]
        if config.message_index_enable:
            dispatchers.append(self.index)
        #: a slave notes the queues its replicated appends reach (arrivals, topics it learns)
        self.replicated = QueueRecorder() if config.broker_role == "SLAVE" else None
        if self.replicated is not None:
            dispatchers.append(self.replicated)
        self.commit_log = CommitLog(config, dispatchers, now_ms, self.stats)
        #: :meth:`put_lone`'s compiled call (None: the Python path; tests compare both)
        self._lone_put = COMPILED_LONE_PUT
        MessageReader.__init__(self, self.consume_queues, self.commit_log, config, total_memory)
        self.retention = Retention(config, now_ms)
        self.checkpoint: StoreCheckpoint | None = None
        #: what the last load's recovery did
        self.recovery: RecoveryReport | None = None
        self._checkpoint_written: tuple[int, int, int, int] | None = None  # the values last flushed
        self.last_exit_ok = True
        #: after a crash: only the process died (the abort file names this boot)
        self.page_cache_intact = False
        self.running = False
        self._lock_fd = -1
        self._load_began = 0.0

    # -- lifecycle --

    def load(self) -> bool:
        """Take the lock file, open every file and recover (normally, or after a crash when the
        abort file is there); rebuild the queue-offset table.

        :returns: False when the store cannot be opened (locked, a file of the wrong size, I/O error).
        """
        try:
            self._take_lock()
            self.last_exit_ok = not os.path.exists(self.config.abort_path)
            self._load_began = time.monotonic()
            self.page_cache_intact = not self.last_exit_ok and page_cache_intact(self.config.abort_path)
            _log.info("store {dir}: recovering after {exit}", dir=self.config.store_path_root_dir,
                      exit=_exit_name(self.last_exit_ok, self.page_cache_intact))
            self.checkpoint = StoreCheckpoint(self.config.checkpoint_path)
            index_trusted = self.last_exit_ok or self.page_cache_intact
            if not (self.commit_log.load() and self.consume_queues.load()
                    and self.index.load(index_trusted, self.checkpoint.index_msg_timestamp)):
                self._release_lock()
                return False
            report = self.recovery = recover_store(self)
            if not self.page_cache_intact:  # the recovered state, checkpointed at once
                self.flush_consume_queues(0)
            log = self.commit_log
            _log.info("store {dir} recovered after {exit} in {seconds:.3f} s: commit log [{min}, {end}) in {files} "
                      "files, {messages} messages in {queues} queues; the walk began at {start}{how}",
                      dir=self.config.store_path_root_dir, exit=_exit_name(self.last_exit_ok, self.page_cache_intact),
                      seconds=time.monotonic() - self._load_began, min=max(log.min_offset, 0), end=report.end,
                      files=len(log.queue.mapped_files), messages=sum(log.topic_queue_table.values()),
                      queues=len(log.topic_queue_table), start=report.start,
                      how=" (the queues' newest record or the checkpoint's offset)" if report.page_cache_intact
                      else " (the checkpoint's offset)" if report.from_checkpoint_offset else "")
        except (OSError, StoreLockedError) as e:
            _log.error("store {dir}: cannot load: {error}", dir=self.config.store_path_root_dir, error=e)
            self._release_lock()
            return False
        return True

    def _take_lock(self) -> None:
        if self._lock_fd >= 0:
            return
        os.makedirs(self.config.store_path_root_dir, exist_ok=True)
        fd = os.open(self.config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError("Lock failed, MQ already started") from None
        os.pwrite(fd, b"lock", 0)
        os.fsync(fd)
        self._lock_fd = fd

    def start(self) -> None:
        """Hold the lock file and create the abort file, holding this boot's id: from now on an
        exit without :meth:`shutdown` counts as a crash (of the process alone while the boot id
        is the same).

        :raises StoreLockedError: another store runs on this directory.
        """
        self._take_lock()
        with open(self.config.abort_path, "wb") as abort:
            abort.write(boot_id().encode())
            abort.flush()
            os.fsync(abort.fileno())
        root = os.open(self.config.store_path_root_dir, os.O_RDONLY)
        try:
            os.fsync(root)  # the abort file's directory entry survives a power loss too
        finally:
            os.close(root)
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove the abort file (a clean exit) unless the
        store became unwritable, close the files and release the lock."""
        was_running, self.running = self.running, False
        if was_running:
            self.flush(0)
            self.flush_consume_queues(0)
            if self.is_writable():
                os.remove(self.config.abort_path)
            else:
                _log.warn("store {dir} not writable at shutdown: the next start recovers as after a crash",
                          dir=self.config.store_path_root_dir)
        if self.checkpoint is not None:
            self.checkpoint.close()
        self.commit_log.close()
        self.consume_queues.close()
        self.index.close()
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    # -- writes --

    def is_writable(self) -> bool:
        """False once a dispatch failed or the disk is full."""
        return not (self.commit_log.dispatch_failed or self.retention.disk_full)

    def _refusal(self) -> PutMessageStatus | None:
        if not self.running or self.config.broker_role == "SLAVE" or not self.is_writable():
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.commit_log.begin_time_in_lock and self.commit_log.is_os_page_cache_busy():
            return PutMessageStatus.OS_PAGECACHE_BUSY
        return None

    def put_message(self, msg: MessageExt) -> PutMessageResult:
        """Append one message; see :meth:`CommitLog.put_messages`."""
        return self.put_messages([msg])

    def put_messages(self, msgs: Sequence[MessageExt]) -> PutMessageResult:
        """Append a batch under one lock; one result with every message id."""
        refusal = self._refusal()
        if refusal is not None:
            self.stats.record_failure(refusal.value)
            return PutMessageResult(refusal)
        return self.commit_log.put_messages(msgs)

    def can_append_inline(self, puts: Sequence[Sequence[MessageExt]]) -> bool:
        """True when appending ``puts`` now does no blocking I/O, so the store service may append
        them on the reactor thread while its writer is idle (doc/store.md, "The put path").

        That needs small bodies (for a bound of the records' sizes: on the mmap write path
        memory copies into pages already faulted in by :meth:`MappedFile._populate`, on the pwrite
        path a ``pwrite`` into blocks already written with zeros by :meth:`MappedFile._zero_ahead`,
        a page-cache copy), no file to create for the commit log, the consume queues or the
        index, and no delay level or timer (which would move a message to another queue).
        """
        if COMPILED_INLINE_ROOM is not None:  # this method in one call, for the usual store
            room = COMPILED_INLINE_ROOM(self, puts, INLINE_MAX_BODY, INLINE_RECORD_FIXED)
            if room is not None:
                return room
        if not self.running:
            return False
        bound = inline_bound(puts, INLINE_MAX_BODY, INLINE_RECORD_FIXED)
        if bound is None:
            return False
        size, keys, entries = bound
        if not self.commit_log.can_append_inline(size):
            return False
        for (topic, queue_id), count in entries.items():
            if not self.consume_queues.can_append_inline(topic, queue_id, count):
                return False
        return not self.config.message_index_enable or self.index.can_append_inline(keys)

    def put_lone(self, msg: MessageExt, sync: tuple[Any, ...] | None = None
                 ) -> tuple[PutMessageResult, int | None, bool] | None:
        """One message appended now, on the calling thread, when :meth:`can_append_inline` would
        vouch for it and the compiled module does it in one call: the
        result :meth:`put_many` would give, the consume queue's new max offset (None: ask
        :meth:`get_max_offset_in_queue`) and whether :meth:`populate_ahead` is due. None, having
        appended nothing, otherwise: then ``can_append_inline`` and ``put_many`` as before.
        ``sync``: ``(sync_lone_put, syncer, started)`` (``AioFdSync.presync``): once appended, the sync
        :meth:`flush_begin` would hand out is submitted in the same call (doc/store.md, "Group commit on
        the reactor").
        """
        lone = self._lone_put
        log = self.commit_log
        if (lone is None or log.speedups is None or not self.running or self.config.broker_role == "SLAVE"
                or log.dispatch_failed or self.retention.disk_full):  # not is_writable()
            return None
        if sync is not None:
            return sync[0](lone, log, msg, sync[1], sync[2])
        return lone(log, msg)

    def populate_due(self) -> bool:
        """Inline appends are about to reach the end of the commit log's faulted-in pages."""
        return self.commit_log.populate_due()

    def populate_ahead(self) -> None:
        """Fault in the commit log's next pages (a pool thread), so appends stay inline, and the
        consume queues' and the index's, so the dispatch does not fault on them."""
        self.commit_log.populate_ahead()
        self.consume_queues.populate_ahead()
        if self.config.message_index_enable:
            self.index.populate_ahead()

    def put_many(self, puts: Sequence[Sequence[MessageExt]]) -> list[PutMessageResult]:
        """Several independent puts (single messages or batches) in order, one result each, under
        one lock with one write per file (:meth:`CommitLog.put_many`): the service's append hop."""
        refusal = self._refusal()
        if refusal is not None:
            for _ in puts:
                self.stats.record_failure(refusal.value)
            return [PutMessageResult(refusal) for _ in puts]
        return self.commit_log.put_many(puts)

    def flush(self, least_pages: int = 0) -> bool:
        """Make the commit log durable (``fdatasync``) when ``least_pages`` pages are dirty.

        :returns: True when the flushed offset advanced.
        """
        started = time.perf_counter()
        advanced = self.commit_log.flush(least_pages)
        if advanced:
            self._flushed(time.perf_counter() - started)
        return advanced

    def flush_begin(self) -> tuple[int, FlushToken] | None:
        """A flush the caller runs itself (the service's AIO ``fdatasync`` on the reactor): the
        descriptor to sync and a token for :meth:`flush_end`, or None when the unflushed bytes
        span files (then :meth:`flush`). Called on the reactor, with no other flush running."""
        return self.commit_log.queue.flush_begin()

    def flush_end(self, token: FlushToken, seconds: float) -> int:
        """The sync of ``token`` ended after ``seconds``: the log is durable as far as it covers;
        returns the flushed offset."""
        queue = self.commit_log.queue
        before = queue.flushed_where
        flushed = queue.flush_end(token)
        if flushed > before:
            self._flushed(seconds)
        return flushed

    def _flushed(self, seconds: float) -> None:
        self.stats.record_flush(seconds)
        if self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = self.commit_log.queue.store_timestamp

    def trail_page_cache(self) -> int:
        """:meth:`CommitLog.trail_page_cache` (the flush thread's, about once a second)."""
        return self.commit_log.trail_page_cache()

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Flush the consume queues and write the checkpoint; a thorough pass (0 pages) also
        flushes the index and advances the checkpoint's logics and index times.

        A queue whose first unflushed entry points below the commit log's flushed end is flushed
        whatever its dirty pages, so the checkpoint's offset keeps up with the log's flushes.
        """
        checkpoint = self.checkpoint
        if checkpoint is None:
            return
        logics = self.consume_queues.logics_msg_timestamp  # snapshots before the queues are flushed
        dispatched, flushed = self.commit_log.reput_offset, self.commit_log.flushed_offset
        unflushed = self.consume_queues.flush_for_checkpoint(least_pages, min(dispatched, flushed))
        if least_pages == 0:
            index_end = self.index.flush()
            if index_end:
                checkpoint.index_msg_timestamp = index_end
            if logics:
                checkpoint.logics_msg_timestamp = logics
        # below it the log and every queue are durable: where a crash recovery can start
        safe = min(dispatched, self.commit_log.flushed_offset)
        checkpoint.physic_offset = safe if unflushed < 0 else min(safe, unflushed)
        values = (checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                  checkpoint.index_msg_timestamp, checkpoint.physic_offset)
        if values != self._checkpoint_written:  # idle: no write
            checkpoint.flush()
            self._checkpoint_written = values

    @property
    def max_physical_offset(self) -> int:
        """End of the commit log (where the next record goes)."""
        return self.commit_log.max_offset

    @property
    def min_physical_offset(self) -> int:
        """Start of the oldest commit-log file (0 when there is none)."""
        return max(0, self.commit_log.min_offset)

    @property
    def checked_disk_ratio(self) -> float:
        """The highest used ratio of the store's partitions at the last retention check (-1: unreadable)."""
        return self.retention.last.ratio

    @property
    def flushed_offset(self) -> int:
        """How far the commit log is durable."""
        return self.commit_log.flushed_offset

    # -- reads (any thread; the others are MessageReader's) --

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        """Records of ``topic`` with ``key`` (a KEYS token or UNIQ_KEY) stored in ``[begin_ms, end_ms]``."""
        found = self.index.query(topic, key, max_num, begin_ms, end_ms)
        records = [r for r in map(self.select_one_message_by_offset, found.phy_offsets) if r is not None]
        return QueryMessageResult(records, found.index_last_update_timestamp, found.index_last_update_phyoffset)

    # -- HA --

    def append_to_commit_log(self, offset: int, data: bytes) -> bool:
        """Slave side: append master bytes at ``offset`` byte for byte, then dispatch whole records."""
        if self.checkpoint is None or not self.is_writable():
            return False
        return self.commit_log.append_data(offset, data)

    def append_replicated(self, offset: int, data: bytes) -> tuple[bool, dict[tuple[str, int], None]]:
        """:meth:`append_to_commit_log`, and the queues records were dispatched to since the last call."""
        ok = self.append_to_commit_log(offset, data)
        return ok, self.replicated.take() if self.replicated is not None else {}

    # -- retention --

    def clean_expired_files(self, positions: Iterable[ConsumerPosition] = ()) -> int:
        """Measure the disk and delete expired commit-log files; consume-queue and index files
        wholly below the new minimum follow. Run it every ``clean_resource_interval``.

        :param positions: every group's committed ``(group, topic, queue_id, offset)``: above 85 %
            (without ``clean_file_forcibly_enable``) they decide which files are consumed.
        :returns: how many commit-log files were deleted.
        """
        paths = [self.config.commit_log_dir, self.config.consume_queue_dir]
        deleted = self.retention.run(self.commit_log.queue, [p for p in paths if os.path.isdir(p)] or
                                     [self.config.store_path_root_dir], lambda: self.pending_by_group(positions))
        if deleted:
            low = self.commit_log.min_offset
            self.consume_queues.delete_expired(low)
            self.index.delete_expired(low)
        return deleted

    def pending_by_group(self, positions: Iterable[ConsumerPosition]) -> dict[str, int]:
        """Per group, the commit-log offset of the oldest message it has not consumed (groups at
        the end of all their queues are left out)."""
        pending: dict[str, int] = {}
        for group, topic, queue_id, offset in positions:
            cq = self.consume_queues.get(topic, queue_id)
            if cq is None or offset >= cq.max_offset:
                continue
            entry = cq.get_entry(max(offset, cq.min_offset))
            if entry is not None and entry[0] < pending.get(group, entry[0] + 1):
                pending[group] = entry[0]
        return pending

    def execute_delete_files_manually(self) -> None:
        """TRIGGER_DELETE_FILES: the next clean passes delete expired files whatever the hour."""
        self.retention.delete_manually()

    def disk_usage_ratio(self) -> float:
        """Used share (0–1) of the commit log's partition; -1 when unknown."""
        path = self.config.commit_log_dir
        return used_ratio(path if os.path.isdir(path) else self.config.store_path_root_dir)
