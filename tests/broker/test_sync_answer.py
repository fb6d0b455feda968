"""A lone SYNC_FLUSH send answered as its native fdatasync ends (rocketpy/_speedups_syncanswer.h): a real
broker on loopback and the real producer; the sync held back where a test needs it. The answer goes out
only once the sync succeeded, written before the store's Python bookkeeping (the node then only counts it
answered); a timeout, a failed sync and a group of puts keep their answers; without the compiled module
(``ROCKETPY_NO_SPEEDUPS=1``) the same sends are answered through the flush thread."""

from __future__ import annotations

import os
from typing import Any, Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.logger import capturedLogs
from twisted.trial.unittest import SkipTest, TestCase

from rocketpy.broker.controller import BrokerService
from rocketpy.client import Producer, new_message
from rocketpy.client.results import SendResult, SendStatus
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.aioflush import AioFdSync
from rocketpy.store.service import StoreService
from rocketpy.testing import BrokerFixture
from tests.store.test_aioflush import record_submits

SENDS = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)


async def turns(until: Callable[[], bool], limit: float = 5.0) -> None:
    """Let the reactor run until ``until()`` (at most ``limit`` seconds)."""
    waited = 0.0
    while not until():
        if waited > limit:
            raise AssertionError("timed out waiting")
        await deferLater(reactor, 0.002, lambda: None)
        waited += 0.002


class Held:
    """The syncs of ``aio`` held back: :meth:`submit` runs one for real (or a given descriptor's),
    :meth:`release` all and lets the next ones run."""

    def __init__(self, aio: AioFdSync) -> None:
        self.aio = aio
        self.syncs: list[tuple[Any, int]] = []
        self._real, self._presync = aio._submit, aio.presync
        aio.presync = None
        aio._submit = lambda handle, fd: self.syncs.append((handle, fd))

    def submit(self, fd: int | None = None) -> None:
        handle, held_fd = self.syncs.pop(0)
        self._real(handle, held_fd if fd is None else fd)

    def release(self) -> None:
        self.aio._submit, self.aio.presync = self._real, self._presync
        while self.syncs:
            self.submit()


class SyncAnswerTests(TestCase):
    timeout = 60

    async def broker(self) -> tuple[BrokerService, StoreService, str]:
        fixture = BrokerFixture(reactor, {"flush-disk-type": "SYNC_FLUSH"})
        namesrv = await fixture.start()
        self.addCleanup(fixture.stop)
        assert fixture._tree is not None
        broker = fixture._tree.getServiceNamed("broker")
        assert isinstance(broker, BrokerService)
        store = broker.store
        assert isinstance(store, StoreService)
        return broker, store, namesrv

    async def producer(self, namesrv: str, group: str = "PG") -> Producer:
        producer = Producer(group, namesrv, reactor)
        await producer.start()
        self.addCleanup(producer.shutdown)
        return producer

    async def warm(self, store: StoreService, producer: Producer) -> None:
        """The topic, its queues' files and the commit log's first zeros there: the next puts go inline."""
        for _ in range(8):  # the producer takes the topic's 4 queues in turn
            self.assertEqual((await producer.send(new_message("SyncT", b"warm"))).status, SendStatus.SEND_OK)
        await turns(lambda: not store._populating)

    async def ready(self) -> tuple[StoreService, AioFdSync, Producer, list[Any]]:
        """A broker with the native sync, a warm producer, and the node's :meth:`replies` from now on."""
        broker, store, namesrv = await self.broker()
        aio = self.native(store)
        producer = await self.producer(namesrv)
        await self.warm(store, producer)
        return store, aio, producer, self.replies(broker)

    def replies(self, broker: BrokerService) -> list[Any]:
        """What the broker's node is handed to answer each send once its put fired: None when the
        answer was written already (at the sync's end), else the response it writes then."""
        seen: list[Any] = []
        real = broker.server._reply

        def spy(result: Any, channel: Any, request: RemotingCommand) -> None:
            if request.code in SENDS:
                seen.append(result)
            real(result, channel, request)
        self.patch(broker.server, "_reply", spy)
        return seen

    def native(self, store: StoreService) -> AioFdSync:
        aio = store._aio
        if aio is None or aio.answers is None:
            raise SkipTest("no native sync with early answers here (compiled module, Linux)")
        return aio

    def hold(self, aio: AioFdSync) -> Held:
        """Hold every sync back (also the one the lone put's C call would submit) until released."""
        held = Held(aio)
        self.addCleanup(held.release)
        return held

    async def test_answer_written_when_the_sync_ends(self) -> None:
        """No answer while the sync is held; its end writes the answer before the put's Deferred fires
        (the node is handed None), and the message is durable by then."""
        store, aio, producer, seen = await self.ready()
        held = self.hold(aio)
        sent = producer.send(new_message("SyncT", b"x" * 1024))
        await turns(lambda: len(aio.answers or ()) == 1)
        await deferLater(reactor, 0.05, lambda: None)
        self.assertFalse(sent.called, "answered before its sync ran")
        assert aio.answers is not None
        entry = aio.answers[0]
        self.assertIsInstance(entry[2], bytes)
        self.assertLess(store._store.flushed_offset, entry[0])
        held.release()
        result = await sent
        self.assertEqual(result.status, SendStatus.SEND_OK)
        self.assertEqual(seen, [None], "the answer was not written at the sync's end")
        self.assertEqual((aio.answers, entry[2]), ([], None))
        self.assertGreaterEqual(store._store.flushed_offset, entry[0])

    async def test_unheld_sends(self) -> None:
        """Sends one at a time, the sync submitted in the append's own call: every one SEND_OK, written at
        its sync's end, none through a Python submit."""
        store, aio, producer, seen = await self.ready()
        submits = record_submits(self, aio)
        results = [await producer.send(new_message("SyncT", b"%d" % i * 100)) for i in range(20)]
        self.assertEqual({r.status for r in results}, {SendStatus.SEND_OK})
        self.assertEqual(len({(r.queue, r.queue_offset) for r in results}), 20)
        self.assertEqual(seen, [None] * 20)
        self.assertEqual(submits, [])
        self.assertEqual(store._store.flushed_offset, store._store.max_physical_offset)

    async def test_timeout(self) -> None:
        """A sync still running at sync_flush_timeout: FLUSH_DISK_TIMEOUT through the usual path, and its
        end later writes nothing more."""
        store, aio, producer, seen = await self.ready()
        self.patch(store._completion, "_timeout", 0.05)
        held = self.hold(aio)
        assert aio.answers is not None
        result = await producer.send(new_message("SyncT", b"late"))
        self.assertEqual(result.status, SendStatus.FLUSH_DISK_TIMEOUT)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0].code, ResponseCode.FLUSH_DISK_TIMEOUT)
        entry = aio.answers[0]
        self.assertIsNone(entry[2], "the answer was not taken back")
        with capturedLogs() as logged:
            held.release()
            await turns(lambda: not aio._waiting)
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(aio.answers, [])
        self.assertEqual(len(seen), 1)
        self.assertFalse([e for e in logged if "late response" in str(e.get("log_format"))],
                         "a second answer reached the producer")
        self.patch(store._completion, "_timeout", 5.0)
        self.assertEqual((await producer.send(new_message("SyncT", b"next"))).status, SendStatus.SEND_OK)

    async def test_failed_sync(self) -> None:
        """A sync that fails writes nothing: the put is answered once a later flush (here the flush
        thread, after the kernel refused the native one) made it durable."""
        store, aio, producer, seen = await self.ready()
        held = self.hold(aio)
        sent = producer.send(new_message("SyncT", b"fails"))
        await turns(lambda: bool(held.syncs))
        read, write = os.pipe()  # fdatasync of a pipe: EINVAL, as a kernel refusing FDSYNC
        self.addCleanup(os.close, read)
        self.addCleanup(os.close, write)
        with capturedLogs():
            held.submit(write)
            result = await sent
        self.assertEqual(result.status, SendStatus.SEND_OK)
        self.assertEqual(len(seen), 1)
        self.assertIsInstance(seen[0], RemotingCommand, "written at the end of a failed sync")
        self.assertIsNone(store._aio, "the refused native sync stays on")
        self.assertGreaterEqual(store._store.flushed_offset, store._store.max_physical_offset)

    async def test_group_of_puts(self) -> None:
        """Sends from three connections while a sync runs share the next one (group commit): the first
        sync's end answers only its own put, the second's the three others."""
        broker, store, namesrv = await self.broker()
        aio = self.native(store)
        producers = [await self.producer(namesrv, f"PG{i}") for i in range(4)]
        for p in producers:
            await self.warm(store, p)
        seen = self.replies(broker)
        held = self.hold(aio)
        first = producers[0].send(new_message("SyncT", b"first"))
        await turns(lambda: len(held.syncs) == 1)
        others = [p.send(new_message("SyncT", b"other")) for p in producers[1:]]
        assert aio.answers is not None
        await turns(lambda: len(aio.answers or ()) == 4)
        held.submit()
        await first
        await turns(lambda: len(held.syncs) == 1)  # the next group commit, for the three others
        self.assertFalse(any(d.called for d in others))
        self.assertEqual(len(aio.answers), 3)
        held.submit()
        results: list[SendResult] = [await d for d in others]
        self.assertEqual({r.status for r in results}, {SendStatus.SEND_OK})
        self.assertEqual(seen, [None] * 4)
        self.assertEqual(aio.answers, [])

    async def test_answered_once_durable_in_any_build(self) -> None:
        """With or without the compiled module (``ROCKETPY_NO_SPEEDUPS=1``: the flush thread), a send's
        answer reaches the producer only once its message is durable."""
        broker, store, namesrv = await self.broker()
        producer = await self.producer(namesrv)
        durable: list[bool] = []
        for i in range(10):
            sent: Deferred[SendResult] = producer.send(new_message("SyncT", b"%d" % i * 200))

            def check(result: SendResult) -> SendResult:
                durable.append(store._store.flushed_offset >= store._store.max_physical_offset)
                return result
            self.assertEqual((await sent.addCallback(check)).status, SendStatus.SEND_OK)
        self.assertEqual(durable, [True] * 10)
