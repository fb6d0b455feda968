"""Request checks the RPCs share, with the Java proxy's codes and messages (``GrpcValidator``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, succeed

from rocketpy.common.topic import send_topic_problem
from rocketpy.grpc import convert
from rocketpy.grpc import settings as defaults
from rocketpy.grpc.status import GrpcError
from rocketpy.grpc.v2 import definition_pb2 as pb


@dataclass(frozen=True, slots=True)
class PeerChannel:
    """What the broker's processors read of a connection: the peer address."""

    remote_address: str


def topic_name(resource: pb.Resource) -> str:
    """The topic's name. :raises GrpcError: ILLEGAL_TOPIC."""
    name = resource.name
    problem = send_topic_problem(name) if name else "topic name cannot be empty"
    if problem is not None:
        raise GrpcError(pb.Code.ILLEGAL_TOPIC, problem)
    return name


def check_group(group: pb.Resource) -> None:
    """:raises GrpcError: ILLEGAL_CONSUMER_GROUP."""
    if not group.name or send_topic_problem(group.name) is not None:
        raise GrpcError(pb.Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {group.name!r} is illegal")


def polling_ms(request: Any, remaining_ms: int | None) -> int:
    """The long polling time of a ReceiveMessage or PullMessage: the request's, within 5..20 s and the
    call's deadline (``GrpcValidator.reasonableLongPollingTimeout``).

    :raises GrpcError: ILLEGAL_POLLING_TIME when under 5 s of the deadline remain.
    """
    poll_ms = (convert.duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout")
               else defaults.MAX_LONG_POLLING_MS)
    poll_ms = min(max(poll_ms, defaults.MIN_LONG_POLLING_MS), defaults.MAX_LONG_POLLING_MS)
    if remaining_ms is not None and poll_ms > remaining_ms:
        if remaining_ms < defaults.MIN_LONG_POLLING_MS:
            raise GrpcError(pb.Code.ILLEGAL_POLLING_TIME, "The deadline time remaining is not enough for "
                                                          "polling, please check network condition")
        poll_ms = remaining_ms
    return poll_ms


def check_broker(name: str, served: str) -> None:
    """A queue of another broker is not served here (the 5.x clients reach each queue's broker at its
    endpoint, which QueryRoute gave them; the Java proxy in local mode would use its own broker instead).

    :raises GrpcError: BAD_REQUEST.
    """
    if name and name != served:
        raise GrpcError(pb.Code.BAD_REQUEST, f"this endpoint serves broker {served}, not {name}: "
                                             f"receive from {name}'s endpoint, as QueryRoute gives it")


def as_deferred(result: Any) -> Deferred[Any]:
    """A processor's answer (a response or a Deferred of one) as a Deferred."""
    return result if isinstance(result, Deferred) else succeed(result)
