"""Test doubles for the send and pull processors: an in-memory store service and a channel."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred, succeed

from rocketpy.common.message import MessageExt, encode_record, offset_msg_id, patch_record, tags_code
from rocketpy.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)


class FakeChannel:
    """A connection as processors see it: only its peer address."""

    def __init__(self, remote_address: str = "10.0.0.9:53211") -> None:
        self.remote_address = remote_address


class FakeStoreService:
    """The parts of ``StoreService`` the processors call, in memory and synchronous.

    Every queue keeps ``(tags_code, record)`` pairs; ``put_status`` forces the status of
    the next puts (the message is then kept only for the statuses a broker reports as
    stored); ``min_offsets`` raises a queue's minimum offset; ``reads`` logs reads.
    """

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        self.min_offsets: dict[tuple[str, int], int] = {}
        self.puts: list[tuple[bool, list[MessageExt]]] = []
        self.reads: list[tuple[str, str, int, int, int]] = []
        self.put_status = PutMessageStatus.PUT_OK
        self.busy = False
        self.commit_log_offset = 0
        self.listeners: list[Callable[[str, int, int], None]] = []
        self.notify = True

    # -- writes --

    def is_busy(self) -> bool:
        return self.busy

    def put_message(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        return succeed(self._put([msg], batch=False))

    def put_messages(self, msgs: list[MessageExt]) -> Deferred[PutMessageResult]:
        return succeed(self._put(msgs, batch=True))

    def put_many(self, puts: list[list[MessageExt]]) -> Deferred[list[PutMessageResult]]:
        return succeed([self._put(list(msgs), batch=len(msgs) > 1) for msgs in puts])

    def _put(self, msgs: list[MessageExt], batch: bool) -> PutMessageResult:
        self.puts.append((batch, msgs))
        status = self.put_status
        if status not in (
            PutMessageStatus.PUT_OK,
            PutMessageStatus.FLUSH_DISK_TIMEOUT,
            PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
            PutMessageStatus.SLAVE_NOT_AVAILABLE,
        ):
            return PutMessageResult(status)
        key = (msgs[0].topic, msgs[0].queue_id)
        queue = self.queues.setdefault(key, [])
        first_offset, first_physical, ids = len(queue), self.commit_log_offset, []
        for msg in msgs:
            msg.queue_offset, msg.commit_log_offset = len(queue), self.commit_log_offset
            record = encode_record(msg)
            patch_record(record, msg.queue_offset, msg.commit_log_offset, 1_700_000_000_000)
            queue.append((tags_code(msg.tags), bytes(record)))
            ids.append(offset_msg_id(msg.store_host, msg.commit_log_offset))
            self.commit_log_offset += len(record)
        append = AppendMessageResult(
            AppendMessageStatus.PUT_OK, first_physical, self.commit_log_offset - first_physical,
            ids, first_offset, len(msgs),
        )
        if self.notify:
            for listener in self.listeners:
                listener(key[0], key[1], len(queue))
        return PutMessageResult(status, append)

    # -- reads --

    def add_arrival_listener(self, listener: Callable[[str, int, int], None]) -> None:
        self.listeners.append(listener)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), ()))

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min_offsets.get((topic, queue_id), 0)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
    ) -> Deferred[GetMessageResult]:
        """The store's status table (spec store-and-client.md §5), over the in-memory queue."""
        self.reads.append((group, topic, queue_id, offset, max_msg_nums))
        queue = self.queues.get((topic, queue_id), [])
        low, high = self.get_min_offset_in_queue(topic, queue_id), len(queue)

        def result(
            status: GetMessageStatus, next_offset: int, records: list[bytes] | None = None
        ) -> Deferred[GetMessageResult]:
            return succeed(GetMessageResult(status, next_offset, low, high, records or []))

        if high == 0:
            return result(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
        if offset < low:
            return result(GetMessageStatus.OFFSET_TOO_SMALL, low)
        if offset == high:
            return result(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > high:
            return result(GetMessageStatus.OFFSET_OVERFLOW_BADLY, high)
        found: list[bytes] = []
        position = offset
        while position < high and len(found) < max_msg_nums:
            code, record = queue[position]
            position += 1
            if tag_filter is None or tag_filter(code):
                found.append(record)
        if not found:
            return result(GetMessageStatus.NO_MATCHED_MESSAGE, position)
        return result(GetMessageStatus.FOUND, position, found)
