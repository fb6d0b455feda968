"""The remoting client: one connection per ``host:port``, opened on demand.

Timeouts are seconds (RocketMQ's Java API takes milliseconds). Requests are
mutated on send: ``opaque`` is assigned, ``serialize_type`` and ``language``
are the client's, and oneway requests get the oneway flag.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.internet.protocol import Factory
from twisted.python.failure import Failure

from rocketpy.interfaces import IChannelEventListener, IRPCHook
from rocketpy.remoting.codes import LanguageCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectError, RemotingTimeoutError, RemotingTooMuchRequestError
from rocketpy.remoting.node import RemotingNode
from rocketpy.remoting.pending import Release, Then, call_then
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.tls import ClientTLS

#: Makes the endpoint for a ``"host:port"`` address (tests pass in-memory ones).
EndpointFactory = Callable[[str], IStreamClientEndpoint]


class Permits:
    """A counting semaphore that never waits: :meth:`try_acquire` says yes or no."""

    def __init__(self, count: int) -> None:
        self.available = count

    def try_acquire(self) -> bool:
        """Take a permit if one is free."""
        if self.available <= 0:
            return False
        self.available -= 1
        return True

    def release(self, result: Any = None) -> Any:
        """Give a permit back; returns *result* so it can sit in a callback chain."""
        self.available += 1
        return result


class RemotingClient(RemotingNode):
    """Requests to many addresses, each over its own lazily opened channel.

    Requests the peer sends on those channels (NOTIFY_CONSUMER_IDS_CHANGED,
    CHECK_TRANSACTION_STATE, ...) go to the processors registered with
    :meth:`register_processor`, as on a server.
    """

    def __init__(
        self,
        reactor: IReactorTime,
        *,
        connect_timeout: float = 3.0,
        idle_timeout: float | None = 120.0,
        rpc_hooks: Iterable[IRPCHook] = (),
        listeners: Iterable[IChannelEventListener] = (),
        async_permits: int = 65535,
        oneway_permits: int = 65535,
        serialize_type: int = SerializeType.JSON,
        language: str = LanguageCode.PYTHON.name,
        endpoint_factory: EndpointFactory | None = None,
        scan_interval: float = 1.0,
        close_channel_on_timeout: bool = True,
        tls: ClientTLS | None = None,
    ) -> None:
        """
        :param reactor: clock and TCP connector.
        :param connect_timeout: seconds a connection attempt may take.
        :param async_permits: most :meth:`invoke_async` requests in flight.
        :param oneway_permits: most :meth:`invoke_oneway` requests not yet written.
        :param serialize_type: header encoding of every request sent.
        :param language: the ``language`` every request announces.
        :param endpoint_factory: ``"host:port"`` -> client endpoint; TCP by default.
        :param close_channel_on_timeout: close the channel an :meth:`invoke_sync`
            timed out on, so the next call reconnects (Java's ``clientCloseSocketIfTimeout``).
        :param tls: connect with TLS (the default endpoints only; doc/security.md).

        The other keywords are :class:`RemotingNode`'s.
        """
        super().__init__(
            reactor, idle_timeout=idle_timeout, rpc_hooks=rpc_hooks, listeners=listeners, scan_interval=scan_interval
        )
        self._connect_timeout = connect_timeout
        self._async_permits = Permits(async_permits)
        self._oneway_permits = Permits(oneway_permits)
        self._serialize_type = serialize_type
        self._language = language
        self._endpoint_factory = endpoint_factory or self._tcp_endpoint
        self._by_address: dict[str, RemotingProtocol] = {}
        self._address_of: dict[RemotingProtocol, str] = {}
        self._connecting: dict[str, list[Deferred[RemotingProtocol]]] = {}
        self._attempts: dict[str, Deferred[Any]] = {}
        self._closed = False
        self._close_on_timeout = close_channel_on_timeout
        self._tls = tls

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        """Send *request* to *address*; fires with the response.

        Fails with :class:`RemotingConnectError`, :class:`RemotingConnectionLost`,
        :class:`RemotingSendRequestError` or :class:`RemotingTimeoutError`.
        The timeout counts from this call, connecting included. On a timeout the
        channel is closed (unless ``close_channel_on_timeout`` is false): its other
        pending requests fail with :class:`RemotingConnectionLost`.
        """
        channel = self._by_address.get(address)
        if channel is not None and not channel.closing:  # the hot path, as _invoke's
            request.serialize_type = self._serialize_type
            request.language = self._language
            return channel.invoke_sync(request, timeout, None, self._close_on_timeout)
        return self._invoke(address, request, timeout, None, self._close_on_timeout)

    def invoke_async(
        self,
        address: str,
        request: RemotingCommand,
        timeout: float,
        callback: Callable[[RemotingCommand | Failure], Any] | None = None,
    ) -> Deferred[Any]:
        """Like :meth:`invoke_sync`, bounded by the async permits.

        :param callback: called exactly once with the response or the Failure; the
            Deferred then fires with what it returns.
        :return: fails at once with :class:`RemotingTooMuchRequestError` when no permit is free.
        """
        if not self._async_permits.try_acquire():
            return fail(RemotingTooMuchRequestError(f"{self._async_permits.available} async permits left"))
        d: Deferred[Any] = self._invoke(address, request, timeout, self._async_permits.release, False)
        if callback is not None:
            d.addBoth(callback)
        return d

    def invoke_then(
        self, address: str, request: RemotingCommand, timeout: float, then: Then, args: tuple[Any, ...] = (),
        bounded: bool = False,
    ) -> None:
        """:meth:`invoke_sync` (or with *bounded*, :meth:`invoke_async`) without a Deferred:
        ``then(response_or_failure, *args)`` is called exactly once, at once when the request fails
        before it is sent; an exception it raises is logged. For callers that would only add a
        callback to the Deferred (the producer's sends)."""
        release: Release | None
        if bounded:
            permits = self._async_permits
            if not permits.try_acquire():
                call_then(Failure(RemotingTooMuchRequestError(f"{permits.available} async permits left")), then, args)
                return
            release, close = permits.release, False
        else:
            release, close = None, self._close_on_timeout
        channel = self._by_address.get(address)
        if channel is not None and not channel.closing:  # the hot path, as _invoke's
            request.serialize_type = self._serialize_type
            request.language = self._language
            channel.invoke_then(request, timeout, then, args, release, close)
        else:
            self._invoke(address, request, timeout, release, close).addBoth(call_then, then, args)

    def invoke_oneway(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[None]:
        """Send *request* with the oneway flag; fires once written, bounded by the oneway permits."""
        if not self._oneway_permits.try_acquire():
            return fail(RemotingTooMuchRequestError(f"{self._oneway_permits.available} oneway permits left"))
        self._stamp(request)
        channel = self._by_address.get(address)
        if channel is not None and not channel.closing:
            d = channel.invoke_oneway(request)
        else:
            d = Deferred.fromCoroutine(self._oneway_when_connected(address, request, timeout))
        return d.addBoth(self._oneway_permits.release)

    def close(self) -> Deferred[None]:
        """Close every connection and refuse new requests; fires once all are closed."""
        self._closed = True
        for attempt in list(self._attempts.values()):
            attempt.cancel()
        return self.close_channels()

    def channel_closed(self, channel: RemotingProtocol) -> None:
        address = self._address_of.pop(channel, None)
        if address is not None and self._by_address.get(address) is channel:
            del self._by_address[address]  # the next request reconnects
        super().channel_closed(channel)

    # internals

    def _stamp(self, request: RemotingCommand) -> None:
        request.serialize_type = self._serialize_type
        request.language = self._language

    def _invoke(
        self, address: str, request: RemotingCommand, timeout: float, release: Release | None, close_on_timeout: bool
    ) -> Deferred[RemotingCommand]:
        request.serialize_type = self._serialize_type
        request.language = self._language
        channel = self._by_address.get(address)
        if channel is not None and not channel.closing:  # the hot path: no coroutine
            return channel.invoke_sync(request, timeout, release, close_on_timeout)
        return Deferred.fromCoroutine(
            self._invoke_when_connected(address, request, timeout, release, close_on_timeout)
        )

    async def _invoke_when_connected(
        self, address: str, request: RemotingCommand, timeout: float, release: Release | None, close_on_timeout: bool
    ) -> RemotingCommand:
        start = self._reactor.seconds()
        try:
            channel = await self._channel(address)
            remaining = timeout - (self._reactor.seconds() - start)
            if remaining <= 0:
                error = RemotingTimeoutError(f"connecting to {address} used up the {timeout} s timeout")
                if close_on_timeout and not channel.closing:  # as Java: its check comes after getting the channel
                    self.log.warn("closing channel {peer}: connecting used up a request's timeout", peer=address)
                    channel.close()
                raise error
        except BaseException:
            if release is not None:
                release()
            raise
        return await channel.invoke_sync(request, remaining, release, close_on_timeout)

    async def _oneway_when_connected(self, address: str, request: RemotingCommand, timeout: float) -> None:
        channel, _ = await self._connect_within(address, timeout)
        await channel.invoke_oneway(request)

    async def _connect_within(self, address: str, timeout: float) -> tuple[RemotingProtocol, float]:
        """The channel to *address* and what is left of *timeout* once connected."""
        start = self._reactor.seconds()
        channel = await self._channel(address)
        remaining = timeout - (self._reactor.seconds() - start)
        if remaining <= 0:
            raise RemotingTimeoutError(f"connecting to {address} used up the {timeout} s timeout")
        return channel, remaining

    def _channel(self, address: str) -> Deferred[RemotingProtocol]:
        """The connected channel to *address*; concurrent callers share one attempt."""
        channel = self._by_address.get(address)
        if channel is not None and not channel.closing:
            return succeed(channel)
        if self._closed:
            return fail(RemotingConnectError(address, "client closed"))
        d: Deferred[RemotingProtocol] = Deferred()
        waiters = self._connecting.setdefault(address, [])
        waiters.append(d)
        if len(waiters) == 1:
            self._connect(address)
        return d

    def _connect(self, address: str) -> None:
        try:
            endpoint = self._endpoint_factory(address)
        except Exception:
            self._connect_done(Failure(), address)
            return
        factory = Factory.forProtocol(self.build_channel)
        attempt = endpoint.connect(factory)
        if not attempt.called:
            self._attempts[address] = attempt
        attempt.addTimeout(self._connect_timeout, self._reactor)
        attempt.addBoth(self._connect_done, address)

    def _connect_done(self, result: Any, address: str) -> None:
        self._attempts.pop(address, None)
        waiters = self._connecting.pop(address, [])
        error: Exception | None = None
        if isinstance(result, Failure):
            error = RemotingConnectError(address, result.getErrorMessage())
        elif self._closed:
            result.close()
            error = RemotingConnectError(address, "client closed")
        elif result not in self._channels:
            error = RemotingConnectError(address, "closed while connecting")
        else:
            self._by_address[address] = result
            self._address_of[result] = address
        for d in waiters:
            if error is None:
                d.callback(result)
            else:
                d.errback(error)

    def _tcp_endpoint(self, address: str) -> IStreamClientEndpoint:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"not a host:port address: {address!r}")
        host = host.strip("[]")
        endpoint: IStreamClientEndpoint
        if isIPAddress(host):
            endpoint = TCP4ClientEndpoint(self._reactor, host, int(port), timeout=self._connect_timeout)
        elif isIPv6Address(host):
            endpoint = TCP6ClientEndpoint(self._reactor, host, int(port), timeout=self._connect_timeout)
        else:
            endpoint = HostnameEndpoint(self._reactor, host, int(port), timeout=self._connect_timeout)
        if self._tls is not None:
            endpoint = wrapClientTLS(self._tls.creator(host), endpoint, clock=self._reactor)
        return endpoint
