"""Which :class:`~rocketpy.client.admin.AdminClient` answers an API request (doc/dashboard.md):
one shared client when the broker has no ACL, else a client signing with the ACL account the
request names, so the broker's own ACL decides what each user may read and write."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.server import Request

from rocketpy.client.admin import AdminClient

#: ACL accounts whose clients are kept open between requests (the least recently used is closed).
CACHED_ACCOUNTS = 8
#: The ``WWW-Authenticate`` of a request that names no ACL account.
CHALLENGE = b'Basic realm="rocketpy ACL account", charset="UTF-8"'


class Unauthorized(Exception):
    """The request names no ACL account: the browser is asked for one (401, HTTP Basic)."""


class AdminAccess(Protocol):
    timeout: float
    #: whether requests must name an account (the pages then ask for one too)
    asks_account: bool

    def admin_for(self, request: Request) -> AdminClient:
        """The client to answer ``request`` with; :raises Unauthorized: when it names no account."""

    def close(self) -> Deferred[None]:
        """Close every client made here."""


class SharedAdmin:
    """No ACL: one client (of the broker process's own name servers) answers every request."""

    asks_account = False

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin
        self.timeout = admin.timeout

    def admin_for(self, request: Request) -> AdminClient:
        return self._admin

    def close(self) -> Deferred[None]:
        return self._admin.close()


class AclAccounts:
    """ACL on (``--acl-enable``): a request names an account with HTTP Basic authentication, the
    access key as the user name and the secret key as the password; the API's requests are then
    signed with it. Reads need a valid account; writes (with ``--http-admin``) need what the ACL
    gives that account, as they would from ``mqadmin`` (an ``admin: true`` account to create a topic).

    :param namesrv_addrs: the broker process's own name servers.
    """

    log = Logger()
    asks_account = True

    def __init__(self, reactor: IReactorTime, namesrv_addrs: str | Sequence[str], timeout: float = 5.0,
                 cached: int = CACHED_ACCOUNTS) -> None:
        self._reactor = reactor
        self._namesrv_addrs = namesrv_addrs
        self.timeout = timeout
        self._cached = cached
        self._clients: OrderedDict[tuple[str, str], AdminClient] = OrderedDict()

    def admin_for(self, request: Request) -> AdminClient:
        user, password = request.getUser(), request.getPassword()
        if not user or not password:
            raise Unauthorized("the broker checks ACL: sign in with an access key (user) and its secret key (password)")
        account = (user.decode("utf-8", "replace"), password.decode("utf-8", "replace"))
        client = self._clients.pop(account, None)
        if client is None:
            client = AdminClient(self._reactor, self._namesrv_addrs, timeout=self.timeout, credentials=account)
        self._clients[account] = client
        while len(self._clients) > self._cached:
            _, oldest = self._clients.popitem(last=False)
            oldest.close().addErrback(lambda f: self.log.failure("closing an admin client failed", f))
        return client

    def close(self) -> Deferred[None]:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        return DeferredList([c.close() for c in clients]).addCallback(lambda _: None)
