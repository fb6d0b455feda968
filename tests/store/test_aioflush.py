"""SYNC_FLUSH's group commit completed on the reactor by a C thread or io_uring (store/aioflush.py),
and its fallback to the flush thread."""

from __future__ import annotations

import errno
import os
from typing import Any, Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SkipTest, TestCase

from rocketpy.common import speedups
from rocketpy.store.aioflush import AioFdSync
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.mappedfilequeue import MappedFileQueue
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.store.fakes import message


def record_syncs(test: TestCase) -> list[int]:
    """Patch AioFdSync.fdsync_then to note each descriptor it syncs (the real sync still runs)."""
    syncs: list[int] = []
    real = AioFdSync.fdsync_then

    def recording(aio: AioFdSync, fd: int, covers: int, *rest: Any) -> None:
        syncs.append(fd)
        real(aio, fd, covers, *rest)
    test.patch(AioFdSync, "fdsync_then", recording)
    return syncs


def record_submits(test: TestCase, aio: AioFdSync) -> list[int]:
    """Patch ``aio``'s Python submission to note each descriptor it submits (the real sync still runs)."""
    submits: list[int] = []
    real = aio._submit

    def submit(handle: Any, fd: int) -> None:
        submits.append(fd)
        real(handle, fd)
    test.patch(aio, "_submit", submit)
    return submits


def opened(test: TestCase, kind: str) -> AioFdSync:
    aio = AioFdSync.open(reactor, kind)
    if aio is None:
        raise SkipTest(f"no {kind} flush here ({speedups.why_not() if speedups.compiled is None else 'setup failed'})")
    test.addCleanup(aio.close)
    return aio


async def both_ended(aio: AioFdSync) -> None:
    """Wait until two syncs have ended, leaving their results for one ``doRead`` made by hand (the reader
    removed): the eventfd counts ended syncs, so read it, then put the count back."""
    ended = 0
    while ended < 2:
        await deferLater(reactor, 0.01, lambda: None)
        try:
            ended += os.eventfd_read(aio.fileno())
        except BlockingIOError:
            pass
    os.eventfd_write(aio.fileno(), ended)


class NativeFdSyncTests(TestCase):
    """The eventfd-driven fdatasync on the global reactor, through the native (C) thread."""

    kind = "native"

    async def test_fdsync_fires_on_the_reactor(self) -> None:
        aio = opened(self, self.kind)
        self.assertEqual(aio.kind, self.kind)
        path = self.mktemp()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, fd)
        os.pwrite(fd, b"durable", 0)
        for _ in range(3):  # one at a time, as the store runs them
            await aio.fdsync(fd)
            self.assertEqual(aio._waiting, type(aio._waiting)())

    async def test_refused_sync_fails_its_deferred(self) -> None:
        """A descriptor the kernel refuses (here closed: EBADF at submit) fails the Deferred with OSError."""
        aio = opened(self, self.kind)
        fd = os.open(self.mktemp(), os.O_RDWR | os.O_CREAT, 0o644)
        os.close(fd)
        with self.assertRaises(OSError) as caught:
            await aio.fdsync(fd)
        self.assertEqual(caught.exception.errno, errno.EBADF)

    async def test_closed_by_a_failed_sync_with_more_results_in_the_same_read(self) -> None:
        """Two syncs ended before one read, the first refused (a pipe: EINVAL) and its errback closing this
        (as the store's fallback to the flush thread does): the second fails as closed, nothing raises."""
        aio = opened(self, self.kind)
        reactor.removeReader(aio)  # both results must be in one read: it is made below, by hand
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        self.addCleanup(os.close, write_end)
        fd = os.open(self.mktemp(), os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, fd)
        refused = aio.fdsync(read_end)

        def close(failure: Failure) -> Failure:
            aio.close()
            return failure
        refused.addErrback(close)
        second = aio.fdsync(fd)
        await both_ended(aio)
        aio.doRead()
        self.assertEqual(self.failureResultOf(refused, OSError).value.errno, errno.EINVAL)
        self.assertIn("closed", str(self.failureResultOf(second, OSError).value))

    async def test_fdsync_then_calls_back_and_a_raising_one_is_logged(self) -> None:
        """``fdsync_then``: ``done(*args)`` per sync that succeeded, ``failed(failure, *args)`` at once for one
        refused at submit; a ``done`` that raises is logged and the next result of the same read still
        goes out (as a Deferred's callback would not have stopped the others)."""
        aio = opened(self, self.kind)
        reactor.removeReader(aio)  # both results in one read, made below by hand
        fd = os.open(self.mktemp(), os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, fd)
        calls: list[tuple[Any, ...]] = []

        def raising(*args: Any) -> None:
            calls.append(("raised",) + args)
            raise ZeroDivisionError()
        closed = os.open(self.mktemp(), os.O_RDWR | os.O_CREAT, 0o644)
        os.close(closed)
        aio.fdsync_then(closed, 0, calls.append, lambda f, *a: calls.append((f.value.errno,) + a), "refused")
        self.assertEqual(calls, [(errno.EBADF, "refused")])  # at once, nothing left waiting
        self.assertEqual(len(aio._waiting), 0)
        aio.fdsync_then(fd, 0, raising, calls.append, "first", 1)
        aio.fdsync_then(fd, 0, lambda *a: calls.append(a), calls.append, "second", 2)
        await both_ended(aio)
        with capturedLogs() as logged:
            aio.doRead()
        self.assertEqual(calls[1:], [("raised", "first", 1), ("second", 2)])
        self.assertEqual(len(aio._waiting), 0)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)
        self.assertTrue(any("completion failed" in str(e.get("log_format")) for e in logged))

    def test_unavailable_without_the_compiled_module(self) -> None:
        self.patch(speedups, "compiled", None)
        self.assertIsNone(AioFdSync.open(reactor, self.kind))

    def test_closing_waits_for_the_sync_in_flight(self) -> None:
        """close() with a sync submitted: it ends first (no descriptor left open), the Deferred fails."""
        fd = os.open(self.mktemp(), os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, fd)
        before = len(os.listdir("/proc/self/fd"))
        aio = opened(self, self.kind)
        d = aio.fdsync(fd)
        aio.close()
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)  # the eventfd, the ring, the dup: all closed
        self.failureResultOf(d, OSError)


class UringFdSyncTests(NativeFdSyncTests):
    """The same through io_uring."""

    kind = "uring"

    def test_native_where_io_uring_is_refused(self) -> None:
        """A kernel without io_uring (ENOSYS) or with it turned off (EPERM): the native thread."""
        compiled = speedups.compiled
        if compiled is None:
            raise SkipTest(speedups.why_not())

        class NoUring:
            def __getattr__(self, name: str) -> Any:
                return getattr(compiled, name)

            def uring_setup(self, eventfd: int) -> None:
                raise OSError(errno.EPERM, os.strerror(errno.EPERM))
        self.patch(speedups, "compiled", NoUring())
        aio = AioFdSync.open(reactor, "uring")
        assert aio is not None
        self.addCleanup(aio.close)
        self.assertEqual(aio.kind, "native")


class FlushBeginEndTests(TestCase):
    """MappedFileQueue.flush_begin / flush_end: a flush run by the caller."""

    def test_one_file_then_spanning_files(self) -> None:
        queue = MappedFileQueue(self.mktemp(), 4096)
        self.addCleanup(queue.close)
        self.assertIsNone(queue.flush_begin())  # no file
        first = queue.get_last_mapped_file()
        assert first is not None
        first.append(b"a" * 1000)
        begun = queue.flush_begin()
        assert begun is not None
        fd, token = begun
        first.append(b"b" * 1000)  # after the begin: not covered by this sync
        os.fdatasync(fd)
        self.assertEqual(queue.flush_end(token), 1000)
        self.assertEqual(first.flushed_position, 1000)
        first.append(b"c" * (4096 - 2000))
        second = queue.get_last_mapped_file()
        assert second is not None and second is not first
        second.append(b"d" * 10)
        self.assertIsNone(queue.flush_begin())  # dirty bytes in two files: the thread's flush
        self.assertTrue(queue.flush(0))
        self.assertEqual(queue.flushed_where, 4096)
        begun = queue.flush_begin()
        assert begun is not None
        self.assertEqual(queue.flush_end(begun[1]), 4096 + 10)
        self.assertIsNone(queue.flush_begin())  # nothing dirty


class NativeServiceTests(TestCase):
    """StoreService, SYNC_FLUSH, a real MessageStore: lone puts appended on the reactor and
    flushed by the native thread, never answered before their bytes are durable."""

    kind = "native"

    async def started(self, timeout: float = 5.0, **config_args: Any) -> tuple[StoreService, MessageStore]:
        opened(self, self.kind)  # skips where it does not serve
        root = os.path.abspath(self.mktemp())
        config = MessageStoreConfig(store_path_root_dir=root, flush_disk_type="SYNC_FLUSH",
                                    mapped_file_size_commit_log=4 << 20, mapped_file_size_consume_queue=1000 * 20,
                                    max_hash_slot_num=1000, max_index_num=4000, sync_flush_timeout=timeout,
                                    **{"sync_flush_completion": self.kind, **config_args})
        store = MessageStore(config)
        service = StoreService(store, reactor)
        await service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        return service, store

    async def test_lone_puts_cross_no_thread_and_fire_once_durable(self) -> None:
        service, store = await self.started()
        first = await service.put_message(message())  # the first append writes the zeros ahead (a hop)
        self.assertTrue(first.ok)
        syncs = record_syncs(self)
        before = (service._pools.in_writer.calls, service._pools.in_flush.calls)
        for i in range(20):
            fired: list[int] = []

            def note(result: PutMessageResult) -> PutMessageResult:
                fired.append(store.flushed_offset)
                return result
            result = await service.put_message(message(body=b"%d" % i * 50)).addCallback(note)
            self.assertEqual(result.status, PutMessageStatus.PUT_OK)
            assert result.append is not None
            self.assertGreaterEqual(fired[0], result.append.next_offset, "answered before durable")
        self.assertEqual((service._pools.in_writer.calls, service._pools.in_flush.calls), before,
                         "a lone SYNC_FLUSH put went through a pool thread")
        self.assertEqual(len(syncs), 20)

    async def test_lone_put_submits_its_sync_in_the_append_call(self) -> None:
        """Native: the lone put's C call submits the sync right after the append (no Python submit);
        the group commit claims it; where the flush goes elsewhere (the bytes span files) the early
        sync is awaited and ignored."""
        service, store = await self.started()
        aio = service._aio
        assert aio is not None
        if aio.presync is None:
            raise SkipTest(f"{self.kind}: the sync is submitted by the group commit")
        await service.put_message(message())
        await deferLater(reactor, 0)
        submits = record_submits(self, aio)
        for i in range(5):
            result = await service.put_message(message(body=b"%d" % i * 50))
            assert result.append is not None
            self.assertGreaterEqual(store.flushed_offset, result.append.next_offset)
            await deferLater(reactor, 0)
        self.assertEqual(submits, [])
        real_begin = store.flush_begin
        self.patch(store, "flush_begin", lambda: None)  # as when the unflushed bytes span two files
        result = await service.put_message(message())
        assert result.append is not None
        self.assertEqual(result.status, PutMessageStatus.PUT_OK)
        self.assertGreaterEqual(store.flushed_offset, result.append.next_offset)
        self.assertEqual(aio.started, [])
        self.patch(store, "flush_begin", real_begin)
        while aio._waiting:  # the early sync's end, ignored
            await deferLater(reactor, 0.002)
        await deferLater(reactor, 0)  # not from inside the last put's completion
        self.assertEqual((await service.put_message(message())).status, PutMessageStatus.PUT_OK)
        self.assertEqual(submits, [])

    async def test_puts_waiting_share_one_sync(self) -> None:
        """Puts appended while a sync runs share the next one (group commit)."""
        service, store = await self.started()
        await service.put_message(message())
        await deferLater(reactor, 0)  # not from a put's completion (which queues its new puts for one hop)
        syncs = record_syncs(self)
        results = [await d for d in [service.put_message(message(body=b"%d" % i * 50)) for i in range(10)]]
        self.assertTrue(all(r.status is PutMessageStatus.PUT_OK for r in results))
        self.assertEqual(len(syncs), 2)  # the first put's, then one for the nine appended meanwhile
        self.assertGreaterEqual(store.flushed_offset, max(r.append.next_offset for r in results if r.append))

    async def test_sync_slower_than_the_timeout(self) -> None:
        """A sync still running at ``sync_flush_timeout``: FLUSH_DISK_TIMEOUT, as on the thread."""
        service, store = await self.started(timeout=0.05)
        await service.put_message(message())
        held: list[tuple[Deferred[None], Deferred[None]]] = []
        real_fdsync = AioFdSync.fdsync_then

        def slow(aio: AioFdSync, fd: int, covers: int, done: Callable[..., object],
                 failed: Callable[..., object], *args: Any) -> None:
            late: Deferred[None] = Deferred()
            late.addCallbacks(lambda _: done(*args), lambda f: failed(f, *args))
            real: Deferred[None] = Deferred()
            real_fdsync(aio, fd, covers, lambda: real.callback(None), real.errback)
            held.append((real, late))
        self.patch(AioFdSync, "fdsync_then", slow)
        result = await service.put_message(message())
        self.assertEqual(result.status, PutMessageStatus.FLUSH_DISK_TIMEOUT)
        real, late = held[0]
        await real
        late.callback(None)  # the sync ends after all: the service goes on
        self.patch(AioFdSync, "fdsync_then", real_fdsync)
        self.patch(service._completion, "_timeout", 5.0)  # a loaded disk must not time the next one out
        self.assertEqual((await service.put_message(message())).status, PutMessageStatus.PUT_OK)

    async def test_refused_fdsync_falls_back_to_the_flush_thread(self) -> None:
        """A kernel or file answering EINVAL: the flush thread serves this put and the next ones."""
        service, store = await self.started()

        def refusing(*args: Any) -> None:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        assert service._aio is not None and service._aio.kind == self.kind
        self.patch(service._aio, "_submit", refusing)
        with capturedLogs() as logged:
            results = [await d for d in [service.put_message(message()) for _ in range(3)]]
        self.assertTrue(all(r.status is PutMessageStatus.PUT_OK for r in results))
        self.assertIsNone(service._aio)
        self.assertFalse(service._inline)
        self.assertGreaterEqual(store.flushed_offset, max(r.append.next_offset for r in results if r.append))
        self.assertTrue(any("fdatasync refused" in str(e.get("log_format")) and e.get("kind") == self.kind
                            for e in logged))
        self.assertEqual((await service.put_message(message())).status, PutMessageStatus.PUT_OK)

    async def test_off(self) -> None:
        """``sync_flush_completion="thread"``: the Python flush thread, appends in the writer pool."""
        service, _ = await self.started(sync_flush_completion="thread")
        self.assertIsNone(service._aio)
        self.assertFalse(service._inline)
        self.assertTrue((await service.put_message(message())).ok)



    def test_bad_setting(self) -> None:
        config = MessageStoreConfig(store_path_root_dir=self.mktemp(), flush_disk_type="SYNC_FLUSH",
                                    sync_flush_completion="fast")
        with self.assertRaises(ValueError) as caught:
            StoreService(MessageStore(config), reactor)
        self.assertIn("sync_flush_completion", str(caught.exception))


class UringServiceTests(NativeServiceTests):
    """The same through io_uring."""

    kind = "uring"
