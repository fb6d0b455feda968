"""``HttpService``: listens on the ``--http`` endpoint while running (doc/observability.md)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.web.resource import Resource

from rocketpy.client.admin import AdminClient
from rocketpy.util.service import ListeningService, OrderedMultiService, Steps
from rocketpy.web.access import AclAccounts, AdminAccess, SharedAdmin
from rocketpy.web.site import QuietSite, root_resource


class HttpListenError(Exception):
    """The ``--http`` endpoint cannot be opened (its port is taken, say)."""


class HttpService(OrderedMultiService):
    """Serves ``root`` on ``endpoint`` (a server endpoint string) from start to stop.

    :param reactor: listens, and the site's clock.
    :param pool: the thread pool ``root``'s resources format pages in (started and stopped
        here); None when they use none.
    :param closing: called once the port is closed (the dashboard closes its admin clients).
    """

    def __init__(self, reactor: Any, endpoint: str, root: Resource, pool: ThreadPool | None = None,
                 closing: Callable[[], Deferred[None]] | None = None) -> None:
        super().__init__()
        if closing is not None:  # added first: stopped last
            self.add("admin clients", Steps(None, closing))
        if pool is not None:
            self.add("pool", Steps(pool.start, lambda: pool.stop() if pool.started else None))
        site = QuietSite(root, reactor=reactor)
        self._listener = _HttpListener(serverFromString(reactor, endpoint), site, endpoint)
        self.add("listener", self._listener)

    @property
    def listening_port(self) -> IListeningPort | None:
        return self._listener.port


class _HttpListener(ListeningService):
    """A taken port fails the start with an :class:`HttpListenError` that says what to do."""

    def __init__(self, endpoint: IStreamServerEndpoint, site: QuietSite, description: str) -> None:
        super().__init__(endpoint, site, "HTTP (/metrics, the dashboard at /)")
        self._description = description

    def startService(self) -> Deferred[None]:
        return super().startService().addErrback(self._cannot_listen)

    def _cannot_listen(self, failure: Failure) -> None:
        error = HttpListenError(f"cannot serve HTTP on {self._description} ({failure.value}): "
                                "give --http another endpoint, or --http none")
        self.log.critical("{error}", error=error)
        raise error


def http_service(reactor: Any, endpoint: str, broker: Any, writes: bool = False) -> HttpService:
    """The HTTP endpoint of ``broker``: ``/metrics``, with a one-thread pool that formats its pages,
    and the dashboard, whose API calls go to the broker's own name servers (signed with the ACL
    account each request names when the broker checks ACL).

    :param writes: whether the dashboard's write actions are enabled (``--http-admin``).
    """
    pool = ThreadPool(1, 1, "rocketpy-http")
    namesrv = broker.config.namesrv_addr
    access: AdminAccess = (AclAccounts(reactor, namesrv) if broker.config.acl_enable
                           else SharedAdmin(AdminClient(reactor, namesrv)))
    root = root_resource(broker, partial(deferToThreadPool, reactor, pool), access, writes)
    return HttpService(reactor, endpoint, root, pool, access.close)
