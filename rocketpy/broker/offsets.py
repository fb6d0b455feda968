"""Per-queue consumer state: committed offsets and orderly-consumption locks.

Offsets (``ConsumerOffsetManager``) are kept as ``topic@group`` →
``{queueId: offset}`` in ``consumerOffset.json`` as in Java 4.9; the
controller persists them every 5 s and on stop. Queue locks
(``RebalanceLockManager``) live in memory and expire 60 s after the holder
last locked them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from rocketpy.common.route import MessageQueue
from rocketpy.util.configfile import JsonConfigFile

TOPIC_GROUP_SEPARATOR = "@"
#: Seconds a queue lock lives without being renewed (``rocketmq.broker.rebalance.lockMaxLiveTime``).
LOCK_MAX_LIVE_TIME = 60.0


def offset_key(topic: str, group: str) -> str:
    """``topic@group``."""
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


class ConsumerOffsetManager(JsonConfigFile):
    """Offsets committed by consumer groups, per topic and queue.

    :param path: ``consumerOffset.json``; None keeps the table in memory only.
    """

    log = Logger()

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._table: dict[str, dict[int, int]] = {}

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` for the queue; negative offsets mean "none" and are ignored.

        ali-ons reports an untouched queue's offset 0 as -1, the C++ client
        commits -1 after a GET_MAX_OFFSET start (doc/wire.md §5).
        """
        if offset < 0:
            return
        queues = self._table.setdefault(offset_key(topic, group), {})
        previous = queues.get(queue_id)
        if previous is not None and offset < previous:
            self.log.debug(
                "offset of {group}/{topic}/{qid} moved back {old} -> {new} by {client}",
                group=group, topic=topic, qid=queue_id, old=previous, new=offset, client=client_host,
            )
        queues[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self._table.get(offset_key(topic, group), {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Every committed queue offset of ``group`` on ``topic`` (queue id → offset)."""
        return dict(self._table.get(offset_key(topic, group), {}))

    def positions(self) -> list[tuple[str, str, int, int]]:
        """Every committed ``(group, topic, queue_id, offset)`` (what retention must not delete unread)."""
        return [(group, topic, qid, offset) for topic, group in self._keys()
                for qid, offset in self._table[offset_key(topic, group)].items()]

    def topics_of_group(self, group: str) -> set[str]:
        """Topics ``group`` committed offsets for."""
        return {t for t, g in self._keys() if g == group}

    def pairs(self) -> list[tuple[str, str]]:
        """Every ``(topic, group)`` with committed offsets."""
        return self._keys()

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups that committed offsets for ``topic``."""
        return {g for t, g in self._keys() if t == topic}

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of ``topic`` (the topic was deleted)."""
        for t, g in list(self._keys()):
            if t == topic:
                del self._table[offset_key(t, g)]

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> None:
        """Give ``dest_group`` the offsets ``src_group`` committed on ``topic`` (CLONE_GROUP_OFFSET)."""
        offsets = self._table.get(offset_key(topic, src_group))
        if offsets is not None:
            self._table[offset_key(topic, dest_group)] = dict(offsets)

    def remove_group(self, group: str) -> None:
        """Forget every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with ``removeOffset``)."""
        for t, g in list(self._keys()):
            if g == group:
                del self._table[offset_key(t, g)]

    def _keys(self) -> list[tuple[str, str]]:
        out = []
        for key in self._table:
            topic, sep, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if sep:
                out.append((topic, group))
        return out

    def to_json(self) -> dict[str, Any]:
        """``{"offsetTable":{"topic@group":{"0":offset}}}``."""
        return {
            "offsetTable": {
                key: {str(qid): off for qid, off in sorted(queues.items())} for key, queues in self._table.items()
            }
        }

    def apply_json(self, obj: dict[str, Any]) -> None:
        table = obj.get("offsetTable") or {}
        for key, queues in table.items():
            self._table[str(key)] = {int(qid): int(off) for qid, off in queues.items()}


class RebalanceLockManager:
    """Which client of a group holds each queue (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, doc/wire.md §7).

    :param clock: lock ages are measured with it.
    :param max_live: seconds after the last lock by its holder when a lock may be taken over.
    """

    def __init__(self, clock: IReactorTime, max_live: float = LOCK_MAX_LIVE_TIME) -> None:
        self._clock = clock
        self._max_live = max_live
        self._table: dict[str, dict[MessageQueue, tuple[str, float]]] = {}

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock every queue that is free, expired or already held by ``client_id``; the ones it now holds."""
        now = self._clock.seconds()
        locks = self._table.setdefault(group, {})
        held = []
        for mq in mqs:
            owner = locks.get(mq)
            if owner is None or owner[0] == client_id or now - owner[1] > self._max_live:
                locks[mq] = (client_id, now)
                held.append(mq)
        return held

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds; other clients' locks stay."""
        locks = self._table.get(group, {})
        for mq in mqs:
            owner = locks.get(mq)
            if owner is not None and owner[0] == client_id:
                del locks[mq]
