"""Test doubles for the remoting tests: processors, hooks, listeners, an in-memory endpoint."""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IProtocolFactory, IStreamClientEndpoint
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.test import iosim
from zope.interface import implementer

from rocketpy.interfaces import IChannelEventListener, IRequestProcessor, IRPCHook
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.reactor import LeanEPollReactor
from rocketpy.remoting.server import RemotingServer

ADDRESS = "127.0.0.1:10911"
Respond = Callable[[Any, RemotingCommand], Any]


def echo(channel: Any, request: RemotingCommand) -> RemotingCommand:
    """Answer SUCCESS with the request's body and ext fields."""
    return request.make_response(0, ext_fields=dict(request.ext_fields), body=request.body)


@implementer(IRequestProcessor)
class RecordingProcessor:
    """Records requests and answers with ``respond(channel, request)``."""

    def __init__(self, respond: Respond = echo, busy: bool = False) -> None:
        self.respond = respond
        self.busy = busy
        self.requests: list[tuple[Any, RemotingCommand]] = []

    def reject_request(self) -> bool:
        return self.busy

    def process_request(self, channel: Any, request: RemotingCommand) -> Any:
        self.requests.append((channel, request))
        return self.respond(channel, request)


@implementer(IRPCHook)
class RecordingHook:
    """Records ``("before", address, code)`` and ``("after", address, code, response code)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        self.calls.append(("before", remote_address, request.code))

    def after_response(self, remote_address: str, request: RemotingCommand, response: RemotingCommand) -> None:
        self.calls.append(("after", remote_address, request.code, response.code))


class DenyingHook(RecordingHook):
    """Refuses every request before it is sent or processed (an ACL check failing)."""

    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        raise PermissionError("denied")


def fail_processing(channel: Any, request: RemotingCommand) -> RemotingCommand:
    """A processor body that raises ZeroDivisionError."""
    raise ZeroDivisionError("division by zero")


@implementer(IChannelEventListener)
class RecordingListener:
    """Records ``(event, remote_address)`` pairs."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_channel_connect(self, remote_address: str, channel: Any) -> None:
        self.events.append(("connect", remote_address))

    def on_channel_close(self, remote_address: str, channel: Any) -> None:
        self.events.append(("close", remote_address))

    def on_channel_idle(self, remote_address: str, channel: Any) -> None:
        self.events.append(("idle", remote_address))

    def on_channel_exception(self, remote_address: str, channel: Any) -> None:
        self.events.append(("exception", remote_address))


@implementer(IStreamClientEndpoint)
class IOSimEndpoint:
    """Connects client protocols to a server factory in memory (``twisted.test.iosim``).

    With ``hold`` set, ``connect`` returns an unfired Deferred until :meth:`complete`.
    """

    def __init__(self, server_factory: Factory, clock: Clock) -> None:
        self.server_factory = server_factory
        self.clock = clock
        self.pumps: list[iosim.IOPump] = []
        self.hold = False
        self.held: list[tuple[IProtocolFactory, Deferred[Any]]] = []
        self.attempts = 0

    def connect(self, factory: IProtocolFactory) -> Deferred[Any]:
        self.attempts += 1
        if self.hold:
            d: Deferred[Any] = Deferred()
            self.held.append((factory, d))
            return d
        return succeed(self._connect(factory))

    def complete(self) -> None:
        """Connect every held attempt."""
        held, self.held = self.held, []
        for factory, d in held:
            d.callback(self._connect(factory))

    def flush(self) -> None:
        """Move all bytes (and disconnects) between every connected pair."""
        for pump in self.pumps:
            pump.flush()

    def _connect(self, factory: IProtocolFactory) -> Any:
        port = 50000 + len(self.pumps)
        client = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 10911))
        server = self.server_factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", port))
        server_io = iosim.FakeTransport(
            server, True, IPv4Address("TCP", "127.0.0.1", 10911), IPv4Address("TCP", "127.0.0.1", port)
        )
        client_io = iosim.FakeTransport(
            client, False, IPv4Address("TCP", "127.0.0.1", port), IPv4Address("TCP", "127.0.0.1", 10911)
        )
        self.pumps.append(iosim.connect(server, server_io, client, client_io, greet=False, clock=self.clock))
        return client


class ThenClient(RemotingClient):
    """``invoke_sync`` and ``invoke_async`` made of ``invoke_then`` (``then`` a Deferred's ``callback``,
    which takes a Failure as ``errback`` does): the tests of the Deferred calls check it too."""

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        d: Deferred[RemotingCommand] = Deferred()
        self.invoke_then(address, request, timeout, d.callback)
        return d

    def invoke_async(self, address: str, request: RemotingCommand, timeout: float,
                     callback: Callable[[Any], Any] | None = None) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.invoke_then(address, request, timeout, d.callback, (), bounded=True)
        return d if callback is None else d.addBoth(callback)


class Pair:
    """A RemotingServer and a RemotingClient joined by an :class:`IOSimEndpoint`, on one Clock."""

    def __init__(self, server_kwargs: dict[str, Any] | None = None, client_class: type[RemotingClient] = RemotingClient,
                 **client_kwargs: Any) -> None:
        self.clock = Clock()
        self.server = RemotingServer(self.clock, **(server_kwargs or {}))
        self.endpoint = IOSimEndpoint(self.server.factory(), self.clock)
        self.client = client_class(self.clock, endpoint_factory=lambda address: self.endpoint, **client_kwargs)

    def call(self, code: int, timeout: float = 3.0, **kwargs: Any) -> Deferred[RemotingCommand]:
        """``invoke_sync`` a new request of *code*, then move the bytes."""
        d = self.client.invoke_sync(ADDRESS, RemotingCommand.request(code, **kwargs), timeout)
        self.endpoint.flush()
        return d

    def client_channel(self) -> RemotingProtocol:
        """The client's channel to :data:`ADDRESS`."""
        (channel,) = self.client.channels
        return channel

    def server_channel(self) -> RemotingProtocol:
        """The server's only channel."""
        (channel,) = self.server.channels
        return channel


class PythonLeanEPollReactor(LeanEPollReactor):
    """The lean reactor on its Python turn, even where the C one (rocketpy/_speedups_reactor.h) is built
    (tests/remoting/test_reactor.py runs Twisted's reactor tests on both)."""

    _compiled = None
