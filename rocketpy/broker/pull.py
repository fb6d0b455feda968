"""PULL_MESSAGE (11): read a queue, filter by tag, hold the request when nothing is there.

Follows Java 4.9 ``PullMessageProcessor`` (doc/wire.md §5).
Every response carries ``suggestWhichBrokerId``, ``nextBeginOffset``,
``minOffset`` and ``maxOffset`` as strings (the C++ client ignores anything
else) and the store status name as remark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.broker.filter import MessageFilter, PropertyFilterDisabled, SqlFilter, SubscriptionParseError, build_filter
from rocketpy.broker.longpoll import PullRequestHoldService
from rocketpy.broker.processors import Rejected
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.broker.traffic import GetCounts
from rocketpy.common.headers import HeaderError, get_int, get_str
from rocketpy.common.route import MASTER_ID
from rocketpy.common.topic import is_readable
from rocketpy.interfaces import IRequestProcessor, IStoreService
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import GetMessageResult, GetMessageStatus

#: Pull request sysFlag bits (``PullSysFlag``).
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

SLAVE_ID_WHEN_SLOW = 1


class Subscription(Protocol):
    """What the pull path needs of a subscription registered by HEART_BEAT."""

    @property
    def sub_string(self) -> str: ...

    @property
    def sub_version(self) -> int: ...

    @property
    def expression_type(self) -> str | None: ...


#: ``(group, topic) -> registered subscription or None``.
FindSubscription = Callable[[str, str], "Subscription | None"]
#: ``(client_host, group, topic, queue_id, offset)``: stores a consumer offset.
CommitOffset = Callable[[str, str, str, int, int], object]



@dataclass(slots=True)
class PullHeader:
    """The PULL_MESSAGE request header."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None
    sub_version: int
    expression_type: str | None

    @classmethod
    def parse(cls, fields: dict[str, str]) -> PullHeader:
        """:raises HeaderError: naming the missing or unparsable field."""
        try:  # the usual header: plain decimal digits, short enough for their Java types
            values = [fields[name] for name in _INT_NAMES]
            if all(map(_plain, values)):
                queue_id, queue_offset, max_msg_nums, sys_flag, commit_offset, suspend = map(int, values)
                version = fields.get("subVersion") or "0"
                return cls(
                    get_str(fields, "consumerGroup"), get_str(fields, "topic"), queue_id, queue_offset,
                    max_msg_nums, sys_flag, commit_offset, suspend, fields.get("subscription"),
                    int(version) if _plain(version) else get_int(fields, "subVersion", 0),
                    fields.get("expressionType") or None,
                )
        except KeyError:
            pass
        return cls._parse(fields)

    @classmethod
    def _parse(cls, fields: dict[str, str]) -> PullHeader:
        """Every header, the reference of :meth:`parse`."""
        return cls(
            consumer_group=get_str(fields, "consumerGroup"),
            topic=get_str(fields, "topic"),
            queue_id=get_int(fields, "queueId", bits=32),
            queue_offset=get_int(fields, "queueOffset"),
            max_msg_nums=get_int(fields, "maxMsgNums", bits=32),
            sys_flag=get_int(fields, "sysFlag", bits=32),
            commit_offset=get_int(fields, "commitOffset"),
            suspend_timeout_millis=get_int(fields, "suspendTimeoutMillis"),
            subscription=fields.get("subscription"),
            sub_version=get_int(fields, "subVersion", 0),
            expression_type=fields.get("expressionType") or None,
        )


#: The integer fields :meth:`PullHeader.parse` reads first (up to 9 digits fit a Java int).
_INT_NAMES = ("queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis")


@lru_cache(maxsize=1024)
def _filter(expression: str | None, kind: str | None, property_filter: bool) -> MessageFilter:
    """``build_filter``, once per subscription (filters are immutable; refusals are not cached)."""
    return build_filter(expression, kind, property_filter)


def _plain(value: str) -> bool:
    """True for ASCII decimal digits, maybe after a minus, 9 characters at most (what ``int`` and
    ``get_int`` read alike for any Java integer type)."""
    return value.isascii() and len(value) <= 9 and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit()))


#: GetMessageStatus → response code (offset-dependent ones are decided in ``_code``).
_STATUS_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def _code(status: GetMessageStatus, requested_offset: int) -> int:
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)


@implementer(IRequestProcessor)
class PullMessageProcessor:
    """Serves PULL_MESSAGE from the store, long polling through a :class:`PullRequestHoldService`.

    :param store: the ``StoreService`` (``get_message`` → Deferred[GetMessageResult]).
    :param topics: the broker's topic table.
    :param hold: parks pulls that found nothing; None disables long polling.
    :param find_subscription: the heartbeat's subscription of a group for a topic, for
        pulls without the subscription flag; None means no such subscriptions exist.
    :param commit_offset: stores the consumer offset a pull carries with the commit flag.
    :param groups: consumer group settings (unknown group 26, consumption disabled 16,
        which broker to suggest when slow); None allows every group.
    :param slave_readable: when the store suggests reading from a slave, send clients there.
    :param property_filter: ``enablePropertyFilter``: serve SQL92 subscriptions (else SYSTEM_ERROR).
    :param gets: counts what each group pulls (rocketmq_consumer_tps); None counts nothing.
    """

    log = Logger()

    def __init__(
        self,
        store: IStoreService,
        topics: TopicConfigManager,
        hold: PullRequestHoldService | None = None,
        find_subscription: FindSubscription | None = None,
        commit_offset: CommitOffset | None = None,
        groups: SubscriptionGroupManager | None = None,
        slave_readable: bool = False,
        property_filter: bool = False,
        gets: GetCounts | None = None,
    ) -> None:
        self._gets = gets
        self._groups = groups
        self._property_filter = property_filter
        self._store = store
        self._topics = topics
        self._hold = hold
        self._find_subscription = find_subscription
        self._commit_offset = commit_offset
        self._slave_readable = slave_readable

    def reject_request(self) -> bool:
        return False

    def process_request(
        self, channel: Any, request: RemotingCommand
    ) -> RemotingCommand | Deferred[RemotingCommand | None]:
        """Answer a pull now, or later when held; never raises."""
        try:
            header = PullHeader.parse(request.ext_fields)
            tag_filter = self._check(header)
        except HeaderError as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        except Rejected as e:
            return request.make_response(e.code, e.remark)
        if header.sys_flag & FLAG_COMMIT_OFFSET and header.commit_offset >= 0 and self._commit_offset:
            self._commit_offset(
                _host(channel), header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        allow_suspend = bool(header.sys_flag & FLAG_SUSPEND) and self._hold is not None
        read_now = getattr(self._store, "get_message_resident", None)
        if read_now is not None:  # in memory: answered at once, no Deferred
            try:
                result = read_now(*self._read_args(header, tag_filter))
            except Exception:  # the store's Deferred read reports it
                result = None
            if result is not None:
                return self._respond(result, channel, request, header, tag_filter, allow_suspend)
        return self._execute(channel, request, header, tag_filter, allow_suspend)

    # -- checks -------------------------------------------------------------

    def _check(self, header: PullHeader) -> MessageFilter:
        """Group, topic, queue id and subscription checks; the filter to read with."""
        if self._groups is not None:
            group = self._groups.find_subscription_group_config(header.consumer_group)
            if group is None:
                raise Rejected(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                    f"subscription group [{header.consumer_group}] does not exist",
                )
            if not group.consume_enable:
                raise Rejected(
                    ResponseCode.NO_PERMISSION, f"subscription group no permission, {header.consumer_group}"
                )
        config = self._topics.select_topic_config(header.topic)
        if config is None:
            raise Rejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
        if not is_readable(config.perm):
            raise Rejected(ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling message is forbidden")
        if header.queue_id < 0 or header.queue_id >= config.read_queue_nums:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] consumer:[{header.consumer_group}]",
            )
        if header.sys_flag & FLAG_SUBSCRIPTION:
            expression, kind = header.subscription, header.expression_type
        else:
            expression, kind = self._registered_subscription(header)
        try:
            return _filter(expression, kind, self._property_filter)
        except PropertyFilterDisabled as e:
            raise Rejected(ResponseCode.SYSTEM_ERROR, str(e)) from None
        except SubscriptionParseError as e:
            raise Rejected(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e)) from None

    def _registered_subscription(self, header: PullHeader) -> tuple[str | None, str | None]:
        """The subscription the group registered by heartbeat (24 when none, 25 when older)."""
        found = None
        if self._find_subscription is not None:
            found = self._find_subscription(header.consumer_group, header.topic)
        if found is None:
            raise Rejected(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist")
        if found.sub_version < header.sub_version:
            raise Rejected(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        return found.sub_string, found.expression_type

    # -- reading --------------------------------------------------------------

    def _execute(
        self,
        channel: Any,
        request: RemotingCommand,
        header: PullHeader,
        tag_filter: MessageFilter,
        allow_suspend: bool,
    ) -> Deferred[RemotingCommand | None]:
        d: Deferred[GetMessageResult] = self._store.get_message(*self._read_args(header, tag_filter))
        return d.addCallback(self._respond, channel, request, header, tag_filter, allow_suspend)

    @staticmethod
    def _read_args(header: PullHeader, tag_filter: MessageFilter) -> tuple[Any, ...]:
        """The store read's arguments: group, topic, queue, offset, count, tag filter, record filter."""
        if isinstance(tag_filter, SqlFilter):
            return (header.consumer_group, header.topic, header.queue_id, header.queue_offset, header.max_msg_nums,
                    None, tag_filter.matches_record)
        return (header.consumer_group, header.topic, header.queue_id, header.queue_offset, header.max_msg_nums,
                None if tag_filter.matches_all else tag_filter, None)

    def _respond(
        self,
        result: GetMessageResult,
        channel: Any,
        request: RemotingCommand,
        header: PullHeader,
        tag_filter: MessageFilter,
        allow_suspend: bool,
    ) -> RemotingCommand | Deferred[RemotingCommand | None]:
        code = _code(result.status, header.queue_offset)
        if code != ResponseCode.SUCCESS and self._gets is not None:
            self._gets.missed += 1
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and self._hold is not None:
            return self._hold.suspend(
                channel,
                header.topic,
                header.queue_id,
                header.queue_offset,
                header.suspend_timeout_millis / 1000.0,
                lambda: self._execute(channel, request, header, tag_filter, False),
            )
        fields = {
            "suggestWhichBrokerId": str(self._suggested_broker(header, result)),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        body = b""
        if code == ResponseCode.SUCCESS:
            body = result.body
            if self._gets is not None:
                self._gets.record(header.topic, header.consumer_group, result.message_count, len(body))
        return request.make_response(code, result.status.name, fields, body)

    def _suggested_broker(self, header: PullHeader, result: GetMessageResult) -> int:
        """0 (the master) unless the store lags and slaves may serve reads."""
        if not (result.suggest_pulling_from_slave and self._slave_readable):
            return MASTER_ID
        if self._groups is not None:
            config = self._groups.find_subscription_group_config(header.consumer_group)
            if config is not None:
                return config.which_broker_when_consume_slowly
        return SLAVE_ID_WHEN_SLOW


def _host(channel: Any) -> str:
    return str(getattr(channel, "remote_address", "") or "")
