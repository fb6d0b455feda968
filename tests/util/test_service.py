"""Tests for :mod:`rocketpy.util.service`: the ordered tree, its steps, loops and listeners."""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.util.service import ListeningService, LoopService, OrderedMultiService, Steps


class Recorded(Service):
    """Records its start and stop into ``events``; ``gate`` (if set) is what start returns."""

    def __init__(self, name: str, events: list[str], gate: Deferred[None] | None = None) -> None:
        self.setName(name)
        self.events = events
        self.gate = gate

    def startService(self) -> Deferred[None]:
        super().startService()
        self.events.append(f"start {self.name}")
        return self.gate if self.gate is not None else succeed(None)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        self.events.append(f"stop {self.name}")
        return succeed(None)


class OrderedMultiServiceTests(SynchronousTestCase):
    def test_start_waits_for_each_child(self) -> None:
        """The second child starts once the first's Deferred fired; when_started fires after both."""
        events: list[str] = []
        gate: Deferred[None] = Deferred()
        tree = OrderedMultiService()
        tree.add("a", Recorded("a", events, gate))
        tree.add("b", Recorded("b", events))
        started = tree.startService()
        waiting = tree.when_started()
        self.assertEqual(events, ["start a"])
        self.assertNoResult(started)
        gate.callback(None)
        self.assertEqual(events, ["start a", "start b"])
        self.successResultOf(started)
        self.successResultOf(waiting)

    def test_failed_start_stops_the_start_there(self) -> None:
        """A failing child fails the start; later children are not started, and a stop stops
        the started ones in reverse order."""
        events: list[str] = []
        tree = OrderedMultiService()
        tree.add("a", Recorded("a", events))
        tree.add("bad", Steps(lambda: fail(RuntimeError("port taken"))))
        tree.add("c", Recorded("c", events))
        self.failureResultOf(tree.startService(), RuntimeError)
        self.failureResultOf(tree.when_started(), RuntimeError)
        self.successResultOf(tree.stopService())
        self.assertEqual(events, ["start a", "stop a"])

    def test_stop_in_reverse_past_a_failure(self) -> None:
        """Children stop in reverse order; a failing stop is logged and the earlier children still stop."""
        events: list[str] = []
        tree = OrderedMultiService()
        tree.add("a", Recorded("a", events))
        tree.add("bad", Steps(stop=lambda: fail(OSError("EIO"))))
        tree.add("c", Recorded("c", events))
        tree.startService()
        with capturedLogs() as logged:
            self.successResultOf(tree.stopService())
        self.assertEqual(events, ["start a", "start c", "stop c", "stop a"])
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        self.assertEqual([e["child"] for e in logged if "log_failure" in e], ["bad"])

    def test_stop_during_start_waits_for_it(self) -> None:
        """A stop while a child is starting waits for that start, then stops what started; a
        second stop does nothing."""
        events: list[str] = []
        gate: Deferred[None] = Deferred()
        tree = OrderedMultiService()
        tree.add("a", Recorded("a", events, gate))
        tree.add("b", Recorded("b", events))
        tree.startService()
        stopped = tree.stopService()
        self.assertNoResult(stopped)
        gate.callback(None)
        self.successResultOf(stopped)
        self.assertEqual(events[-2:], ["stop b", "stop a"])
        self.successResultOf(tree.stopService())
        self.assertEqual(events.count("stop a"), 1)

    def test_when_started_before_start(self) -> None:
        """Asking before the start is an error, not a Deferred that never fires."""
        self.failureResultOf(OrderedMultiService().when_started(), RuntimeError)


class StepsTests(SynchronousTestCase):
    def test_coroutine_steps(self) -> None:
        """A step may be a coroutine function; its result is awaited."""
        events: list[str] = []

        async def start() -> None:
            events.append("started")

        steps = Steps(start)
        self.successResultOf(steps.startService())
        self.assertEqual(events, ["started"])
        self.successResultOf(steps.stopService())
        self.assertFalse(steps.running)


class LoopServiceTests(SynchronousTestCase):
    def test_first_call_after_one_interval(self) -> None:
        """The loop runs one interval after start, then every interval, and not after stop."""
        clock = Clock()
        calls: list[float] = []
        loop = LoopService(lambda: calls.append(clock.seconds()), 5.0, clock)
        loop.startService()
        clock.advance(4.9)
        self.assertEqual(calls, [])
        clock.pump([0.1, 5.0])
        self.assertEqual(calls, [5.0, 10.0])
        self.successResultOf(loop.stopService())
        clock.advance(10)
        self.assertEqual(len(calls), 2)
        self.assertEqual(clock.getDelayedCalls(), [])


class ListeningServiceTests(SynchronousTestCase):
    def test_listens_in_start_not_before(self) -> None:
        """The port opens in startService (not privilegedStartService) and closes on stop."""
        reactor = MemoryReactorClock()
        service = ListeningService(TCP4ServerEndpoint(reactor, 1234), Factory.forProtocol(Protocol), "test")
        service.privilegedStartService()
        self.assertEqual(reactor.tcpServers, [])
        self.successResultOf(service.startService())
        self.assertEqual([p[0] for p in reactor.tcpServers], [1234])
        self.assertIsNotNone(service.port)
        self.successResultOf(service.stopService())
        self.assertIsNone(service.port)

    def test_failed_listen_fails_the_start(self) -> None:
        """A port that cannot be opened fails the start's Deferred (nothing logged here); stop still works."""

        class Refusing:
            def listen(self, factory: object) -> Deferred[object]:
                return fail(CannotListenError("127.0.0.1", 1234, OSError("in use")))

        service = ListeningService(Refusing(), Factory.forProtocol(Protocol), "test")  # type: ignore[arg-type]
        self.failureResultOf(service.startService(), CannotListenError)
        self.assertIsNone(service.port)
        self.successResultOf(service.stopService())
