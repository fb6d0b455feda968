"""In-memory stand-ins for the store service on each side of an HA link."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed


class FakeMasterStore:
    """A commit log of ``log`` bytes starting at ``base``; reads answer at once or on demand."""

    def __init__(self, base: int = 0, log: bytes = b"", manual_reads: bool = False) -> None:
        self.base = base
        self.log = bytearray(log)
        self.manual_reads = manual_reads
        self.reads: list[tuple[int, int, Deferred[bytes | None]]] = []
        self.arrival_listeners: list[Any] = []
        self.put_hooks: list[Any] = []

    @property
    def max_physical_offset(self) -> int:
        return self.base + len(self.log)

    def append(self, data: bytes) -> None:
        """Grow the log and tell the arrival listeners, as a put would."""
        self.log += data
        for listener in self.arrival_listeners:
            listener("T", 0, 1)

    def get_commit_log_data(self, offset: int, size: int = -1) -> Deferred[bytes | None]:
        start = offset - self.base
        data = bytes(self.log[start:start + size]) if 0 <= start and start + size <= len(self.log) else None
        if not self.manual_reads:
            return succeed(data)
        d: Deferred[bytes | None] = Deferred()
        self.reads.append((offset, size, d))
        return d

    def add_arrival_listener(self, listener: Any) -> None:
        self.arrival_listeners.append(listener)

    def add_put_hook(self, hook: Any) -> None:
        self.put_hooks.append(hook)


class FakeSlaveStore:
    """Appends are answered by the test (``finish``) so their ordering can be checked."""

    def __init__(self, max_offset: int = 0) -> None:
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
