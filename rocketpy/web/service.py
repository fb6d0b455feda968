"""``HttpService``: listens on the ``--http`` endpoint while running (doc/observability.md)."""

from __future__ import annotations

from functools import partial
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.web.resource import Resource

from rocketpy.util.startup import StartupOutcome
from rocketpy.web.site import QuietSite, root_resource


class HttpListenError(Exception):
    """The ``--http`` endpoint cannot be opened (its port is taken, say)."""


class HttpService(Service):
    """Serves ``root`` on ``endpoint`` (a server endpoint string) from start to stop.

    :param reactor: listens, and the site's clock.
    :param pool: the thread pool ``root``'s resources format pages in (started and stopped
        here); None when they use none.
    """

    log = Logger()

    def __init__(self, reactor: Any, endpoint: str, root: Resource, pool: ThreadPool | None = None) -> None:
        self._reactor = reactor
        self._endpoint = endpoint
        self._root = root
        self._pool = pool
        self._port: IListeningPort | None = None
        self._listening: Deferred[None] | None = None
        self._startup = StartupOutcome("HTTP endpoint")

    @property
    def listening_port(self) -> IListeningPort | None:
        return self._port

    def when_started(self) -> Deferred[None]:
        """A new Deferred that fires once listening; it fails when the port cannot be opened."""
        return self._startup.when_done()

    def startService(self) -> None:
        super().startService()
        if self._pool is not None:
            self._pool.start()
        self._startup.begin()
        self._listening = Deferred.fromCoroutine(self._listen())

    async def _listen(self) -> None:
        site = QuietSite(self._root, reactor=self._reactor)
        try:
            self._port = await serverFromString(self._reactor, self._endpoint).listen(site)
        except Exception as e:
            error = HttpListenError(f"cannot serve HTTP on {self._endpoint} ({e}): "
                                    "give --http another endpoint, or --http none")
            self._startup.failed(Failure(error))
            self.log.critical("{error}", error=error)
            return
        self.log.info("HTTP (/metrics) on {host}", host=self._port.getHost())
        self._startup.succeeded()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        if self._listening is not None:
            await self._listening
        port, self._port = self._port, None
        if port is not None:
            await maybeDeferred(port.stopListening)
        if self._pool is not None and self._pool.started:
            self._pool.stop()  # waits for a page being formatted


def http_service(reactor: Any, endpoint: str, broker: Any) -> HttpService:
    """The HTTP endpoint of ``broker``, with a one-thread pool that formats its pages."""
    pool = ThreadPool(1, 1, "rocketpy-http")
    return HttpService(reactor, endpoint, root_resource(broker, partial(deferToThreadPool, reactor, pool)), pool)
