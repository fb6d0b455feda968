"""``StoreService.put_lone_now`` / ``lone_answered`` (the broker's lone send answered before the
store's bookkeeping, doc/store-api.md): a put that completes at once gives its result itself, its
arrival notices wait for ``lone_answered`` and the record is readable before them; every other case
is :meth:`put_message`'s, or None when the store is busy. The same cases through the C calls the
broker's lone send makes (rocketpy/_speedups_lonestore.h ``store_put_now`` / ``store_answered``)."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from rocketpy.common import speedups
from rocketpy.common.message import MessageExt
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.store.test_lone_put import SKIP, USUAL
from tests.store.test_store_speedups import build


class PutLoneNowTests(TestCase):
    """Through the methods themselves (the Python reference)."""

    def put_now(self, service: StoreService, msg: MessageExt) -> Any:
        return service.put_lone_now(msg)

    def answered(self, service: StoreService) -> None:
        service.lone_answered()

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
        result = self.put_now(service, msg("T", 3))
        self.assertIsInstance(result, PutMessageResult, "stored at once: the result itself")
        assert isinstance(result, PutMessageResult)
        self.assertTrue(result.ok)
        self.assertEqual(result.append.queue_offset if result.append else None, 3)
        self.assertEqual(seen, [], "no notice before the answer")
        self.assertEqual(service._store.get_max_offset_in_queue("T", 0), 4, "readable before the notices")
        self.answered(service)
        self.assertEqual(seen, [("T", 0, 4)])
        self.assertFalse(service.is_busy())
        self.answered(service)  # nothing due: nothing happens
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
        result = self.put_now(service, msg("T", 3))
        self.assertIsInstance(result, PutMessageResult)
        self.answered(service)
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
        d = self.put_now(service, msg("T", 3))
        self.assertIsInstance(d, Deferred)
        self.assertTrue((await d).ok)
        await service.stopService()
        service = await self.service()
        await self.warm(service)
        hooked: list[PutMessageResult] = []
        service.add_put_hook(hooked.append)
        d = self.put_now(service, msg("T", 3))
        self.assertIsInstance(d, Deferred)
        self.assertTrue((await d).ok)
        self.assertEqual(len(hooked), 1)
        service._completion.hooks.clear()
        service._put_lone = None
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        d = self.put_now(service, msg("T", 4))
        self.assertIsInstance(d, Deferred)
        self.assertTrue((await d).ok)
        self.assertEqual(seen, [("T", 0, 5)])
        await service.stopService()

    async def test_busy_is_none(self) -> None:
        service = await self.service(max_queued_messages=0)
        self.assertTrue(service.is_busy())
        before = service._store.max_physical_offset
        self.assertIsNone(self.put_now(service, msg("T", 0)))
        self.assertEqual(service._store.max_physical_offset, before, "nothing appended")
        await service.stopService()

    async def test_a_raising_store_fails_the_put_alone(self) -> None:
        service = await self.service()
        await self.warm(service)

        def broken(msg: MessageExt) -> Any:
            raise RuntimeError("store bug")

        service._put_lone = broken
        d = self.put_now(service, msg("T", 3))
        self.assertIsInstance(d, Deferred)
        self.assertEqual((await d).status, PutMessageStatus.UNKNOWN_ERROR)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertFalse(service.is_busy())
        await service.stopService()

    async def test_the_store_is_free_after_each(self) -> None:
        """One put at a time through put_lone_now and lone_answered, as the broker does, then a stop:
        every put lands in order and the stop drains."""
        service = await self.service()
        await self.warm(service)
        for i in range(3, 300):
            result = self.put_now(service, msg("T", i))
            if isinstance(result, Deferred):
                result = await result
                await deferLater(reactor, 0)
            else:
                self.answered(service)
            assert isinstance(result, PutMessageResult) and result.append
            self.assertEqual(result.append.queue_offset, i)
        await service.stopService()

    async def test_a_refusing_store_goes_through_the_queue(self) -> None:
        """The store's put_lone declines (a slave, a failed dispatch, a full disk): the put goes through
        the queue and the store refuses it there, as put_message would."""
        service = await self.service()
        await self.warm(service)
        store: Any = service._store
        for refuse, undo in ((lambda: setattr(store.config, "broker_role", "SLAVE"),
                              lambda: setattr(store.config, "broker_role", "ASYNC_MASTER")),
                             (lambda: setattr(store.commit_log, "dispatch_failed", True),
                              lambda: setattr(store.commit_log, "dispatch_failed", False)),
                             (lambda: setattr(store.retention, "disk_full", True),
                              lambda: setattr(store.retention, "disk_full", False))):
            refuse()
            d = self.put_now(service, msg("T", 3))
            self.assertIsInstance(d, Deferred)
            self.assertEqual((await d).status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
            self.assertIsNone(service._answering)
            undo()
            await deferLater(reactor, 0)
        result = self.put_now(service, msg("T", 3))
        self.assertIsInstance(result, PutMessageResult)
        self.answered(service)
        self.assertIsNone(service._hop_started)
        await service.stopService()

    async def test_writer_not_idle_is_put_message(self) -> None:
        """A hop running (or a put queued behind it): put_message's Deferred, the put after the hop's."""
        service = await self.service()
        await self.warm(service)
        first = self.put_now(service, msg("T", 3))
        self.assertIsInstance(first, PutMessageResult, "the writer's state is the lone put's until answered")
        second = self.put_now(service, msg("T", 4))
        self.assertIsInstance(second, Deferred)
        self.assertFalse(second.called)
        self.answered(service)  # the hop's end: the queued put goes next
        result = await second
        assert isinstance(first, PutMessageResult) and first.append and result.append
        self.assertEqual(result.append.queue_offset, 4)
        await service._wait_drained()
        await service.stopService()

    async def test_notices_only_where_wanted(self) -> None:
        """Listeners of another topic, or not wanted now, are not called; the others in the order added."""
        service = await self.service()
        await self.warm(service)
        seen: list[tuple[Any, ...]] = []
        service.add_arrival_listener(lambda *args: seen.append(("U", *args)), "U")
        later = service.add_arrival_listener(lambda *args: seen.append(("waiting", *args)))
        later.wanted = False
        service.add_arrival_listener(lambda *args: seen.append(("T", *args)), "T")
        self.assertIsInstance(self.put_now(service, msg("T", 3)), PutMessageResult)
        self.answered(service)
        self.assertEqual(seen, [("T", "T", 0, 4)])
        later.wanted = True
        self.assertIsInstance(self.put_now(service, msg("T", 4)), PutMessageResult)
        self.answered(service)
        self.assertEqual(seen[1:], [("waiting", "T", 0, 5), ("T", "T", 0, 5)])
        result = self.put_now(service, msg("V", 0))  # a new queue: its files made through a hop
        if isinstance(result, Deferred):
            await result
        else:
            self.answered(service)
        self.assertEqual(seen[3:], [("waiting", "V", 0, 1)])
        await service._wait_drained()
        await service.stopService()

    async def test_notice_asks_the_queue_when_not_told(self) -> None:
        service = await self.service()
        await self.warm(service)
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        service._hop_started = 1.0
        service._answering = (msg("T", 9), PutMessageStatus.PUT_OK, None)
        self.answered(service)
        self.assertEqual(seen, [("T", 0, 3)], "the queue's max offset")
        self.assertIsNone(service._hop_started)
        service._hop_started = 1.0
        service._answering = (msg("T", 9), PutMessageStatus.FLUSH_DISK_TIMEOUT, None)
        self.answered(service)
        self.assertEqual(len(seen), 1, "no notice of a put not stored OK")
        self.assertIsNone(service._hop_started)
        await service.stopService()

    for name in ("test_result_now_notices_after_the_answer", "test_puts_of_the_notices_follow",
                 "test_a_refusing_store_goes_through_the_queue", "test_writer_not_idle_is_put_message",
                 "test_notices_only_where_wanted"):
        locals()[name].skip = SKIP  # without the compiled lone put: put_message's Deferred


_compiled: Any = speedups.compiled if hasattr(speedups.compiled, "store_put_now") else None


class CompiledPutLoneNowTests(PutLoneNowTests):
    """Through the C calls of the broker's lone send: the same outcomes."""

    skip = None if _compiled is not None else "no compiled accelerator"

    def put_now(self, service: StoreService, msg: MessageExt) -> Any:
        return _compiled.store_put_now(service.put_lone_now, msg)

    def answered(self, service: StoreService) -> None:
        _compiled.store_answered(service.lone_answered)


def msg(topic: str, i: int) -> MessageExt:
    spec = (topic, 0, 0, b"%d" % i * 50, {**USUAL[4], "UNIQ_KEY": f"U{i}"})
    return build(spec, spec)
