"""How a service's start-up ended, for whoever asks (``when_started()``)."""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

_NOT_STARTED = object()
_PENDING = object()
_SUCCEEDED = object()


class StartupOutcome:
    """Hands each caller a fresh Deferred for the start-up's end (no public Deferred attribute).

    :param what: the service's name, for the "was not started" error.
    """

    def __init__(self, what: str) -> None:
        self._what = what
        self._outcome: object = _NOT_STARTED
        self._waiters: list[Deferred[None]] = []

    def begin(self) -> None:
        """Start-up is under way: callers wait from now on."""
        self._outcome = _PENDING

    def succeeded(self) -> None:
        self._settle(_SUCCEEDED)

    def failed(self, failure: Failure) -> None:
        self._settle(failure)

    def when_done(self) -> Deferred[None]:
        """Fires once start-up succeeded; fails with its error, or at once if it never began."""
        if self._outcome is _NOT_STARTED:
            return fail(RuntimeError(f"the {self._what} was not started"))
        if self._outcome is _PENDING:
            d: Deferred[None] = Deferred()
            self._waiters.append(d)
            return d
        return self._result()

    def _settle(self, outcome: object) -> None:
        self._outcome = outcome
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            self._result().chainDeferred(d)

    def _result(self) -> Deferred[None]:
        if isinstance(self._outcome, Failure):
            return fail(self._outcome)
        return succeed(None)
