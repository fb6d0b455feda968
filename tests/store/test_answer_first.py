"""``StoreService.put_lone_now`` / ``lone_answered`` (the broker's lone send answered before the
store's bookkeeping, doc/store-api.md): a put that completes at once gives its result itself, its
arrival notices wait for ``lone_answered`` and the record is readable before them; every other case
is :meth:`put_message`'s, or None when the store is busy."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from rocketpy.common.message import MessageExt
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.store.test_lone_put import SKIP, USUAL
from tests.store.test_store_speedups import build


class PutLoneNowTests(TestCase):

    async def service(self, flush_disk_type: str = "ASYNC_FLUSH", **kwargs: Any) -> StoreService:
        root = os.path.abspath(self.mktemp())
        config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                                    mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1000,
                                    max_index_num=4000, flush_disk_type=flush_disk_type)
        service = StoreService(MessageStore(config), reactor, **kwargs)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        return service

    async def warm(self, service: StoreService, topic: str = "T") -> None:
        """The queue's files made: the next puts take the store's one-call append."""
        for i in range(3):
            self.assertTrue((await service.put_message(msg(topic, i))).ok)
        await deferLater(reactor, 0)  # from a reactor turn, not from inside the last put's completion

    async def test_result_now_notices_after_the_answer(self) -> None:
        service = await self.service()
        await self.warm(service)
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        result = service.put_lone_now(msg("T", 3))
        self.assertIsInstance(result, PutMessageResult, "stored at once: the result itself")
        assert isinstance(result, PutMessageResult)
        self.assertTrue(result.ok)
        self.assertEqual(result.append.queue_offset if result.append else None, 3)
        self.assertEqual(seen, [], "no notice before the answer")
        self.assertEqual(service._store.get_max_offset_in_queue("T", 0), 4, "readable before the notices")
        service.lone_answered()
        self.assertEqual(seen, [("T", 0, 4)])
        self.assertFalse(service.is_busy())
        service.lone_answered()  # nothing due: nothing happens
        self.assertEqual(seen, [("T", 0, 4)])
        got = await service.get_message("g", "T", 0, 3, 32)
        self.assertEqual(len(got.records), 1)
        await service.stopService()

    async def test_puts_of_the_notices_follow(self) -> None:
        """A put made by an arrival listener (the timer's) waits for the lone put's hop to end, then
        is appended after it, as with put_message."""
        service = await self.service()
        await self.warm(service)
        later: list[Deferred[PutMessageResult]] = []

        def put_again(topic: str, queue_id: int, max_offset: int) -> None:
            if topic == "T":
                later.append(service.put_message(msg("U", 0)))

        service.add_arrival_listener(put_again)
        result = service.put_lone_now(msg("T", 3))
        self.assertIsInstance(result, PutMessageResult)
        service.lone_answered()
        self.assertEqual(len(later), 1)
        second = await later[0]
        assert isinstance(result, PutMessageResult) and result.append and second.append
        self.assertEqual(second.append.wrote_offset, result.append.next_offset, "appended right after")
        await service._wait_drained()
        await service.stopService()

    async def test_otherwise_put_message(self) -> None:
        """SYNC_FLUSH, a put hook, or the store's Python path: put_message's Deferred, nothing more to call."""
        service = await self.service("SYNC_FLUSH")
        await self.warm(service)
        d = service.put_lone_now(msg("T", 3))
        self.assertIsInstance(d, Deferred)
        self.assertTrue((await d).ok)  # type: ignore[misc]
        await service.stopService()
        service = await self.service()
        await self.warm(service)
        hooked: list[PutMessageResult] = []
        service.add_put_hook(hooked.append)
        d = service.put_lone_now(msg("T", 3))
        self.assertIsInstance(d, Deferred)
        self.assertTrue((await d).ok)  # type: ignore[misc]
        self.assertEqual(len(hooked), 1)
        service._completion.hooks.clear()
        service._put_lone = None
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        d = service.put_lone_now(msg("T", 4))
        self.assertIsInstance(d, Deferred)
        self.assertTrue((await d).ok)  # type: ignore[misc]
        self.assertEqual(seen, [("T", 0, 5)])
        await service.stopService()

    async def test_busy_is_none(self) -> None:
        service = await self.service(max_queued_messages=0)
        self.assertTrue(service.is_busy())
        before = service._store.max_physical_offset
        self.assertIsNone(service.put_lone_now(msg("T", 0)))
        self.assertEqual(service._store.max_physical_offset, before, "nothing appended")
        await service.stopService()

    async def test_a_raising_store_fails_the_put_alone(self) -> None:
        service = await self.service()
        await self.warm(service)

        def broken(msg: MessageExt) -> Any:
            raise RuntimeError("store bug")

        service._put_lone = broken
        d = service.put_lone_now(msg("T", 3))
        self.assertIsInstance(d, Deferred)
        self.assertEqual((await d).status, PutMessageStatus.UNKNOWN_ERROR)  # type: ignore[misc]
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertFalse(service.is_busy())
        await service.stopService()

    async def test_the_store_is_free_after_each(self) -> None:
        """One put at a time through put_lone_now and lone_answered, as the broker does, then a stop:
        every put lands in order and the stop drains."""
        service = await self.service()
        await self.warm(service)
        for i in range(3, 300):
            result = service.put_lone_now(msg("T", i))
            if isinstance(result, Deferred):
                result = await result
                await deferLater(reactor, 0)
            else:
                service.lone_answered()
            assert isinstance(result, PutMessageResult) and result.append
            self.assertEqual(result.append.queue_offset, i)
        await service.stopService()

    for name in ("test_result_now_notices_after_the_answer", "test_puts_of_the_notices_follow"):
        locals()[name].skip = SKIP  # without the compiled lone put: put_message's Deferred


def msg(topic: str, i: int) -> MessageExt:
    spec = (topic, 0, 0, b"%d" % i * 50, {**USUAL[4], "UNIQ_KEY": f"U{i}"})
    return build(spec, spec)
