"""Test doubles for the store service: a blocking fake store, an inline pool, a step-by-step pool."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Sequence, cast

from twisted.internet.testing import MemoryReactorClock
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from rocketpy.common.message import MessageExt, offset_msg_id
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.service import StoreService
from rocketpy.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

PAGE = 4096
RECORD_OVERHEAD = 100  # bytes a fake record adds to its body


class FakeMessageStore:
    """A blocking store following doc/store-api.md just enough for :class:`StoreService`.

    Records are not kept; offsets advance by ``len(body) + 100`` per message. ``events``
    lists calls in order (``"load"``, ``"put"``, ``("flush", least_pages)``, ...), and
    setting ``flush_error`` makes the next flushes raise it.
    """

    def __init__(self, config: MessageStoreConfig | None = None) -> None:
        self.config = config or MessageStoreConfig(store_path_root_dir="unused")
        self.events: list[Any] = []
        self.max_physical_offset = 0
        self.flushed_offset = 0
        self.min_physical_offset = 0
        self.queues: dict[tuple[str, int], int] = {}
        self.flush_error: Exception | None = None
        self.load_result = True
        self.on_put: Callable[[MessageExt], None] | None = None
        self.populate_wanted = False  # what populate_due answers
        self.inline_ok = False  # what can_append_inline answers

    def can_append_inline(self, puts: Sequence[Sequence[MessageExt]]) -> bool:
        return self.inline_ok

    def populate_due(self) -> bool:
        return self.populate_wanted

    def populate_ahead(self) -> None:
        self.events.append("populate")
        self.populate_wanted = False

    def load(self) -> bool:
        self.events.append("load")
        return self.load_result

    def start(self) -> None:
        self.events.append("start")

    def shutdown(self) -> None:
        self.events.append("shutdown")

    def put_message(self, msg: MessageExt) -> PutMessageResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: list[MessageExt]) -> PutMessageResult:
        self.events.append("put")
        if self.on_put is not None:
            self.on_put(msgs[0])
        key = (msgs[0].topic, msgs[0].queue_id)
        queue_offset = self.queues.get(key, 0)
        start = self.max_physical_offset
        size = sum(len(m.body) + RECORD_OVERHEAD for m in msgs)
        self.max_physical_offset += size
        self.queues[key] = queue_offset + len(msgs)
        append = AppendMessageResult(
            AppendMessageStatus.PUT_OK, start, size,
            [offset_msg_id(("127.0.0.1", 10911), start)], queue_offset, len(msgs), 0,
        )
        return PutMessageResult(PutMessageStatus.PUT_OK, append)

    def flush(self, least_pages: int = 0) -> bool:
        self.events.append(("flush", least_pages))
        if self.flush_error is not None:
            raise self.flush_error
        wrote, flushed = self.max_physical_offset, self.flushed_offset
        if wrote <= flushed or wrote // PAGE - flushed // PAGE < least_pages:
            return False
        self.flushed_offset = wrote
        return True

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        self.events.append(("flush_cq", least_pages))

    def clean_expired_files(self) -> int:
        self.events.append("clean")
        return 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), 0)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 0

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tag_filter: Callable[[int], bool] | None = None) -> GetMessageResult:
        self.events.append("get")
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE)


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
                 **service_args: Any) -> tuple[StoreService, FakeMessageStore, ThreadlessClock, Any]:
    """A started :class:`StoreService` over a fake store, an inline (or given) pool and a clock.

    With a :class:`ManualPool` the load hop is left queued for the test to run.
    """
    config = MessageStoreConfig(store_path_root_dir="unused", flush_disk_type=flush_disk_type)
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
