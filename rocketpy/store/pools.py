"""The store service's thread pools: writer, reads and commit-log flush (STYLE.md §3)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

T = TypeVar("T")


class PoolCaller:
    """``deferToThreadPool`` bound to one reactor and pool; ``running`` counts its calls not
    yet answered (0: the pool runs nothing of ours)."""

    __slots__ = ("_reactor", "_pool", "running")

    def __init__(self, reactor: IReactorFromThreads, pool: ThreadPool) -> None:
        self._reactor = reactor
        self._pool = pool
        self.running = 0

    def __call__(self, f: Callable[..., T], *args: Any) -> Deferred[T]:
        self.running += 1
        return deferToThreadPool(self._reactor, self._pool, f, *args).addBoth(self._answered)

    def _answered(self, result: T) -> T:
        self.running -= 1
        return result


class StorePools:
    """The writer pool (appends, load, consume-queue flush, retention, shutdown: one thread), the
    read pool and the flush pool (one thread), with a :class:`PoolCaller` each.

    Without ``pool``, one-thread writer and flush pools and a 1–4 thread read pool; with it,
    ``read_pool`` and ``flush_pool`` default to it.
    """

    def __init__(self, reactor: IReactorTime, pool: ThreadPool | None = None,
                 read_pool: ThreadPool | None = None, flush_pool: ThreadPool | None = None) -> None:
        if pool is None:
            pool = ThreadPool(1, 1, "rocketpy-store")
            if read_pool is None:
                read_pool = ThreadPool(1, 4, "rocketpy-store-read")
            if flush_pool is None:
                flush_pool = ThreadPool(1, 1, "rocketpy-store-flush")
        self.writer = pool
        self.read = pool if read_pool is None else read_pool
        self.flush = pool if flush_pool is None else flush_pool
        threads = cast(IReactorFromThreads, reactor)
        self.in_writer = PoolCaller(threads, self.writer)
        self.in_read = PoolCaller(threads, self.read)
        self.in_flush = PoolCaller(threads, self.flush)

    def distinct(self) -> list[ThreadPool]:
        """The distinct pools, writer first."""
        pools: list[ThreadPool] = []
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
