"""RecallMessage: cancel a timer message not yet delivered (RocketMQ 5's ``RecallMessageHandle``,
``RecallMessageProcessor`` and the proxy's ``RecallMessageActivity``).

A SendMessage of a message with a future ``delivery_timestamp`` answers a recall handle: base64
(URL alphabet) of ``v1 <topic> <broker name> <timestamp> <message id>``, the timestamp being the
message's timer slot ``TIMER_OUT_MS`` + 1 (``SendMessageProcessor.attachRecallHandle``). Recalling it
stores a cancel marker (``TIMER_DEL_UNIQKEY`` = ``<topic>+<message id>``, due at that timestamp, so
in the same timer slot) through the broker's send processor: the timer then delivers neither
(doc/features.md, "Timer messages").
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import MessageConst, properties_to_string
from rocketpy.grpc import convert
from rocketpy.grpc.checks import PeerChannel, as_deferred, topic_name
from rocketpy.grpc.status import GrpcError, ok
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.timer import TimerRules, delete_key

VERSION = "v1"
#: the cancel marker's tag (``RecallMessageProcessor.RECALL_MESSAGE_TAG``)
RECALL_TAG = "_RECALL_TAG_"
INVALID = "recall handle is invalid"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """``RecallMessageHandle.HandleV1``: what a recall needs to name a timer message."""

    topic: str
    broker_name: str
    timestamp: str
    message_id: str

    def encode(self) -> str:
        raw = " ".join((VERSION, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        """:raises ValueError: "recall handle is invalid" (empty, not base64, not v1, too few fields)."""
        if not handle:
            raise ValueError(INVALID)
        try:
            padded = handle + "=" * (-len(handle) % 4)  # padding optional, as Java's URL decoder
            raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
        except (binascii.Error, ValueError):
            raise ValueError(INVALID) from None
        items = raw.split(" ")
        if items[0] != VERSION or len(items) < 5:
            raise ValueError(INVALID)
        return cls(items[1], items[2], items[3], items[4])


def sent_handle(msg: pb.Message, broker_name: str, timer: TimerRules | None, now_ms: int) -> str:
    """The recall handle of a sent message: for one the timer holds (a future delivery time, not a
    transaction's half message), else empty (``attachRecallHandle``)."""
    sysp = msg.system_properties
    if timer is None or not sysp.HasField("delivery_timestamp") or sysp.message_type == pb.MessageType.TRANSACTION:
        return ""
    deliver_ms = convert.delivery_ms(sysp.delivery_timestamp)
    if deliver_ms <= now_ms:
        return ""
    return RecallHandle(msg.topic.name, broker_name, str(timer.slot_ms(deliver_ms) + 1), sysp.message_id).encode()


class Recall:
    """The RecallMessage RPC over one broker's topics, send processor and timer settings."""

    def __init__(self, clock: IReactorTime, broker_name: str, topics: TopicConfigManager, send: IRequestProcessor,
                 timer: TimerRules) -> None:
        self._clock = clock
        self._broker_name = broker_name
        self._topics = topics
        self._send = send
        self._timer = timer

    def recall_message(self, ctx: Any, request: rpc.RecallMessageRequest) -> Deferred[rpc.RecallMessageResponse]:
        return Deferred.fromCoroutine(self._recall(ctx.peer, request))

    async def _recall(self, peer: str, request: rpc.RecallMessageRequest) -> rpc.RecallMessageResponse:
        """As the Java proxy and broker answer: every refusal is INTERNAL_SERVER_ERROR with the broker's
        remark (the proxy's ``ProxyException``), a bad topic name ILLEGAL_TOPIC."""
        name = topic_name(request.topic)
        try:
            handle = RecallHandle.decode(request.recall_handle)
        except ValueError as e:
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, str(e)) from None
        if self._topics.select_topic_config(name) is None:
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, f"recall failed, the topic[{name}] not exist")
        if handle.topic != name:
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, "recall failed, topic not match")
        if handle.broker_name != self._broker_name:
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, "recall failed, broker service not available")
        now_ms = int(self._clock.seconds() * 1000)
        try:
            left_ms = int(handle.timestamp) - now_ms
        except ValueError:
            left_ms = -1
        if left_ms <= 0 or left_ms >= self._timer.max_delay_ms:  # delivered (or about to be), or no such time
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, "recall failed, timestamp invalid")
        response: RemotingCommand = await as_deferred(self._send.process_request(
            cast(Any, PeerChannel(peer)), cancel_request(handle, now_ms)))
        if response.code == ResponseCode.MESSAGE_ILLEGAL:  # the store found its time passed meanwhile
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, "recall failed, timestamp invalid")
        if response.code != ResponseCode.SUCCESS:
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, response.remark or "recall failed, execute error")
        return rpc.RecallMessageResponse(status=ok(), message_id=handle.message_id)


def cancel_request(handle: RecallHandle, now_ms: int) -> RemotingCommand:
    """The SEND_MESSAGE of the cancel marker (``RecallMessageProcessor.buildMessage``): queue 0 of the
    topic, body ``0``, due at the handle's timestamp, naming the message by its id."""
    props = {
        MessageConst.TAGS: RECALL_TAG,
        MessageConst.TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.message_id),
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.message_id,
        MessageConst.TIMER_DELIVER_MS: handle.timestamp,
        "BORN_TIMESTAMP": str(now_ms),
        convert.TRACE_CONTEXT: "",
        MessageConst.PRODUCER_GROUP: handle.topic,  # the gRPC producers' group (SendMessage)
    }
    fields = {
        "producerGroup": handle.topic, "topic": handle.topic, "defaultTopic": convert.TBW102,
        "defaultTopicQueueNums": "8", "queueId": "0", "sysFlag": "0", "bornTimestamp": str(now_ms), "flag": "0",
        "properties": properties_to_string(props), "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, b"0")
