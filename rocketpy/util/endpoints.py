"""Server endpoint strings: Twisted's, plus ``fd:N`` for a listening TCP socket handed over open.

``fd:N`` listens on a duplicate of the IPv4 listening, non-blocking socket at file descriptor N; N stays the
caller's to close. :mod:`rocketpy.testing` binds port 0 itself this way, so it knows the
broker's port before the broker is built (the port is written into every stored message).
"""

from __future__ import annotations

import re
import socket
from typing import Any

from twisted.internet.defer import Deferred, execute
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from zope.interface import implementer

_FD = re.compile(r"fd:(\d+)$")


@implementer(IStreamServerEndpoint)
class OpenSocketEndpoint:
    """Listens on a duplicate of a listening, non-blocking socket (Twisted's ``AdoptedStreamServerEndpoint``
    closes the caller's descriptor instead, which then cannot know whether it still owns it)."""

    def __init__(self, reactor: Any, fileno: int) -> None:
        self._reactor = reactor
        self._fileno = fileno

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        return execute(self._reactor.adoptStreamPort, self._fileno, socket.AF_INET, factory)


def server_endpoint(reactor: Any, description: str) -> IStreamServerEndpoint:
    """The endpoint of ``description``: ``fd:N`` or any :func:`serverFromString` string."""
    match = _FD.match(description)
    if match is None:
        return serverFromString(reactor, description)
    return OpenSocketEndpoint(reactor, int(match.group(1)))
