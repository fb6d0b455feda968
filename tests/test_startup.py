from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.util.startup import StartupOutcome


class StartupOutcomeTests(SynchronousTestCase):
    def test_not_started(self) -> None:
        """Asking before start-up began fails at once, naming the service."""
        f = self.failureResultOf(StartupOutcome("broker").when_done(), RuntimeError)
        self.assertIn("broker was not started", str(f.value))

    def test_waiters_fire_on_success(self) -> None:
        """Callers waiting during start-up, and later callers, each get a Deferred that fires."""
        outcome = StartupOutcome("x")
        outcome.begin()
        early = outcome.when_done()
        self.assertNoResult(early)
        outcome.succeeded()
        self.successResultOf(early)
        self.successResultOf(outcome.when_done())

    def test_failure_reaches_every_caller(self) -> None:
        """A failed start-up fails every waiter and every later caller with its error."""
        outcome = StartupOutcome("x")
        outcome.begin()
        early = outcome.when_done()
        outcome.failed(Failure(OSError("address already in use")))
        self.failureResultOf(early, OSError)
        self.failureResultOf(outcome.when_done(), OSError)
