"""``popReceipts.json``: the POP cursors and in-flight leases, so a restart keeps them.

Written every few seconds and when the endpoint stops (through the broker's config pool, like
the offsets), read when it starts. What a crash loses since the last write comes back to the
consumers (at least once): a lease acked after it is handed out again once expired, and a cursor
moves back to where the checkpoint had it.
"""

from __future__ import annotations

from typing import Any

from rocketpy.grpc.pop import PopService
from rocketpy.util.configfile import JsonConfigFile

CHECKPOINT_INTERVAL_S = 5.0


class PopCheckpoint(JsonConfigFile):
    """The :class:`PopService` state in one JSON file; ``path`` None keeps it in memory only."""

    def __init__(self, pop: PopService, path: str | None) -> None:
        self._pop = pop
        self.path = path

    def to_json(self) -> dict[str, Any]:
        return self._pop.snapshot()

    def apply_json(self, obj: dict[str, Any]) -> None:
        self._pop.restore(obj)
