"""One routing table per server: each handler is registered with the node under its own code.

Modelled on AMP's ``CommandLocator``: an object that answers several request codes says which
of its methods answers which code (:meth:`~rocketpy.interfaces.ICommandLocator.responders`),
and :func:`register_responders` puts each method straight into the node's code table, wrapped in
a :class:`Responder` that turns bad input into an answer. The node's table is then the only
code → handler lookup; no processor dispatches a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from zope.interface import implementer

from rocketpy.common.fastjson import BodyError
from rocketpy.common.headers import HeaderError
from rocketpy.interfaces import IChannel, ICommandLocator, IRequestProcessor
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand

#: ``handler(channel, request)`` returns a response, a Deferred or coroutine of one, or None for no reply.
Handler = Callable[[IChannel, RemotingCommand], Any]


class RequestRefused(Exception):
    """A handler's refusal of a request: answered with ``code`` and ``remark``."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@implementer(IRequestProcessor)
class Responder:
    """One handler as the node sees it: a refusal, a header or a body it cannot read becomes
    the answer (SYSTEM_ERROR with the reason, or the refusal's code); any other exception is
    left to the node (SYSTEM_ERROR, logged)."""

    __slots__ = ("handler",)

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> Any:
        try:
            return self.handler(channel, request)
        except RequestRefused as e:
            return request.make_response(e.code, e.remark)
        except (HeaderError, BodyError) as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(e))


class Registry(Protocol):
    """Where responders go: a :class:`~rocketpy.remoting.node.RemotingNode`."""

    def register_processor(self, code: int, processor: IRequestProcessor) -> None: ...


def register_responders(node: Registry, locator: ICommandLocator) -> None:
    """Register each of ``locator``'s responders with ``node`` under its code."""
    for code, handler in locator.responders().items():
        node.register_processor(code, Responder(handler))
