"""Queue allocation among the consumers of a group (``AllocateMessageQueueAveragely``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, TypeVar

Q = TypeVar("Q")

#: ``(queues, client ids, this client's id) -> this client's queues``; inputs are sorted.
AllocateStrategy = Callable[[Sequence[Q], Sequence[str], str], list[Q]]


def allocate_averagely(queues: Sequence[Q], client_ids: Sequence[str], client_id: str) -> list[Q]:
    """Contiguous, near-equal shares: the first ``len(queues) % len(client_ids)`` clients get one more.

    Both sequences must be sorted the same way on every client; a client not in
    ``client_ids`` gets nothing.
    """
    if not queues or client_id not in client_ids:
        return []
    n, m = len(queues), len(client_ids)
    index = client_ids.index(client_id)
    mod = n % m
    if n <= m:
        size = 1
    elif mod > 0 and index < mod:
        size = n // m + 1
    else:
        size = n // m
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [queues[(start + i) % n] for i in range(min(size, n - start))]
