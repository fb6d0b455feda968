"""Broker-side tag filtering built from a subscription string (``*``, ``TagA || TagB``).

The filter is always built from the tag *strings*: the C++ client's heartbeat
carries ``codeSet`` ``[0]`` instead of the tags' Java hashes (doc/wire.md
§4), so the codes are recomputed here with
:func:`~rocketpy.common.message.java_hash`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketpy.common.message import java_hash

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


class SubscriptionParseError(ValueError):
    """The subscription expression cannot be turned into a filter."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    """Which consume-queue tag codes a subscription accepts.

    :ivar expression: the subscription string as the client sent it.
    :ivar tags: the subscribed tags; empty means every message.
    :ivar codes: the Java hash of each tag, what the consume queue stores.
    """

    expression: str
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def __call__(self, tags_code: int) -> bool:
        """True when a consume-queue entry with ``tags_code`` passes the filter."""
        return not self.tags or tags_code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        """True when a message tagged ``tag`` passes (used for stored-message checks)."""
        return not self.tags or (tag is not None and tag in self.tags)


def parse_tags(subscription: str | None) -> frozenset[str]:
    """The tag set of a subscription string, like Java's ``FilterAPI.buildSubscriptionData``.

    ``None``, empty and ``*`` mean every tag and give an empty set.
    """
    if subscription is None or not subscription.strip() or subscription.strip() == SUB_ALL:
        return frozenset()
    return frozenset(t.strip() for t in subscription.split("||") if t.strip())


def build_tag_filter(subscription: str | None, expression_type: str | None = None) -> TagFilter:
    """A :class:`TagFilter` for a subscription.

    :param subscription: the expression, e.g. ``*`` or ``TagA || TagB``.
    :param expression_type: ``TAG`` (the default when absent) or ``SQL92``.
    :raises SubscriptionParseError: for SQL92 (not supported) or an unknown type.
    """
    kind = (expression_type or EXPRESSION_TAG).upper()
    if kind != EXPRESSION_TAG:
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported, only TAG")
    tags = parse_tags(subscription)
    expression = SUB_ALL if not tags else (subscription or "").strip()
    return TagFilter(expression, tags, frozenset(java_hash(t) for t in tags))
