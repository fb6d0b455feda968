"""The zope interfaces that tie rocketpy's layers together."""

from __future__ import annotations

from zope.interface import Attribute, Interface


class IChannel(Interface):
    """One remoting connection, as a processor or listener sees it."""

    remote_address = Attribute("The peer as an 'ip:port' string.")

    def invoke_sync(request, timeout):  # type: ignore[no-untyped-def]
        """Send a request to the peer; Deferred fires with its response."""

    def invoke_oneway(request):  # type: ignore[no-untyped-def]
        """Send a request that gets no response; Deferred fires once written."""

    def close():  # type: ignore[no-untyped-def]
        """Close the connection."""


class IRequestProcessor(Interface):
    """Handles the requests of the codes it is registered for."""

    def process_request(channel, request):  # type: ignore[no-untyped-def]
        """Return a response RemotingCommand, a Deferred of one, or None (no reply).

        An exception (or failed Deferred) becomes a SYSTEM_ERROR response.
        """

    def reject_request():  # type: ignore[no-untyped-def]
        """True when the processor is overloaded: the server answers SYSTEM_BUSY."""


class IBatchRequestProcessor(IRequestProcessor):
    """A reactor-thread processor that also takes the run of requests for it that arrived
    together (one read of a connection) in one call: per-request work paid once per run."""

    def process_requests(channel, requests):  # type: ignore[no-untyped-def]
        """Return one result per request, in order (a response RemotingCommand, or None for
        no reply), or a Deferred of that list.

        An exception (or failed Deferred) becomes a SYSTEM_ERROR response to each request.
        """


class IRPCHook(Interface):
    """Called around every request, on client and server (ACL signing and checking)."""

    def before_request(remote_address, request):  # type: ignore[no-untyped-def]
        """Before a request is sent (client) or processed (server)."""

    def after_response(remote_address, request, response):  # type: ignore[no-untyped-def]
        """After a response was received (client) or produced (server)."""


class IChannelEventListener(Interface):
    """Told about CONNECT, CLOSE, IDLE and EXCEPTION events of remoting channels."""

    def on_channel_connect(remote_address, channel):  # type: ignore[no-untyped-def]
        pass

    def on_channel_close(remote_address, channel):  # type: ignore[no-untyped-def]
        pass

    def on_channel_idle(remote_address, channel):  # type: ignore[no-untyped-def]
        pass

    def on_channel_exception(remote_address, channel):  # type: ignore[no-untyped-def]
        pass
