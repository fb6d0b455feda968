"""Request/reply on the client (RocketMQ 4.6+): ``Producer.request`` and ``create_reply_message``.

A request is a normal send with ``CORRELATION_ID`` (a fresh UUID), ``REPLY_TO_CLIENT`` (this
client's id) and ``TTL`` (the timeout in ms). The consumer that receives it sends
``create_reply_message(request, body)`` with any producer: the reply goes to
``<cluster>_REPLY_TOPIC`` with ``MSG_TYPE=reply``, which makes the producer use SEND_REPLY_MESSAGE_V2;
the broker pushes it to the requesting client (PUSH_REPLY_MESSAGE_TO_CLIENT), whose
:class:`ReplyProcessor` hands it to the waiting request by correlation id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.client.errors import ClientErrorCode, MQClientError
from rocketpy.common.compression import DecompressionError, inflate_body
from rocketpy.common.headers import HeaderError, get_int, get_str
from rocketpy.common.message import Message, MessageConst, MessageExt, parse_address, string_to_properties
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand

#: ``MSG_TYPE`` of a reply (Java ``MixAll.REPLY_MESSAGE_FLAG``).
REPLY_MESSAGE_FLAG = "reply"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"


class RequestTimeoutError(MQClientError):
    """The request was sent but no reply came in time (Java ``RequestTimeoutException``, 10006)."""

    def __init__(self, topic: str, timeout: float) -> None:
        super().__init__(ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION,
                         f"send request message to <{topic}> OK, but wait reply message timeout, "
                         f"{int(timeout * 1000)} ms.")


def reply_topic(cluster: str) -> str:
    """``<cluster>_REPLY_TOPIC`` (Java ``MixAll.getReplyTopic``)."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def create_reply_message(request: Message, body: bytes) -> Message:
    """The reply to a received request message (Java ``MessageUtil.createReplyMessage``).

    :raises MQClientError: 10007 when ``request`` has no ``CLUSTER`` (it was not received from a broker).
    """
    props = request.properties
    cluster = props.get(MessageConst.CLUSTER)
    if cluster is None:
        raise MQClientError(ClientErrorCode.CREATE_REPLY_MESSAGE_EXCEPTION,
                            f"create reply message fail, requestMessage error, property[{MessageConst.CLUSTER}] is null.")
    reply = Message(reply_topic(cluster), body)
    reply.properties[MessageConst.MESSAGE_TYPE] = REPLY_MESSAGE_FLAG
    for key in (MessageConst.CORRELATION_ID, MessageConst.REPLY_TO_CLIENT, MessageConst.MESSAGE_TTL):
        if key in props:
            reply.properties[key] = props[key]
    return reply


class RequestFutures:
    """The requests of one client instance waiting for their reply, by correlation id."""

    log = Logger()

    def __init__(self) -> None:
        self._waiting: dict[str, Deferred[MessageExt]] = {}

    def expect(self, correlation_id: str) -> Deferred[MessageExt]:
        d: Deferred[MessageExt] = Deferred()
        self._waiting[correlation_id] = d
        return d

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def deliver(self, reply: MessageExt) -> bool:
        """Fire the request ``reply`` answers; False (logged) when none waits for it any more."""
        correlation_id = reply.properties.get(MessageConst.CORRELATION_ID, "")
        d = self._waiting.pop(correlation_id, None)
        if d is None:
            self.log.warn("receive reply message, but not matched any request, CorrelationId: {id}",
                          id=correlation_id)
            return False
        d.callback(reply)
        return True


def _host(text: str | None) -> tuple[str, int]:
    """Java's ``SocketAddress.toString()`` (``/ip:port``) or ``ip:port``."""
    try:
        return parse_address((text or "").lstrip("/"))
    except ValueError:
        return ("0.0.0.0", 0)


@implementer(IRequestProcessor)
class ReplyProcessor:
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326): a broker brings a reply to one of this client's requests."""

    log = Logger()

    def __init__(self, futures: RequestFutures, clock: IReactorTime) -> None:
        self._futures = futures
        self._clock = clock

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        f = request.ext_fields
        try:
            msg = MessageExt(
                topic=get_str(f, "topic"), body=request.body, flag=get_int(f, "flag", 0),
                properties=string_to_properties(f.get("properties")), queue_id=get_int(f, "queueId", 0),
                sys_flag=get_int(f, "sysFlag", 0), born_timestamp=get_int(f, "bornTimestamp", 0),
                born_host=_host(f.get("bornHost")), store_timestamp=get_int(f, "storeTimestamp", 0),
                store_host=_host(f.get("storeHost")), reconsume_times=get_int(f, "reconsumeTimes", 0),
            )
            inflate_body(msg)
        except (HeaderError, DecompressionError) as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad reply message: {e}")
        msg.properties[MessageConst.REPLY_MESSAGE_ARRIVE_TIME] = str(int(self._clock.seconds() * 1000))
        self._futures.deliver(msg)
        return request.make_response(ResponseCode.SUCCESS)


async def request(instance: Any, clock: IReactorTime, send: Callable[[Message, float], Deferred[Any]],
                  msg: Message, timeout: float) -> MessageExt:
    """Send ``msg`` as a request and wait for its reply (Java ``DefaultMQProducerImpl.request``).

    :param instance: the producer's ``ClientInstance`` (client id, routes, heartbeat, futures).
    :param send: the producer's SYNC send.
    :raises RequestTimeoutError: sent, but no reply within ``timeout`` seconds.
    :raises MQClientError: the request could not be sent.
    """
    start = clock.seconds()
    correlation_id = str(uuid.uuid4())
    msg.properties[MessageConst.CORRELATION_ID] = correlation_id
    msg.properties[MessageConst.REPLY_TO_CLIENT] = instance.client_id
    msg.properties[MessageConst.MESSAGE_TTL] = str(int(timeout * 1000))
    futures: RequestFutures = instance.reply_futures
    if msg.topic not in instance.routes:
        await instance.update_topic_route(msg.topic, use_default=True)
    # the broker pushes the reply on the connection our producer heartbeat came in on: announce
    # ourselves to new brokers before requesting (Java only does it for a topic without route,
    # so its requests fail for up to 30 s after a plain send found the broker first)
    await instance.announce()
    reply = futures.expect(correlation_id)
    try:
        try:
            await send(msg, max(0.001, timeout - (clock.seconds() - start)))
        except Exception as e:
            raise MQClientError(-1, f"send request message to <{msg.topic}> fail: {e}") from e
        reply.addTimeout(max(0.0, timeout - (clock.seconds() - start)), clock)
        try:
            return await reply
        except TimeoutError:
            raise RequestTimeoutError(msg.topic, timeout) from None
    finally:
        futures.forget(correlation_id)
