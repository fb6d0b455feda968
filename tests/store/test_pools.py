"""The store's bare one-thread pool (``OneThread``), on the real reactor."""

from __future__ import annotations

import threading

from twisted.internet import reactor
from twisted.internet.defer import DeferredList
from twisted.internet.interfaces import IReactorFromThreads
from twisted.trial.unittest import TestCase

from rocketpy.store.pools import OneThread, PoolCaller


class OneThreadTests(TestCase):
    def make(self) -> tuple[OneThread, PoolCaller]:
        pool = OneThread("test-one")
        self.addCleanup(pool.stop)
        return pool, PoolCaller(reactor, pool)  # type: ignore[arg-type]  # the global reactor, untyped

    async def test_jobs_run_in_order_on_one_named_thread(self) -> None:
        """Calls run one at a time, in order, on the pool's thread; calls made before start wait."""
        pool, call = self.make()
        seen: list[tuple[int, str]] = []

        def job(i: int) -> int:
            seen.append((i, threading.current_thread().name))
            return i

        ds = [call(job, i) for i in range(50)]
        self.assertEqual(call.running, 50)
        pool.start()
        results = await DeferredList(ds, fireOnOneErrback=True)
        self.assertEqual([value for _, value in results], list(range(50)))
        self.assertEqual(seen, [(i, "PoolThread-test-one-0") for i in range(50)])
        self.assertEqual(call.running, 0)

    async def test_exception_fails_the_deferred(self) -> None:
        """An exception in the job fails its Deferred on the reactor; the thread goes on."""
        pool, call = self.make()
        pool.start()

        def boom() -> None:
            raise ValueError("bad job")

        with self.assertRaises(ValueError):
            await call(boom)
        self.assertEqual(await call(lambda: 7), 7)

    def test_stop_finishes_queued_jobs(self) -> None:
        """stop() runs what was queued, then ends the thread; a stopped pool can start again."""
        pool = OneThread("test-stop")
        ran: list[int] = []
        fake: IReactorFromThreads = _RecordingReactor()  # type: ignore[assignment]
        for i in range(5):
            pool.defer(fake, ran.append, i)
        pool.start()
        pool.stop()
        self.assertEqual(ran, [0, 1, 2, 3, 4])
        self.assertEqual(len(fake.calls), 5)  # type: ignore[attr-defined]
        self.assertFalse(any(t.name == "PoolThread-test-stop-0" for t in threading.enumerate()))
        pool.start()
        pool.defer(fake, ran.append, 5)
        pool.stop()
        self.assertEqual(ran[-1], 5)


class _RecordingReactor:
    """Records ``callFromThread`` calls instead of running them (the test stops the pool itself)."""

    def __init__(self) -> None:
        self.calls: list[object] = []

    def callFromThread(self, f: object, *args: object) -> None:
        self.calls.append(f)

