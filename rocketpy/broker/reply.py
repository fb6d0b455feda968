"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): request/reply (RocketMQ 4.6+).

Follows Java 4.9 ``ReplyMessageProcessor``: the reply is checked and built like a send, pushed
to the requesting client (its ``REPLY_TO_CLIENT`` property names it; its producer heartbeat gave
the broker the connection) as PUSH_REPLY_MESSAGE_TO_CLIENT (326), then stored on the reply topic
(``storeReplyMessageEnable``). The response code is the push's: SUCCESS, or SYSTEM_ERROR when the
requester cannot be reached, even when the reply was stored.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer_only

from rocketpy.broker.clients import ProducerManager
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.sendheader import SendHeader
from rocketpy.common.headers import to_fields
from rocketpy.common.message import MessageConst, MessageExt, format_address, properties_to_string
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import PutMessageResult

REPLY_CODES = (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)
#: Seconds the requester has to acknowledge a pushed reply (Java's ``callClient``).
PUSH_TIMEOUT = 10.0


@implementer_only(IRequestProcessor)
class ReplyMessageProcessor(SendMessageProcessor):
    """Pushes replies to their requester, then stores them.

    :param producers: finds the requester's connection by client id.
    :param clock: the push time stamped on the reply (``PUSH_REPLY_TIME``).
    :param store_reply: also store the reply (``storeReplyMessageEnable``, true in RocketMQ).
    Other parameters: :class:`SendMessageProcessor`'s.
    """

    def __init__(self, *args: Any, producers: ProducerManager, clock: IReactorTime, store_reply: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._producers = producers
        self._clock = clock
        self._store_reply = store_reply

    def process_request(self, channel: Any, request: RemotingCommand) -> Deferred[RemotingCommand] | RemotingCommand:
        prepared = self._prepare(request, channel)
        if type(prepared) is RemotingCommand:
            return prepared
        msgs, queue_id, _batch = prepared  # type: ignore[misc]
        return Deferred.fromCoroutine(self._reply(channel, request, msgs[0], queue_id))

    async def _reply(self, channel: Any, request: RemotingCommand, msg: MessageExt, queue_id: int) -> RemotingCommand:
        pushed, remark = await self._push(channel, request, msg)
        result: PutMessageResult | None = None
        if self._store_reply:
            result = await self._store.put_message(msg)
        stored = self._put_response(result, request, queue_id) if result is not None else None
        if not pushed:
            return self._response(request, ResponseCode.SYSTEM_ERROR, remark)
        if stored is not None and stored.code == ResponseCode.SUCCESS:
            return self._response(request, ResponseCode.SUCCESS, None, stored.ext_fields)
        # as Java: zeros the client can decode when the reply was not stored
        return self._response(request, ResponseCode.SUCCESS, None,
                              {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0"})

    async def _push(self, channel: Any, request: RemotingCommand, msg: MessageExt) -> tuple[bool, str | None]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the requester: (pushed, remark when not)."""
        requester = msg.properties.get(MessageConst.REPLY_TO_CLIENT)
        if not requester:
            return False, f"push reply message fail, {MessageConst.REPLY_TO_CLIENT} is null."
        target = self._producers.find_channel(requester)
        if target is None:
            self.log.warn("push reply message fail, channel of <{client}> not found", client=requester)
            return False, f"push reply message fail, channel of <{requester}> not found."
        msg.properties[MessageConst.PUSH_REPLY_TIME] = str(int(self._clock.seconds() * 1000))
        header = SendHeader.parse(request)
        fields = to_fields(
            producerGroup=header.producer_group, topic=msg.topic, defaultTopic=header.default_topic,
            defaultTopicQueueNums=header.default_topic_queue_nums, queueId=msg.queue_id, sysFlag=msg.sys_flag,
            bornTimestamp=msg.born_timestamp, flag=msg.flag, properties=properties_to_string(msg.properties),
            reconsumeTimes=msg.reconsume_times, unitMode="false",
            bornHost="/" + format_address(msg.born_host), storeHost="/" + format_address(msg.store_host),
            storeTimestamp=int(self._clock.seconds() * 1000),
        )
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, fields, msg.body)
        try:
            response = await target.invoke_sync(push, PUSH_TIMEOUT)
        except Exception as e:  # lost connection, timeout
            self.log.warn("push reply message to {client} failed: {error}", client=requester, error=e)
            return False, f"push reply message to {requester} fail: {e}"
        if response.code != ResponseCode.SUCCESS:
            return False, f"push reply message to {requester}fail."  # sic, Java's remark
        return True, None
