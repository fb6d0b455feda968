"""Broker-side filters built from a subscription: tags (``*``, ``TagA || TagB``) or SQL92.

The filter is always built from the tag *strings*: the C++ client's heartbeat
carries ``codeSet`` ``[0]`` instead of the tags' Java hashes (doc/wire.md
§4), so the codes are recomputed here with
:func:`~rocketpy.common.message.java_hash`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rocketpy.broker.sql92 import Selector, SelectorError, compile_selector
from rocketpy.common.message import RecordError, java_hash, record_properties

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


class PropertyFilterDisabled(SubscriptionParseError):
    """An SQL92 subscription on a broker without ``enablePropertyFilter``."""


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """An SQL92 subscription: every consume-queue entry passes, the stored record's properties decide.

    :ivar selector: the compiled expression.
    """

    selector: Selector

    @property
    def expression(self) -> str:
        return self.selector.expression

    matches_all = False

    def __call__(self, tags_code: int) -> bool:
        return True

    def matches_record(self, record: bytes) -> bool:
        """True when the stored record's properties (``TAGS`` among them) satisfy the selector."""
        try:
            return self.selector.matches(record_properties(record))
        except RecordError:
            return False


MessageFilter = TagFilter | SqlFilter


def is_tag_type(expression_type: str | None) -> bool:
    """Java ``ExpressionType.isTagType``: absent, empty or ``TAG``."""
    return not expression_type or expression_type.upper() == EXPRESSION_TAG


@lru_cache(maxsize=1024)
def _compiled(expression: str) -> SqlFilter:
    """One compilation per distinct expression (so per subscription version), shared by all pulls."""
    return SqlFilter(compile_selector(expression))


def build_filter(
    subscription: str | None, expression_type: str | None = None, property_filter: bool = False
) -> MessageFilter:
    """The filter of a subscription.

    :param subscription: the expression, e.g. ``*``, ``TagA || TagB`` or ``a > 5``.
    :param expression_type: ``TAG`` (the default when absent) or ``SQL92``.
    :param property_filter: the broker's ``enablePropertyFilter``; SQL92 is refused without it.
    :raises PropertyFilterDisabled: for SQL92 on a broker without the property filter.
    :raises SubscriptionParseError: for a malformed SQL92 expression or an unknown type.
    """
    if is_tag_type(expression_type):
        return build_tag_filter(subscription)
    if (expression_type or "").upper() != EXPRESSION_SQL92:
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported, only TAG and SQL92")
    if not property_filter:
        raise PropertyFilterDisabled(f"The broker does not support consumer to filter message by {EXPRESSION_SQL92}")
    try:
        return _compiled((subscription or "").strip())
    except SelectorError as e:
        raise SubscriptionParseError(str(e)) from None


def build_tag_filter(subscription: str | None, expression_type: str | None = None) -> TagFilter:
    """A :class:`TagFilter` for a subscription.

    :param subscription: the expression, e.g. ``*`` or ``TagA || TagB``.
    :param expression_type: ``TAG`` (the default when absent).
    :raises SubscriptionParseError: for any other type (SQL92 goes through :func:`build_filter`).
    """
    if not is_tag_type(expression_type):
        raise SubscriptionParseError(f"expression type {expression_type!r} is not a tag expression")
    tags = parse_tags(subscription)
    expression = SUB_ALL if not tags else (subscription or "").strip()
    return TagFilter(expression, tags, frozenset(java_hash(t) for t in tags))
