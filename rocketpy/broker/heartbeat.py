"""HEART_BEAT bodies: the client's producer and consumer data, parsed once (doc/wire.md §4).

Heartbeat bodies differ per client (doc/wire.md §4): the C++ client
sends enum ordinals and ``subVersion`` as a string, Java and ali-ons enum
names and numbers, and any list may be missing. Subscriptions keep the tag
*strings* — the C++ ``codeSet`` is ``[0]`` and is never used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

from rocketpy.broker.filter import EXPRESSION_TAG, SUB_ALL, is_tag_type, parse_tags
from rocketpy.common.errors import RequestError
from rocketpy.common.fastjson import loads_body
from rocketpy.common.message import java_hash


class ConsumeType(IntEnum):
    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1


class MessageModel(IntEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(IntEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


_E = TypeVar("_E", bound=IntEnum)


class HeartbeatError(RequestError):
    """A HEART_BEAT body that cannot be understood."""


def parse_enum(kind: type[_E], value: Any, default: _E) -> _E:
    """An enum from its name (Java, ali-ons) or ordinal (C++, number or digits); ``default`` when absent.

    :raises HeartbeatError: for an unknown name or ordinal.
    """
    if value is None or value == "":
        return default
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
            return kind(int(value))
        return kind[str(value)]
    except (KeyError, ValueError):
        raise HeartbeatError(f"unknown {kind.__name__} {value!r}") from None


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic a consumer group subscribes to, as its latest heartbeat said."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG

    @classmethod
    def build(
        cls, topic: str, sub_string: str | None, sub_version: int = 0, expression_type: str | None = None
    ) -> SubscriptionData:
        """Java ``FilterAPI.build``: tags split from a tag expression; an SQL92 one is kept whole."""
        if not is_tag_type(expression_type):
            return cls(topic, (sub_string or "").strip(), frozenset(), sub_version, str(expression_type))
        tags = parse_tags(sub_string)
        text = (sub_string or "").strip() if tags else SUB_ALL
        return cls(topic, text, tags, sub_version, expression_type or EXPRESSION_TAG)

    def to_json(self) -> dict[str, Any]:
        """The Java ``SubscriptionData`` shape, with codes recomputed from the tags."""
        tags = sorted(self.tags_set)
        return {
            "classFilterMode": False,
            "codeSet": [java_hash(t) for t in tags],
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": tags,
            "topic": self.topic,
        }


@dataclass(slots=True)
class ConsumerData:
    """One consumer group entry of a heartbeat."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass(slots=True)
class HeartbeatData:
    """A parsed HEART_BEAT body."""

    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise HeartbeatError(f"{key} is not a list of objects")
    return value


def _subscription(obj: dict[str, Any]) -> SubscriptionData:
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise HeartbeatError("subscription without topic")
    sub_string = obj.get("subString")
    if sub_string is None and obj.get("tagsSet"):
        sub_string = "||".join(str(t) for t in obj["tagsSet"])
    try:
        version = int(obj.get("subVersion") or 0)
    except (TypeError, ValueError):
        raise HeartbeatError(f"subVersion of {topic} is not a number: {obj.get('subVersion')!r}") from None
    kind = obj.get("expressionType")
    return SubscriptionData.build(
        topic, None if sub_string is None else str(sub_string), version, None if kind is None else str(kind)
    )


def parse_heartbeat(body: bytes) -> HeartbeatData:
    """Parse a HEART_BEAT body from any client.

    :raises HeartbeatError: when it is not JSON, lacks ``clientID`` or has wrong types.
    """
    try:
        obj = loads_body(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise HeartbeatError(f"heartbeat body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise HeartbeatError("heartbeat body is not a JSON object")
    client_id = obj.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise HeartbeatError("heartbeat without clientID")
    producers = [str(p["groupName"]) for p in _objects(obj, "producerDataSet") if p.get("groupName")]
    consumers = []
    for c in _objects(obj, "consumerDataSet"):
        group = c.get("groupName")
        if not isinstance(group, str) or not group:
            raise HeartbeatError("consumer data without groupName")
        consumers.append(
            ConsumerData(
                group,
                parse_enum(ConsumeType, c.get("consumeType"), ConsumeType.CONSUME_PASSIVELY),
                parse_enum(MessageModel, c.get("messageModel"), MessageModel.CLUSTERING),
                parse_enum(ConsumeFromWhere, c.get("consumeFromWhere"), ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
                [_subscription(s) for s in _objects(c, "subscriptionDataSet")],
                c.get("unitMode") in (True, "true", "1", 1),
            )
        )
    return HeartbeatData(client_id, producers, consumers)
