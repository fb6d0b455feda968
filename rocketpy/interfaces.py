"""The zope interfaces that tie rocketpy's layers together."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from rocketpy.common.message import MessageExt
    from rocketpy.store.status import GetMessageResult, PutMessageResult, PutMessageStatus, QueryMessageResult


class IChannel(Interface):
    """One remoting connection, as a processor or listener sees it."""

    remote_address = Attribute("The peer as an 'ip:port' string.")

    def invoke_sync(request, timeout):  # type: ignore[no-untyped-def]
        """Send a request to the peer; Deferred fires with its response."""

    def invoke_oneway(request):  # type: ignore[no-untyped-def]
        """Send a request that gets no response; Deferred fires once written."""

    def close():  # type: ignore[no-untyped-def]
        """Close the connection."""


class IRequestProcessor(Interface):
    """Handles the requests of the codes it is registered for."""

    def process_request(channel, request):  # type: ignore[no-untyped-def]
        """Return a response RemotingCommand, a Deferred of one, or None (no reply).

        An exception (or failed Deferred) becomes a SYSTEM_ERROR response.
        """

    def reject_request():  # type: ignore[no-untyped-def]
        """True when the processor is overloaded: the server answers SYSTEM_BUSY."""


class ICommandLocator(Interface):
    """Answers several request codes, one method each (AMP's ``CommandLocator``); the server
    registers each method under its code (:func:`rocketpy.remoting.responders.register_responders`)."""

    def responders() -> Mapping[int, Callable[..., Any]]:
        """Request code → the method answering it, called as ``method(channel, request)`` and
        returning what :meth:`IRequestProcessor.process_request` returns; it may raise
        ``RequestRefused``, ``HeaderError`` or ``BodyError`` to refuse the request."""


class IBatchRequestProcessor(IRequestProcessor):
    """A reactor-thread processor that also takes the run of requests for it that arrived
    together (one read of a connection) in one call: per-request work paid once per run."""

    def process_requests(channel, requests):  # type: ignore[no-untyped-def]
        """Return one result per request, in order (a response RemotingCommand, or None for
        no reply), or a Deferred of that list.

        An exception (or failed Deferred) becomes a SYSTEM_ERROR response to each request.
        """


class IRPCHook(Interface):
    """Called around every request, on client and server (ACL signing and checking)."""

    def before_request(remote_address, request):  # type: ignore[no-untyped-def]
        """Before a request is sent (client) or processed (server)."""

    def after_response(remote_address, request, response):  # type: ignore[no-untyped-def]
        """After a response was received (client) or produced (server)."""


class IChannelEventListener(Interface):
    """Told about CONNECT, CLOSE, IDLE and EXCEPTION events of remoting channels."""

    def on_channel_connect(remote_address, channel):  # type: ignore[no-untyped-def]
        pass

    def on_channel_close(remote_address, channel):  # type: ignore[no-untyped-def]
        pass

    def on_channel_idle(remote_address, channel):  # type: ignore[no-untyped-def]
        pass

    def on_channel_exception(remote_address, channel):  # type: ignore[no-untyped-def]
        pass


class IStoreService(Interface):
    """The message store as the broker and HA use it (doc/store-api.md): ``StoreService``.

    Writes and most reads return Deferreds; queue bounds are answered from memory. No
    method blocks the reactor, and no Deferred fails: errors come back as a status.
    """

    max_physical_offset = Attribute("int: the commit-log offset after the last appended byte.")
    min_physical_offset = Attribute("int: the start of the oldest commit-log file (0 when none).")
    flushed_offset = Attribute("int: how far the commit log is durable on disk.")
    stats = Attribute("StoreStats: the store's counters (puts, bytes per topic, failures, latencies).")
    checked_disk_ratio = Attribute("float: the store partitions' used ratio at the last retention check.")
    refused = Attribute("Counter[str]: puts refused before reaching the store, by status.")

    # -- writes

    def put_message(msg: MessageExt) -> Deferred[PutMessageResult]:
        """Append one message; fires once appended (ASYNC_FLUSH) or flushed (SYNC_FLUSH + WAIT)."""

    def put_messages(msgs: Sequence[MessageExt]) -> Deferred[PutMessageResult]:
        """Append a batch under one store lock, with one result."""

    def put_many(puts: Sequence[Sequence[MessageExt]]) -> Deferred[list[PutMessageResult]]:
        """Independent puts (one message, or a batch, each), one result each, in order."""

    def is_busy() -> bool:
        """True when puts should be refused (the broker answers SYSTEM_BUSY)."""

    def queue_wait() -> float:
        """Seconds the oldest put waiting for an append hop has waited (0 when none waits)."""

    def add_arrival_listener(listener: Callable[[str, int, int], None], topic: str | None = None) -> Any:
        """Call ``listener(topic, queue_id, new_max_offset)`` on the reactor after appends (of ``topic``
        only, when given); returns an ``rocketpy.store.arrivals.Arrival``, whose ``wanted`` False stops
        its calls until set True again (a listener waiting for nothing)."""

    def add_put_hook(hook: Callable[[PutMessageResult], Deferred[PutMessageStatus] | None]) -> None:
        """Call ``hook(result)`` for every appended put that waits for its store (HA replication)."""

    def append_to_commit_log(offset: int, data: bytes) -> Deferred[bool]:
        """HA slave: append bytes replicated from the master; the queues the dispatched records
        reached are then announced to the arrival listeners."""

    def set_consumer_positions(snapshot: Callable[[], Sequence[tuple[str, str, int, int]]]) -> None:
        """Where retention reads every group's ``(group, topic, queue_id, offset)`` (above 85 % disk use
        only files they all consumed are deleted)."""

    def execute_delete_files_manually() -> None:
        """The next retention passes ignore ``delete_when`` (TRIGGER_DELETE_FILES)."""

    # -- reads

    def get_max_offset_in_queue(topic: str, queue_id: int) -> int:
        """The next offset to be written in a consume queue (from memory)."""

    def get_min_offset_in_queue(topic: str, queue_id: int) -> int:
        """The first offset still stored in a consume queue (from memory)."""

    def get_message(
        group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> Deferred[GetMessageResult]:
        """Up to ``max_msg_nums`` stored records of a queue from ``offset``, filtered by tag code,
        then by ``record_filter`` on each stored record (SQL92)."""

    def get_offset_in_queue_by_time(topic: str, queue_id: int, timestamp_ms: int) -> Deferred[int]:
        """The queue offset of the first message stored at or after ``timestamp_ms``."""

    def get_earliest_message_time(topic: str, queue_id: int) -> Deferred[int]:
        """The store time (ms) of a queue's first message; -1 when it has none."""

    def get_commit_log_offset_in_queue(topic: str, queue_id: int, cq_offset: int) -> Deferred[int]:
        """The commit-log offset of a queue entry."""

    def query_consume_time_span(
        topic: str, queue_id: int, consumer_offset: int
    ) -> Deferred[tuple[int, int, int, int]]:
        """Min and max store times of a queue, and of the message at ``consumer_offset`` (admin)."""

    def next_store_times(positions: list[tuple[str, int, int]]) -> Deferred[list[int]]:
        """Per ``(topic, queue id, offset)``, the store time (ms) of the message there, -1 at the end."""

    def commit_log_figures() -> Deferred[tuple[int, float]]:
        """The store time (ms) of the commit log's oldest message (-1 when empty) and the used
        ratio of its partition (-1 when unknown), measured now."""

    def query_consume_queue(
        topic: str, queue_id: int, index: int, count: int
    ) -> Deferred[tuple[int, int, list[tuple[int, int, int]] | None] | None]:
        """Raw consume-queue entries (QUERY_CONSUME_QUEUE)."""

    def look_message_by_offset(offset: int) -> Deferred[MessageExt | None]:
        """The message stored at a commit-log offset, decoded."""

    def select_one_message_by_offset(offset: int) -> Deferred[bytes | None]:
        """The raw record stored at a commit-log offset."""

    def query_message(topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> Deferred[QueryMessageResult]:
        """Messages of ``topic`` with a key (or UNIQ_KEY) stored between two times (the index)."""

    def get_commit_log_data(offset: int, size: int = -1) -> Deferred[bytes | None]:
        """HA master: ``size`` bytes of commit log at ``offset`` (-1: to the end of its file)."""


class IMessageStore(Interface):
    """The blocking store ``StoreService`` runs on its threads (doc/store-api.md): ``MessageStore``.

    Writes come from one writer thread at a time; reads may run on other threads meanwhile.
    A ``put_many(puts)`` method, when present, takes a whole append hop under one lock;
    ``flush_begin()`` / ``flush_end(token, seconds)``, when present, let the service run the
    commit log's ``fdatasync`` itself (SYNC_FLUSH on the reactor, ``store/aioflush.py``).
    """

    config = Attribute("MessageStoreConfig: flush settings, paths and limits.")
    max_physical_offset = Attribute("int: the commit-log offset after the last appended byte.")
    flushed_offset = Attribute("int: the commit-log offset up to which the log is on disk.")
    min_physical_offset = Attribute("int: the start of the oldest commit-log file (0 when none).")
    stats = Attribute("StoreStats: counters the writer and flush threads update.")
    checked_disk_ratio = Attribute("float: the store partitions' used ratio at the last retention check.")

    # -- life cycle and writes (the writer thread)

    def load() -> bool:
        """Open the files and recover; False when the store cannot run."""

    def start() -> None:
        """Take the store for this process (lock and abort files)."""

    def shutdown() -> None:
        """Flush everything and release the files (a clean exit)."""

    def put_message(msg: MessageExt) -> PutMessageResult:
        """Append one message."""

    def put_messages(msgs: Sequence[MessageExt]) -> PutMessageResult:
        """Append a batch under one lock, with one result."""

    def can_append_inline(puts: Sequence[Sequence[MessageExt]]) -> bool:
        """True when appending ``puts`` blocks on nothing (no file to create, no page to fault in)."""

    def populate_due() -> bool:
        """True when the pages ahead of the write position should be faulted in."""

    def populate_ahead() -> None:
        """Fault in the pages ahead of the write position (the flush thread; the writer's on the
        pwrite path, whose zeros ahead must not race an append)."""

    def flush(least_pages: int = 0) -> bool:
        """Make the commit log durable; True when the flushed offset advanced."""

    def flush_consume_queues(least_pages: int = 0) -> None:
        """Make the consume queues and the index durable."""

    def trail_page_cache() -> int:
        """Drop the commit log's pages far behind its flushed offset that no reader read lately
        (the flush thread's, about once a second); the bytes it asked to drop."""

    def clean_expired_files(positions: Iterable[tuple[str, str, int, int]] = ()) -> int:
        """Delete expired commit-log files (and what only they needed); how many went. Above 85 %
        ``positions`` (every group's committed offsets) decide which files are consumed."""

    def execute_delete_files_manually() -> None:
        """The next clean passes ignore ``delete_when``."""

    def append_to_commit_log(offset: int, data: bytes) -> bool:
        """HA slave: append replicated bytes at ``offset`` and dispatch whole records."""

    def append_replicated(offset: int, data: bytes) -> tuple[bool, dict[tuple[str, int], None]]:
        """:meth:`append_to_commit_log`, and the queues records were dispatched to since the last call."""

    # -- reads (any thread)

    def get_message(
        group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
        tag_filter: Callable[[int], bool] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` stored records of a queue from ``offset``."""

    def get_max_offset_in_queue(topic: str, queue_id: int) -> int:
        """The next offset to be written in a consume queue."""

    def get_min_offset_in_queue(topic: str, queue_id: int) -> int:
        """The first offset still stored in a consume queue."""

    def get_offset_in_queue_by_time(topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The queue offset of the first message stored at or after ``timestamp_ms``."""

    def get_earliest_message_time(topic: str, queue_id: int) -> int:
        """The store time (ms) of a queue's first message; -1 when it has none."""

    def get_commit_log_offset_in_queue(topic: str, queue_id: int, cq_offset: int) -> int:
        """The commit-log offset of a queue entry, 0 when absent."""

    def query_consume_time_span(topic: str, queue_id: int, consumer_offset: int) -> tuple[int, int, int, int]:
        """Store times of a queue's oldest and newest messages, and around ``consumer_offset``."""

    def disk_usage_ratio() -> float:
        """Used share (0-1) of the commit log's partition; -1 when unknown."""

    def query_consume_queue(
        topic: str, queue_id: int, index: int, count: int
    ) -> tuple[int, int, list[tuple[int, int, int]] | None] | None:
        """Raw consume-queue entries (QUERY_CONSUME_QUEUE); None when the queue does not exist."""

    def look_message_by_offset(commit_log_offset: int) -> MessageExt | None:
        """The message stored at a commit-log offset, decoded."""

    def select_one_message_by_offset(commit_log_offset: int) -> bytes | None:
        """The raw record stored at a commit-log offset."""

    def query_message(topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        """Records of ``topic`` with ``key`` (a KEYS word or UNIQ_KEY) stored between two times."""

    def get_commit_log_data(offset: int, size: int = -1) -> bytes | None:
        """HA master: ``size`` bytes at ``offset`` (-1: to the readable end of its file)."""
