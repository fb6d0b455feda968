"""The copy of an unacked POP message that goes to its group's retry topic.

As RocketMQ 5's ``PopReviveService.reviveRetry``: same body, flag, system flag, born time and
properties (so the same message id), ``reconsume_times + 1``, queue 0 of the retry topic, and the
time of the first pop. Unlike it, the born host is kept, and a message without a client id gets its
offset id as one (what the 5.x clients saw as its id), so the id stays across deliveries.
"""

from __future__ import annotations

from rocketpy.common.message import MessageConst, MessageExt

#: ``MessageConst.PROPERTY_FIRST_POP_TIME``
FIRST_POP_TIME = "1ST_POP_TIME"
#: Left from an earlier delayed delivery: the store would delay the copy again (sendback drops them too).
_DELAYING = (MessageConst.DELAY_TIME_LEVEL, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID)
#: A timer request: kept once the timer delivered the message (``TIMER_OUT_MS``: never parked again),
#: dropped from a message that never went through the timer (it would be parked or refused).
_TIMER = (MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC, MessageConst.TIMER_DELAY_MS)


def revived_copy(original: MessageExt, retry_topic: str, first_pop_ms: int) -> MessageExt:
    """``original`` (as stored) for ``retry_topic``, one more reconsume time."""
    props = dict(original.properties)
    for key in _DELAYING if MessageConst.TIMER_OUT_MS in props else _DELAYING + _TIMER:
        props.pop(key, None)
    props.setdefault(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, original.msg_id)
    props.setdefault(MessageConst.RETRY_TOPIC, original.topic)  # the DLQ copy names the real topic
    if original.reconsume_times == 0 or FIRST_POP_TIME not in props:
        props[FIRST_POP_TIME] = str(first_pop_ms)
    return MessageExt(
        topic=retry_topic,
        body=original.body,
        flag=original.flag,
        properties=props,
        queue_id=0,
        sys_flag=original.sys_flag,
        born_timestamp=original.born_timestamp,
        born_host=original.born_host,
        store_host=original.store_host,
        reconsume_times=original.reconsume_times + 1,
    )
