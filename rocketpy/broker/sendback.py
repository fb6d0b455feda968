"""CONSUMER_SEND_MSG_BACK (36): a consumer hands a failed message back for a later retry.

Follows Java 4.9 ``SendMessageProcessor.asyncConsumerSendMsgBack`` (doc/wire.md
§6): the stored message is copied to
``%RETRY%<group>`` with a delay level, or to ``%DLQ%<group>`` once it was retried
often enough. Header variants: the C++ 1.2 client sends only ``offset``, ``group`` and
``delayLevel``; the C++ 2.0 client swaps ``maxReconsumeTimes`` with its RPC timeout
(3000), so implausible limits fall back to the group's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.broker.processors import Rejected
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.headers import HeaderError, get_int, get_str
from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.topic import PERM_READ, PERM_WRITE, TopicConfig, dlq_topic, is_writeable, retry_topic
from rocketpy.interfaces import IChannel, IRequestProcessor, IStoreService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import PutMessageResult, PutMessageStatus

#: MQVersion V3_4_9: from this client version on the header's maxReconsumeTimes is honoured.
V3_4_9 = 121
DEFAULT_MAX_RECONSUME_TIMES = 16
DLQ_NUMS_PER_GROUP = 1
#: A header limit above this is not a retry count (the C++ 2.0 client sends its timeout, 3000).
MAX_PLAUSIBLE_RECONSUME_TIMES = 1000


def max_reconsume_times(group_limit: int, header_value: int | None, version: int) -> int:
    """The retry limit of a send-back or ``%RETRY%`` send.

    The header's value counts only from client version V3_4_9 on and only when it is
    plausible (0..1000); otherwise the group's ``retry_max_times`` applies.
    """
    if version >= V3_4_9 and header_value is not None and 0 <= header_value <= MAX_PLAUSIBLE_RECONSUME_TIMES:
        return header_value
    return group_limit


def dead_letter_topic(topics: TopicConfigManager, group: str) -> TopicConfig:
    """``%DLQ%<group>``, created on demand: one queue, readable and writable (4.9)."""
    return topics.create_topic_in_send_message_back_method(dlq_topic(group), DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)


@dataclass(slots=True)
class SendBackHeader:
    """``ConsumerSendMsgBackRequestHeader``."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None
    origin_topic: str | None
    max_reconsume_times: int | None

    @classmethod
    def parse(cls, request: RemotingCommand) -> SendBackHeader:
        """:raises HeaderError: for a missing ``offset``/``group`` or a field that is not a number."""
        f = request.ext_fields
        return cls(
            offset=get_int(f, "offset"),
            group=get_str(f, "group"),
            delay_level=get_int(f, "delayLevel", 0, bits=32),
            origin_msg_id=get_str(f, "originMsgId", None),
            origin_topic=get_str(f, "originTopic", None),
            max_reconsume_times=get_int(f, "maxReconsumeTimes", None, bits=32),
        )


@implementer(IRequestProcessor)
class SendBackProcessor:
    """Copies failed messages to the group's retry or dead-letter topic.

    :param store: the ``StoreService`` (``look_message_by_offset``, ``put_message``).
    :param topics: the topic table (retry and DLQ topics are created here).
    :param groups: consumer group settings (``retry_queue_nums``, ``retry_max_times``).
    :param writable: tells whether the broker takes writes (a slave does not).
    :param rng: picks the retry queue (injectable for tests).
    """

    log = Logger()
    codes = (RequestCode.CONSUMER_SEND_MSG_BACK,)

    def __init__(
        self,
        store: IStoreService,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        writable: Any = lambda: True,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._writable = writable
        self._rng = rng or random.Random()

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        """Answer once the copy was stored (or refused); never fails."""
        return Deferred.fromCoroutine(self._process(request))

    async def _process(self, request: RemotingCommand) -> RemotingCommand:
        try:
            header = SendBackHeader.parse(request)
            return await self._send_back(header, request)
        except HeaderError as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        except Rejected as e:
            return request.make_response(e.code, e.remark)

    async def _send_back(self, header: SendBackHeader, request: RemotingCommand) -> RemotingCommand:
        group = self._groups.find_subscription_group_config(header.group)
        if group is None:
            raise Rejected(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {header.group}"
            )
        if not self._writable():
            raise Rejected(ResponseCode.NO_PERMISSION, "the broker is not writable now")
        if group.retry_queue_nums <= 0:  # retries switched off for this group: drop it
            return request.make_response(ResponseCode.SUCCESS, None)
        config = self._topics.create_topic_in_send_message_back_method(
            retry_topic(header.group), group.retry_queue_nums, PERM_READ | PERM_WRITE
        )
        if not is_writeable(config.perm):
            raise Rejected(ResponseCode.NO_PERMISSION, f"the topic[{config.topic_name}] sending message is forbidden")
        original = await self._store.look_message_by_offset(header.offset)
        if original is None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")
        limit = max_reconsume_times(group.retry_max_times, header.max_reconsume_times, request.version)
        msg = self.retry_message(original, header, config, limit)
        result: PutMessageResult = await self._store.put_message(msg)
        if result.status is not PutMessageStatus.PUT_OK:
            self.log.warn("send-back of {offset} to {topic} failed: {status}",
                          offset=header.offset, topic=msg.topic, status=result.status.name)
            return request.make_response(ResponseCode.SYSTEM_ERROR, result.status.name)
        return request.make_response(ResponseCode.SUCCESS, None)

    def retry_message(self, original: MessageExt, header: SendBackHeader, retry: TopicConfig, limit: int) -> MessageExt:
        """The copy to store: on the retry topic with a delay, or on the DLQ without one."""
        props = dict(original.properties)
        props.setdefault(MessageConst.RETRY_TOPIC, original.topic)
        props[MessageConst.WAIT_STORE_MSG_OK] = "false"
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, original.msg_id)
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        for stale in (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID):
            props.pop(stale, None)  # left by an earlier delayed delivery; the store sets them anew
        if original.reconsume_times >= limit or header.delay_level < 0:
            config = dead_letter_topic(self._topics, header.group)
            self.log.info("message {offset} of group {group} to its dead-letter queue after {n} retries",
                          offset=header.offset, group=header.group, n=original.reconsume_times)
        else:
            config = retry
            level = header.delay_level or 3 + original.reconsume_times
            props[MessageConst.DELAY_TIME_LEVEL] = str(level)
        queues = max(1, config.write_queue_nums)
        return MessageExt(
            topic=config.topic_name,
            body=original.body,
            flag=original.flag,
            properties=props,
            queue_id=self._rng.randrange(99999999) % queues,
            sys_flag=original.sys_flag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            store_host=original.store_host,
            reconsume_times=original.reconsume_times + 1,
        )
