"""The errors a client call can fail with.

Three families, as in RocketMQ:

- :class:`MQClientError`: the client refused or could not complete the call
  (invalid message, no route, no name server, every attempt failed); ``code``
  is a RocketMQ code (13 for a bad message, 10001-10005 as in
  ``ClientErrorCode``, or the broker's code after a failed retry loop).
- :class:`MQBrokerError`: the broker answered with an error code; carries the
  code, the broker's remark and the broker address that said it.
- Remoting errors (re-exported from :mod:`rocketpy.remoting.errors`): the
  network failed (connect, write, timeout, too many in-flight requests).
"""

from __future__ import annotations

from enum import IntEnum

from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.errors import (
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)

__all__ = [
    "ClientErrorCode",
    "MQError",
    "MQClientError",
    "MessageInvalidError",
    "NoNameServerError",
    "NoRouteError",
    "BrokerNotFoundError",
    "SendFailedError",
    "MQBrokerError",
    "RemotingError",
    "RemotingConnectError",
    "RemotingSendRequestError",
    "RemotingTimeoutError",
    "RemotingTooMuchRequestError",
]


class ClientErrorCode(IntEnum):
    """RocketMQ's client-side error codes (``ClientErrorCode``)."""

    CONNECT_BROKER_EXCEPTION = 10001
    ACCESS_BROKER_TIMEOUT = 10002
    BROKER_NOT_EXIST_EXCEPTION = 10003
    NO_NAME_SERVER_EXCEPTION = 10004
    NOT_FOUND_TOPIC_EXCEPTION = 10005
    REQUEST_TIMEOUT_EXCEPTION = 10006
    CREATE_REPLY_MESSAGE_EXCEPTION = 10007


class MQError(Exception):
    """Base class of the client's own errors (remoting errors are separate)."""


class MQClientError(MQError):
    """The client could not do what was asked.

    :ivar code: a RocketMQ response or client error code (-1 when none applies).
    :ivar message: what went wrong, in words.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


class MessageInvalidError(MQClientError):
    """The message failed validation (code 13 MESSAGE_ILLEGAL); it was never sent."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.MESSAGE_ILLEGAL, message)


class NoNameServerError(MQClientError):
    """No name server address is configured (code 10004)."""

    def __init__(self) -> None:
        super().__init__(ClientErrorCode.NO_NAME_SERVER_EXCEPTION, "no name server address is configured")


class NoRouteError(MQClientError):
    """No name server knows the topic, and no broker offers the TBW102 template (code 10005).

    :ivar topic: the topic without a route.
    """

    def __init__(self, topic: str, detail: str = "") -> None:
        text = f"no route info of topic {topic!r}"
        super().__init__(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION, f"{text} ({detail})" if detail else text)
        self.topic = topic


class BrokerNotFoundError(MQClientError):
    """The route names a broker with no known master address (code 10003).

    :ivar broker_name: the broker name that could not be resolved.
    """

    def __init__(self, broker_name: str) -> None:
        super().__init__(ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION, f"broker {broker_name!r} has no master address")
        self.broker_name = broker_name


class SendFailedError(MQClientError):
    """Every allowed send attempt failed with a retriable error.

    ``code`` follows Java: the broker's code for a broker error, 10001 for a
    connect error, 10002 for a timeout, 10003 for a missing broker. The last
    error is ``__cause__`` and :attr:`last_error`.

    :ivar attempts: how many attempts were made.
    :ivar last_error: the error of the last attempt.
    """

    def __init__(self, topic: str, attempts: int, elapsed: float, last_error: Exception) -> None:
        super().__init__(
            _code_of(last_error),
            f"send to topic {topic!r} failed {attempts} time(s) in {elapsed * 1000:.0f} ms: {last_error}",
        )
        self.attempts = attempts
        self.last_error = last_error


class MQBrokerError(MQError):
    """The broker answered a request with an error code.

    :ivar code: the response code (see :class:`rocketpy.remoting.codes.ResponseCode`).
    :ivar remark: the broker's explanation, if it gave one.
    :ivar broker_addr: the ``ip:port`` of the broker that answered.
    """

    def __init__(self, code: int, remark: str | None, broker_addr: str) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"broker {broker_addr} answered {name} ({code}): {remark or 'no remark'}")
        self.code = code
        self.remark = remark
        self.broker_addr = broker_addr


def _code_of(error: Exception) -> int:
    if isinstance(error, MQBrokerError):
        return error.code
    if isinstance(error, RemotingConnectError):
        return ClientErrorCode.CONNECT_BROKER_EXCEPTION
    if isinstance(error, RemotingTimeoutError):
        return ClientErrorCode.ACCESS_BROKER_TIMEOUT
    if isinstance(error, MQClientError):
        return ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION
    return -1
