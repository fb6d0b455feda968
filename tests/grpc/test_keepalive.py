"""The endpoint's keepalive pings: a client whose host went silent loses its Telemetry stream."""

from __future__ import annotations

import grpc
from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.task import deferLater
from twisted.protocols import portforward

from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2.service_pb2_grpc import MessagingServiceStub
from tests.grpc.test_endpoint import CLIENT_ID, GrpcCalls


def _frozen(server: portforward.Proxy | None) -> bool:
    return server is not None and isinstance(server.factory, FreezingProxy) and server.factory.frozen


class _Client(portforward.ProxyClient):
    def dataReceived(self, data: bytes) -> None:
        if not _frozen(self.peer):
            super().dataReceived(data)


class _ClientFactory(portforward.ProxyClientFactory):
    protocol = _Client


class _Server(portforward.ProxyServer):
    clientProtocolFactory = _ClientFactory

    def dataReceived(self, data: bytes) -> None:
        if not _frozen(self):
            super().dataReceived(data)


class FreezingProxy(portforward.ProxyFactory):
    """Forwards a TCP connection until :attr:`frozen`: then both ways go silent, the sockets stay
    open (a host that vanished from the network)."""

    protocol = _Server

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.frozen = False


class KeepaliveTests(GrpcCalls):
    keepalive = (0.3, 0.3)

    async def _through_proxy(self) -> FreezingProxy:
        await self._start()
        assert self.service.port is not None
        proxy = FreezingProxy("127.0.0.1", self.service.port)
        port = reactor.listenTCP(0, proxy, interface="127.0.0.1")  # type: ignore[arg-type]  # portforward is untyped
        self.addCleanup(port.stopListening)
        address = port.getHost()
        assert isinstance(address, IPv4Address)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{address.port}")
        self.addCleanup(self.channel.close)
        self.stub = MessagingServiceStub(self.channel)
        stream, _ = self._open_telemetry(pb.Settings(client_type=pb.ClientType.PRODUCER,
                                                     publishing=pb.Publishing(topics=[pb.Resource(name="KA")])))
        await self._call(next, stream)
        return proxy

    def _stream_open(self) -> bool:
        assert self.service.messaging is not None
        channel = self.service.messaging._channels.get(CLIENT_ID)
        return channel is not None and channel.writable

    async def test_silent_client_loses_its_stream(self) -> None:
        """Pings the client cannot answer close its connection: its Telemetry stream ends."""
        proxy = await self._through_proxy()
        self.assertTrue(self._stream_open())
        proxy.frozen = True
        await self._until(lambda: not self._stream_open(), seconds=10)

    async def test_idle_live_client_keeps_its_stream(self) -> None:
        """A client that answers the pings keeps an idle stream over many ping intervals."""
        await self._through_proxy()
        await deferLater(reactor, 2.0, lambda: None)
        self.assertTrue(self._stream_open())
