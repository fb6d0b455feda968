"""The store's side of timer messages (RocketMQ 5 ``HookUtils.handleScheduleMessage``): a NOT/COMMIT
message with ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` and a delivery time in
the future is stored on ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` and its real topic and
queue in properties; that queue's tags code holds the time it is due (``TimerMessageService`` in the
broker delivers it then). Plain code, run under the commit log's encode step."""

from __future__ import annotations

from rocketpy.common.message import MessageConst, MessageExt, MessageSysFlag
from rocketpy.common.topic import TIMER_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.status import PutMessageStatus

#: The properties that ask for a timer, in the order Java reads them.
TIMER_PROPERTIES = (MessageConst.TIMER_DELAY_SEC, MessageConst.TIMER_DELAY_MS, MessageConst.TIMER_DELIVER_MS)
_TIMED_TYPES = (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE)
_TRAN_MASK = MessageSysFlag.TRANSACTION_MASK
PRECISIONS = (100, 200, 500, 1000)
#: Parked already, or a half message (its timer applies once committed, never once given up).
_UNTIMED_TOPICS = (TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)


def is_timer_request(props: dict[str, str]) -> bool:
    """True when a message carries one of the properties asking for a timer."""
    return (MessageConst.TIMER_DELIVER_MS in props or MessageConst.TIMER_DELAY_SEC in props
            or MessageConst.TIMER_DELAY_MS in props)


def delete_key(real_topic: str, uniq_key: str) -> str:
    """The ``TIMER_DEL_UNIQKEY`` value that cancels the timer message ``uniq_key`` of ``real_topic``."""
    return f"{real_topic}+{uniq_key}"


def _delay_level(props: dict[str, str]) -> int:
    try:
        return int(props.get(MessageConst.DELAY_TIME_LEVEL, "0"))
    except ValueError:
        return 0


class TimerRules:
    """:param config: gives ``timer_wheel_enable``, ``timer_max_delay_sec`` and ``timer_precision_ms``
    (rounded down to 100, 200, 500 or 1000 as Java's setter does)."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.enabled = config.timer_wheel_enable
        self.max_delay_ms = config.timer_max_delay_sec * 1000
        self.precision_ms = max([p for p in PRECISIONS if p <= config.timer_precision_ms] or [PRECISIONS[0]])
        self.illegal_remark = (
            f"timer message illegal, the delay time should not be bigger than the max delay {self.max_delay_ms}ms; "
            "or if set del msg, the delay time should be bigger than the current time")
        self.disabled_remark = f"accurate timer message is not enabled, timerWheelEnable is {str(self.enabled).lower()}"

    def divert(self, msg: MessageExt, now_ms: int) -> PutMessageStatus | None:
        """Park a timer message due later on the timer topic; a refusal status, or None (stored as
        it is, or parked). A DELAY level wins: the timer properties are dropped."""
        props = msg.properties
        if msg.sys_flag & _TRAN_MASK not in _TIMED_TYPES or msg.topic in _UNTIMED_TOPICS:
            return None
        if _delay_level(props) > 0:
            for name in TIMER_PROPERTIES:
                props.pop(name, None)
            return None
        if MessageConst.TIMER_OUT_MS in props:  # been through the timer already: deliver as it is
            return None
        if not self.enabled:
            return PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
        try:
            if MessageConst.TIMER_DELAY_SEC in props:
                deliver_ms = now_ms + int(props[MessageConst.TIMER_DELAY_SEC]) * 1000
            elif MessageConst.TIMER_DELAY_MS in props:
                deliver_ms = now_ms + int(props[MessageConst.TIMER_DELAY_MS])
            else:
                deliver_ms = int(props[MessageConst.TIMER_DELIVER_MS])
        except ValueError:
            return PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
        if deliver_ms <= now_ms:  # due already: stored where it was sent, unless it is a cancel
            return PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL if MessageConst.TIMER_DEL_UNIQKEY in props else None
        if deliver_ms - now_ms > self.max_delay_ms:
            return PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
        props[MessageConst.TIMER_OUT_MS] = str(self.slot_ms(deliver_ms))
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic, msg.queue_id = TIMER_TOPIC, 0
        return None

    def slot_ms(self, deliver_ms: int) -> int:
        """``TIMER_OUT_MS`` of a message due at ``deliver_ms``: Java's slot, the precision step before
        the delivery time (the slot is due one step later)."""
        precision = self.precision_ms
        return deliver_ms - precision if deliver_ms % precision == 0 else deliver_ms // precision * precision

    def due_ms(self, msg: MessageExt, default: int) -> int:
        """A parked message's due time (ms), its queue's tags code: ``TIMER_OUT_MS`` + the precision
        (when Java's wheel reaches the slot); ``default`` when it has none (due at once)."""
        try:
            return int(msg.properties[MessageConst.TIMER_OUT_MS]) + self.precision_ms
        except (KeyError, ValueError):
            return default

    def remark(self, status: PutMessageStatus) -> str | None:
        """The send response's remark for a refusal of :meth:`divert`."""
        if status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL:
            return self.illegal_remark
        if status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE:
            return self.disabled_remark
        return None
