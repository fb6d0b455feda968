"""Subscriptions (tag expressions) and what a consumer does with pulled messages."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from rocketpy.common.message import MessageConst, MessageExt, MessageSysFlag, java_hash
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX

SUB_ALL = "*"
#: Bits 8-10 of sysFlag name the compression (4.9.4+); 0 and 3 are zlib.
_COMPRESSION_TYPE_MASK = 0x700
_ZLIB_TYPES = (0x000, 0x300)


class DecompressionError(ValueError):
    """A compressed body that cannot be inflated (unknown codec or corrupt)."""


@dataclass(slots=True)
class SubscriptionData:
    """A topic and its tag expression, as the heartbeat and PULL_MESSAGE carry it."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"

    @property
    def matches_all(self) -> bool:
        return not self.tags_set or SUB_ALL in self.tags_set

    def matches(self, msg: MessageExt) -> bool:
        """The client-side re-filter: by tag string, never by hash."""
        return self.matches_all or msg.properties.get(MessageConst.TAGS) in self.tags_set

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": self.code_set,
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags_set,
            "topic": self.topic,
        }


def build_subscription(topic: str, expression: str | None, version_ms: int) -> SubscriptionData:
    """Parse ``"TagA || TagB"``; empty or ``*`` subscribes to everything.

    :param version_ms: the subscription version (Java uses the creation time).
    """
    expression = (expression or "").strip()
    if not expression or expression == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, [], [], version_ms)
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return SubscriptionData(topic, expression, tags, [java_hash(t) for t in tags], version_ms)


def inflate_body(msg: MessageExt) -> None:
    """Inflate a compressed body in place and clear the compressed flag.

    :raises DecompressionError: for LZ4/ZSTD bodies or corrupt data.
    """
    if not msg.sys_flag & MessageSysFlag.COMPRESSED:
        return
    kind = msg.sys_flag & _COMPRESSION_TYPE_MASK
    if kind not in _ZLIB_TYPES:
        raise DecompressionError(f"compression type {kind >> 8} is not supported (only zlib)")
    try:
        msg.body = zlib.decompress(msg.body)
    except zlib.error as e:
        raise DecompressionError(f"corrupt compressed body: {e}") from None
    msg.sys_flag &= ~(MessageSysFlag.COMPRESSED | _COMPRESSION_TYPE_MASK)


def prepare_pulled(
    messages: list[MessageExt], queue: MessageQueue, sub: SubscriptionData, min_offset: int, max_offset: int
) -> list[MessageExt]:
    """Java's ``processPullResult``: re-filter by tag and add MIN_OFFSET/MAX_OFFSET."""
    kept = messages if sub.matches_all else [m for m in messages if sub.matches(m)]
    low, high = str(min_offset), str(max_offset)
    for m in kept:
        m.properties[MessageConst.MIN_OFFSET] = low
        m.properties[MessageConst.MAX_OFFSET] = high
    return kept


def restore_retry_topic(msg: MessageExt, group: str) -> None:
    """A message redelivered through ``%RETRY%group`` gets its original topic back."""
    original = msg.properties.get(MessageConst.RETRY_TOPIC)
    if original and msg.topic == RETRY_GROUP_TOPIC_PREFIX + group:
        msg.topic = original


def client_msg_id(msg: MessageExt) -> str:
    """The id a user sees: UNIQ_KEY when set, else the broker's offset id."""
    return msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
