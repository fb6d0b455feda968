"""Subscriptions (tag or SQL92 selectors) and what a consumer does with pulled messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from rocketpy.common.message import MessageConst, MessageExt, java_hash
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """Which messages of a topic a consumer wants: Java's ``MessageSelector``.

    SQL92 selectors are evaluated by the broker against the message properties (``TAGS`` among
    them); the broker must run with ``--enable-property-filter``.
    """

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """E.g. ``MessageSelector.by_sql("a > 5 AND color = 'red'")``."""
        return cls(EXPRESSION_SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None = SUB_ALL) -> MessageSelector:
        """``"*"`` (or None) for every message, ``"TagA || TagB"`` for some tags."""
        return cls(EXPRESSION_TAG, tag or SUB_ALL)


Selector = Union[str, MessageSelector, None]


@dataclass(slots=True)
class SubscriptionData:
    """A topic and its tag expression, as the heartbeat and PULL_MESSAGE carry it."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG

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


def build_subscription(topic: str, selector: Selector, version_ms: int) -> SubscriptionData:
    """Parse ``"TagA || TagB"``; empty or ``*`` subscribes to everything; a :class:`MessageSelector`
    of SQL92 is passed to the broker as is (no client-side re-filter).

    :param version_ms: the subscription version (Java uses the creation time).
    """
    if isinstance(selector, MessageSelector):
        if selector.expression_type.upper() != EXPRESSION_TAG:
            return SubscriptionData(topic, selector.expression.strip(), [], [], version_ms, selector.expression_type)
        selector = selector.expression
    expression = (selector or "").strip()
    if not expression or expression == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, [], [], version_ms)
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return SubscriptionData(topic, expression, tags, [java_hash(t) for t in tags], version_ms)


def prepare_pulled(messages: list[MessageExt], sub: SubscriptionData) -> list[MessageExt]:
    """Java's ``processPullResult``: re-filter by tag (MIN_OFFSET/MAX_OFFSET were added as the
    pull response was decoded)."""
    return messages if sub.matches_all else [m for m in messages if sub.matches(m)]


def restore_retry_topic(msg: MessageExt, group: str) -> None:
    """A message redelivered through ``%RETRY%group`` gets its original topic back."""
    original = msg.properties.get(MessageConst.RETRY_TOPIC)
    if original and msg.topic == RETRY_GROUP_TOPIC_PREFIX + group:
        msg.topic = original


def client_msg_id(msg: MessageExt) -> str:
    """The id a user sees: UNIQ_KEY when set, else the broker's offset id."""
    return msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
