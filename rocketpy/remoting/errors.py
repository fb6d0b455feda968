"""The errors of the remoting layer, modelled on RocketMQ's ``RemotingException`` family.

No Twisted import: the codec raises :class:`ProtocolError` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketpy.remoting.command import RemotingCommand


class RemotingError(Exception):
    """Base class of every remoting failure."""


class ProtocolError(RemotingError):
    """A frame could not be decoded (or a command could not be encoded)."""


class MalformedRequestError(ProtocolError):
    """A whole frame that says which request it is (code, opaque, flag) but whose header is
    invalid, such as a field that is not UTF-8 text: the request is answered SYSTEM_ERROR with
    this message, and the connection keeps serving.

    :ivar command: the request as far as it could be read (no fields, no body).
    """

    def __init__(self, command: RemotingCommand, problem: str) -> None:
        super().__init__(problem)
        self.command = command


class RemotingConnectError(RemotingError):
    """No connection to the address could be made, or the client is closed."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"connect to {address} failed: {reason}")
        self.address = address


class RemotingConnectionLost(RemotingConnectError):
    """The connection closed while the request was pending.

    Every request pending on the connection fails at once with this error.
    """

    def __init__(self, address: str, reason: str) -> None:
        RemotingError.__init__(self, f"connection to {address} lost: {reason}")
        self.address = address


class RemotingSendRequestError(RemotingError):
    """The request could not be written (encoding failed or the channel is closing)."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the request's timeout."""


class RemotingTooMuchRequestError(RemotingError):
    """The async or oneway permits are exhausted."""


class RequestRefused(RemotingError):
    """An RPC hook refuses a request (an ACL check): it is answered ``code`` with ``remark``,
    logged as one warning line, and only that request is affected."""

    def __init__(self, remark: str, code: int = 1) -> None:
        super().__init__(remark)
        self.remark = remark
        self.code = code
