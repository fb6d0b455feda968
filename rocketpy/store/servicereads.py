"""The read half of :class:`~rocketpy.store.service.StoreService` (doc/store-api.md): queue
bounds in memory, everything else one hop in the read pool, so reads never wait for appends."""

from __future__ import annotations

from typing import Any, Callable, cast

from twisted.internet.defer import Deferred, fail, succeed

from rocketpy.common.message import MessageExt
from rocketpy.interfaces import IMessageStore
from rocketpy.store.stats import StoreStats
from rocketpy.store.status import GetMessageResult, QueryMessageResult


class StoreReads:
    """Reads of the blocking store ``_store``; ``_in_read_pool`` runs a call in the read pool."""

    _store: IMessageStore
    _in_read_pool: Callable[..., Deferred[Any]]

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return cast(int, self._store.get_max_offset_in_queue(topic, queue_id))

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return cast(int, self._store.get_min_offset_in_queue(topic, queue_id))

    @property
    def max_physical_offset(self) -> int:
        return cast(int, self._store.max_physical_offset)

    @property
    def min_physical_offset(self) -> int:
        return cast(int, self._store.min_physical_offset)

    @property
    def flushed_offset(self) -> int:
        return cast(int, self._store.flushed_offset)

    @property
    def stats(self) -> StoreStats:
        """The store's counters (written by its writer thread; plain ints, read as they are)."""
        return cast(StoreStats, self._store.stats)

    @property
    def checked_disk_ratio(self) -> float:
        """The store partitions' used ratio at the last retention check (-1: unreadable)."""
        return cast(float, self._store.checked_disk_ratio)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tag_filter: Callable[[int], bool] | None = None,
                    record_filter: Callable[[bytes], bool] | None = None) -> Deferred[GetMessageResult]:
        """A pull's read: on the reactor thread when every page it reads is in memory (the store's
        ``get_message_resident``, compiled module only: no disk wait, no thread hop), else in the
        read pool."""
        try:
            result = self.get_message_resident(group, topic, queue_id, offset, max_msg_nums, tag_filter, record_filter)
        except Exception:
            return fail()
        if result is not None:
            return succeed(result)
        return self._in_read_pool(self._store.get_message, group, topic, queue_id, offset,
                                  max_msg_nums, tag_filter, record_filter)

    def get_message_resident(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                             tag_filter: Callable[[int], bool] | None = None,
                             record_filter: Callable[[bytes], bool] | None = None) -> GetMessageResult | None:
        """:meth:`get_message` now, on this thread, when every page it reads is in memory; None
        when one is not or the store cannot tell (then :meth:`get_message`)."""
        resident = getattr(self._store, "get_message_resident", None)
        if resident is None:
            return None
        return cast("GetMessageResult | None",
                    resident(group, topic, queue_id, offset, max_msg_nums, tag_filter, record_filter))

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> Deferred[int]:
        return self._in_read_pool(self._store.get_offset_in_queue_by_time, topic, queue_id, timestamp_ms)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> Deferred[int]:
        return self._in_read_pool(self._store.get_earliest_message_time, topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> Deferred[int]:
        return self._in_read_pool(self._store.get_commit_log_offset_in_queue, topic, queue_id, cq_offset)

    def query_consume_time_span(self, topic: str, queue_id: int,
                                consumer_offset: int) -> Deferred[tuple[int, int, int, int]]:
        return self._in_read_pool(self._store.query_consume_time_span, topic, queue_id, consumer_offset)

    def next_store_times(self, positions: list[tuple[str, int, int]]) -> Deferred[list[int]]:
        """Per ``(topic, queue id, offset)``, the store time (ms) of the message at that offset
        (the oldest one when the offset is below it), -1 at the end: one read-pool hop for all."""
        return self._in_read_pool(_next_store_times, self._store, positions)

    def commit_log_figures(self) -> Deferred[tuple[int, float]]:
        """The store time (ms) of the commit log's oldest message (-1 when empty) and the used ratio
        of its partition (-1 when unknown), measured now: GET_BROKER_RUNTIME_INFO's
        ``earliestMessageTimeStamp`` and ``commitLogDiskRatio``."""
        return self._in_read_pool(_commit_log_figures, self._store)

    def query_consume_queue(self, topic: str, queue_id: int, index: int,
                            count: int) -> Deferred[tuple[int, int, list[tuple[int, int, int]] | None] | None]:
        return self._in_read_pool(self._store.query_consume_queue, topic, queue_id, index, count)

    def look_message_by_offset(self, offset: int) -> Deferred[MessageExt | None]:
        return self._in_read_pool(self._store.look_message_by_offset, offset)

    def select_one_message_by_offset(self, offset: int) -> Deferred[bytes | None]:
        return self._in_read_pool(self._store.select_one_message_by_offset, offset)

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int) -> Deferred[QueryMessageResult]:
        return self._in_read_pool(self._store.query_message, topic, key, max_num, begin_ms, end_ms)

    def get_commit_log_data(self, offset: int, size: int = -1) -> Deferred[bytes | None]:
        """HA master: ``size`` bytes of commit log at ``offset`` (-1: to the end of its file)."""
        return self._in_read_pool(self._store.get_commit_log_data, offset, size)


def _next_store_times(store: Any, positions: list[tuple[str, int, int]]) -> list[int]:
    return [store.query_consume_time_span(topic, queue_id, offset)[3] for topic, queue_id, offset in positions]


def _commit_log_figures(store: Any) -> tuple[int, float]:
    oldest = store.look_message_by_offset(store.min_physical_offset)
    return (-1 if oldest is None else oldest.store_timestamp), store.disk_usage_ratio()
