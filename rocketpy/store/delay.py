"""The store's side of delayed delivery (RocketMQ 4.9 ``CommitLog.putMessage``): a message with a
DELAY level is stored on ``SCHEDULE_TOPIC_XXXX`` queue level - 1, and that queue's tags code holds
its delivery time (``ScheduleMessageService`` in the broker delivers it then)."""

from __future__ import annotations

from collections.abc import Sequence

from rocketpy.common.message import MessageConst, MessageExt, MessageSysFlag
from rocketpy.common.topic import SCHEDULE_TOPIC

_NO_QUEUE_OFFSET = (MessageSysFlag.TRANSACTION_PREPARED_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
_TRAN_MASK = MessageSysFlag.TRANSACTION_MASK


class DelayLevels:
    """:param delay_ms: the delay of each level (level 1 first), ``MessageStoreConfig.delay_level_table()``."""

    def __init__(self, delay_ms: Sequence[int]) -> None:
        self._delay_ms = list(delay_ms)

    def divert(self, msg: MessageExt) -> None:
        """Move a delayed NOT/COMMIT message to the schedule topic, its real topic and queue in
        properties (a level above the highest counts as the highest)."""
        if msg.sys_flag & _TRAN_MASK in _NO_QUEUE_OFFSET:
            return
        try:
            level = int(msg.properties[MessageConst.DELAY_TIME_LEVEL])
        except ValueError:
            return
        if level <= 0:
            return
        level = min(level, len(self._delay_ms))
        msg.properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
        msg.properties[MessageConst.REAL_TOPIC] = msg.topic
        msg.properties[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic, msg.queue_id = SCHEDULE_TOPIC, level - 1

    def delivery_time(self, msg: MessageExt, default: int) -> int:
        """A stored schedule-topic message's delivery time (ms), its queue's tags code; ``default``
        when it has no valid level."""
        try:
            level = int(msg.properties.get(MessageConst.DELAY_TIME_LEVEL, "0"))
        except ValueError:
            return default
        if level <= 0:
            return default
        return msg.store_timestamp + self._delay_ms[min(level, len(self._delay_ms)) - 1]
