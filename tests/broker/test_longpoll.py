"""PullRequestHoldService on a Clock: waking, deadlines, re-checks, cancellation, stop."""

from __future__ import annotations

from dataclasses import dataclass

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from zope.interface.verify import verifyObject

from rocketpy.broker.longpoll import PullRequestHoldService
from rocketpy.interfaces import IChannelEventListener
from rocketpy.remoting.command import RemotingCommand


@dataclass
class Peer:
    """A channel as the hold service reads it."""

    remote_address: str
    closing: bool = False


class PullRequestHoldServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.max_offsets: dict[tuple[str, int], int] = {}
        self.service = PullRequestHoldService(
            self.clock, lambda t, q: self.max_offsets.get((t, q), 0), recheck_interval=5.0, max_hold=20.0
        )
        self.service.startService()
        self.reruns = 0

    def rerun(self) -> Deferred[RemotingCommand | None]:
        self.reruns += 1
        return succeed(RemotingCommand(code=0, remark=f"run {self.reruns}"))

    def park(self, offset: int = 3, timeout: float = 15.0, channel: object = None) -> Deferred[RemotingCommand | None]:
        return self.service.suspend(channel, "T", 0, offset, timeout, self.rerun)

    def test_arrival_below_offset_does_not_wake(self) -> None:
        """Only a max offset beyond the parked offset wakes the request, and only once."""
        d = self.park(offset=3)
        self.service.notify_message_arriving("T", 0, 3)
        self.service.notify_message_arriving("T", 1, 9)
        self.assertNoResult(d)
        self.service.notify_message_arriving("T", 0, 4)
        self.service.notify_message_arriving("T", 0, 5)
        self.assertEqual(self.successResultOf(d).remark, "run 1")  # type: ignore[union-attr]
        self.assertEqual(self.reruns, 1)
        self.assertEqual(self.service.parked_count(), 0)

    def test_deadline_reruns(self) -> None:
        """At the deadline the request is re-run once and its timer is gone."""
        d = self.park(timeout=2.5)
        self.clock.advance(2.4)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.assertEqual(self.reruns, 1)
        self.successResultOf(d)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)  # the re-check loop only

    def test_recheck_wakes_on_growth(self) -> None:
        """The periodic re-check reads the queue's max offset and wakes waiting requests."""
        d = self.park(offset=0)
        self.clock.advance(5)
        self.assertNoResult(d)
        self.max_offsets[("T", 0)] = 1
        self.clock.advance(5)
        self.successResultOf(d)

    def test_cancel_unparks(self) -> None:
        """Cancelling the returned Deferred removes the request and its timer."""
        d = self.park()
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(self.service.parked_count(), 0)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_rerun_failure_propagates(self) -> None:
        """A failing re-run fails the held request's Deferred (the server turns it into SYSTEM_ERROR)."""
        d = self.service.suspend(None, "T", 0, 0, 1.0, lambda: fail(ValueError("boom")))
        self.clock.advance(1)
        self.failureResultOf(d, ValueError)

    def test_rerun_exception_propagates(self) -> None:
        """A re-run that raises fails the held request and does not escape into the caller."""

        def explode() -> Deferred[RemotingCommand | None]:
            raise RuntimeError("boom")

        d = self.service.suspend(None, "T", 0, 0, 1.0, explode)
        self.service.notify_message_arriving("T", 0, 1)
        self.failureResultOf(d, RuntimeError)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_channel_closed(self) -> None:
        """Only the closed channel's requests are dropped."""
        mine, other = object(), object()
        d1, d2 = self.park(channel=mine), self.park(channel=other)
        self.service.channel_closed(mine)
        self.assertIsNone(self.successResultOf(d1))
        self.assertNoResult(d2)
        self.assertEqual(self.service.parked_count("T", 0), 1)

    def test_channel_listener(self) -> None:
        """As a channel event listener the service drops on close, idle and exception."""
        self.assertTrue(verifyObject(IChannelEventListener, self.service))
        channel = object()
        self.service.on_channel_connect("a:1", channel)
        for event in (self.service.on_channel_idle, self.service.on_channel_exception,
                      self.service.on_channel_close):
            d = self.park(channel=channel)
            self.assertNoResult(d)
            event("a:1", channel)
            self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.service.parked_count(), 0)

    def test_closing_channel_not_held(self) -> None:
        """A pull whose read ends after its channel began closing is answered None at once: no
        timer, nothing parked; another channel's pull is still held."""
        gone, live = Peer("a:1", closing=True), Peer("b:2")
        kept = self.park(channel=live)
        d = self.park(channel=gone)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.service.parked_count(), 1)
        self.assertEqual(len(self.clock.getDelayedCalls()), 2)  # the re-check loop and the live pull's deadline
        self.service.notify_message_arriving("T", 0, 4)
        self.assertEqual(self.successResultOf(kept).remark, "run 1")  # type: ignore[union-attr]

    def test_stop_cancels_every_timer(self) -> None:
        """Stopping drops the parked requests and leaves no delayed call."""
        d1, d2 = self.park(), self.park(offset=9)
        self.service.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertIsNone(self.successResultOf(d1))
        self.assertIsNone(self.successResultOf(d2))
        self.assertEqual(self.reruns, 0)

    def test_pull_after_stop_is_dropped(self) -> None:
        """A pull that reaches the processor while the broker stops is dropped, not parked: no
        timer outlives the service."""
        self.service.stopService()
        d = self.park()
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.service.parked_count(), 0)
