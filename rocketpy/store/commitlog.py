"""The commit log: every message of the broker, appended in one sequence of segment files.

Records have RocketMQ's v1 layout (doc/wire.md §10; :mod:`rocketpy.common.message`).
Records are encoded outside the lock; under it the store fields are patched in, the bytes copied
once and the dispatchers (consume queues, index) told about each record. Plain blocking code:
one writer thread, readers on any thread.
"""

from __future__ import annotations

import errno
import struct
import threading
import time
from typing import Callable, Iterable, Protocol, Sequence, cast

from twisted.logger import Logger
from twisted.python.failure import Failure

from rocketpy.common import speedups
from rocketpy.common.message import (
    BLANK_MAGIC_CODE,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    encode_record,
    offset_msg_id,
    patch_record,
    tags_code,
)
from rocketpy.common.topic import SCHEDULE_TOPIC, TIMER_TOPIC, TOPIC_MAX_LENGTH
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.consumequeue import ConsumeQueueStore
from rocketpy.store.delay import DelayLevels
from rocketpy.store.dispatch import DispatchRequest, SupportsDispatch
from rocketpy.store.index import IndexService
from rocketpy.store.mappedfile import MappedFile
from rocketpy.store.mappedfilequeue import MappedFileQueue
from rocketpy.store.pagecache import PageCacheTrail
from rocketpy.store.recovery import BLANK_SIZE, walk
from rocketpy.store.stats import StoreStats
from rocketpy.store.timer import TimerRules, is_timer_request
from rocketpy.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

LOCK_WARN_MS = 500
RECORD_SLACK = 64 * 1024  # a record may exceed max_message_size by this much (4.9.5+)
_PAGE_CACHE_BUSY_CEILING_MS = 10_000_000
_HEAD = struct.Struct(">ii")
_NO_QUEUE_OFFSET = (MessageSysFlag.TRANSACTION_PREPARED_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
_TRAN_MASK = MessageSysFlag.TRANSACTION_MASK

_log = Logger()

#: One put of an append: its index in the results, its messages, their encoded records (one per
#: message, or for a batch from the compiled ``encode_puts`` one holding them back to back), their bytes.
Put = tuple[int, Sequence[MessageExt], list[bytearray], int]
#: What placing a chunk gives: the end offset, the queue offsets to restore, the records, each put's ids.
Placed = tuple[int, list[tuple[str, int]], list[bytearray], list[list[str]]]


def _records_of(data: bytearray) -> Iterable[bytearray]:
    """Each record of ``data``, records back to back (copies: patched and written instead)."""
    at = 0
    while at < len(data):
        size = _HEAD.unpack_from(data, at)[0]
        yield data[at:at + size]
        at += size


class StoreSpeedups(Protocol):
    """The compiled store functions (``rocketpy/_speedups_store.h``)."""

    def encode_puts(self, puts: Sequence[Sequence[MessageExt]], store_host: tuple[str, int], max_body: int,
                    slack: int, limit: int) -> list[Put] | None: ...

    def place_chunk(self, chunk: list[Put], table: dict[str, int], phys: int, now: int, host: str) -> Placed | None: ...

    def dispatch_chunk(self, chunk: list[Put], consume_queues: ConsumeQueueStore, index: IndexService | None,
                       dispatch: Callable[[MessageExt], None]) -> None: ...

    def put_encoded(self, log: CommitLog, encoded: list[Put], count: int) -> list[PutMessageResult] | None: ...


#: The compiled module when built (None: the Python methods run); a CommitLog's ``speedups``.
COMPILED = cast("StoreSpeedups | None", speedups.compiled if hasattr(speedups.compiled, "encode_puts") else None)


def wall_clock_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class CommitLog:
    """Appends, reads and recovers the commit log.

    :param config: the store configuration.
    :param dispatchers: told about every appended or recovered record, in order.
    :param now_ms: the clock (ms); tests inject one.
    """

    def __init__(self, config: MessageStoreConfig, dispatchers: Iterable[SupportsDispatch] = (),
                 now_ms: Callable[[], int] = wall_clock_ms, stats: StoreStats | None = None) -> None:
        self.config = config
        self.queue = MappedFileQueue(config.commit_log_dir, config.mapped_file_size_commit_log, config.write_path)
        self.dispatchers = list(dispatchers)
        self.now_ms = now_ms
        self.stats = stats if stats is not None else StoreStats()
        self.topic_queue_table: dict[str, int] = {}  # "topic-qid" -> next queue offset
        self.begin_time_in_lock = 0
        self.dispatch_failed = False
        self.reput_offset = 0  # first byte not yet dispatched (HA appends)
        self._lock = threading.Lock()
        self._delays = DelayLevels(config.delay_level_table())
        self.timer = TimerRules(config)
        self._host_hex = offset_msg_id(config.store_host, 0)[:-16]
        self._tags_codes: dict[str, int] = {}
        #: the compiled put functions, or None for the Python reference (tests compare both)
        self.speedups = COMPILED
        #: which pages behind the flushed offset to drop from the page cache
        self.page_cache = PageCacheTrail(config.commit_log_page_cache_keep, self.queue.drop_cache)
        #: a reader read the log at this offset (any thread): the trail keeps its chunk cached a while
        self.note_read: Callable[[int], None] = self.page_cache.note_read

    def load(self) -> bool:
        """Open the existing files (recovery must follow); False if one has the wrong size."""
        return self.queue.load()

    # -- state --

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_where

    def is_os_page_cache_busy(self) -> bool:
        """True while a writer has held the lock longer than ``os_page_cache_busy_timeout``."""
        begin = self.begin_time_in_lock
        if begin == 0:
            return False
        held = self.now_ms() - begin
        return self.config.os_page_cache_busy_timeout * 1000 < held < _PAGE_CACHE_BUSY_CEILING_MS

    # -- writes --

    def put_message(self, msg: MessageExt) -> PutMessageResult:
        """Append one message (see :meth:`put_messages`)."""
        return self.put_many(([msg],))[0]

    def put_messages(self, msgs: Sequence[MessageExt]) -> PutMessageResult:
        """Append ``msgs`` contiguously in one file, under one lock; one result for them all.

        Each message gets its store host, store time, commit-log and queue offsets set in place.
        """
        return self.put_many((msgs,))[0]

    def put_many(self, puts: Sequence[Sequence[MessageExt]]) -> list[PutMessageResult]:
        """Append several independent puts in order under one lock, each as :meth:`put_messages`
        would (contiguous in one file, its own result), with one write per file touched.

        This is the store service's append hop: the lock, the clock, the file lookup and the
        write call (a system call on the pwrite path) are paid once per hop, not per put.
        """
        results: list[PutMessageResult | None] = [None] * len(puts)
        limit = self.queue.mapped_file_size - BLANK_SIZE
        compiled = self.speedups
        fast = None if compiled is None else compiled.encode_puts(puts, self.config.store_host,
                                                                  self.config.max_message_size, RECORD_SLACK, limit)
        if fast is not None and compiled is not None:  # the rest of this method in one call, for the usual case
            done = compiled.put_encoded(self, fast, len(puts))
            if done is not None:
                return done
        encoded: list[Put] = self._encode_each(puts, results, limit) if fast is None else fast
        if encoded:
            with self._lock:
                begin = self.begin_time_in_lock = self.now_ms()
                try:
                    self._append(encoded, results, begin)
                finally:
                    self.begin_time_in_lock = 0
            elapsed = self.now_ms() - begin
            for i, msgs, _bufs, total in encoded:
                result = results[i]
                assert result is not None
                if result.status is PutMessageStatus.PUT_OK:
                    self._record_put(msgs[0].topic, len(msgs), total, elapsed)
                else:
                    if elapsed > LOCK_WARN_MS:
                        self._lock_held(total, elapsed)
                    self.stats.record_failure(result.status.value)
        return results  # type: ignore[return-value]  # every slot is filled by now

    def _record_put(self, topic: str, records: int, total: int, elapsed: int) -> None:
        """The stats of a stored put of ``total`` bytes that held the lock ``elapsed`` ms (also the compiled lone put's)."""
        if elapsed > LOCK_WARN_MS:
            self._lock_held(total, elapsed)
        self.stats.record_put(topic, records, total, elapsed)

    def _lock_held(self, total: int, elapsed: int) -> None:
        _log.warn("commit log {dir}: a put of {size} bytes held the lock {ms} ms", dir=self.queue.store_path,
                  size=total, ms=elapsed)

    def _encode_each(self, puts: Sequence[Sequence[MessageExt]], results: list[PutMessageResult | None],
                     limit: int) -> list[Put]:
        """The reference of the compiled ``encode_puts``: each put's records, or its failure in
        ``results`` (counted in the stats)."""
        encoded: list[Put] = []
        for i, msgs in enumerate(puts):
            try:
                bufs, status = self._encode(msgs) if msgs else ([], PutMessageStatus.MESSAGE_ILLEGAL)
            except Exception:  # a malformed message fails its own put only
                _log.failure("commit log {dir}: cannot encode a put of {count} message(s)", dir=self.queue.store_path,
                             count=len(msgs))
                bufs, status = [], PutMessageStatus.UNKNOWN_ERROR
            if status is None:
                total = len(bufs[0]) if len(bufs) == 1 else sum(map(len, bufs))
                if total <= limit:
                    encoded.append((i, msgs, bufs, total))
                    continue
                status = PutMessageStatus.MESSAGE_ILLEGAL
            self.stats.record_failure(status.value)
            results[i] = PutMessageResult(status, remark=self.timer.remark(status))
        return encoded

    def can_append_inline(self, size: int) -> bool:
        """True when ``size`` bytes fit the current file, in pages already faulted in: such an
        append creates no file and takes no page fault (no blocking I/O)."""
        mf = self.queue.last()
        return (mf is not None and size + BLANK_SIZE <= mf.remaining
                and mf.is_populated(mf.wrote_position + size))

    def populate_due(self) -> bool:
        """The current file's faulted-in window ahead of the writes is running low."""
        mf = self.queue.last()
        return mf is not None and mf.populate_due()

    def populate_ahead(self) -> None:
        """Fault in the next window of the current file (any thread but the reactor)."""
        mf = self.queue.last()
        if mf is not None:
            mf.populate_ahead()

    def _encode(self, msgs: Sequence[MessageExt]) -> tuple[list[bytearray], PutMessageStatus | None]:
        host = self.config.store_host
        max_body = self.config.max_message_size
        bufs: list[bytearray] = []
        for msg in msgs:
            if len(msg.topic) > TOPIC_MAX_LENGTH or len(msg.body) > max_body:
                return bufs, PutMessageStatus.MESSAGE_ILLEGAL
            props = msg.properties
            if is_timer_request(props):
                refused = self.timer.divert(msg, self.now_ms())
                if refused is not None:
                    return bufs, refused
            if MessageConst.DELAY_TIME_LEVEL in props and msg.topic != SCHEDULE_TOPIC:
                self._delays.divert(msg)
            msg.store_host = host
            try:
                buf = encode_record(msg)
            except ValueError:
                if len(msg.topic.encode()) > TOPIC_MAX_LENGTH:
                    return bufs, PutMessageStatus.MESSAGE_ILLEGAL
                return bufs, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
            if len(buf) > max_body + RECORD_SLACK:
                return bufs, PutMessageStatus.MESSAGE_ILLEGAL
            bufs.append(buf)
        return bufs, None

    def _append(self, encoded: list[Put], results: list[PutMessageResult | None], now: int) -> None:
        """Under the lock: place each put, write the puts of one file with one call, then dispatch."""
        if len(encoded) == 1:  # a lone put that fits the current file: no chunk loop, no file lookup
            mf = self.queue.last()
            total = encoded[0][3]
            if mf is not None and total + BLANK_SIZE <= mf.remaining:
                self._write_chunk(mf, encoded, total, results, now)
                return
        chunk: list[Put] = []
        chunk_bytes = 0
        mf = None
        for put in encoded:
            total = put[3]
            if mf is None or total + BLANK_SIZE > mf.remaining - chunk_bytes:
                if chunk:
                    self._write_chunk(mf, chunk, chunk_bytes, results, now)  # type: ignore[arg-type]
                    chunk, chunk_bytes = [], 0
                try:
                    mf = self._file_with_room(total)
                except OSError as e:
                    _log.error("commit log {dir}: cannot create a file: {error}", dir=self.queue.store_path, error=e)
                    results[put[0]] = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE
                                                       if e.errno == errno.ENOSPC
                                                       else PutMessageStatus.CREATE_MAPEDFILE_FAILED)
                    mf = None
                    continue
            chunk.append(put)
            chunk_bytes += total
        if chunk:
            self._write_chunk(mf, chunk, chunk_bytes, results, now)  # type: ignore[arg-type]

    def _write_chunk(self, mf: MappedFile, chunk: list[Put], chunk_bytes: int, results: list[PutMessageResult | None],
                     now: int) -> None:
        """Assign offsets to the puts of ``chunk``, write them at the end of ``mf``, dispatch them."""
        base = mf.file_from_offset + mf.wrote_position
        table = self.topic_queue_table
        placed = None if self.speedups is None else self.speedups.place_chunk(chunk, table, base, now, self._host_hex)
        phys, undo, out, ids = self._place(chunk, base, now) if placed is None else placed
        try:
            if len(out) == 1:
                mf.append(out[0])
            else:
                mf.append_many(out, chunk_bytes)
        except OSError as e:
            for key, queue_offset in reversed(undo):
                table[key] = queue_offset
            _log.error("commit log {dir}: write failed at {offset}: {error}", dir=self.queue.store_path, offset=base, error=e)
            status = PutMessageStatus.SERVICE_NOT_AVAILABLE if e.errno == errno.ENOSPC else PutMessageStatus.UNKNOWN_ERROR
            for i, *_rest in chunk:
                results[i] = PutMessageResult(status)
            return
        mf.store_timestamp = now
        self._dispatch_chunk(chunk)
        for (i, msgs, _bufs, total), put_ids in zip(chunk, ids):
            first = msgs[0]
            append = AppendMessageResult(AppendMessageStatus.PUT_OK, first.commit_log_offset, total, put_ids,
                                         first.queue_offset, len(msgs), now)
            results[i] = PutMessageResult(PutMessageStatus.PUT_OK, append)
        self.reput_offset = phys

    def _place(self, chunk: list[Put], phys: int, now: int) -> Placed:
        """The reference of the compiled ``place_chunk``: each record's queue offset (the next of
        its queue, 0 for transaction PREPARED and ROLLBACK records), commit-log offset ``phys``
        on, store time ``now``, patched into the record and set on the message.

        :returns: the end offset, ``(key, previous next offset)`` pairs to restore when the write
            fails, the records in order, and each put's message ids.
        """
        table = self.topic_queue_table
        host = self._host_hex
        undo: list[tuple[str, int]] = []
        out: list[bytearray] = []
        ids: list[list[str]] = []
        for _i, msgs, bufs, _total in chunk:
            put_ids = []
            if len(bufs) != len(msgs):  # the compiled encode_puts' batch: its records, one by one
                bufs = list(_records_of(bufs[0]))
            for msg, buf in zip(msgs, bufs):
                if msg.sys_flag & _TRAN_MASK in _NO_QUEUE_OFFSET:
                    queue_offset = 0
                else:
                    key = f"{msg.topic}-{msg.queue_id}"
                    queue_offset = table.get(key, 0)
                    table[key] = queue_offset + 1
                    undo.append((key, queue_offset))
                patch_record(buf, queue_offset, phys, now)
                msg.queue_offset, msg.commit_log_offset, msg.store_timestamp = queue_offset, phys, now
                msg.store_size = size = len(buf)
                put_ids.append(host + format(phys, "016X"))
                phys += size
            out += bufs
            ids.append(put_ids)
        return phys, undo, out, ids

    def _dispatch_chunk(self, chunk: list[Put]) -> None:
        """:meth:`dispatch` every record of ``chunk``, in order: in one compiled call when the
        dispatchers are the store's consume queues (and index)."""
        compiled = self.speedups
        # dispatch_chunk knows these two dispatchers only (a slave's QueueRecorder goes the Python way)
        dispatchers = self.dispatchers
        count = len(dispatchers)
        queues = dispatchers[0] if count else None
        index = dispatchers[1] if count == 2 else None
        if (compiled is None or type(queues) is not ConsumeQueueStore or count > 2
                or (index is not None and type(index) is not IndexService)):
            dispatch = self.dispatch
            for _i, msgs, _bufs, _total in chunk:
                for msg in msgs:
                    dispatch(msg)
            return
        try:
            compiled.dispatch_chunk(chunk, queues, index, self.dispatch)
        except Exception as e:
            self._dispatch_raised(e)

    def _dispatch_raised(self, error: BaseException) -> None:
        """What dispatch() does for a dispatcher's failure, for the compiled dispatch's (memory, in C)."""
        _log.failure("commit log {dir}: dispatching a chunk failed", Failure(error), dir=self.queue.store_path)
        self.dispatch_failed = True

    def _file_with_room(self, size: int) -> MappedFile:
        # END_OF_FILE: fill the rest of a file too small for ``size`` with a blank, go to the next.
        mf = self.queue.get_last_mapped_file(0)
        assert mf is not None
        if size + BLANK_SIZE > mf.remaining:
            mf.write_at(mf.wrote_position, _HEAD.pack(mf.remaining, BLANK_MAGIC_CODE))
            mf.wrote_position = mf.committed_position = mf.file_size
            mf = self.queue.get_last_mapped_file(0)
            assert mf is not None
        return mf

    def dispatch(self, msg: MessageExt) -> None:
        """Tell every dispatcher about the stored record ``msg``."""
        props = msg.properties
        tags = props.get(MessageConst.TAGS)
        code = 0
        if tags:
            code = self._tags_codes.get(tags, 0) or self._tags_code(tags)
        if msg.topic == SCHEDULE_TOPIC:
            code = self._delays.delivery_time(msg, code)
        elif msg.topic == TIMER_TOPIC:
            code = self.timer.due_ms(msg, 0)
        request = DispatchRequest(
            msg.topic, msg.queue_id, msg.commit_log_offset, msg.store_size, code, msg.store_timestamp,
            msg.queue_offset, props.get(MessageConst.KEYS), props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            msg.sys_flag, msg.prepared_transaction_offset,
        )
        for dispatcher in self.dispatchers:
            try:
                dispatcher.dispatch(request)
            except Exception:
                _log.failure("commit log {dir}: dispatcher {dispatcher!r} failed at offset {offset}",
                             dir=self.queue.store_path, dispatcher=dispatcher, offset=msg.commit_log_offset)
                self.dispatch_failed = True

    def _tags_code(self, tags: str) -> int:
        if len(self._tags_codes) > 4096:
            self._tags_codes.clear()
        code = self._tags_codes[tags] = tags_code(tags)
        return code

    def append_data(self, offset: int, data: bytes) -> bool:
        """HA slave: append master bytes at ``offset`` (must be the log end), then dispatch every
        record they complete.

        :returns: False, appending nothing, when ``offset`` is not the end or the bytes do not fit.
        """
        size = self.queue.mapped_file_size
        with self._lock:
            if self.queue.last() is None:
                if offset % size:
                    return False
                self.reput_offset = offset
            elif offset != self.queue.max_offset:
                return False
            try:
                mf = self.queue.get_last_mapped_file(offset)
            except OSError as e:
                _log.error("commit log {dir}: cannot create a file: {error}", dir=self.queue.store_path, error=e)
                return False
            assert mf is not None
            if len(data) > mf.remaining:
                return False
            mf.append(data)
            # An HA block often ends inside a record: no warning for that tail.
            self.reput_offset = walk(self, self.reput_offset, check_crc=False, dispatch=True, warn=False)
        return True

    # -- reads (any thread) --

    def get_data(self, offset: int, size: int = -1) -> bytes | None:
        """``size`` bytes at ``offset`` (to the readable end of its file when -1).

        None when they are not (or no longer) all there.
        """
        mf = self.queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        return mf.select(offset - mf.file_from_offset, size)

    # -- flush and lifecycle --

    def flush(self, least_pages: int = 0) -> bool:
        """Make the log durable up to its end (across files filled since the last flush).

        :returns: True when the flushed offset advanced.
        """
        advanced = False
        while self.queue.flush(least_pages):
            advanced = True
            if self.queue.flushed_where >= self.queue.max_offset:
                break
        return advanced

    def trail_page_cache(self) -> int:
        """Drop the pages far behind the flushed offset that nobody read lately (blocking; the
        flush thread's); returns the bytes it asked to drop (doc/store.md, "Page cache behind the
        flushed position")."""
        return self.page_cache.advance(self.queue.flushed_where, self.queue.min_offset)

    def close(self) -> None:
        self.queue.close()
