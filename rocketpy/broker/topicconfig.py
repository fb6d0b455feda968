"""The broker's topic table: system topics, auto-creation, data version, ``topics.json``.

Behaviour follows Java 4.9.4 ``TopicConfigManager`` and ``TopicValidator``
(doc/wire.md §2–3). Everything runs on the
reactor thread; persisting writes a small JSON file atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import LogLevel

from rocketpy.common.topic import (
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    REPLY_TOPIC_POSTFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    SELF_TEST_TOPIC,
    TBW102,
    DataVersion,
    TopicConfig,
    is_inherited,
)
from rocketpy.util.configfile import JsonConfigFile

#: Number of delay levels, one queue of ``SCHEDULE_TOPIC_XXXX`` each.
SCHEDULE_QUEUE_NUMS = 18


class TopicConfigManager(JsonConfigFile):
    """All topics of one broker, with the data version the name server compares.

    :param clock: gives the data-version timestamps.
    :param path: ``topics.json``; None keeps the table in memory only.
    """

    data_version: DataVersion

    def __init__(
        self,
        clock: IReactorTime,
        path: str | None = None,
        *,
        broker_name: str = "broker-a",
        cluster_name: str = "DefaultCluster",
        auto_create_topic_enable: bool = True,
        default_topic_queue_nums: int = 8,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
        trace_topic: str | None = None,
    ) -> None:
        self._clock = clock
        self.path = path
        self._auto_create = auto_create_topic_enable
        self._table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(0, self._now_ms())
        self._listeners: list[Callable[[], object]] = []
        #: topics a slave created from replicated records, until its master's table names them
        self.learnt: set[str] = set()
        for config in self._system_topics(
            broker_name, cluster_name, default_topic_queue_nums, cluster_topic_enable, broker_topic_enable
        ):
            self._table[config.topic_name] = config
        if trace_topic:  # traceTopicEnable: one queue, like RocketMQ
            self._table[trace_topic] = TopicConfig(trace_topic, 1, 1)
        #: the topics the broker creates itself (GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
        self.system_topics = frozenset(self._table)

    def _system_topics(
        self, broker: str, cluster: str, default_nums: int, cluster_rw: bool, broker_rw: bool
    ) -> Iterator[TopicConfig]:
        rw = PERM_READ | PERM_WRITE
        yield TopicConfig(SELF_TEST_TOPIC, 1, 1)
        if self._auto_create:
            yield TopicConfig(TBW102, default_nums, default_nums, PERM_INHERIT | rw)
        yield TopicConfig(BENCHMARK_TOPIC, 1024, 1024)
        yield TopicConfig(cluster, perm=PERM_INHERIT | (rw if cluster_rw else 0))
        yield TopicConfig(broker, 1, 1, PERM_INHERIT | (rw if broker_rw else 0))
        yield TopicConfig(OFFSET_MOVED_EVENT, 1, 1)
        yield TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS)
        yield TopicConfig(TIMER_TOPIC, 1, 1)
        yield TopicConfig(f"{cluster}_{REPLY_TOPIC_POSTFIX}", 1, 1)

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- reads ------------------------------------------------------------

    def select_topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None when this broker does not have it."""
        return self._table.get(topic)

    def live_table(self) -> Mapping[str, TopicConfig]:
        """The table itself (name → config), as it changes: for readers on the hot path that must
        not copy it (the send path's compiled check); never changed through this view."""
        return self._table

    def topics(self) -> dict[str, TopicConfig]:
        """A snapshot of the table (name → config)."""
        return dict(self._table)

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    # -- changes ----------------------------------------------------------

    def add_change_listener(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` after a topic was created or updated (re-register at once)."""
        self._listeners.append(listener)

    def create_topic_in_send_message_method(
        self,
        topic: str,
        default_topic: str,
        remote_addr: str,
        client_default_queue_nums: int,
        topic_sys_flag: int = 0,
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from the template ``default_topic`` (normally TBW102).

        The template must exist and carry INHERIT; the new topic gets
        ``min(client_default_queue_nums, template write queues)`` queues and
        the template's perm without INHERIT.

        :return: the (existing or new) config, or None when nothing could be created.
        """
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        template = self._table.get(default_topic)
        if template is None:
            self.log.warn(
                "create topic {topic} from {template} for {peer}: template does not exist",
                topic=topic, template=default_topic, peer=remote_addr,
            )
            return None
        perm = template.perm
        if default_topic == TBW102 and not self._auto_create:
            perm = PERM_READ | PERM_WRITE
        if not is_inherited(perm):
            self.log.warn(
                "create topic {topic} from {template} for {peer}: template perm {perm} lacks INHERIT",
                topic=topic, template=default_topic, peer=remote_addr, perm=perm,
            )
            return None
        queues = max(0, min(client_default_queue_nums, template.write_queue_nums))
        config = TopicConfig(
            topic, queues, queues, perm & ~PERM_INHERIT, template.topic_filter_type, topic_sys_flag
        )
        self.log.info(
            "auto-created topic {topic} ({queues} queues) from {template} for {peer}",
            topic=topic, queues=queues, template=default_topic, peer=remote_addr,
        )
        self._put(config)
        return config

    def create_topic_in_send_message_back_method(
        self,
        topic: str,
        client_default_queue_nums: int = 1,
        perm: int = PERM_READ | PERM_WRITE,
        topic_sys_flag: int = 0,
    ) -> TopicConfig:
        """Create a ``%RETRY%`` / ``%DLQ%`` topic when absent; the existing one otherwise."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        config = TopicConfig(
            topic, client_default_queue_nums, client_default_queue_nums, perm, topic_sys_flag=topic_sys_flag
        )
        self.log.info("created topic {topic} ({n} queues)", topic=topic, n=client_default_queue_nums)
        self._put(config)
        return config

    def learn_queue(self, topic: str, queue_id: int) -> bool:
        """A slave saw a replicated record of ``topic`` queue ``queue_id``: make the topic readable
        at once (RocketMQ's slave waits up to 10 s for its master's table, answering TOPIC_NOT_EXIST).

        A topic the table has from the master is left alone; a learnt one grows to the queue. The
        data version does not move, so the master's table, when it comes, is still copied and wins.

        :returns: True when the table changed.
        """
        config = self._table.get(topic)
        if config is not None and (topic not in self.learnt or queue_id < config.read_queue_nums):
            return False
        nums = max(queue_id + 1, config.read_queue_nums if config is not None else 0)
        self._table[topic] = TopicConfig(topic, nums, nums)
        self.learnt.add(topic)
        self.log.info("slave learnt topic {topic} ({n} queues) from replicated records", topic=topic, n=nums)
        self.persist()
        return True

    def update_topic_config(self, config: TopicConfig) -> None:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC)."""
        self._put(config)

    def delete_topic_config(self, topic: str) -> bool:
        """Remove ``topic``; True when it existed."""
        if self._table.pop(topic, None) is None:
            return False
        self.data_version.bump(self._now_ms())
        self.persist()
        return True

    def _put(self, config: TopicConfig) -> None:
        self._table[config.topic_name] = config
        self.data_version.bump(self._now_ms())
        self.persist()
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                self.log.failure("topic change listener failed", level=LogLevel.error)

    # -- persistence ------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper: ``{"dataVersion":…,"topicConfigTable":…}``.

        The same object is ``topics.json``, the GET_ALL_TOPIC_CONFIG body and
        the registration's ``topicConfigSerializeWrapper``.
        """
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: c.to_json() for name, c in self._table.items()},
        }

    def replace_json(self, obj: dict[str, Any]) -> None:
        """The master's table (Java 5's slave sync): topics it lacks are deleted, except those this
        slave learnt from records newer than the copy."""
        kept = (obj.get("topicConfigTable") or {}).keys() | self.learnt
        for name in [name for name in self._table if name not in kept]:
            del self._table[name]
        self.apply_json(obj)

    def apply_json(self, obj: dict[str, Any]) -> None:
        """Loaded topics win over the built-in ones; the data version is restored."""
        table = obj.get("topicConfigTable") or {}
        loaded = {name: TopicConfig.from_json(name, value) for name, value in table.items()}
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self._table.update(loaded)
        self.learnt.difference_update(loaded)
