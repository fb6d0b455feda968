"""An ordered service tree: each child starts once the previous one has started, and stops in reverse.

Twisted's ``MultiService`` starts its children without waiting for their (Deferred) starts and
stops them all at once; Buildbot's ``AsyncMultiService`` (``buildbot/util/service.py``) returns
those Deferreds but still runs them side by side. Here a store finishes loading before anything
listens, and a broker unregisters before its connections close.
"""

from __future__ import annotations

from collections.abc import Callable
from inspect import iscoroutine
from typing import Any

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import IService, MultiService, Service
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from rocketpy.util.startup import StartupOutcome

#: A start or stop step: returns nothing, a Deferred or a coroutine.
Step = Callable[[], object]


def _deferred(result: object) -> Deferred[Any]:
    if isinstance(result, Deferred):
        return result
    if iscoroutine(result):
        return Deferred.fromCoroutine(result)
    return succeed(result)


class OrderedMultiService(MultiService):
    """Starts children in the order added, each once the previous one's start (a Deferred, maybe)
    fired; a failed start ends the start there. Stops the running children in reverse order, each
    once the later one has stopped; a failed stop is logged and the next one still runs.

    ``startService`` returns a Deferred that fails with the first failed start (the caller handles
    it); :meth:`when_started` hands out more. Children listen in ``startService``, in tree order,
    not in ``privilegedStartService``.
    """

    log = Logger()

    def __init__(self) -> None:
        super().__init__()
        self._startup = StartupOutcome(type(self).__name__)
        self._starting: Deferred[None] | None = None

    def add(self, name: str, service: IService) -> IService:
        """Add ``service`` under ``name`` as the last child (started last, stopped first)."""
        service.setName(name)
        service.setServiceParent(self)
        return service

    def privilegedStartService(self) -> None:
        Service.privilegedStartService(self)

    def startService(self) -> Deferred[None]:
        Service.startService(self)
        self._startup.begin()
        self._starting = Deferred.fromCoroutine(self._start())
        return self.when_started()

    async def _start(self) -> None:
        for service in list(self):
            try:
                await maybeDeferred(service.startService)
            except Exception:
                self._startup.failed(Failure())
                return
        self._startup.succeeded()

    def when_started(self) -> Deferred[None]:
        """A new Deferred that fires once every child started; it fails with the first failed start."""
        return self._startup.when_done()

    def stopService(self) -> Deferred[None]:
        if not self.running:  # already stopped, or never started: nothing to undo
            return succeed(None)
        Service.stopService(self)
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        if self._starting is not None:
            await self._starting  # never fails: its outcome went to _startup
            self._starting = None
        for service in reversed(list(self)):
            if not service.running:
                continue
            try:
                await maybeDeferred(service.stopService)
            except Exception:
                self.log.failure("{parent}: stopping {child} failed", level=LogLevel.error,
                                 parent=self.name or type(self).__name__, child=service.name)


class Steps(Service):
    """A service made of a start and a stop step (each may return a Deferred or a coroutine), for
    the parts of a tree that are not services themselves."""

    def __init__(self, start: Step | None = None, stop: Step | None = None) -> None:
        self._start_step = start
        self._stop_step = stop

    def startService(self) -> Deferred[Any]:
        super().startService()
        return maybeDeferred(self._start_step or (lambda: None)).addCallback(_deferred)

    def stopService(self) -> Deferred[Any]:
        super().stopService()
        return maybeDeferred(self._stop_step or (lambda: None)).addCallback(_deferred)


class LoopService(Steps):
    """Calls ``f`` every ``interval`` seconds of ``clock``, first after one interval; a stop waits
    for a call in progress."""

    def __init__(self, f: Callable[[], object], interval: float, clock: Any) -> None:
        from twisted.internet.task import LoopingCall

        self._loop = LoopingCall(f)
        self._loop.clock = clock
        self._interval = interval
        self._looping: Deferred[Any] | None = None
        super().__init__(self._begin, self._end)

    def _begin(self) -> None:
        self._looping = self._loop.start(self._interval, now=False)

    def _end(self) -> Deferred[Any] | None:
        if self._loop.running:
            self._loop.stop()
        looping, self._looping = self._looping, None
        return looping


class ListeningService(StreamServerEndpointService):
    """``StreamServerEndpointService`` whose start is a Deferred: it fires once listening and
    fails when the port cannot be opened (the failure is the caller's to report, not logged)."""

    log = Logger()

    def __init__(self, endpoint: IStreamServerEndpoint, factory: IProtocolFactory, what: str) -> None:
        super().__init__(endpoint, factory)
        self._what = what
        self.port: IListeningPort | None = None

    def privilegedStartService(self) -> None:
        """Nothing: the port opens in ``startService``, in the tree's order."""

    def startService(self) -> Deferred[None]:
        Service.startService(self)
        started: Deferred[None] = Deferred()

        def listened(port: IListeningPort) -> IListeningPort:
            self.port = port
            self.log.info("{what} listening on {host}", what=self._what, host=port.getHost())
            started.callback(None)
            return port

        def failed(failure: Failure) -> None:
            started.errback(failure)

        self._waitingForPort = self.endpoint.listen(self.factory).addCallbacks(listened, failed)
        return started

    def stopService(self) -> Deferred[None]:
        self.port = None
        return super().stopService()

