"""The values client calls return: send results, pull results, consume statuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rocketpy.common.message import MessageExt
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.codes import ResponseCode


class SendStatus(Enum):
    """How a sync send ended; everything but SEND_OK means stored without the guarantee asked for."""

    SEND_OK = ResponseCode.SUCCESS
    FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
    FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT
    SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE


@dataclass(slots=True)
class SendResult:
    """A message the broker accepted.

    :ivar msg_id: the client id (``UNIQ_KEY``; comma-joined for a batch).
    :ivar offset_msg_id: the broker's id (store host + commit-log offset).
    :ivar queue: where it was stored.
    :ivar queue_offset: its logical offset in that queue (the first one for a batch).
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str = "DefaultRegion"


class PullStatus(Enum):
    FOUND = ResponseCode.SUCCESS
    NO_NEW_MSG = ResponseCode.PULL_NOT_FOUND
    NO_MATCHED_MSG = ResponseCode.PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = ResponseCode.PULL_OFFSET_MOVED


@dataclass(slots=True)
class PullResult:
    """One pull: where to pull next, the queue's bounds, and the (filtered) messages."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


class ConsumeResult(Enum):
    """What a push consumer's listener returns (or fires its Deferred with)."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    #: Concurrent mode: send the messages back for a later retry; orderly mode:
    #: suspend the queue a moment and consume the same messages again.
    RECONSUME_LATER = "RECONSUME_LATER"
