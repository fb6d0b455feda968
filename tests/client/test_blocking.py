"""Tests for rocketpy.blocking: calls hop onto the reactor thread and return or raise there."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.blocking import Message, Producer, reactor_thread
from rocketpy.client import errors
from rocketpy.client.results import SendStatus
from rocketpy.remoting.codes import RequestCode

from .fakes import NAMESRV, FakeCluster


class ReactorThreadTests(SynchronousTestCase):
    def test_values_and_errors(self) -> None:
        """Plain values and Deferred results come back; a failure is raised as its exception."""
        rt = reactor_thread()
        self.assertEqual(rt.call(lambda: 3), 3)
        self.assertEqual(rt.call(lambda: succeed("d")), "d")
        self.assertRaises(errors.NoRouteError, rt.call, lambda: fail(errors.NoRouteError("T")))

    def test_timeout(self) -> None:
        """A call that does not finish in time raises TimeoutError."""
        rt = reactor_thread()
        self.assertRaises(TimeoutError, rt.call, Deferred, timeout=0.01)

    def test_no_deadlock_from_reactor_thread(self) -> None:
        """A blocking call made on the reactor thread itself is refused."""
        rt = reactor_thread()
        error = rt.call(lambda: _catch(lambda: rt.call(lambda: 1)))
        self.assertIsInstance(error, RuntimeError)


    def test_many_submits_all_run_in_order(self) -> None:
        """Submits from several threads at once (one reactor wake-up for a run of them) all run, in
        each thread's order, and an exception in one does not drop the others."""
        rt = reactor_thread()
        seen: list[tuple[int, int]] = []

        def submit_many(thread: int) -> list[Future[object]]:
            return [rt.submit(seen.append, (thread, i)) for i in range(500)] + [rt.submit(lambda: 1 / 0)]

        futures: list[list[Future[object]]] = [[] for _ in range(4)]
        threads = [threading.Thread(target=lambda n=n: futures[n].extend(submit_many(n))) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for per_thread in futures:
            for f in per_thread[:-1]:
                f.result(5)
            self.assertRaises(ZeroDivisionError, per_thread[-1].result, 5)
        for thread in range(4):
            self.assertEqual([i for t, i in seen if t == thread], list(range(500)))


def _catch(f: Callable[[], object]) -> Exception | None:
    try:
        f()
    except Exception as e:
        return e
    return None


class BlockingProducerTests(SynchronousTestCase):
    def test_send(self) -> None:
        """send returns the SendResult; errors of the Deferred API are raised as they are."""
        cluster = FakeCluster(Clock())
        cluster.add_broker("broker-a", "10.0.0.1:10911")
        cluster.add_topic("T")
        with Producer("PG", NAMESRV, remoting_client=cluster.remoting) as producer:
            self.assertEqual(producer.send(Message("T", b"x")).status, SendStatus.SEND_OK)
            self.assertEqual(producer.send_async(Message("T", b"y")).result(10).status, SendStatus.SEND_OK)
            self.assertRaises(errors.MessageInvalidError, producer.send, Message("T", b""))
        self.assertEqual(len(cluster.remoting.sent(RequestCode.UNREGISTER_CLIENT)), 1)  # shut down on exit
