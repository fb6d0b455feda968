"""rocketpy.util.endpoints: ``fd:N`` listens on an open socket; other strings are Twisted's."""

from __future__ import annotations

import socket

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import TestCase

from rocketpy.util.endpoints import OpenSocketEndpoint, server_endpoint


class ServerEndpointTests(TestCase):
    def test_strings(self) -> None:
        """``fd:N`` gives an OpenSocketEndpoint; anything else goes to serverFromString."""
        self.assertIsInstance(server_endpoint(reactor, "fd:7"), OpenSocketEndpoint)
        self.assertIsInstance(server_endpoint(reactor, "tcp:0:interface=127.0.0.1"), TCP4ServerEndpoint)
        self.assertRaises(ValueError, server_endpoint, reactor, "fd:x")

    async def test_listens_on_the_socket_left_open(self) -> None:
        """The endpoint accepts connections on the socket's port, and the caller's socket stays its own:
        closing it leaves the listening port working."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        port_number = sock.getsockname()[1]
        accepted: Deferred[Protocol] = Deferred()

        class Recording(Protocol):
            def connectionMade(self) -> None:
                accepted.callback(self)

        port = await server_endpoint(reactor, f"fd:{sock.fileno()}").listen(Factory.forProtocol(Recording))
        self.addCleanup(port.stopListening)
        sock.close()
        self.assertEqual(port.getHost().port, port_number)  # type: ignore[attr-defined]
        client = await TCP4ClientEndpoint(reactor, "127.0.0.1", port_number).connect(Factory.forProtocol(Protocol))
        server = await accepted
        for side in (client, server):
            side.transport.loseConnection()  # type: ignore[union-attr]
