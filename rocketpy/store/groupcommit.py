"""Waiters keyed by a log offset: group commit for SYNC_FLUSH, and slave acks for SYNC_MASTER.

A waiter asks "tell me when the log is durable (or replicated) up to ``offset``, or
give up at ``deadline``". One :meth:`OffsetWaiters.advance` serves every waiter up to
the new offset; a single timer expires the overdue ones. Each Deferred fires exactly
once: ``True`` when covered, ``False`` when its deadline passed first.
:class:`~rocketpy.store.flush.CommitLogFlush` drives the flushes; :class:`PutCompletion` turns a put's flush and
put-hook waits into its final :class:`PutMessageResult`.
"""

from __future__ import annotations

import dataclasses
import heapq
from itertools import count
from functools import partial
from typing import Any, Callable, Sequence

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.store.status import PutMessageResult, PutMessageStatus

#: called on the reactor with each appended put; may return a Deferred status (HA replication)
PutHook = Callable[[PutMessageResult], "Deferred[PutMessageStatus] | None"]


def wants_wait(msg: MessageExt) -> bool:
    """RocketMQ's ``isWaitStoreMsgOK``: the WAIT property is absent or ``true`` (any case)."""
    value = msg.properties.get(MessageConst.WAIT_STORE_MSG_OK)
    return value is None or value.lower() == "true"


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
    :param keep_timer: leave the timer armed when the last waiter fires, instead of cancelling
        it: with deadlines that only grow (one timeout for all), the next waiter then needs no
        timer of its own (a ``callLater`` and a cancel per SYNC_FLUSH put saved). It fires
        harmlessly; :meth:`expire` with nothing left cancels it (the owner's stop calls it).
    """

    def __init__(self, clock: IReactorTime | None = None, keep_timer: bool = False) -> None:
        self._clock = clock
        self._keep_timer = keep_timer
        self._seq = count()
        self._by_offset: list[tuple[int, int, _Waiter]] = []
        self._by_deadline: list[tuple[float, int, _Waiter]] = []
        self._timer: IDelayedCall | None = None
        self._timer_at = 0.0  # the armed timer's time (``getTime()`` without the call)
        #: the number of waiters not yet fired (``len()`` without the call)
        self.pending = 0
        #: the highest position reported to :meth:`advance`
        self.position = 0
        #: the highest offset ever waited for
        self.max_offset = 0

    def __len__(self) -> int:
        """The number of waiters not yet fired."""
        return self.pending

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
        if offset > self.max_offset:
            self.max_offset = offset
        seq = next(self._seq)
        heapq.heappush(self._by_offset, (offset, seq, waiter))
        heapq.heappush(self._by_deadline, (deadline, seq, waiter))
        self.pending += 1
        if self._timer is None or self._timer_at > deadline:
            self._arm()

    def advance(self, position: int) -> int:
        """The log is durable (or acknowledged) up to ``position``: fire the covered waiters.

        :returns: how many waiters fired.
        """
        if position > self.position:
            self.position = position
        position = self.position
        fired = 0
        heap = self._by_offset
        while heap and heap[0][0] <= position:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done:
                fired += self._settle(waiter, True)
        if self.pending or not self._keep_timer:  # else no deadline left and the timer stays: nothing to arm
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
        if not self.pending:
            self._cancel_timer()
        return expired

    def _settle(self, waiter: _Waiter, covered: bool) -> int:
        waiter.done = True
        self.pending -= 1
        if not self.pending:
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
            if not self._keep_timer:
                self._cancel_timer()
            return
        first = heap[0][0]
        if self._timer is not None and self._timer.active():
            if self._timer_at <= first:
                return
            self._timer.cancel()
        delay = max(0.0, first - self._clock.seconds())
        self._timer = self._clock.callLater(delay, self._on_timer)
        self._timer_at = self._timer.getTime()

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        assert self._clock is not None
        self.expire(self._clock.seconds())


class PutCompletion:
    """Fires a put's Deferred once it is appended, flushed (SYNC_FLUSH, WAIT) and accepted
    by every put hook (HA replication): RocketMQ's flush and replica futures.

    :param waiters: the flush waiters (advanced by whoever flushes).
    :param clock: gives the deadlines.
    :param sync_flush: wait for the flush (SYNC_FLUSH), or not.
    :param timeout: ``sync_flush_timeout``: then the status is FLUSH_DISK_TIMEOUT.
    """

    log = Logger()

    def __init__(self, waiters: OffsetWaiters, clock: IReactorTime, sync_flush: bool, timeout: float) -> None:
        self._waiters = waiters
        self._clock = clock
        self._sync_flush = sync_flush
        self._timeout = timeout
        self.hooks: list[PutHook] = []

    def complete(self, done: Callable[[PutMessageResult], object], msgs: Sequence[MessageExt],
                 result: PutMessageResult) -> None:
        """Call ``done(result)`` now, or once the put's flush and put hooks are done."""
        append = result.append
        if append is None or result.status is not PutMessageStatus.PUT_OK or not (self._sync_flush or self.hooks):
            done(result)  # failed, or ASYNC_FLUSH without hooks: done once appended
            return
        wait = wants_wait(msgs[0])  # appended: not empty
        waits: list[Deferred[PutMessageStatus]] = []
        next_offset = append.next_offset
        if self._sync_flush and wait and next_offset > self._waiters.position:
            deadline = self._clock.seconds() + self._timeout
            if not self.hooks:  # the common case: no Deferred chain, no gatherResults
                self._waiters.add_callback(next_offset, deadline, _fire_flushed, done, result)
                return
            waits.append(self._waiters.add(next_offset, deadline).addCallback(_flush_status))
        for hook in self.hooks if wait else ():
            status = hook(result)
            if status is not None:
                waits.append(status)
        if not waits:
            done(result)
        else:
            gathered = gatherResults(waits, consumeErrors=True).addCallback(_combine, result)
            gathered.addErrback(self._hook_failed).addCallback(done)

    def complete_many(self, d: Deferred[list[PutMessageResult]], puts: Sequence[Sequence[MessageExt]],
                      results: list[PutMessageResult]) -> None:
        """Fire ``d`` with the final results of ``puts`` once each is complete (as :meth:`complete`)."""
        if not (self._sync_flush or self.hooks):
            d.callback(results)
            return
        gather = _Gather(d, results)
        for i, (msgs, result) in enumerate(zip(puts, results)):
            self.complete(partial(gather.done, i), msgs, result)
        gather.done(-1, None)  # the last completion fires d, even when all completed above

    def _hook_failed(self, failure: Failure) -> PutMessageResult:
        self.log.failure("put hook failed", failure, level=LogLevel.error)
        return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)


class _Gather:
    """Collects the results of :meth:`PutCompletion.complete_many`; fires once all are in."""

    __slots__ = ("_d", "_results", "_left")

    def __init__(self, d: Deferred[list[PutMessageResult]], results: list[PutMessageResult]) -> None:
        self._d = d
        self._results = list(results)
        self._left = len(results) + 1  # + the caller's own call after registering every put

    def done(self, index: int, result: PutMessageResult | None) -> None:
        if index >= 0:
            self._results[index] = result  # type: ignore[assignment]
        self._left -= 1
        if not self._left:
            self._d.callback(self._results)


def _fire_flushed(covered: bool, done: Callable[[PutMessageResult], object], result: PutMessageResult) -> None:
    done(result if covered else dataclasses.replace(result, status=PutMessageStatus.FLUSH_DISK_TIMEOUT))


def _flush_status(covered: bool) -> PutMessageStatus:
    return PutMessageStatus.PUT_OK if covered else PutMessageStatus.FLUSH_DISK_TIMEOUT


def _combine(statuses: list[PutMessageStatus], result: PutMessageResult) -> PutMessageResult:
    """The last non-OK status wins: flush first, then each hook (replica over flush)."""
    status = PutMessageStatus.PUT_OK
    for each in statuses:
        if each is not PutMessageStatus.PUT_OK:
            status = each
    if status is PutMessageStatus.PUT_OK:
        return result
    return dataclasses.replace(result, status=status)
