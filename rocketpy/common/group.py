"""A consumer group's settings, as brokers keep them in ``subscriptionGroup.json`` and admin tools
send them (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): RocketMQ's ``SubscriptionGroupConfig``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class SubscriptionGroupConfig:
    """One consumer group's broker-side settings (defaults as Java)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5: the group's POP consumers get each queue in order, one batch in flight (5.x FIFO)
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, name: str, obj: Any) -> SubscriptionGroupConfig:
        """Parse :meth:`to_json`'s shape (the UPDATE_AND_CREATE_SUBSCRIPTIONGROUP body too).

        :raises ValueError: when ``obj`` is not an object or a number does not parse.
        """
        if not isinstance(obj, dict):
            raise ValueError(f"subscription group {name!r} is not a JSON object")
        d = cls(name)
        return cls(
            str(obj.get("groupName") or name),
            bool(obj.get("consumeEnable", d.consume_enable)),
            bool(obj.get("consumeFromMinEnable", d.consume_from_min_enable)),
            bool(obj.get("consumeBroadcastEnable", d.consume_broadcast_enable)),
            int(obj.get("retryQueueNums", d.retry_queue_nums)),
            int(obj.get("retryMaxTimes", d.retry_max_times)),
            int(obj.get("brokerId", d.broker_id)),
            int(obj.get("whichBrokerWhenConsumeSlowly", d.which_broker_when_consume_slowly)),
            bool(obj.get("notifyConsumerIdsChangedEnable", d.notify_consumer_ids_changed_enable)),
            bool(obj.get("consumeMessageOrderly", d.consume_message_orderly)),
        )
