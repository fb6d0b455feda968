"""Test doubles shared by the test packages: a channel, a server's registry, in-memory store services,
a blocking store.

Both declare the interface they stand in for, and ``tests/test_fakes.py`` checks them (and
every subclass the tests make) with ``verifyObject``, so a fake cannot drift from the real thing.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail, gatherResults, succeed
from zope.interface import implementer

from rocketpy.common.message import (
    MessageConst,
    MessageExt,
    decode_record,
    encode_record,
    offset_msg_id,
    patch_record,
    tags_code,
)
from rocketpy.interfaces import IChannel, ICommandLocator, IMessageStore, IRequestProcessor, IStoreService
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.responders import register_responders
from rocketpy.store.arrivals import Arrival, ArrivalListeners
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.groupcommit import PutHook
from rocketpy.store.stats import StoreStats
from rocketpy.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)

PAGE = 4096
RECORD_OVERHEAD = 100  # bytes a fake record adds to its body
#: The store time (ms) of every message the fake store keeps.
STORE_MS = 1_700_000_000_000
#: Put statuses after which the message is stored (the broker reports them as sent).
_STORED = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)


@implementer(IChannel)
class FakeChannel:
    """A connection as processors see it: a peer address; it records what is sent on it.

    :ivar sent: every request, oneway or not; ``oneway`` only the oneway ones.
    :param broken: oneway sends fail; ``raises``: they raise.
    """

    def __init__(self, remote_address: str = "10.0.0.9:53211", broken: bool = False, raises: bool = False) -> None:
        self.remote_address = remote_address
        self.sent: list[RemotingCommand] = []
        self.oneway: list[RemotingCommand] = []
        self.closed = False
        self.broken = broken
        self.raises = raises

    def invoke_sync(self, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        """Recorded; the answer never comes (no test waits for one)."""
        self.sent.append(request)
        return Deferred()

    def invoke_oneway(self, request: RemotingCommand) -> Deferred[None]:
        if self.raises:
            raise ConnectionError("gone")
        if self.broken:
            return fail(ConnectionError("gone"))
        self.sent.append(request)
        self.oneway.append(request)
        return succeed(None)

    def close(self) -> None:
        self.closed = True


class Registry:
    """The registration side of a remoting server: the processor registered for each code."""

    def __init__(self) -> None:
        self.processors: dict[int, IRequestProcessor] = {}

    def register_processor(self, code: int, processor: IRequestProcessor) -> None:
        self.processors[code] = processor

    def answer(self, channel: IChannel, request: RemotingCommand) -> Any:
        """What the processor registered for ``request.code`` returns for it."""
        return self.processors[request.code].process_request(channel, request)


def registered(locator: ICommandLocator) -> Registry:
    """A :class:`Registry` holding ``locator``'s responders, as a server would."""
    registry = Registry()
    register_responders(registry, locator)
    return registry


@implementer(IStoreService)
class FakeStoreService:
    """``StoreService`` in memory and synchronous: one commit log (``log``) and consume queues of
    ``(commit-log offset, size, tags code)`` entries; every message is stored at :data:`STORE_MS`.

    ``put_status`` forces the status of the next puts (the message is then kept only for the
    statuses a broker reports as stored); ``min_offsets`` raises a queue's minimum offset;
    ``busy`` answers :meth:`is_busy`; ``notify`` False keeps arrivals from the listeners;
    ``puts`` and ``reads`` log the calls.
    """

    def __init__(self) -> None:
        self.log = bytearray()
        self.queues: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.min_offsets: dict[tuple[str, int], int] = {}
        self.puts: list[tuple[bool, list[MessageExt]]] = []
        self.reads: list[tuple[str, str, int, int, int]] = []
        self.put_status = PutMessageStatus.PUT_OK
        self.busy = False
        self.notify = True
        self.listeners = ArrivalListeners()
        self.put_hooks: list[PutHook] = []
        self.delete_requests = 0
        self.stats = StoreStats()
        self.refused: Counter[str] = Counter()
        self.checked_disk_ratio = 0.0

    min_physical_offset = 0

    @property
    def max_physical_offset(self) -> int:
        return len(self.log)

    @property
    def flushed_offset(self) -> int:
        return len(self.log)

    def queue_wait(self) -> float:
        return 0.0

    # -- writes --

    def is_busy(self) -> bool:
        return self.busy

    def put_message(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        return succeed(self._put([msg], batch=False))

    def put_messages(self, msgs: Sequence[MessageExt]) -> Deferred[PutMessageResult]:
        return succeed(self._put(list(msgs), batch=True))

    def put_many(self, puts: Sequence[Sequence[MessageExt]]) -> Deferred[list[PutMessageResult]]:
        return succeed([self._put(list(msgs), batch=len(msgs) > 1) for msgs in puts])

    def _put(self, msgs: list[MessageExt], batch: bool) -> PutMessageResult:
        self.puts.append((batch, msgs))
        status = self.put_status
        if status not in _STORED:
            return PutMessageResult(status)
        key = (msgs[0].topic, msgs[0].queue_id)
        queue = self.queues.setdefault(key, [])
        first_offset, first_physical, ids = len(queue), len(self.log), []
        for msg in msgs:
            msg.queue_offset, msg.commit_log_offset = len(queue), len(self.log)
            record = encode_record(msg)
            patch_record(record, msg.queue_offset, msg.commit_log_offset, STORE_MS)
            queue.append((len(self.log), len(record), tags_code(msg.tags)))
            ids.append(offset_msg_id(msg.store_host, msg.commit_log_offset))
            self.log += record
        append = AppendMessageResult(
            AppendMessageStatus.PUT_OK, first_physical, len(self.log) - first_physical, ids, first_offset, len(msgs),
        )
        if self.notify:
            for listener in self.listeners.of(key[0]):
                listener(key[0], key[1], len(queue))
        return PutMessageResult(status, append)

    def add_arrival_listener(self, listener: Callable[[str, int, int], None], topic: str | None = None) -> Arrival:
        return self.listeners.add(listener, topic)

    def set_consumer_positions(self, snapshot: Callable[[], Sequence[tuple[str, str, int, int]]]) -> None:
        self.positions = snapshot

    def add_put_hook(self, hook: PutHook) -> None:
        self.put_hooks.append(hook)

    def append_to_commit_log(self, offset: int, data: bytes) -> Deferred[bool]:
        """Bytes that continue the log are appended (not dispatched to queues); others refused."""
        if offset != len(self.log):
            return succeed(False)
        self.log += data
        return succeed(True)

    def execute_delete_files_manually(self) -> None:
        self.delete_requests += 1

    # -- reads --

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), ()))

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min_offsets.get((topic, queue_id), 0)

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> Deferred[GetMessageResult]:
        """The store's status table (doc/store.md), over the in-memory queue."""
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
            physical, size, code = queue[position]
            position += 1
            record = bytes(self.log[physical:physical + size])
            if (tag_filter is None or tag_filter(code)) and (record_filter is None or record_filter(record)):
                found.append(record)
        if not found:
            return result(GetMessageStatus.NO_MATCHED_MESSAGE, position)
        return result(GetMessageStatus.FOUND, position, found)

    def _entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        queue = self.queues.get((topic, queue_id), [])
        return queue[offset] if self.get_min_offset_in_queue(topic, queue_id) <= offset < len(queue) else None

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> Deferred[int]:
        """Every message is stored at STORE_MS: the minimum offset up to then, the maximum after."""
        if timestamp_ms <= STORE_MS:
            return succeed(self.get_min_offset_in_queue(topic, queue_id))
        return succeed(self.get_max_offset_in_queue(topic, queue_id))

    def get_earliest_message_time(self, topic: str, queue_id: int) -> Deferred[int]:
        found = self._entry(topic, queue_id, self.get_min_offset_in_queue(topic, queue_id))
        return succeed(-1 if found is None else STORE_MS)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> Deferred[int]:
        found = self._entry(topic, queue_id, cq_offset)
        return succeed(0 if found is None else found[0])

    def query_consume_time_span(
        self, topic: str, queue_id: int, consumer_offset: int
    ) -> Deferred[tuple[int, int, int, int]]:
        low, end = self.get_min_offset_in_queue(topic, queue_id), self.get_max_offset_in_queue(topic, queue_id)
        stored = STORE_MS if end > low else -1
        return succeed((stored, stored, stored, STORE_MS if max(consumer_offset, low) < end else -1))

    def next_store_times(self, positions: list[tuple[str, int, int]]) -> Deferred[list[int]]:
        spans = [self.query_consume_time_span(topic, queue_id, offset) for topic, queue_id, offset in positions]
        return gatherResults(spans).addCallback(lambda found: [span[3] for span in found])

    def commit_log_figures(self) -> Deferred[tuple[int, float]]:
        return succeed((STORE_MS if self.log else -1, self.checked_disk_ratio))

    def query_consume_queue(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> Deferred[tuple[int, int, list[tuple[int, int, int]] | None] | None]:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return succeed(None)
        low = self.get_min_offset_in_queue(topic, queue_id)
        entries = queue[index:index + count] if low <= index < len(queue) else None
        return succeed((low, len(queue), entries))

    def select_one_message_by_offset(self, offset: int) -> Deferred[bytes | None]:
        if not 0 <= offset <= len(self.log) - 4:
            return succeed(None)
        (size,) = struct.unpack_from(">i", self.log, offset)
        return succeed(bytes(self.log[offset:offset + size]))

    def look_message_by_offset(self, offset: int) -> Deferred[MessageExt | None]:
        return self.select_one_message_by_offset(offset).addCallback(
            lambda record: None if record is None else decode_record(record))

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int) -> Deferred[QueryMessageResult]:
        """The messages of ``topic`` whose KEYS or UNIQ_KEY is ``key`` (all stored at STORE_MS)."""
        found: list[bytes] = []
        if begin_ms <= STORE_MS <= end_ms:
            for (queue_topic, _), queue in sorted(self.queues.items()):
                for physical, size, _ in queue if queue_topic == topic else ():
                    record = bytes(self.log[physical:physical + size])
                    msg = decode_record(record)
                    keys = (msg.properties.get(MessageConst.KEYS) or "").split()
                    if key in keys or msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key:
                        found.append(record)
        return succeed(QueryMessageResult(found[:max_num], STORE_MS, len(self.log)))

    def get_commit_log_data(self, offset: int, size: int = -1) -> Deferred[bytes | None]:
        if not 0 <= offset < len(self.log):
            return succeed(None)
        return succeed(bytes(self.log[offset:] if size < 0 else self.log[offset:offset + size]))


class CannedStoreService(FakeStoreService):
    """A store service whose queue bounds come from the dicts ``max`` and ``min``, whose time
    lookups answer at once, and whose raw records (``records``) and decoded messages
    (``messages``) are set by the test; puts are only recorded (``put``)."""

    max_physical_offset = 1234

    def __init__(self) -> None:
        super().__init__()
        self.max: dict[tuple[str, int], int] = {}
        self.min: dict[tuple[str, int], int] = {}
        self.records: dict[int, bytes] = {}
        self.messages: dict[int, MessageExt] = {}
        self.put: list[MessageExt] = []
        self.selected: list[int] = []

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.max.get((topic, queue_id), 0)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min.get((topic, queue_id), 0)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> Deferred[int]:
        return succeed(timestamp_ms // 1000)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> Deferred[int]:
        return succeed(STORE_MS)

    def query_consume_queue(
        self, topic: str, queue_id: int, index: int, count: int
    ) -> Deferred[tuple[int, int, list[tuple[int, int, int]] | None] | None]:
        if topic not in ("T", "ExploreTopic"):
            return succeed(None)
        entries = [(100 * i, 10, 7) for i in range(index, min(index + count, 5))] if index < 5 else None
        return succeed((0, 5, entries))

    def query_consume_time_span(
        self, topic: str, queue_id: int, consumer_offset: int
    ) -> Deferred[tuple[int, int, int, int]]:
        following = 1_000_000 + consumer_offset if queue_id == 0 else -1
        return succeed((10, 20, 15, following))

    def look_message_by_offset(self, offset: int) -> Deferred[MessageExt | None]:
        return succeed(self.messages.get(offset))

    def select_one_message_by_offset(self, offset: int) -> Deferred[bytes | None]:
        self.selected.append(offset)
        return succeed(self.records.get(offset))

    def put_message(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        self.put.append(msg)
        return succeed(PutMessageResult(PutMessageStatus.PUT_OK, AppendMessageResult(AppendMessageStatus.PUT_OK)))


class FakeMasterStore(FakeStoreService):
    """An HA master's store: a commit log of ``log`` bytes starting at ``base``; reads of it
    answer at once or, with ``manual_reads``, when the test fires the Deferreds in ``reads``."""

    def __init__(self, base: int = 0, log: bytes = b"", manual_reads: bool = False) -> None:
        super().__init__()
        self.base = base
        self.log = bytearray(log)
        self.manual_reads = manual_reads
        self.manual: list[tuple[int, int, Deferred[bytes | None]]] = []

    @property
    def max_physical_offset(self) -> int:
        return self.base + len(self.log)

    def append(self, data: bytes) -> None:
        """Grow the log and tell the arrival listeners, as a put would."""
        self.log += data
        for listener in self.listeners.of("T"):
            listener("T", 0, 1)

    def get_commit_log_data(self, offset: int, size: int = -1) -> Deferred[bytes | None]:
        start = offset - self.base
        data = bytes(self.log[start:start + size]) if 0 <= start and start + size <= len(self.log) else None
        if not self.manual_reads:
            return succeed(data)
        d: Deferred[bytes | None] = Deferred()
        self.manual.append((offset, size, d))
        return d


class FakeSlaveStore(FakeStoreService):
    """An HA slave's store: its appends are answered by the test (``finish``), in order."""

    max_physical_offset = 0

    def __init__(self, max_offset: int = 0) -> None:
        super().__init__()
        self.max_physical_offset = max_offset
        self.pending: list[tuple[int, bytes, Deferred[bool]]] = []
        self.appended: list[tuple[int, bytes]] = []

    def append_to_commit_log(self, offset: int, data: bytes) -> Deferred[bool]:
        d: Deferred[bool] = Deferred()
        self.pending.append((offset, data, d))
        return d

    def finish(self, ok: bool = True) -> None:
        """Complete the oldest pending append."""
        offset, data, d = self.pending.pop(0)
        if ok:
            if not self.max_physical_offset:
                self.max_physical_offset = offset
            self.max_physical_offset += len(data)
            self.appended.append((offset, data))
        d.callback(ok)


@implementer(IMessageStore)
class FakeMessageStore:
    """The blocking store :class:`StoreService` runs, counting instead of storing.

    Records are not kept (lookups find nothing); offsets advance by ``len(body) + 100`` per
    message. ``events`` lists calls in order (``"load"``, ``"put"``, ``("flush", least_pages)``,
    ...), and setting ``flush_error`` makes the next flushes raise it.
    """

    def __init__(self, config: MessageStoreConfig | None = None) -> None:
        self.config = config or MessageStoreConfig(store_path_root_dir="unused")
        self.events: list[Any] = []
        self.max_physical_offset = 0
        self.flushed_offset = 0
        self.min_physical_offset = 0
        self.queues: dict[tuple[str, int], int] = {}
        self.flush_error: Exception | None = None
        self.trails = 0  # trail_page_cache calls
        self.load_result = True
        self.on_put: Callable[[MessageExt], None] | None = None
        self.populate_wanted = False  # what populate_due answers
        self.inline_ok = False  # what can_append_inline answers
        self.stats = StoreStats()
        self.checked_disk_ratio = 0.0

    def can_append_inline(self, puts: Sequence[Sequence[MessageExt]]) -> bool:
        return self.inline_ok

    def populate_due(self) -> bool:
        return self.populate_wanted

    def populate_ahead(self) -> None:
        self.events.append("populate")
        self.populate_wanted = False

    def load(self) -> bool:
        self.events.append("load")
        return self.load_result

    def start(self) -> None:
        self.events.append("start")

    def shutdown(self) -> None:
        self.events.append("shutdown")

    def put_message(self, msg: MessageExt) -> PutMessageResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: Sequence[MessageExt]) -> PutMessageResult:
        self.events.append("put")
        if self.on_put is not None:
            self.on_put(msgs[0])
        key = (msgs[0].topic, msgs[0].queue_id)
        queue_offset = self.queues.get(key, 0)
        start = self.max_physical_offset
        size = sum(len(m.body) + RECORD_OVERHEAD for m in msgs)
        self.max_physical_offset += size
        self.queues[key] = queue_offset + len(msgs)
        append = AppendMessageResult(
            AppendMessageStatus.PUT_OK, start, size,
            [offset_msg_id(("127.0.0.1", 10911), start)], queue_offset, len(msgs), 0,
        )
        return PutMessageResult(PutMessageStatus.PUT_OK, append)

    def flush(self, least_pages: int = 0) -> bool:
        self.events.append(("flush", least_pages))
        if self.flush_error is not None:
            raise self.flush_error
        wrote, flushed = self.max_physical_offset, self.flushed_offset
        if wrote <= flushed or wrote // PAGE - flushed // PAGE < least_pages:
            return False
        self.flushed_offset = wrote
        return True

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        self.events.append(("flush_cq", least_pages))

    def trail_page_cache(self) -> int:
        self.trails += 1
        return 0

    def clean_expired_files(self, positions: Iterable[tuple[str, str, int, int]] = ()) -> int:
        self.events.append("clean")
        self.positions = list(positions)
        return 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), 0)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 0

    def execute_delete_files_manually(self) -> None:
        self.events.append("delete manually")

    def append_to_commit_log(self, offset: int, data: bytes) -> bool:
        """Bytes that continue the log advance it; others are refused."""
        if offset != self.max_physical_offset:
            return False
        self.events.append("append")
        self.max_physical_offset += len(data)
        return True

    def append_replicated(self, offset: int, data: bytes) -> tuple[bool, dict[tuple[str, int], None]]:
        return self.append_to_commit_log(offset, data), {}

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tag_filter: Callable[[int], bool] | None = None,
                    record_filter: Callable[[bytes], bool] | None = None) -> GetMessageResult:
        self.events.append("get")
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.get_min_offset_in_queue(topic, queue_id)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return 0

    def disk_usage_ratio(self) -> float:
        return -1.0

    def query_consume_time_span(self, topic: str, queue_id: int, consumer_offset: int) -> tuple[int, int, int, int]:
        return -1, -1, -1, -1

    def query_consume_queue(self, topic: str, queue_id: int, index: int,
                            count: int) -> tuple[int, int, list[tuple[int, int, int]] | None] | None:
        if (topic, queue_id) not in self.queues:
            return None
        return 0, self.queues[(topic, queue_id)], None

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        return None

    def select_one_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        return None

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        return QueryMessageResult([], 0, 0)

    def get_commit_log_data(self, offset: int, size: int = -1) -> bytes | None:
        return None
