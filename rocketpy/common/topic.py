"""Topics as every layer names them: permission bits, system topics, name rules, TopicConfig.

The constants and checks are RocketMQ's ``PermName``, ``TopicValidator`` and ``MixAll``;
:class:`TopicConfig` and :class:`DataVersion` are the JSON shapes brokers persist in
``topics.json`` and send with every registration (see ``doc/namesrv.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: ``perm`` bits (``PermName``).
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_PRIORITY = 8

#: The topic brokers use as template for auto-created topics (``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``).
TBW102 = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
#: Where the store parks delayed messages, one queue per delay level.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: Where the store parks timer messages (RocketMQ 5's ``TimerMessageStore.TIMER_TOPIC``), queue 0.
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"

#: Topics no producer may send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``).
SEND_FORBIDDEN_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,  # not in Java's set: a send there would bypass the timer's checks
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
#: Longest topic name (``TopicValidator.TOPIC_MAX_LENGTH``); the stored record keeps its length in one byte.
TOPIC_MAX_LENGTH = 127
#: The characters a topic name may use.
VALID_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid topic name (Java's wording), or None when it is."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not VALID_TOPIC.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}."
    return None


def is_send_forbidden(topic: str) -> bool:
    """True for the system topics producers may not send to."""
    return topic in SEND_FORBIDDEN_TOPICS


def send_topic_problem(topic: str) -> str | None:
    """Why a producer may not send to ``topic`` (invalid or forbidden), or None."""
    problem = topic_problem(topic)
    if problem is None and is_send_forbidden(topic):
        problem = f"Sending message to topic[{topic}] is forbidden."
    return problem


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_inherited(perm: int) -> bool:
    return bool(perm & PERM_INHERIT)


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``."""
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(slots=True)
class TopicConfig:
    """One topic of a broker (defaults as Java ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        """The fastjson shape used by ``topics.json``, registration and admin bodies."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, name: str, obj: Any) -> TopicConfig:
        """Parse the :meth:`to_json` shape; missing keys take the defaults.

        :raises ValueError: when ``obj`` is not an object or a number does not parse.
        """
        if not isinstance(obj, dict):
            raise ValueError(f"topic config {name!r} is not a JSON object")
        d = cls(name)
        return cls(
            str(obj.get("topicName") or name),
            int(obj.get("readQueueNums", d.read_queue_nums)),
            int(obj.get("writeQueueNums", d.write_queue_nums)),
            int(obj.get("perm", d.perm)),
            str(obj.get("topicFilterType") or d.topic_filter_type),
            int(obj.get("topicSysFlag", d.topic_sys_flag)),
            bool(obj.get("order", d.order)),
        )


@dataclass(slots=True)
class DataVersion:
    """Counter + timestamp (ms) of a config table; bumped on every change, compared by the name server."""

    counter: int = 0
    timestamp: int = 0

    def bump(self, now_ms: int) -> None:
        """Java ``nextVersion()``: new timestamp, counter + 1."""
        self.timestamp = now_ms
        self.counter += 1

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        if not isinstance(obj, dict):
            return cls()
        return cls(int(obj.get("counter", 0)), int(obj.get("timestamp", 0)))
