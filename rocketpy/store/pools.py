"""The store service's thread pools: writer, reads and commit-log flush (STYLE.md §3)."""

from __future__ import annotations

import threading
from queue import SimpleQueue
from typing import Any, Callable, TypeVar, Union, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

T = TypeVar("T")
_Job = tuple[IReactorFromThreads, "Deferred[Any]", Callable[..., Any], tuple[Any, ...]]


class OneThread:
    """A one-thread pool on a bare ``SimpleQueue``: the default writer and flush pools.

    A call and its answer cost the same two thread wake-ups as through Twisted's ``ThreadPool``
    but none of its coordination (a team, a lock worker, context propagation): a round trip
    with an ``fdatasync`` measured 138–140 µs against 155–169 µs, and 20 µs less CPU
    (doc/benchmarks.md, "Eleventh pass"). Jobs run one at a time, in order, as the store's one
    writer needs; calls made before :meth:`start` wait for it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"PoolThread-{self.name}-0")
            self._thread.start()

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join()

    def defer(self, reactor: IReactorFromThreads, f: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run ``f(*args)`` on the thread; the Deferred fires on the reactor with its result."""
        d: Deferred[T] = Deferred()
        self._jobs.put((reactor, d, f, args))
        return d

    def _run(self) -> None:
        get = self._jobs.get
        while (job := get()) is not None:
            reactor, d, f, args = job
            del job
            try:
                result = f(*args)
            except BaseException:
                reactor.callFromThread(d.errback, Failure())
            else:
                reactor.callFromThread(d.callback, result)
                del result
            del d, f, args


Pool = Union[ThreadPool, OneThread]


class PoolCaller:
    """``deferToThreadPool`` bound to one reactor and pool; ``running`` counts its calls not
    yet answered (0: the pool runs nothing of ours), ``calls`` all it made."""

    __slots__ = ("_reactor", "_pool", "running", "calls")

    def __init__(self, reactor: IReactorFromThreads, pool: Pool) -> None:
        self._reactor = reactor
        self._pool = pool
        self.running = 0
        self.calls = 0

    def __call__(self, f: Callable[..., T], *args: Any) -> Deferred[T]:
        self.running += 1
        self.calls += 1
        pool = self._pool
        if isinstance(pool, OneThread):
            d = pool.defer(self._reactor, f, *args)
        else:
            d = deferToThreadPool(self._reactor, pool, f, *args)
        return d.addBoth(self._answered)

    def _answered(self, result: T) -> T:
        self.running -= 1
        return result


class StorePools:
    """The writer pool (appends, load, consume-queue flush, retention, shutdown: one thread), the
    read pool and the flush pool (one thread), with a :class:`PoolCaller` each.

    Without ``pool``, :class:`OneThread` writer and flush pools and a 1–4 thread read pool; with
    it, ``read_pool`` and ``flush_pool`` default to it.
    """

    def __init__(self, reactor: IReactorTime, pool: Pool | None = None,
                 read_pool: Pool | None = None, flush_pool: Pool | None = None) -> None:
        if pool is None:
            pool = OneThread("rocketpy-store")
            if read_pool is None:
                read_pool = ThreadPool(1, 4, "rocketpy-store-read")
            if flush_pool is None:
                flush_pool = OneThread("rocketpy-store-flush")
        self.writer: Pool = pool
        self.read: Pool = pool if read_pool is None else read_pool
        self.flush: Pool = pool if flush_pool is None else flush_pool
        threads = cast(IReactorFromThreads, reactor)
        self.in_writer = PoolCaller(threads, self.writer)
        self.in_read = PoolCaller(threads, self.read)
        self.in_flush = PoolCaller(threads, self.flush)

    def distinct(self) -> list[Pool]:
        """The distinct pools, writer first."""
        pools: list[Pool] = []
        for pool in (self.writer, self.flush, self.read):
            if all(pool is not p for p in pools):
                pools.append(pool)
        return pools

    def start(self) -> None:
        for pool in self.distinct():
            pool.start()

    def stop(self) -> None:
        """Stop every pool, writer first (each waits for its running job)."""
        for pool in self.distinct():
            pool.stop()
