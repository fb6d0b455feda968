"""The response table of one connection: opaque -> pending request.

Shared by the client and the server side (both can send requests on a
channel). Deadlines are enforced by :meth:`ResponseTable.expire`, which the
owner's 1 s scan calls: no ``DelayedCall`` per request.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred

from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

#: Called exactly once when a pending request completes in any way (frees a permit).
Release = Callable[[], object]
#: A pending request: its Deferred, deadline, release, and whether its timeout should close the channel.
_Entry = tuple[Deferred[RemotingCommand], float, Release | None, bool]


class ResponseTable:
    """Pending requests of one connection, keyed by their 32-bit signed opaque.

    Every entry leaves the table exactly once (response, timeout, cancel or
    :meth:`fail_all`), and its ``release`` is called exactly then.
    """

    def __init__(self, first_opaque: int = 0) -> None:
        """:param first_opaque: the first opaque handed out (tests start near the wrap)."""
        self._next = first_opaque
        self._pending: dict[int, _Entry] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, opaque: int) -> bool:
        return opaque in self._pending

    def next_opaque(self) -> int:
        """The next free opaque: counts up, wraps to -2**31, skips opaques still pending."""
        opaque = self._next
        pending = self._pending
        while opaque in pending:
            opaque = opaque + 1 if opaque < _INT32_MAX else _INT32_MIN
        self._next = opaque + 1 if opaque < _INT32_MAX else _INT32_MIN
        return opaque

    def add(
        self, opaque: int, deadline: float, release: Release | None = None, close_on_timeout: bool = False
    ) -> Deferred[RemotingCommand]:
        """Register a request; the Deferred fires with its response.

        Cancelling the Deferred removes the entry (and calls *release*).

        :param deadline: the clock time after which :meth:`expire` fails it.
        :param close_on_timeout: :meth:`expire` reports its timeout as a reason to close the channel.
        """
        d: Deferred[RemotingCommand] = Deferred(lambda _: self._discard(opaque))
        self._pending[opaque] = (d, deadline, release, close_on_timeout)
        return d

    def resolve(self, response: RemotingCommand) -> bool:
        """Fire the request *response* answers; False when none is pending (a late reply)."""
        entry = self._pending.pop(response.opaque, None)
        if entry is None:
            return False
        d, _, release, _ = entry
        if release is not None:
            release()
        d.callback(response)
        return True

    def fail(self, opaque: int, error: Exception) -> None:
        """Fail one pending request (e.g. its request could not be written)."""
        entry = self._pending.pop(opaque, None)
        if entry is not None:
            self._complete_with_error(entry, error)

    def expire(self, now: float) -> tuple[int, bool]:
        """Fail every request whose deadline is at or before *now*.

        :return: how many, and whether one of them was added with ``close_on_timeout``.
        """
        expired = [(opaque, entry[3]) for opaque, entry in self._pending.items() if entry[1] <= now]
        for opaque, _ in expired:
            self.fail(opaque, RemotingTimeoutError(f"no response to request {opaque} in time"))
        return len(expired), any(close for _, close in expired)

    def fail_all(self, error: Exception) -> None:
        """Fail every pending request with *error* (the connection is gone)."""
        pending, self._pending = self._pending, {}  # swap first: errbacks may send again
        for entry in pending.values():
            self._complete_with_error(entry, error)

    def _discard(self, opaque: int) -> None:
        entry = self._pending.pop(opaque, None)
        if entry is not None and entry[2] is not None:
            entry[2]()

    @staticmethod
    def _complete_with_error(entry: _Entry, error: Exception) -> None:
        d, _, release, _ = entry
        if release is not None:
            release()
        d.errback(error)
