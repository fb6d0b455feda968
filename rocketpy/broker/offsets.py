"""Committed consumer offsets (``ConsumerOffsetManager``), kept in ``consumerOffset.json``.

Keys are ``topic@group`` → ``{queueId: offset}`` as in Java 4.9. The
controller persists the table every 5 s and on stop.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from rocketpy.broker.config import JsonConfigFile

TOPIC_GROUP_SEPARATOR = "@"


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
        commits -1 after a GET_MAX_OFFSET start (observed-clients.md §4).
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

    def topics_of_group(self, group: str) -> set[str]:
        """Topics ``group`` committed offsets for."""
        return {t for t, g in self._keys() if g == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups that committed offsets for ``topic``."""
        return {g for t, g in self._keys() if t == topic}

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of ``topic`` (the topic was deleted)."""
        for t, g in list(self._keys()):
            if t == topic:
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
