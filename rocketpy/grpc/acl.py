"""Plain ACL on the gRPC endpoint, as the RocketMQ 5.x proxy checks it (doc/security.md).

The 5.x clients sign no request content: ``authorization`` is
``MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of the
x-mq-date-time value>``. Java's ``AuthorizationHeader`` turns the hex into Base64 and checks it as a
remoting signature over the date-time; so do we, through :func:`~rocketpy.acl.plain.check_access` (one
permission check for both protocols). Which resource each RPC needs is Java's
``PlainAccessResource.parse(GeneratedMessageV3, AuthenticationHeader)``, groups as ``%RETRY%group``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from rocketpy.acl.plain import PUB, SUB, AclForbidden, AclRefused, PlainAcl, check_access
from rocketpy.common.topic import retry_topic
from rocketpy.grpc.status import GrpcError
from rocketpy.grpc.v2.definition_pb2 import Code

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
#: no remoting request code is an admin one on the gRPC side: the v2 API has no admin RPC
_NO_ADMIN_CODES: frozenset[int] = frozenset()


def parse_authorization(header: str) -> tuple[str | None, str | None]:
    """``(access_key, Base64 signature)`` of an ``authorization`` value.

    :raises AclRefused: a header Java's ``AuthorizationHeader`` cannot read either.
    """
    method, sep, rest = header.partition(" ")
    if not sep or not method:
        raise AclRefused("authorization header is incorrect")
    access_key = signature = None
    for item in rest.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq:
            raise AclRefused(f"authorization item is not key=value: {item.strip()!r}")
        if key == "Credential":
            access_key = value.split("/")[0]
        elif key == "Signature":
            try:
                signature = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except ValueError:
                raise AclRefused("authorization Signature is not hex") from None
    return access_key, signature


def _topic(resource: Any) -> str | None:
    return resource.name or None


def _group(resource: Any) -> str | None:
    return retry_topic(resource.name) if resource.name else None


def _put(needs: dict[str, int], name: str | None, perm: int) -> None:
    if name is not None:
        needs[name] = perm


def needed_resources(request: Any) -> dict[str, int]:
    """Topic or ``%RETRY%group`` → the permission the v2 *request* needs (Java's table; the rest,
    QueryRoute and QueryAssignment among them, need only a known signature)."""
    needs: dict[str, int] = {}
    kind = request.DESCRIPTOR.name
    if kind == "SendMessageRequest":
        topics = {message.topic.name for message in request.messages}
        if len(topics) > 1:
            raise AclForbidden("SendMessageRequest, messages' topic is not consistent")
        for topic in topics:
            _put(needs, topic or None, PUB)
    elif kind in ("ReceiveMessageRequest", "PullMessageRequest", "UpdateOffsetRequest", "GetOffsetRequest"):
        _put(needs, _group(request.group), SUB)  # the offset RPCs as the broker's QUERY/UPDATE_CONSUMER_OFFSET
        _put(needs, _topic(request.message_queue.topic), SUB)
    elif kind == "QueryOffsetRequest":
        _put(needs, _topic(request.message_queue.topic), SUB)
    elif kind in ("AckMessageRequest", "ChangeInvisibleDurationRequest", "ForwardMessageToDeadLetterQueueRequest"):
        _put(needs, _group(request.group), SUB)
        _put(needs, _topic(request.topic), SUB)
    elif kind in ("HeartbeatRequest", "NotifyClientTerminationRequest"):
        _put(needs, _group(request.group), SUB)
    elif kind in ("EndTransactionRequest", "RecallMessageRequest"):
        _put(needs, _topic(request.topic), PUB)
    elif kind == "TelemetryCommand" and request.WhichOneof("command") == "settings":
        settings = request.settings
        if settings.HasField("publishing"):
            for topic in settings.publishing.topics:
                _put(needs, _topic(topic), PUB)
        if settings.HasField("subscription"):
            _put(needs, _group(settings.subscription.group), SUB)
            for entry in settings.subscription.subscriptions:
                _put(needs, _topic(entry.topic), SUB)
    return needs


class GrpcAccessCheck:
    """Checks one v2 request against the :class:`PlainAcl` that ``current()`` returns (the broker's
    validator swaps it on reload)."""

    def __init__(self, current: Callable[[], PlainAcl]) -> None:
        self._current = current

    def __call__(self, metadata: Mapping[str, Any], host: str, request: Any) -> None:
        """:raises GrpcError: UNAUTHORIZED (who sends) or FORBIDDEN (what they may do), Java's message."""
        try:
            header, date_time = metadata.get(AUTHORIZATION), metadata.get(DATE_TIME)
            access_key, signature = parse_authorization(str(header)) if header is not None else (None, None)
            content = (str(date_time).encode("utf-8", "surrogatepass"),) if date_time is not None else None
            check_access(self._current(), host, 0, access_key, signature, content,
                         lambda: needed_resources(request), _NO_ADMIN_CODES)
        except AclForbidden as e:
            raise GrpcError(Code.FORBIDDEN, e.message) from None
        except AclRefused as e:
            raise GrpcError(Code.UNAUTHORIZED, e.message) from None
        except (binascii.Error, UnicodeError) as e:
            raise GrpcError(Code.UNAUTHORIZED, f"cannot read the credentials: {e}") from None
