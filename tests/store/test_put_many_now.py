"""``StoreService.put_many_now`` (the broker's run of sends stored without a Deferred,
doc/store-api.md): when the puts complete at once, their results themselves, with the same results,
records and arrival notices as :meth:`StoreService.put_many`; None, having done nothing, otherwise."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from rocketpy.common.message import MessageExt
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.store.test_lone_put import USUAL
from tests.store.test_store_speedups import build


def message(topic: str, queue_id: int, i: int) -> MessageExt:
    spec = (topic, queue_id, 0, b"%d" % i * 40, {**USUAL[4], "UNIQ_KEY": f"U{topic}{queue_id}-{i}"})
    return build(spec, spec)


def puts_of(round_: int) -> list[list[MessageExt]]:
    """A run's puts: a batch, a lone message, a batch to another topic, a batch to the first queue again."""
    return [[message("T", 0, round_ * 10 + j) for j in range(3)], [message("T", 1, round_)],
            [message("U", 0, round_ * 10 + j) for j in range(2)],
            [message("T", 0, round_ * 10 + 5 + j) for j in range(2)]]


def outcome(result: PutMessageResult) -> Any:
    append = result.append
    return result.status, append and (append.wrote_offset, append.wrote_bytes, append.msg_ids, append.queue_offset,
                                      append.msg_num)


class PutManyNowTests(TestCase):

    async def service(self, flush_disk_type: str = "ASYNC_FLUSH") -> tuple[StoreService, list[tuple[str, int, int]]]:
        root = os.path.abspath(self.mktemp())
        config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                                    mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1000,
                                    max_index_num=4000, flush_disk_type=flush_disk_type)
        service = StoreService(MessageStore(config), reactor)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        await service.put_many(puts_of(0))  # the queues' files made
        await deferLater(reactor, 0)  # from a reactor turn, not from inside the put's completion
        seen: list[tuple[str, int, int]] = []
        service.add_arrival_listener(lambda *args: seen.append(args))
        return service, seen

    async def test_same_as_put_many(self) -> None:
        """Round after round into two stores, put_many_now's results, notices and commit log are put_many's."""
        now, now_seen = await self.service()
        later, later_seen = await self.service()
        completed_now = 0
        for round_ in range(1, 13):
            results = now.put_many_now(puts_of(round_))
            if results is None:  # a file being made, or the pages faulted in behind: the Deferred way
                results = await now.put_many(puts_of(round_))
            else:
                completed_now += 1
                self.assertFalse(now.is_busy())
            self.assertEqual([outcome(r) for r in results],
                             [outcome(r) for r in await later.put_many(puts_of(round_))])
            self.assertEqual(now_seen, later_seen)
            await deferLater(reactor, 0)
        self.assertGreater(completed_now, 6)
        self.assertEqual(now_seen[-3:], [("T", 0, 65), ("T", 1, 13), ("U", 0, 26)])
        for service in (now, later):
            got = await service.get_message("g", "T", 0, 55, 32)
            self.assertEqual((got.next_begin_offset, got.message_count), (65, 10))
        await now.stopService()
        await later.stopService()
        logs = [service._config.commit_log_dir for service in (now, later)]
        self.assertEqual(sorted(os.listdir(logs[0])), sorted(os.listdir(logs[1])))
        for name in os.listdir(logs[0]):
            with open(os.path.join(logs[0], name), "rb") as a, open(os.path.join(logs[1], name), "rb") as b:
                self.assertEqual(strip_times(a.read()), strip_times(b.read()))

    async def test_none_unless_at_once(self) -> None:
        """SYNC_FLUSH, a put hook, a hop running, no puts, a stopped store: None, nothing stored."""
        sync, _ = await self.service("SYNC_FLUSH")
        self.assertIsNone(sync.put_many_now(puts_of(1)))
        service, seen = await self.service()
        self.assertIsNone(service.put_many_now([]))
        service.add_put_hook(lambda result: succeed(PutMessageStatus.PUT_OK))
        self.assertIsNone(service.put_many_now(puts_of(0)))
        service._completion.hooks.clear()
        service._hop_started = 0.0  # a hop runs
        self.assertIsNone(service.put_many_now(puts_of(0)))
        service._hop_started = None
        end = service._store.max_physical_offset
        self.assertIsNone(sync.put_many_now(puts_of(1)))
        self.assertEqual((seen, service._store.max_physical_offset), ([], end))
        results = service.put_many_now(puts_of(1))
        assert results is not None
        self.assertTrue(all(r.ok for r in results))
        await service.stopService()
        self.assertIsNone(service.put_many_now(puts_of(2)))

    async def test_puts_of_the_notices_follow(self) -> None:
        """A put made by an arrival listener waits for the hop's end, then is appended after the run."""
        service, _ = await self.service()
        later: list[Deferred[PutMessageResult]] = []

        def put_again(topic: str, queue_id: int, max_offset: int) -> None:
            if topic == "U":
                later.append(service.put_message(message("V", 0, max_offset)))

        service.add_arrival_listener(put_again)
        results = service.put_many_now(puts_of(1))
        assert results is not None
        self.assertEqual(len(later), 1)
        moved = await later[0]
        assert moved.append is not None and results[3].append is not None
        self.assertEqual(moved.append.wrote_offset, results[3].append.wrote_offset + results[3].append.wrote_bytes)
        await service.stopService()


def strip_times(data: bytes) -> bytes:
    """A commit log's bytes with each record's store timestamp zeroed (the two stores' clocks differ)."""
    out = bytearray(data)
    at = 0
    while at + 64 <= len(out):
        size = int.from_bytes(out[at:at + 4], "big")
        if size <= 0 or int.from_bytes(out[at + 4:at + 8], "big") != 0xDAA320A7:
            break
        out[at + 56:at + 64] = bytes(8)
        at += size
    return bytes(out)
