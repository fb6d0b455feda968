"""In-flight receipts of POP consumption: which received messages are invisible until when.

A :class:`Lease` is one delivery of one message to one consumer group: the message stays
invisible until ``expires_ms``; if not acked by then it comes back with ``attempt + 1`` (through
the group's POP retry topic, or in place for a FIFO group: :mod:`rocketpy.grpc.pop`).
The table is plain data with no Twisted and no clock of its own (callers pass ``now_ms``),
so a later step can checkpoint it to disk (:meth:`ReceiptTable.leases` lists everything).

A receipt handle is ``"<expires_ms>_<seq>_<queue_id>_<offset>"``: its own expiry can be read
without the table (an acked handle and an expired one are told apart as the Java proxy does:
an expired handle is INVALID_RECEIPT_HANDLE, an already acked one acks again without error).
Auto-renewal (a PushConsumer's receives) extends a lease under its handle, so the table's
expiry wins over the handle's while the lease is in it.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX


class AckOutcome(enum.Enum):
    OK = "ok"
    EXPIRED = "receipt handle is expired"
    INVALID = "receipt handle is invalid"


def pop_retry_topic(group: str, topic: str) -> str:
    """The group's POP retry topic of ``topic``: ``%RETRY%<group>_<topic>`` (RocketMQ 5's
    ``KeyBuilder.buildPopRetryTopicV1``, the name its brokers use by default)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


@dataclass(slots=True)
class Lease:
    """One delivery of the message at ``(queue_topic, queue_id, offset)`` to ``group``.

    ``topic`` is the topic the group subscribes (what its acks name); the message is stored there,
    or in the group's POP retry topic of it when ``retry``.
    """

    group: str
    topic: str
    queue_id: int
    offset: int
    commit_log_offset: int
    attempt: int
    expires_ms: int
    handle: str = ""
    #: the client whose lease the endpoint renews until acked (a PushConsumer's auto_renew).
    renewed_for: str | None = None
    leased_ms: int = 0
    #: the message is a revived copy in ``pop_retry_topic(group, topic)``
    retry: bool = False
    #: a FIFO group's lease: when it expires the message comes back in place, in order
    orderly: bool = False
    #: expired, being copied to the retry topic (kept in the table, and so in checkpoints, until stored)
    reviving: bool = False

    @property
    def queue_topic(self) -> str:
        """The topic whose queue holds the message."""
        return pop_retry_topic(self.group, self.topic) if self.retry else self.topic


def handle_expiry(handle: str) -> int | None:
    """The expiry written into a handle, or None when it is not one of ours."""
    head, _, rest = handle.partition("_")
    if not rest or not head.isdigit():
        return None
    return int(head)


class ReceiptTable:
    """The leases of every group and topic, by handle and by queue."""

    def __init__(self) -> None:
        self._by_handle: dict[str, Lease] = {}
        #: (group, topic, queue_id) → {offset: lease}; a message has at most one live lease.
        self._by_queue: dict[tuple[str, str, int], dict[int, Lease]] = {}
        #: (group, topic, queue_id) → a min-heap of its offsets in flight, and of some that no longer
        #: are (dropped once they reach the top): the lowest in flight without a scan per ack
        self._lowest: dict[tuple[str, str, int], list[int]] = {}
        #: (group, topic) → {handle: lease}: what a receive scans for expired leases
        self._by_topic: dict[tuple[str, str], dict[str, Lease]] = {}
        self._seq = itertools.count(1)

    def __len__(self) -> int:
        return len(self._by_handle)

    def leases(self) -> Iterator[Lease]:
        return iter(list(self._by_handle.values()))

    def lease(self, group: str, topic: str, queue_id: int, offset: int, commit_log_offset: int,
              attempt: int, now_ms: int, invisible_ms: int, retry: bool = False, orderly: bool = False) -> Lease:
        """Make the message invisible for ``invisible_ms``; a new handle."""
        lease = Lease(group, topic, queue_id, offset, commit_log_offset, attempt, now_ms + invisible_ms,
                      leased_ms=now_ms, retry=retry, orderly=orderly)
        self._add(lease)
        return lease

    def _add(self, lease: Lease) -> None:
        lease.handle = f"{lease.expires_ms}_{next(self._seq)}_{lease.queue_id}_{lease.offset}"
        self._index(lease)

    def restore(self, lease: Lease) -> None:
        """Put back a lease from a checkpoint, under its handle; new handles never repeat it."""
        parts = lease.handle.split("_")
        if len(parts) != 4 or not parts[1].isdigit() or handle_expiry(lease.handle) is None:
            raise ValueError(f"not a receipt handle: {lease.handle!r}")
        seq = int(parts[1])
        probe = next(self._seq)
        self._seq = itertools.count(max(probe, seq + 1))
        self._index(lease)

    def _index(self, lease: Lease) -> None:
        self._by_handle[lease.handle] = lease
        key = (lease.group, lease.queue_topic, lease.queue_id)
        self._by_queue.setdefault(key, {})[lease.offset] = lease
        heapq.heappush(self._lowest.setdefault(key, []), lease.offset)
        self._by_topic.setdefault((lease.group, lease.topic), {})[lease.handle] = lease

    def remove(self, lease: Lease) -> None:
        """Take a lease out of the table (its message was revived or moved to the DLQ)."""
        if self._by_handle.get(lease.handle) is lease:
            self._remove(lease)

    def _remove(self, lease: Lease) -> None:
        del self._by_handle[lease.handle]
        key = (lease.group, lease.queue_topic, lease.queue_id)
        queue = self._by_queue[key]
        del queue[lease.offset]
        if not queue:
            del self._by_queue[key]
            del self._lowest[key]
        topic_key = (lease.group, lease.topic)
        leases = self._by_topic[topic_key]
        del leases[lease.handle]
        if not leases:
            del self._by_topic[topic_key]

    def live(self, group: str, topic: str, handle: str, now_ms: int) -> Lease | AckOutcome:
        """The live lease of ``handle``; else why not (OK means acked before)."""
        lease = self._by_handle.get(handle)
        if lease is None:  # acked before, or expired and handed out again: the handle tells which
            expiry = handle_expiry(handle)
            if expiry is None:
                return AckOutcome.INVALID
            return AckOutcome.EXPIRED if expiry < now_ms else AckOutcome.OK
        if lease.expires_ms < now_ms:
            return AckOutcome.EXPIRED
        if lease.group != group or lease.topic != topic:
            return AckOutcome.INVALID
        return lease

    def ack(self, group: str, topic: str, handle: str, now_ms: int) -> tuple[AckOutcome, Lease | None]:
        """End a lease: the message is consumed. The lease ended, if one did."""
        found = self.live(group, topic, handle, now_ms)
        if isinstance(found, AckOutcome):
            return found, None
        self._remove(found)
        return AckOutcome.OK, found

    def renew(self, group: str, topic: str, handle: str, now_ms: int,
              invisible_ms: int) -> tuple[AckOutcome, Lease | None]:
        """Change a live lease's invisibility to ``now + invisible_ms``; it gets a new handle."""
        found = self.live(group, topic, handle, now_ms)
        if isinstance(found, AckOutcome):
            return (AckOutcome.INVALID if found is AckOutcome.OK else found), None
        self._remove(found)
        found.expires_ms = now_ms + invisible_ms
        found.renewed_for = None  # the client took over its invisibility
        self._add(found)
        return AckOutcome.OK, found

    def extend(self, lease: Lease, expires_ms: int) -> None:
        """Auto-renewal: a later expiry under the same handle (the client keeps acking with it)."""
        lease.expires_ms = expires_ms

    def due_for_renewal(self, before_ms: int) -> list[Lease]:
        """Auto-renewed leases that expire before ``before_ms``."""
        return [lease for lease in self._by_handle.values()
                if lease.renewed_for is not None and lease.expires_ms < before_ms]

    def stop_renewing(self, client_id: str) -> None:
        """A client went away: its leases run out and come back."""
        for lease in self._by_handle.values():
            if lease.renewed_for == client_id:
                lease.renewed_for = None

    def take_due(self, now_ms: int, group_topic: tuple[str, str] | None = None) -> list[Lease]:
        """Expired leases to revive (not FIFO ones), oldest first, marked ``reviving``; they stay in
        the table until :meth:`remove`. Only those of ``(group, topic)`` when given."""
        leases = self._by_handle.values() if group_topic is None else self._by_topic.get(group_topic, {}).values()
        due = [lease for lease in leases if lease.expires_ms < now_ms and not lease.orderly and not lease.reviving]
        due.sort(key=lambda lease: lease.expires_ms)
        for lease in due:
            lease.reviving = True
        return due

    def queue_busy(self, group: str, topic: str, queue_id: int, now_ms: int) -> bool:
        """Whether a lease of the queue is still invisible (a FIFO queue then waits)."""
        return any(lease.expires_ms >= now_ms for lease in self._by_queue.get((group, topic, queue_id), {}).values())

    def take_queue(self, group: str, topic: str, queue_id: int) -> list[Lease]:
        """Every lease of the queue, by offset, removed from the table."""
        leases = sorted(self._by_queue.get((group, topic, queue_id), {}).values(), key=lambda lease: lease.offset)
        for lease in leases:
            self._remove(lease)
        return leases

    def next_expiry(self, group: str, topic: str) -> int | None:
        """The earliest expiry among ``group``'s leases on ``topic`` (not those being revived)."""
        return min((lease.expires_ms for lease in self._by_topic.get((group, topic), {}).values()
                    if not lease.reviving), default=None)

    def lowest_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The smallest offset in flight of the queue (``topic`` as in :attr:`Lease.queue_topic`):
        the group's progress cannot pass it."""
        key = (group, topic, queue_id)
        queue = self._by_queue.get(key)
        if not queue:
            return None
        heap = self._lowest[key]
        while heap[0] not in queue:
            heapq.heappop(heap)
        return heap[0]
