"""A real message store on an inline pool and a ``Clock``, for the retry/delay/transaction/query tests.

Store timestamps come from the same clock the services under test use, so advancing
the clock makes delayed messages due without sleeping.
"""

from __future__ import annotations

from typing import Any, cast

from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.message import MessageExt, decode_record
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import GetMessageStatus, PutMessageResult
from tests.store.fakes import InlinePool, ThreadlessClock

STORE_HOST = ("10.0.0.7", 10911)
T0 = 1_700_000_000.0


def open_store(test: SynchronousTestCase, clock: ThreadlessClock, root: str | None = None,
               **overrides: Any) -> StoreService:
    """A started :class:`StoreService` over a real store in ``root`` (a new temp dir by default)."""
    settings: dict[str, Any] = dict(
        store_path_root_dir=root or test.mktemp(), mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=300 * 20, max_hash_slot_num=64, max_index_num=256, store_host=STORE_HOST,
    )
    settings.update(overrides)
    config = MessageStoreConfig(**settings)
    store = MessageStore(config, lambda: int(clock.seconds() * 1000), total_memory=1 << 30)
    service = StoreService(store, clock, cast(ThreadPool, InlinePool()))
    service.startService()
    test.addCleanup(lambda: service.stopService() if service.running else None)
    return service


def new_clock() -> ThreadlessClock:
    clock = ThreadlessClock()
    clock.advance(T0)
    return clock


def put(test: SynchronousTestCase, store: StoreService, msg: MessageExt) -> PutMessageResult:
    """Put ``msg`` and return the (synchronous) result."""
    msg.store_host = STORE_HOST
    result: PutMessageResult = test.successResultOf(store.put_message(msg))
    test.assertTrue(result.ok, result.status)
    return result


def read_queue(test: SynchronousTestCase, store: StoreService, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every message of a queue, decoded."""
    found = test.successResultOf(store.get_message("TEST", topic, queue_id, 0, 1000))
    if found.status is not GetMessageStatus.FOUND:
        return []
    return [decode_record(r) for r in found.records]
