"""``Status`` messages and the remoting response code → v2 ``Code`` mapping of the Java proxy
(``ResponseBuilder.buildCode``)."""

from __future__ import annotations

from typing import Any, cast

from rocketpy.grpc.v2.definition_pb2 import Code, Status
from rocketpy.remoting.codes import ResponseCode

_FROM_REMOTING: dict[int, int] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
}


class GrpcError(Exception):
    """A request the endpoint answers with a non-OK ``Status`` (``code``, ``message``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str | None = None) -> Status:
    """A ``Status``; the message defaults to the code's name, as the Java proxy writes it."""
    return Status(code=cast(Any, code), message=Code.Name(code) if message is None else message)


def ok() -> Status:
    return status(Code.OK)


def from_remoting(code: int, remark: str | None) -> Status:
    """The Status of a remoting response code (INTERNAL_SERVER_ERROR for unmapped codes)."""
    return status(_FROM_REMOTING.get(code, Code.INTERNAL_SERVER_ERROR), remark or str(code))


def overall(codes: set[int]) -> Status:
    """The RPC status over per-entry codes: the one code, or MULTIPLE_RESULTS."""
    if len(codes) == 1:
        return status(next(iter(codes)))
    return status(Code.MULTIPLE_RESULTS) if codes else status(Code.INTERNAL_SERVER_ERROR, "no entry")
