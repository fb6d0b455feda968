"""Test doubles for the store service: an inline pool, a step-by-step pool, clocks, and services over
:class:`~tests.fakes.FakeMessageStore`."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, cast

from twisted.internet.testing import MemoryReactorClock
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from rocketpy.common.message import MessageExt
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.service import StoreService
from tests.fakes import FakeMessageStore

class ThreadlessReactor(MemoryReactorClock):
    """A memory reactor whose callFromThread runs the call at once (for an :class:`InlinePool`)."""

    def callFromThread(self, f, *args, **kwargs):  # type: ignore[no-untyped-def]
        f(*args, **kwargs)


class InlinePool:
    """A thread pool that runs work at once on the calling thread (twisted's ``NonThreadPool``)."""

    def __init__(self) -> None:
        self.started = self.stopped = False
        self.calls = 0

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False
        self.stopped = True

    def callInThreadWithCallback(self, on_result: Callable[[bool, Any], None],
                                 f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        self._run(on_result, f, *args, **kwargs)

    @staticmethod
    def _run(on_result: Callable[[bool, Any], None], f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            result = f(*args, **kwargs)
        except BaseException:
            on_result(False, Failure())
        else:
            on_result(True, result)


class ManualPool(InlinePool):
    """A thread pool that queues work until the test runs it with :meth:`run_one`."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[tuple[Callable[[bool, Any], None], Callable[..., Any], Any, Any]] = deque()

    def callInThreadWithCallback(self, on_result: Callable[[bool, Any], None],
                                 f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        self.pending.append((on_result, f, args, kwargs))

    def run_one(self) -> None:
        """Run the oldest queued work item, as the pool thread would."""
        on_result, f, args, kwargs = self.pending.popleft()
        self._run(on_result, f, *args, **kwargs)

    def run_all(self) -> None:
        """Run work until none is queued, including work queued meanwhile."""
        while self.pending:
            self.run_one()


def as_thread_pool(pool: InlinePool) -> ThreadPool:
    """Type a test pool as the ``ThreadPool`` it stands in for (it has the methods used)."""
    return cast(ThreadPool, pool)


class ThreadlessClock(Clock):
    """A :class:`Clock` whose ``callFromThread`` calls through (for the inline pools)."""

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)


def message(topic: str = "T", queue_id: int = 0, body: bytes = b"x" * 100, wait: bool | None = None) -> MessageExt:
    """A message to put; ``wait`` sets the WAIT property ("true"/"false"), None leaves it out."""
    msg = MessageExt(topic=topic, body=body, queue_id=queue_id)
    if wait is not None:
        msg.properties["WAIT"] = "true" if wait else "false"
    return msg


def make_service(flush_disk_type: str = "ASYNC_FLUSH", pool: InlinePool | None = None,
                 config_args: dict[str, Any] | None = None,
                 **service_args: Any) -> tuple[StoreService, FakeMessageStore, ThreadlessClock, Any]:
    """A started :class:`StoreService` over a fake store (its config with ``config_args``), an
    inline (or given) pool and a clock.

    With a :class:`ManualPool` the load hop is left queued for the test to run.
    """
    config = MessageStoreConfig(store_path_root_dir="unused", flush_disk_type=flush_disk_type, **(config_args or {}))
    store = FakeMessageStore(config)
    clock = ThreadlessClock()
    pool = pool if pool is not None else InlinePool()
    service = StoreService(store, clock, as_thread_pool(pool), **service_args)
    service.startService()
    return service, store, clock, pool


def make_stepped_service(flush_disk_type: str = "ASYNC_FLUSH", **service_args: Any
                         ) -> tuple[StoreService, FakeMessageStore, ThreadlessClock, ManualPool]:
    """:func:`make_service` on a :class:`ManualPool`, with the store already loaded."""
    pool = ManualPool()
    service, store, clock, _ = make_service(flush_disk_type, pool=pool, **service_args)
    pool.run_one()
    return service, store, clock, pool
