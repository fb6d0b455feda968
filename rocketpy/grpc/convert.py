"""v2 ``Message`` ⇄ the 4.x message shapes, as the Java proxy's ``SendMessageActivity`` and
``GrpcConverter`` convert them (property names of RocketMQ's ``MessageConst``)."""

from __future__ import annotations

import re
import zlib
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from rocketpy.common.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    properties_to_string,
)
from rocketpy.grpc.status import GrpcError
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

SHARDING_KEY = "__SHARDINGKEY"
BORN_HOST = "__BORNHOST"
TRACE_CONTEXT = "TRACE_CONTEXT"
TIMER_DELIVER_MS = MessageConst.TIMER_DELIVER_MS
#: The longest delivery delay a send may ask (ProxyConfig ``maxDelayTimeMills``: 1 day).
MAX_DELAY_MS = 24 * 3600 * 1000
CHECK_IMMUNITY = MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS
#: ProxyConfig.maxTransactionRecoverySecond: the longest orphaned-transaction recovery duration
MAX_TRANSACTION_RECOVERY_S = 3600
KEY_SEPARATOR = " "
TBW102 = "TBW102"
#: Properties the broker or proxy set: not the user's, and not accepted from the user.
SYSTEM_PROPERTIES = frozenset({
    MessageConst.KEYS, MessageConst.TAGS, MessageConst.WAIT_STORE_MSG_OK, MessageConst.DELAY_TIME_LEVEL,
    MessageConst.RETRY_TOPIC, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID,
    MessageConst.TRANSACTION_PREPARED, MessageConst.PRODUCER_GROUP, MessageConst.MIN_OFFSET,
    MessageConst.MAX_OFFSET, MessageConst.ORIGIN_MESSAGE_ID, MessageConst.RECONSUME_TIME,
    MessageConst.MAX_RECONSUME_TIMES, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.CLUSTER,
    MessageConst.TRANSACTION_CHECK_TIMES, MessageConst.TRAN_PREPARED_QUEUE_OFFSET,
    MessageConst.CONSUME_START_TIME, MessageConst.MSG_REGION, MessageConst.TRACE_SWITCH,
    SHARDING_KEY, BORN_HOST, TRACE_CONTEXT, TIMER_DELIVER_MS, CHECK_IMMUNITY, "__STARTDELIVERTIME", MessageConst.TIMER_DELAY_SEC,
    "POP_CK", "1ST_POP_TIME", "BORN_TIMESTAMP", MessageConst.TIMER_DELAY_MS, MessageConst.TIMER_OUT_MS,
    MessageConst.TIMER_ENQUEUE_MS, MessageConst.TIMER_DEQUEUE_MS, MessageConst.TIMER_ROLL_TIMES,
    MessageConst.TIMER_DEL_UNIQKEY,
})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def millis(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


#: ``Timestamp.seconds`` from here on (the year 5138) can only be milliseconds put in the seconds field.
MS_IN_SECONDS_FIELD = 100_000_000_000


def delivery_ms(ts: Timestamp) -> int:
    """A send's delivery time in ms. rocketmq-python-client 5.1.2 copies ``Message.delivery_timestamp``
    (ms, as its docstring says) into ``Timestamp.seconds``: such a value is read as ms (the Java proxy
    refuses it as too far ahead)."""
    return ts.seconds if ts.seconds >= MS_IN_SECONDS_FIELD else millis(ts)


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def send_request(msg: pb.Message, producer_group: str, queue_id: int, max_body_size: int,
                 now_ms: int = 0) -> RemotingCommand:
    """The SEND_MESSAGE request the broker's send processor stores (checks as the Java proxy).

    :raises GrpcError: for a message the proxy refuses (empty body, bad key, reserved property …).
    """
    sysp = msg.system_properties
    if not msg.body:
        raise GrpcError(pb.Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(msg.body) > max_body_size:
        raise GrpcError(pb.Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_body_size}")
    if not sysp.message_id:
        raise GrpcError(pb.Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props: dict[str, str] = {}
    for key, value in msg.user_properties.items():
        if key in SYSTEM_PROPERTIES:
            raise GrpcError(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if _CONTROL.search(key) or _CONTROL.search(value):
            raise GrpcError(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key or value of a property cannot "
                                                                  "contain control character")
        props[key] = value
    if sysp.HasField("tag"):
        if not sysp.tag.strip() or "|" in sysp.tag or _CONTROL.search(sysp.tag):
            raise GrpcError(pb.Code.ILLEGAL_MESSAGE_TAG, f"tag {sysp.tag!r} is illegal")
        props[MessageConst.TAGS] = sysp.tag
    for key in sysp.keys:
        if not key.strip() or _CONTROL.search(key):
            raise GrpcError(pb.Code.ILLEGAL_MESSAGE_KEY, "key cannot be blank or contain control character")
    if sysp.keys:
        props[MessageConst.KEYS] = KEY_SEPARATOR.join(sysp.keys)
    props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sysp.message_id
    props[MessageConst.PRODUCER_GROUP] = producer_group
    if sysp.HasField("message_group"):
        props[SHARDING_KEY] = sysp.message_group
    if sysp.HasField("trace_context"):
        props[TRACE_CONTEXT] = sysp.trace_context
    if sysp.born_host:
        props[BORN_HOST] = sysp.born_host
    if sysp.HasField("delivery_timestamp"):  # any message type, as SendMessageActivity.fillDelayMessageProperty
        deliver_ms = delivery_ms(sysp.delivery_timestamp)
        if deliver_ms - now_ms > MAX_DELAY_MS:
            raise GrpcError(pb.Code.ILLEGAL_DELIVERY_TIME, f"the max delay time of message is too large, max is "
                                                           f"{MAX_DELAY_MS}")
        props[TIMER_DELIVER_MS] = str(deliver_ms)
    born = millis(sysp.born_timestamp) if sysp.HasField("born_timestamp") else 0
    sys_flag = MessageSysFlag.COMPRESSED if sysp.body_encoding == pb.Encoding.GZIP else 0
    if sysp.message_type == pb.MessageType.TRANSACTION:
        sys_flag |= _half_message(sysp, props)
    fields = {
        "producerGroup": producer_group, "topic": msg.topic.name, "defaultTopic": TBW102,
        "defaultTopicQueueNums": "8", "queueId": str(queue_id), "sysFlag": str(sys_flag),
        "bornTimestamp": str(born), "flag": "0", "properties": properties_to_string(props),
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, bytes(msg.body))


def _half_message(sysp: pb.SystemProperties, props: dict[str, str]) -> int:
    """A TRANSACTION message's properties (``TRAN_MSG``, the recovery duration); its sysFlag bits."""
    props[MessageConst.TRANSACTION_PREPARED] = "true"
    if sysp.HasField("orphaned_transaction_recovery_duration"):
        seconds = sysp.orphaned_transaction_recovery_duration.seconds
        if seconds > MAX_TRANSACTION_RECOVERY_S:
            raise GrpcError(pb.Code.BAD_REQUEST, "the max transaction recovery time of message is too large, "
                                                 f"max is {MAX_TRANSACTION_RECOVERY_S}")
        props[CHECK_IMMUNITY] = str(seconds)
    return MessageSysFlag.TRANSACTION_PREPARED_TYPE


def _message_type(ext: MessageExt) -> Any:
    props = ext.properties
    if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return pb.MessageType.TRANSACTION
    if MessageConst.DELAY_TIME_LEVEL in props or TIMER_DELIVER_MS in props or MessageConst.TIMER_DELAY_SEC in props:
        return pb.MessageType.DELAY
    if SHARDING_KEY in props:
        return pb.MessageType.FIFO
    return pb.MessageType.NORMAL


def _delivery_ms(props: dict[str, str], now_ms: int) -> int | None:
    """``delivery_timestamp`` as GrpcConverter gives it: now + TIMER_DELAY_SEC, else TIMER_DELIVER_MS."""
    try:
        if MessageConst.TIMER_DELAY_SEC in props:
            return now_ms + int(props[MessageConst.TIMER_DELAY_SEC]) * 1000
        if TIMER_DELIVER_MS in props:
            return int(props[TIMER_DELIVER_MS])
    except ValueError:
        pass
    return None


def crc32_hex(body: bytes) -> str:
    """The CRC32 body digest as the 5.x clients check it: 8 upper-case hex digits."""
    return f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"


def to_v2(ext: MessageExt, receipt_handle: str, attempt: int, invisible_ms: int, now_ms: int = 0) -> pb.Message:
    """A stored message as a ReceiveMessage response's ``Message`` (``GrpcConverter.buildMessage``)."""
    props = ext.properties
    sysp = pb.SystemProperties(
        message_id=props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or ext.msg_id,
        body_digest=pb.Digest(type=pb.DigestType.CRC32, checksum=crc32_hex(ext.body)),
        body_encoding=pb.Encoding.GZIP if ext.sys_flag & MessageSysFlag.COMPRESSED else pb.Encoding.IDENTITY,
        message_type=_message_type(ext),
        born_timestamp=timestamp(ext.born_timestamp),
        born_host=props.get(BORN_HOST) or ext.born_host[0],
        store_timestamp=timestamp(ext.store_timestamp),
        store_host=f"{ext.store_host[0]}:{ext.store_host[1]}",
        receipt_handle=receipt_handle,
        queue_id=ext.queue_id,
        queue_offset=ext.queue_offset,
        invisible_duration=duration(invisible_ms),
        delivery_attempt=attempt,
    )
    tag = props.get(MessageConst.TAGS)
    if tag:
        sysp.tag = tag
    keys = props.get(MessageConst.KEYS)
    if keys:
        sysp.keys.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    if SHARDING_KEY in props:
        sysp.message_group = props[SHARDING_KEY]
    if TRACE_CONTEXT in props:
        sysp.trace_context = props[TRACE_CONTEXT]
    deliver_ms = _delivery_ms(props, now_ms)
    if deliver_ms is not None:
        sysp.delivery_timestamp.CopyFrom(timestamp(deliver_ms))
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=ext.topic), user_properties=user, system_properties=sysp,
                      body=ext.body)
