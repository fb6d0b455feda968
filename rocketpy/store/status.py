"""Result and status types shared by the store, the broker and HA (doc/store-api.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class PutMessageStatus(Enum):
    """Outcome of a put as the broker sees it (RocketMQ ``PutMessageStatus``)."""

    __hash__ = object.__hash__  # members are singletons: hashed in C, not by Enum's Python __hash__

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"


class AppendMessageStatus(Enum):
    """Outcome of appending to one commit-log file."""

    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass(slots=True)
class AppendMessageResult:
    """Where the records of one put landed.

    :ivar wrote_offset: commit-log offset of the first record.
    :ivar wrote_bytes: bytes of all records of this put.
    :ivar msg_ids: offset message ids, one per record.
    :ivar queue_offset: consume-queue offset of the first record.
    """

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_ids: list[str] = field(default_factory=list)
    queue_offset: int = 0
    msg_num: int = 1
    store_timestamp: int = 0

    @property
    def next_offset(self) -> int:
        """The commit-log offset a flush or a replica must reach to cover this put."""
        return self.wrote_offset + self.wrote_bytes


@dataclass(slots=True)
class PutMessageResult:
    """A put's status plus, when something was appended, where."""

    status: PutMessageStatus
    append: AppendMessageResult | None = None
    #: the store's explanation of a refusal, when the status alone does not say it
    remark: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


class GetMessageStatus(Enum):
    """Outcome of a consume-queue read (doc/wire.md §5 table)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    """Records read from one queue, with the offsets a pull response needs."""

    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    records: list[bytes] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False

    @property
    def body(self) -> bytes:
        """The records back to back: a PULL_MESSAGE response body."""
        return b"".join(self.records)

    @property
    def message_count(self) -> int:
        return len(self.records)


@dataclass(slots=True)
class QueryMessageResult:
    """Records found by key through the index."""

    records: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
