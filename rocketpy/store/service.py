"""``StoreService``: the Twisted face of the blocking message store (doc/store-api.md).

The service owns the store's thread pools (STYLE.md §3). Puts are queued on the reactor
and handed to the writer pool in *one* hop for everything queued since the previous hop
(a hop costs ~70 µs of CPU, doc/store.md "The put path"); only one append hop runs at a
time (under ASYNC_FLUSH a small put that finds the writer idle is appended on the reactor
thread instead, when the store vouches that it blocks on nothing: see ``_append_inline``).
Commit-log flushes run on a flush thread of their own, as RocketMQ's flush
services do, so an ``fdatasync`` (which releases the GIL) overlaps the next appends.
SYNC_FLUSH group commit: one flush covers every waiter appended before it started;
waiters appended while it runs are served by the next one. With the compiled module
(``store/aioflush.py``), SYNC_FLUSH appends inline too and the group commit's ``fdatasync`` runs
without the GIL (a C thread, or io_uring) and ends on the reactor's epoll: a lone put then
crosses no Python thread.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Sequence

from twisted.application.service import Service
import errno
import time

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from zope.interface import implementer

from rocketpy.common import speedups
from rocketpy.common.message import MessageExt
from rocketpy.interfaces import IMessageStore, IStoreService
from rocketpy.store.aioflush import AioFdSync
from rocketpy.store.arrivals import Arrival, ArrivalListener, ArrivalListeners
from rocketpy.store.config import SYNC_FLUSH_COMPLETIONS
from rocketpy.store.flush import CommitLogFlush, FlushLoops, flush_commit_log
from rocketpy.store.groupcommit import OffsetWaiters, PutCompletion, PutHook
from rocketpy.store.hop import HopOutcome, QueuedPut, Results, append_and_flush, each_put, put_all, put_each
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.pools import StorePools
from rocketpy.store.retention import ConsumerPosition
from rocketpy.store.servicereads import StoreReads
from rocketpy.store.status import PutMessageResult, PutMessageStatus


@implementer(IStoreService)
class StoreService(StoreReads, Service):
    """Runs a blocking ``MessageStore`` on its own thread pool.

    :param message_store: the blocking facade; its ``config`` gives the flush settings.
    :param reactor: provides ``IReactorTime`` and ``IReactorFromThreads``.
    :param pool: the writer pool (appends, load, consume-queue flush, retention,
        shutdown). It must have one thread. Default: a ``pools.OneThread("rocketpy-store")``.
    :param read_pool: runs reads. Default: the writer pool when ``pool`` was given,
        otherwise ``ThreadPool(1, 4, "rocketpy-store-read")``.
    :param flush_pool: runs commit-log flushes; one thread. Default: the writer pool
        when ``pool`` was given, otherwise a ``pools.OneThread("rocketpy-store-flush")``.
    :param max_queued_messages: flow control: more messages waiting for a hop make
        :meth:`is_busy` true and new puts fail with ``OS_PAGECACHE_BUSY``.
    :param max_queue_wait: flow control: the same once the oldest queued put has
        waited this long (RocketMQ's ``waitTimeMillsInSendQueue``, 200 ms).
    """

    log = Logger()

    def __init__(self, message_store: IMessageStore, reactor: IReactorTime, pool: ThreadPool | None = None,
                 read_pool: ThreadPool | None = None, flush_pool: ThreadPool | None = None,
                 max_queued_messages: int = 10_000, max_queue_wait: float = 0.2) -> None:
        self._store = message_store
        self._config = message_store.config
        self._reactor = reactor
        self._pools = StorePools(reactor, pool, read_pool, flush_pool)
        self._in_pool = self._pools.in_writer
        self._in_read_pool = self._pools.in_read
        self._in_flush_pool = self._pools.in_flush
        self._sync_flush = self._config.flush_disk_type == "SYNC_FLUSH"
        # Appends on the reactor thread while the writer is idle (ASYNC_FLUSH; SYNC_FLUSH only when
        # its sync ends on the reactor: else its put waits for a flush hop anyway, and its append hop flushes too).
        self._inline = not self._sync_flush
        completion = getattr(self._config, "sync_flush_completion", "native")
        if completion not in SYNC_FLUSH_COMPLETIONS:
            raise ValueError(f"sync_flush_completion must be one of {SYNC_FLUSH_COMPLETIONS}, not {completion!r}")
        self._aio_kind = completion
        self._aio_wanted = completion != "thread" and self._sync_flush and hasattr(message_store, "flush_begin")
        self._aio: AioFdSync | None = None
        #: ``(d, result, answers, next_offset, direct)`` when the last :meth:`put_message` (its Deferred ``d``)
        #: was appended and waits only for a native sync: the caller may add ``[next_offset, transport, frame]``
        #: to ``answers`` (the sync's end writes it first, then ``d`` fires; with ``direct``, ``AioFdSync.direct``,
        #: the sync thread may write it itself) and set this back to None (the broker's lone send,
        #: rocketpy/_speedups_syncanswer.h; doc/store.md, "Group commit on the reactor")
        self.lone_waiting: tuple[Deferred[PutMessageResult], PutMessageResult, list[list[Any]], int,
                                 tuple[Any, list[int]] | None] | None = None
        # pwrite path: the zeros ahead must not race an append, so they go to the writer itself
        self._in_populate_pool = self._in_pool if self._config.write_path == "pwrite" else self._in_flush_pool
        self._populating = False
        self._max_queued = max_queued_messages
        self._max_queue_wait = max_queue_wait
        self._queue: list[QueuedPut] = []
        #: the store's one-call inline append of one message (MessageStore.put_lone), if it has one
        self._put_lone: Callable[..., tuple[PutMessageResult, int | None, bool] | None] | None = getattr(
            message_store, "put_lone", None)
        self._queued_messages = 0
        self._queued_since = 0.0
        self._hop_started: float | None = None
        self._delivering = 0  # > 0 while firing put Deferreds: their new puts wait for one hop
        self._drained: list[Deferred[None]] = []
        self._ready = False
        self._started: Deferred[None] | None = None
        self._accepting = False  # running, and the store not known to have failed loading
        self._arrivals = ArrivalListeners()
        self._answering: tuple[MessageExt, PutMessageStatus, int | None] | None = None  # put_lone_now's put
        #: puts refused here before reaching the store, by status (the store counts its own)
        self.refused: Counter[str] = Counter()
        self._flush_waiters = OffsetWaiters(reactor, keep_timer=True)
        self._completion = PutCompletion(self._flush_waiters, reactor, self._sync_flush,
                                         self._config.sync_flush_timeout)
        self._flush = CommitLogFlush(self._flush_waiters, self._flush_log, self._advance_flushed, self._check_drained,
                                     self._flush_group)
        self._loops = FlushLoops(message_store, self._config, reactor, self._in_pool, self._in_flush_pool, self._flush,
                                 self._sync_flush)

    # -- lifecycle --

    def startService(self) -> Deferred[None]:
        """Start the pools, ``load()`` and ``start()`` the store in the pool, then the loops."""
        super().startService()
        self._accepting = True
        self._pools.start()
        if self._aio_wanted and self._aio is None:
            self._aio = AioFdSync.open(self._reactor, self._aio_kind)
            self._inline = self._aio is not None
        self._started = Deferred.fromCoroutine(self._start())
        return self._started

    async def _start(self) -> None:
        try:
            loaded = await self._in_pool(self._load_blocking)
        except Exception:
            self.log.failure("message store failed to load", level=LogLevel.critical)
            loaded = False
        if not loaded:
            self.log.critical("message store not loaded: puts are refused")
            self._accepting = False
            queue, self._queue = self._queue, []
            self._queued_messages = 0
            for put in queue:
                self._refuse(put, PutMessageStatus.SERVICE_NOT_AVAILABLE)
            return
        recovery = getattr(self._store, "recovery", None)  # a MessageStore's RecoveryReport
        if recovery is not None and not recovery.clean:
            self.log.warn("recovered after a crash{what}: commit log walked from {start} to {end}",
                          what=" of the process" if recovery.page_cache_intact else "", start=recovery.start,
                          end=recovery.end)
        self._flush_waiters.advance(self._store.flushed_offset)
        self._ready = True
        self._loops.start()
        self._maybe_hop()

    def _load_blocking(self) -> bool:
        if not self._store.load():
            return False
        self._store.start()
        return True

    def stopService(self) -> Deferred[None]:
        """Stop the loops, finish queued puts, flush everything, shut the store down, stop the pools."""
        super().stopService()
        self._accepting = False
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        if self._started is not None:
            await self._started
        await self._loops.stop()
        await self._wait_drained()
        if self._ready:
            self._ready = False
            try:
                flushed = await self._in_pool(self._shutdown_blocking)
                self._flush_waiters.advance(flushed)
            except Exception:
                self.log.failure("message store shutdown failed", level=LogLevel.critical)
        self._flush_waiters.expire(float("inf"))  # nothing will flush any more
        self._aio_off()
        self._pools.stop()

    def _shutdown_blocking(self) -> int:
        # The facade's shutdown flushes everything again (consume queues, index, checkpoint).
        flushed = flush_commit_log(self._store, 0, self._store.max_physical_offset)
        self._store.shutdown()
        return flushed

    def _idle(self) -> bool:
        return (self._hop_started is None and not self._queue and not self._flush.group_running
                and not self._populating)

    def _wait_drained(self) -> Deferred[None]:
        """Wait until no append hop or group-commit flush runs and nothing is queued."""
        if self._idle():
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._drained.append(d)
        return d

    # -- writes --

    def put_message(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        """Append one message; fires once appended (ASYNC_FLUSH) or flushed (SYNC_FLUSH + WAIT).

        Never fails: errors come back as a result status (``SERVICE_NOT_AVAILABLE`` when
        stopped, ``OS_PAGECACHE_BUSY`` when :meth:`is_busy`, ``FLUSH_DISK_TIMEOUT`` after
        ``sync_flush_timeout``, ``UNKNOWN_ERROR`` when the store raised).
        """
        lone = self._put_lone
        if (lone is not None and self._inline and self._hop_started is None and not self._queue
                and not self._delivering and self._ready and self._accepting and not self._in_pool.running):
            # what _enqueue's inline append does, in one store call when the store can (a usual message)
            self._hop_started = self._reactor.seconds()  # the writer's state is ours meanwhile
            aio = self._aio  # SYNC_FLUSH: the sync submitted in the append's call when none runs
            presync = aio.presync if aio is not None and not self._flush.group_running else None
            try:
                stored = lone(msg) if presync is None else lone(msg, presync)
            except Exception as e:  # a store bug: what put_all gives the hop
                if aio is not None:
                    aio.settle()  # a sync it started is no group commit's
                return self._lone_raised(msg, e)
            if stored is not None:
                return self._stored_now(msg, *stored)
            self._hop_started = None
        return self._enqueue(QueuedPut(((msg,),), True, 1))

    def _lone_raised(self, msg: MessageExt, error: Exception) -> Deferred[PutMessageResult]:
        """A store bug in its one-call append: what ``put_all`` gives the hop (UNKNOWN_ERROR, logged)."""
        put = QueuedPut(((msg,),), True, 1)
        self._hop_done(([error], None, None), [put], False)
        return put.deferred

    def put_lone_now(self, msg: MessageExt) -> PutMessageResult | Deferred[PutMessageResult] | None:
        """:meth:`put_message` for a caller that answers first (the broker's lone send in C,
        ``rocketpy/_speedups_request.h``), :meth:`is_busy` included: when the put completes at
        once (ASYNC_FLUSH, no put hook, the writer idle, the store's one-call append), its result
        itself, no Deferred; the caller then writes its answer and calls :meth:`lone_answered`,
        once and at once (the put's arrival notices and the next hop run there, right after the
        answer; the record is readable already). None, having done nothing, when :meth:`is_busy`
        (the caller refuses). Otherwise :meth:`put_message`'s Deferred, and nothing more to call.
        """
        lone = self._put_lone
        if lone is None or not self._completes_at_once() or self._queued_messages >= self._max_queued:
            return None if self.is_busy() else self.put_message(msg)
        self._hop_started = self._reactor.seconds()  # the writer's state is ours until lone_answered
        try:
            stored = lone(msg)
        except Exception as e:
            return self._lone_raised(msg, e)
        if stored is None:
            self._hop_started = None
            return self._enqueue_single(msg)
        result, max_offset, populate_due = stored
        if populate_due and not self._populating:
            self._populate()
        self._answering = (msg, result.status, max_offset)
        return result

    def _completes_at_once(self) -> bool:
        """Whether a put may be appended and completed right here (:meth:`put_lone_now`, :meth:`put_many_now`):
        ASYNC_FLUSH appending inline, no put hook, the writer idle (no hop, nothing queued or being delivered, no
        pool job) and the store ready and accepting."""
        return not (self._sync_flush or self._completion.hooks or not self._inline or self._hop_started is not None
                    or self._queue or self._delivering or not self._ready or not self._accepting
                    or self._in_pool.running)

    def _enqueue_single(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        """One message's put through the queue (or :meth:`_enqueue`'s inline append)."""
        return self._enqueue(QueuedPut(((msg,),), True, 1))

    def lone_answered(self) -> None:
        """After :meth:`put_lone_now`'s result was answered: the rest of :meth:`_lone_done`, the arrival
        notices (long polls, HA slaves, the timer) then the hop's end (its puts queued meanwhile go next)."""
        answering, self._answering = self._answering, None
        if answering is None:
            return
        msg, status, max_offset = answering
        if status is PutMessageStatus.PUT_OK:
            self._notify_put(msg, max_offset)
        if self._queue or self._drained:  # the notices' puts, or a stop waiting: else only the state
            self._hop_finished()
        else:
            self._hop_started = None

    def _stored_now(self, msg: MessageExt, result: PutMessageResult, max_offset: int | None,
                    populate_due: bool) -> Deferred[PutMessageResult]:
        """:meth:`_append_inline` and :meth:`_lone_done` after the store's ``put_lone``."""
        aio = self._aio
        append = result.append
        if aio is not None:  # SYNC_FLUSH: start the sync first (put_lone may have), the put's bookkeeping meanwhile
            # the log's end: this put's (nothing appended after it yet)
            end = append.next_offset if append is not None else self._store.max_physical_offset
            self._flush.kick(end)
            if aio.started:
                aio.settle()
        if populate_due and not self._populating:
            self._populate()
        d: Deferred[PutMessageResult] = Deferred()
        self._lone_done(d, (msg,), result, max_offset)
        if aio is not None and not d.called and aio is self._aio and aio.answers is not None \
                and not self._completion.hooks:  # waits for the native sync alone: its answer may go first
            self.lone_waiting = (d, result, aio.answers, end, aio.direct)
        return d

    def put_messages(self, msgs: Sequence[MessageExt]) -> Deferred[PutMessageResult]:
        """Append a batch under one store lock, with one result (as :meth:`put_message`)."""
        return self._enqueue(QueuedPut((msgs,), True, len(msgs)))

    def put_many(self, puts: Sequence[Sequence[MessageExt]]) -> Deferred[list[PutMessageResult]]:
        """Several independent puts (a sequence of one message, or a batch), one result each
        in order, with one Deferred: what a broker read of many send requests puts.

        Each result is what :meth:`put_message` (or :meth:`put_messages`) would give it.
        """
        if not puts:
            return succeed([])
        return self._enqueue(QueuedPut(puts, False, sum(map(len, puts))))

    def put_many_now(self, puts: Sequence[Sequence[MessageExt]]) -> list[PutMessageResult] | None:
        """:meth:`put_many` (or :meth:`put_messages`, for one batch) for a caller that takes the results
        at once (the broker's sends): when the puts complete at once (ASYNC_FLUSH, no put hook, the
        writer idle, the store vouching for an inline append), their results themselves, no Deferred;
        their arrival notices ran already, as before :meth:`put_many`'s Deferred fires. None, having
        done nothing, otherwise: then :meth:`put_many`."""
        if not puts or not self._completes_at_once() or not self._store.can_append_inline(puts):
            return None
        self._hop_started = self._reactor.seconds()  # the writer's state is ours meanwhile
        try:
            results = put_each(self._store, puts)
            if not self._populating and self._store.populate_due():
                self._populate()
            self._appended(puts, results)
        finally:
            self._hop_finished()
        return results  # type: ignore[return-value]  # _appended replaced the exceptions

    def queue_wait(self) -> float:
        """Seconds the oldest put waiting for an append hop has waited (0 when none waits)."""
        return self._reactor.seconds() - self._queued_since if self._queue else 0.0

    def is_busy(self) -> bool:
        """True when puts should be refused (the broker answers SYSTEM_BUSY).

        Busy when too many messages wait for a hop, the oldest has waited longer than
        ``max_queue_wait``, or the running hop has taken longer than
        ``os_page_cache_busy_timeout`` (RocketMQ's page-cache-busy rule).
        """
        if self._queued_messages >= self._max_queued:
            return True
        started = self._hop_started
        if started is None and not self._queue:  # nothing waits, nothing runs: no clock read
            return False
        now = self._reactor.seconds()
        if self._queue and now - self._queued_since > self._max_queue_wait:
            return True
        return started is not None and now - started > self._config.os_page_cache_busy_timeout

    def _enqueue(self, put: QueuedPut) -> Deferred[Any]:
        if not self._accepting:
            self._refuse(put, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        elif (self._hop_started is not None or self._queue) and self.is_busy():
            self._refuse(put, PutMessageStatus.OS_PAGECACHE_BUSY)
        elif (self._inline and self._hop_started is None and not self._queue
                and not self._delivering and self._ready and not self._in_pool.running
                and self._store.can_append_inline(put.puts)):
            self._append_inline([put])
        else:
            if not self._queue:
                self._queued_since = self._reactor.seconds()
            self._queue.append(put)
            self._queued_messages += put.messages
            if not self._delivering:
                self._maybe_hop()
        return put.deferred

    def _refuse(self, put: QueuedPut, status: PutMessageStatus) -> None:
        self.refused[status.value] += len(put.puts)
        put.refuse(status)

    def _append_inline(self, puts: list[QueuedPut]) -> None:
        """Writer idle: append small messages on the reactor thread, without a hop (ASYNC_FLUSH,
        and SYNC_FLUSH with its sync on the reactor).

        A lone producer otherwise pays two thread wake-ups per send (to the pool and back
        through the reactor's waker), which cost more than the append itself; a loaded broker's
        run of sends (one put_many) the same per run, plus the GIL hand-offs. The store's
        ``can_append_inline`` vouches that nothing blocks: memory copies into mmap pages
        already faulted in (or a ``pwrite`` into blocks written with zeros already), no file
        created (doc/store.md, "The put path").
        """
        self._hop_started = self._reactor.seconds()  # the writer's state is ours meanwhile
        results = put_all(self._store, puts)
        if self._aio is not None:  # SYNC_FLUSH: start the sync first, the puts' bookkeeping meanwhile
            self._flush.kick(self._store.max_physical_offset)
        if not self._populating and self._store.populate_due():
            self._populate()
        self._hop_done((results, None, None), puts, False)  # a lone send's put: _lone_done from there

    def _populate(self) -> None:
        """Fault in the next pages on the flush thread (write zeros ahead on the writer's), so the
        next appends stay inline too; the callers checked that no such job runs."""
        self._populating = True
        self._in_populate_pool(self._store.populate_ahead).addBoth(self._populated)

    def _populated(self, result: object) -> None:
        self._populating = False
        if isinstance(result, Failure):
            self.log.failure("populating commit-log pages failed", result, level=LogLevel.warn)
        self._check_drained()  # a stop waits for it: the files must stay mapped meanwhile

    def _maybe_hop(self) -> None:
        """Hand everything queued to the pool (or append it inline, as :meth:`_enqueue` would),
        unless a hop runs or the store is not loaded."""
        if not self._ready or self._hop_started is not None or not self._queue:
            return
        puts, self._queue = self._queue, []
        self._queued_messages = 0
        if self._inline and not self._in_pool.running and self._store.can_append_inline(each_put(puts)):
            self._append_inline(puts)  # what queued up during the last hop, without another
            return
        self._hop_started = self._reactor.seconds()
        flush_target = None
        if self._sync_flush and self._flush.claim():
            # No flush ran: this hop flushes too, saving a thread hop (a lone producer's latency).
            flush_target = self._flush_waiters.max_offset if len(self._flush_waiters) else 0
        d = self._in_pool(append_and_flush, self._store, puts, flush_target)
        flushing = flush_target is not None
        d.addCallbacks(self._hop_done, self._hop_failed, callbackArgs=(puts, flushing),
                       errbackArgs=(puts, flushing))

    def _hop_done(self, outcome: HopOutcome, puts: list[QueuedPut], flushing: bool) -> None:
        results, flushed, flush_error = outcome
        if flushed is None and flush_error is None and not flushing and len(puts) == 1 and puts[0].single:
            result = results[0]
            if not isinstance(result, Exception):
                self._lone_done(puts[0].deferred, puts[0].puts[0], result)
                return
        if flushing:
            self._flush.release()
        if flush_error is not None:
            self.log.failure("group-commit flush failed", _failure(flush_error), level=LogLevel.error)
        self._appended(each_put(puts), results)
        if flushed is not None:
            self._advance_flushed(flushed)  # before completing: covered puts fire at once
        self._delivering += 1
        try:
            complete = self._completion.complete
            start = 0
            for put in puts:
                count = len(put.puts)
                if put.single:
                    complete(put.deferred.callback, put.puts[0], results[start])  # type: ignore[arg-type]
                else:
                    self._completion.complete_many(put.deferred, put.puts, results[start:start + count])  # type: ignore[arg-type]
                start += count
        finally:
            self._delivering -= 1
        self._flush.kick()
        self._hop_finished()

    def _appended(self, puts: Sequence[Sequence[MessageExt]], results: Results) -> None:
        """A hop's results settled: each exception (logged once) becomes UNKNOWN_ERROR in ``results``;
        then the arrival notices of the queues it stored to (the records are readable: long polls first)."""
        touched: dict[tuple[str, int], None] = {}
        logged: set[int] = set()
        ok = PutMessageStatus.PUT_OK
        for i, (msgs, result) in enumerate(zip(puts, results)):
            if isinstance(result, Exception):
                if id(result) not in logged:  # a failed put_many repeats one exception
                    logged.add(id(result))
                    self.log.failure("put failed", _failure(result), level=LogLevel.error)
                results[i] = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)
            elif result.status is ok:
                first = msgs[0]
                touched[(first.topic, first.queue_id)] = None
        self._notify_arrivals(touched)

    def _lone_done(self, d: Deferred[PutMessageResult], msgs: Sequence[MessageExt], result: PutMessageResult,
                   max_offset: int | None = None) -> None:
        """:meth:`_hop_done` for a hop of one single put that raised nothing (a lone send's inline
        append): the same notices and completion, without the loops over puts and results.
        ``max_offset``: the queue's, when the store said it."""
        if result.status is PutMessageStatus.PUT_OK:
            self._notify_put(msgs[0], max_offset)
        self._delivering += 1
        try:
            self._completion.complete(d.callback, msgs, result)
        finally:
            self._delivering -= 1
        if self._sync_flush and not self._flush.group_running:  # ASYNC_FLUSH puts never wait for a flush
            self._flush.kick()
        self._hop_finished()

    def _hop_failed(self, failure: Failure, puts: list[QueuedPut], flushing: bool) -> None:
        self.log.failure("append hop failed", failure, level=LogLevel.error)
        if flushing:
            self._flush.release()
        for put in puts:
            if not put.deferred.called:
                self._refuse(put, PutMessageStatus.UNKNOWN_ERROR)
        self._hop_finished()

    def _hop_finished(self) -> None:
        self._hop_started = None
        if self._queue:  # else _maybe_hop has nothing to hand over
            self._maybe_hop()
        if self._drained:  # else _check_drained has nobody to tell
            self._check_drained()

    def _check_drained(self) -> None:
        if self._drained and self._idle():
            drained, self._drained = self._drained, []
            for d in drained:
                d.callback(None)

    def _flush_log(self, least_pages: int, target: int) -> Deferred[int]:
        """One commit-log flush for :class:`CommitLogFlush`'s periodic tick: :meth:`_flush_group`'s when
        ``least_pages`` is 0, else :func:`flush_commit_log` on the flush thread."""
        if self._aio is not None and not least_pages:
            d: Deferred[int] = Deferred()
            self._flush_group(target, d.callback, d.errback)
            return d
        return self._in_flush_pool(flush_commit_log, self._store, least_pages, target)

    def _flush_group(self, target: int, done: Callable[..., object], failed: Callable[..., object],
                     *args: Any) -> None:
        """Flush the commit log up to ``target``, then ``done(offset, *args)`` or ``failed(failure, *args)``:
        ended on the reactor (``AioFdSync``, no Deferred) when it serves and the dirty bytes lie in one
        file, else :func:`flush_commit_log` on the flush thread."""
        aio = self._aio
        if aio is not None:
            begun = self._store.flush_begin()  # type: ignore[attr-defined]  # _aio_wanted checked it
            if begun is not None:
                fd, token = begun
                aio.fdsync_then(fd, target, self._aio_flushed, self._aio_failed, token, time.perf_counter(),
                                target, done, failed, args)
                return
        self._in_flush_pool(flush_commit_log, self._store, 0, target).addCallbacks(
            done, failed, args, errbackArgs=args)

    def _aio_flushed(self, token: Any, started: float, target: int, done: Callable[..., object],
                     failed: Callable[..., object], args: tuple[Any, ...]) -> None:
        try:
            flushed = int(self._store.flush_end(token, time.perf_counter() - started))  # type: ignore[attr-defined]
        except Exception:
            failed(Failure(), *args)
            return
        done(flushed, *args)

    def _aio_failed(self, failure: Failure, token: Any, started: float, target: int, done: Callable[..., object],
                    failed: Callable[..., object], args: tuple[Any, ...]) -> None:
        """A kernel or file that refuses FDSYNC: the flush thread from now on (this flush too)."""
        error = failure.value
        if not isinstance(error, OSError) or error.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
            failed(failure, *args)  # a failed sync: CommitLogFlush logs it, as a failed thread flush
            return
        self.log.warn("{kind} fdatasync refused ({error}): SYNC_FLUSH flushes on the flush thread",
                      kind=self._aio.kind if self._aio is not None else self._aio_kind, error=error)
        self._aio_off()
        self._flush_group(target, done, failed, *args)

    def _aio_off(self) -> None:
        aio, self._aio = self._aio, None
        if aio is not None:
            aio.close()
            self._inline = not self._sync_flush

    def _advance_flushed(self, offset: int) -> None:
        """The commit log is durable up to ``offset``: fire the waiters, then hop once for their new puts."""
        self._delivering += 1
        try:
            self._flush_waiters.advance(offset)
        finally:
            self._delivering -= 1
        if self._queue:  # else _maybe_hop has nothing to hand over
            self._maybe_hop()

    def _notify_arrivals(self, touched: Iterable[tuple[str, int]]) -> None:
        of = self._arrivals.of
        for topic, queue_id in touched:
            listeners = of(topic)
            if listeners:  # else nobody listens to it now
                self._notify_arrival(listeners, topic, queue_id, self._store.get_max_offset_in_queue(topic, queue_id))

    def _notify_put(self, msg: MessageExt, max_offset: int | None) -> None:
        """The arrival notice of a put stored PUT_OK whose first message is ``msg`` (``max_offset``: its queue's,
        when the store said it), to the listeners of its topic (none: nothing to do)."""
        topic = msg.topic
        listeners = self._arrivals.of(topic)
        if listeners:
            queue_id = msg.queue_id
            self._notify_arrival(listeners, topic, queue_id, self._store.get_max_offset_in_queue(topic, queue_id)
                                 if max_offset is None else max_offset)

    def _notify_arrival(self, listeners: Iterable[ArrivalListener], topic: str, queue_id: int,
                        max_offset: int) -> None:
        for listener in listeners:
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                self.log.failure("arrival listener failed", level=LogLevel.error)

    def add_arrival_listener(self, listener: ArrivalListener, topic: str | None = None) -> Arrival:
        """Call ``listener(topic, queue_id, new_max_offset)`` on the reactor after appends (of ``topic``
        only, when given); the returned :class:`Arrival`'s ``wanted`` stops and resumes its calls."""
        return self._arrivals.add(listener, topic)

    def add_put_hook(self, hook: PutHook) -> None:
        """Call ``hook(result)`` on the reactor for every appended put whose WAIT property
        is not false (HA replication: SYNC_MASTER waits only for those).

        The hook may return a Deferred status; the put's Deferred then waits for it too,
        and a non-OK status replaces the flush status (RocketMQ: replica over flush).
        """
        self._completion.hooks.append(hook)

    def execute_delete_files_manually(self) -> None:
        """TRIGGER_DELETE_FILES: the next clean passes (in the writer pool) ignore ``delete_when``."""
        self._store.execute_delete_files_manually()

    def set_consumer_positions(self, snapshot: Callable[[], Sequence[ConsumerPosition]]) -> None:
        """Where retention reads the groups' committed offsets (called on the reactor every 10 s):
        above 85 % it deletes only files they have all consumed (doc/features.md)."""
        self._loops.consumer_positions = snapshot

    def append_to_commit_log(self, offset: int, data: bytes) -> Deferred[bool]:
        """HA slave: append bytes replicated from the master, in the writer pool; the queues the
        dispatched records reached are then announced to the arrival listeners (long polls, and
        the broker learning topics)."""
        d: Deferred[tuple[bool, dict[tuple[str, int], None]]] = self._in_pool(
            self._store.append_replicated, offset, data)
        return d.addCallback(self._replicated)

    def _replicated(self, result: tuple[bool, dict[tuple[str, int], None]]) -> bool:
        ok, touched = result
        self._notify_arrivals(touched)
        return ok


def _failure(error: Exception) -> Failure:
    return Failure(error, type(error), error.__traceback__)


if speedups.compiled is not None and hasattr(speedups.compiled, "set_lone_store"):
    # a lone send's put_lone_now and lone_answered, bound to a StoreService, run in C (rocketpy/_speedups_lonestore.h;
    # these methods are its reference), and put_lone too when the store's is MessageStore's
    speedups.compiled.set_lone_store(StoreService.put_lone_now, StoreService.lone_answered, MessageStore.put_lone,
                                     PutMessageStatus.PUT_OK)
