"""What the commit log tells its followers (consume queues, index) about each record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from zope.interface import Interface


@dataclass(slots=True)
class DispatchRequest:
    """One stored record, as a consume queue or the index needs it (no re-parse)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int


class QueueRecorder:
    """Notes which queues records were dispatched to, until taken (a slave's replicated appends)."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, int], None] = {}

    def dispatch(self, request: DispatchRequest) -> None:
        self._queues[(request.topic, request.queue_id)] = None

    def take(self) -> dict[tuple[str, int], None]:
        """The queues noted since the last call (insertion order), forgetting them."""
        queues, self._queues = self._queues, {}
        return queues


class IDispatcher(Interface):
    """Follows the commit log: called after every append and for each record walked in recovery."""

    def dispatch(request: DispatchRequest) -> None:
        """Record ``request``; must ignore a record already present (same or lower offset)."""


class SupportsDispatch(Protocol):
    """The static type of an :class:`IDispatcher` provider (mypy does not see zope interfaces)."""

    def dispatch(self, request: DispatchRequest) -> None:
        ...
