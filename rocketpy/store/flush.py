"""The store's flushes: :class:`CommitLogFlush` owns the commit log's (group commit, periodic),
:class:`FlushLoops` runs the periodic pool work (commit-log flush, consume-queue flush, retention,
the commit log's pages behind its flushed offset).

RocketMQ runs these as service threads (``FlushRealTimeService``, ``CleanCommitLogService``; doc/store.md); here each is a
reactor ``LoopingCall`` that hands one blocking call to the store's pool per tick. A loop
never overlaps itself (``LoopingCall`` waits for the returned Deferred), and a failing tick
is logged without ending the loop.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, Sequence

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.groupcommit import OffsetWaiters
from rocketpy.store.retention import ConsumerPosition


class FlushableStore(Protocol):
    """The part of the blocking ``MessageStore`` facade the flush work uses."""

    @property
    def max_physical_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    def flush(self, least_pages: int = 0) -> bool: ...

    def flush_consume_queues(self, least_pages: int = 0) -> None: ...

    def trail_page_cache(self) -> int: ...

    def clean_expired_files(self, positions: Sequence[ConsumerPosition] = ()) -> int: ...


InPool = Callable[..., "Deferred[Any]"]


def flush_commit_log(store: FlushableStore, least_pages: int, target: int = 0) -> int:
    """Flush the commit log (blocking; runs in the pool) and return the flushed offset.

    The facade flushes one segment per call, so a record spanning into the next file
    may need a second call: like RocketMQ's group commit, try twice to reach ``target``.

    :param least_pages: flush only when this many pages are dirty (0: anything dirty).
    :param target: the offset the caller needs flushed, 0 for "whatever is due".
    """
    store.flush(least_pages)
    if store.flushed_offset < target:
        store.flush(0)
    return store.flushed_offset


class CommitLogFlush:
    """The commit log's flushes and the one record of which runs (RocketMQ's flush services).

    Three kinds share the flush thread, all started on the reactor through this object:

    - group commit (SYNC_FLUSH): :meth:`kick` flushes up to the highest waiter; at most one such
      flush is in flight, covering every waiter added before it started, and waiters added
      meanwhile start the next when it ends. A failed flush is logged, not retried here;
    - an append hop that flushes on its way (:meth:`claim`, then :meth:`release`), only when no
      flush runs: it counts as the group commit's flush meanwhile;
    - the periodic :meth:`tick`, skipped while a group-commit flush runs.

    :param waiters: the flush waiters.
    :param flush: ``(least_pages, target) -> Deferred`` of the offset then durable; runs
        :func:`flush_commit_log` in the flush pool.
    :param on_flushed: called on the reactor with that offset after each flush of :meth:`kick`
        and :meth:`tick`; it must advance ``waiters``.
    :param idle: called whenever a group-commit flush ends.
    :param start_group: ``(target, done, failed, before) -> None``: starts a group-commit flush up to
        ``target`` and calls ``done(offset, before)`` or ``failed(failure)`` on the reactor when it ends,
        without a Deferred (the reactor's own ``fdatasync``, a lone SYNC_FLUSH send's); None: ``flush(0,
        target)``'s Deferred.
    """

    log = Logger()

    def __init__(self, waiters: OffsetWaiters, flush: Callable[[int, int], Deferred[int]],
                 on_flushed: Callable[[int], object], idle: Callable[[], object],
                 start_group: Callable[[int, Callable[[int, int], None], Callable[[Failure], None], int], None]
                 | None = None) -> None:
        self._waiters = waiters
        self._flush = flush
        self._on_flushed = on_flushed
        self._idle = idle
        self._start_group = start_group
        #: a group-commit flush (or an append hop's flush) is in flight
        self.group_running = False
        self._periodic = False  # a tick's flush is in flight

    def claim(self) -> bool:
        """For an append hop that would flush too: True (the flush is the hop's until
        :meth:`release`) when no flush of any kind runs."""
        if self.group_running or self._periodic:
            return False
        self.group_running = True
        return True

    def release(self) -> None:
        """The claiming hop's flush ended (its offset reaches the waiters through the hop)."""
        self.group_running = False

    def kick(self, target: int = 0) -> None:
        """Start a group-commit flush if a waiter (or ``target``: a put about to wait) is not
        covered and none runs."""
        if self.group_running:
            return
        waiters = self._waiters
        if waiters.pending and waiters.max_offset > target:
            target = waiters.max_offset
        if target <= waiters.position:
            return
        self.group_running = True
        if self._start_group is not None:
            self._start_group(target, self._group_done, self._group_failed, waiters.position)
        else:
            self._flush(0, target).addCallbacks(self._group_done, self._group_failed, (waiters.position,))

    def _group_done(self, offset: int, before: int) -> None:
        self.group_running = False
        self._on_flushed(offset)
        if offset > before and self._waiters.pending:  # else kick() finds nothing to flush
            self.kick()
        self._idle()

    def _group_failed(self, failure: Failure, *_: object) -> None:
        self.log.failure("group-commit flush failed", failure, level=LogLevel.error)
        self.group_running = False
        self._idle()

    async def tick(self, least_pages: int) -> None:
        """One periodic flush of ``least_pages`` dirty pages or more; skipped while a group commit runs."""
        if self.group_running:
            return
        self._periodic = True
        try:
            flushed = await self._flush(least_pages, 0)
        finally:
            self._periodic = False
        self._on_flushed(flushed)


class FlushLoops:
    """The periodic tasks of a running store: commit-log flush, consume-queue flush, retention, and the
    page-cache trail when ``commit_log_page_cache_keep`` is set.

    :param store: the blocking facade; only read here, called in the pool.
    :param config: intervals and page thresholds (``flush_*``, ``clean_resource_interval``).
    :param clock: the reactor's time; ``LoopingCall.clock`` and the thorough-flush timer.
    :param in_pool: runs a blocking callable in the store's writer pool (consume-queue
        flush, retention), returning a Deferred.
    :param in_flush_pool: runs a blocking callable on the flush thread (the page-cache trail,
        when ``commit_log_page_cache_keep`` is set).
    :param commit_log: flushes the commit log (on its own thread, so that an ``fdatasync``
        does not hold up appends) and knows whether a flush runs.
    :param sync_flush: SYNC_FLUSH: flush any dirty byte each tick (WAIT=false puts and
        waiters left over by a failed group commit), not only 4 pages.
    """

    log = Logger()

    def __init__(self, store: FlushableStore, config: MessageStoreConfig, clock: IReactorTime,
                 in_pool: InPool, in_flush_pool: InPool, commit_log: CommitLogFlush, sync_flush: bool = False) -> None:
        self._store = store
        self._in_flush_pool = in_flush_pool
        self._config = config
        self._clock = clock
        self._in_pool = in_pool
        self._commit_log = commit_log
        self._sync_flush = sync_flush
        self._last_thorough_log = self._last_thorough_cq = 0.0
        self._running: list[tuple[LoopingCall, Deferred[Any]]] = []
        #: a snapshot of every group's committed offsets, taken on the reactor for each retention check
        self.consumer_positions: Callable[[], Sequence[ConsumerPosition]] = tuple

    def start(self) -> None:
        """Start the loops; their first ticks come one interval from now."""
        now = self._clock.seconds()
        self._last_thorough_log = self._last_thorough_cq = now
        cfg = self._config
        for interval, tick, what in (
            (cfg.flush_interval_commit_log, self.flush_commit_log, "commit-log flush"),
            (cfg.flush_interval_consume_queue, self.flush_consume_queues, "consume-queue flush"),
            (cfg.clean_resource_interval, self.clean_expired_files, "retention check"),
            *([(cfg.page_cache_trail_interval, self.trail_page_cache, "page-cache trail")]
              if cfg.commit_log_page_cache_keep > 0 else []),
        ):
            loop = LoopingCall(self._guarded, tick, what)
            loop.clock = self._clock
            self._running.append((loop, loop.start(interval, now=False)))

    async def stop(self) -> None:
        """Stop the loops and wait for a tick still running in the pool."""
        running, self._running = self._running, []
        for loop, _ in running:
            if loop.running:
                loop.stop()
        await DeferredList([done for _, done in running])

    def _guarded(self, tick: Callable[[], Awaitable[None]], what: str) -> Deferred[None]:
        return Deferred.fromCoroutine(self._run_guarded(tick, what))

    async def _run_guarded(self, tick: Callable[[], Awaitable[None]], what: str) -> None:
        try:
            await tick()
        except Exception:
            # An exception escaping a LoopingCall would end it for good.
            self.log.failure("{what} failed", what=what, level=LogLevel.error)

    def _due(self, last: float, interval: float) -> bool:
        return self._clock.seconds() - last >= interval

    async def flush_commit_log(self) -> None:
        """One tick of RocketMQ's ``FlushRealTimeService``: ≥ 4 dirty pages, or all every 10 s."""
        cfg, store = self._config, self._store
        least = 0 if self._sync_flush else cfg.flush_commit_log_least_pages
        if self._due(self._last_thorough_log, cfg.flush_commit_log_thorough_interval):
            self._last_thorough_log = self._clock.seconds()
            least = 0
        if store.max_physical_offset > store.flushed_offset:  # else nothing dirty: skip the hop
            await self._commit_log.tick(least)

    async def flush_consume_queues(self) -> None:
        """One tick of ``FlushConsumeQueueService``: ≥ 2 pages, or everything (and the checkpoint) every 60 s."""
        cfg = self._config
        least = cfg.flush_consume_queue_least_pages
        if self._due(self._last_thorough_cq, cfg.flush_consume_queue_thorough_interval):
            self._last_thorough_cq = self._clock.seconds()
            least = 0
        await self._in_pool(self._store.flush_consume_queues, least)

    async def trail_page_cache(self) -> None:
        """Drop the commit log's pages far behind its flushed offset that nobody read lately."""
        await self._in_flush_pool(self._store.trail_page_cache)

    async def clean_expired_files(self) -> None:
        """One retention check: the facade deletes what its rules allow."""
        deleted = await self._in_pool(self._store.clean_expired_files, self.consumer_positions())
        if deleted:
            self.log.info("retention deleted {count} files", count=deleted)
