"""Waiters keyed by a log offset: group commit for SYNC_FLUSH, and slave acks for SYNC_MASTER.

A waiter asks "tell me when the log is durable (or replicated) up to ``offset``, or
give up at ``deadline``". One :meth:`OffsetWaiters.advance` serves every waiter up to
the new offset; a single timer expires the overdue ones. Each Deferred fires exactly
once: ``True`` when covered, ``False`` when its deadline passed first.
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure


class _Waiter:
    """One pending request; ``done`` marks it settled in both heaps (lazy deletion)."""

    __slots__ = ("offset", "fire", "args", "done")

    def __init__(self, offset: int, fire: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.offset = offset
        self.fire = fire
        self.args = args
        self.done = False


class OffsetWaiters:
    """Deferreds waiting for a log position to reach an offset, each with a deadline.

    :param clock: schedules the expiry timer; ``None`` means the owner calls
        :meth:`expire` itself.
    """

    def __init__(self, clock: IReactorTime | None = None) -> None:
        self._clock = clock
        self._seq = count()
        self._by_offset: list[tuple[int, int, _Waiter]] = []
        self._by_deadline: list[tuple[float, int, _Waiter]] = []
        self._timer: IDelayedCall | None = None
        self._pending = 0
        #: the highest position reported to :meth:`advance`
        self.position = 0
        #: the highest offset ever waited for
        self.max_offset = 0

    def __len__(self) -> int:
        """The number of waiters not yet fired."""
        return self._pending

    def add(self, offset: int, deadline: float) -> Deferred[bool]:
        """Wait until the position reaches ``offset``.

        :param offset: the position that covers the request (e.g. ``append.next_offset``).
        :param deadline: clock time after which the Deferred fires ``False``.
        :returns: a Deferred firing ``True`` once covered, ``False`` once expired.
        """
        d: Deferred[bool] = Deferred()
        self.add_callback(offset, deadline, d.callback)
        return d

    def add_callback(self, offset: int, deadline: float, fire: Callable[..., object], *args: Any) -> None:
        """Like :meth:`add`, but call ``fire(covered, *args)`` instead of firing a Deferred.

        The put path uses this to save a Deferred per message.
        """
        if offset <= self.position:
            fire(True, *args)
            return
        waiter = _Waiter(offset, fire, args)
        self.max_offset = max(self.max_offset, offset)
        seq = next(self._seq)
        heapq.heappush(self._by_offset, (offset, seq, waiter))
        heapq.heappush(self._by_deadline, (deadline, seq, waiter))
        self._pending += 1
        timer = self._timer
        if timer is None or timer.getTime() > deadline:
            self._arm()

    def advance(self, position: int) -> int:
        """The log is durable (or acknowledged) up to ``position``: fire the covered waiters.

        :returns: how many waiters fired.
        """
        self.position = max(self.position, position)
        fired = 0
        heap = self._by_offset
        while heap and heap[0][0] <= self.position:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done:
                fired += self._settle(waiter, True)
        self._arm()
        return fired

    def expire(self, now: float) -> int:
        """Fire ``False`` for every waiter whose deadline is at or before ``now``.

        :returns: how many waiters expired.
        """
        expired = 0
        heap = self._by_deadline
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done:
                expired += self._settle(waiter, False)
        self._arm()
        return expired

    def _settle(self, waiter: _Waiter, covered: bool) -> int:
        waiter.done = True
        self._pending -= 1
        if not self._pending:
            # Drop the settled entries left behind by lazy deletion.
            self._by_offset.clear()
            self._by_deadline.clear()
        waiter.fire(covered, *waiter.args)
        return 1

    def _arm(self) -> None:
        """Keep one timer at the earliest live deadline, none when nobody waits."""
        if self._clock is None:
            return
        heap = self._by_deadline
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        if not heap:
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            self._timer = None
            return
        first = heap[0][0]
        if self._timer is not None and self._timer.active():
            if self._timer.getTime() <= first:
                return
            self._timer.cancel()
        delay = max(0.0, first - self._clock.seconds())
        self._timer = self._clock.callLater(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        assert self._clock is not None
        self.expire(self._clock.seconds())


class GroupCommit:
    """Group commit over :class:`OffsetWaiters`: at most one flush in flight.

    A flush covers every waiter added before it started; when it ends, waiters added
    meanwhile start the next one. A flush that fails, or makes no progress, is not
    retried here (the periodic flush loop retries; waiters time out meanwhile).

    :param waiters: the waiters to serve.
    :param flush: starts a flush up to the given offset off the reactor thread and
        returns a Deferred of the offset then durable.
    :param advance: called with that offset; it must call ``waiters.advance``.
    :param idle: called whenever a flush ends.
    """

    log = Logger()

    def __init__(self, waiters: OffsetWaiters, flush: Callable[[int], Deferred[int]],
                 advance: Callable[[int], object], idle: Callable[[], object]) -> None:
        self._waiters = waiters
        self._flush = flush
        self._advance = advance
        self._idle = idle
        self.running = False

    def kick(self) -> None:
        """Start a flush if a waiter is not covered and none runs."""
        waiters = self._waiters
        if self.running or not len(waiters) or waiters.max_offset <= waiters.position:
            return
        self.running = True
        self._flush(waiters.max_offset).addCallbacks(self._done, self._failed, (waiters.position,))

    def _done(self, offset: int, before: int) -> None:
        self.running = False
        self._advance(offset)
        if offset > before:
            self.kick()
        self._idle()

    def _failed(self, failure: Failure) -> None:
        self.log.failure("group-commit flush failed", failure, level=LogLevel.error)
        self.running = False
        self._idle()
