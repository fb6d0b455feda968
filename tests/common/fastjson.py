"""fastjson output in tests: :func:`rocketpy.common.fastjson.loads`, and the key it gives a queue."""

from __future__ import annotations

from typing import Any

from rocketpy.common.fastjson import loads as fastjson_loads

__all__ = ["fastjson_loads", "mq_key"]


def mq_key(topic: str, broker_name: str, queue_id: int) -> tuple[tuple[str, Any], ...]:
    """The key :func:`fastjson_loads` gives a ``MessageQueue`` object key."""
    return (("brokerName", broker_name), ("queueId", queue_id), ("topic", topic))
