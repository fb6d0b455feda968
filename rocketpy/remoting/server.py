"""The remoting server: accepts connections and dispatches their requests.

Start one on an endpoint::

    server = RemotingServer(reactor)
    server.register_processor(RequestCode.HEART_BEAT, processor)
    port = await serverFromString(reactor, "tcp:10911:interface=127.0.0.1").listen(server.factory())
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.protocol import ServerFactory

from rocketpy.remoting.node import RemotingNode
from rocketpy.remoting.protocol import RemotingProtocol


class RemotingServer(RemotingNode):
    """Processors by request code behind any stream server endpoint.

    Constructor arguments are those of :class:`RemotingNode`: ``reactor`` and
    the keywords ``idle_timeout``, ``rpc_hooks``, ``listeners``, ``scan_interval``.
    Channels handed to processors and listeners provide
    :class:`~rocketpy.interfaces.IChannel`, so the server can ``invoke_sync``
    and ``invoke_oneway`` on them.
    """

    hooks_on_send = False

    def factory(self) -> ServerFactory:
        """A protocol factory for ``endpoint.listen``; every connection is served by this server."""
        factory = _RemotingServerFactory()
        factory.server = self
        return factory

    def close(self) -> Deferred[None]:
        """Close every connection; fires once all are closed. Stop listening separately."""
        return self.close_channels()


class _RemotingServerFactory(ServerFactory):
    server: RemotingServer

    def buildProtocol(self, addr: object) -> RemotingProtocol:
        protocol = self.server.build_channel()
        protocol.factory = self
        return protocol


__all__ = ["RemotingServer"]
