"""The response table of one connection: opaque -> pending request.

Shared by the client and the server side (both can send requests on a
channel). Deadlines are enforced by :meth:`ResponseTable.expire`, which the
owner's 1 s scan calls: no ``DelayedCall`` per request (a timeout is noticed
up to one scan interval late).

An entry's outcome goes to a callable, ``then(result, *args)``, with the response or a
:class:`~twisted.python.failure.Failure`: a request's Deferred (``add``: ``then`` is its
``callback``, which takes a Failure as ``errback`` does) or a caller's own function
(``add_then``: no Deferred per request for callers that need none, such as the producer's
sends).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from rocketpy.common import speedups
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

#: Called exactly once when a pending request completes in any way (frees a permit).
Release = Callable[[], object]
#: Gets a request's outcome: ``then(response_or_failure, *args)``; what it returns is ignored.
Then = Callable[..., object]
#: A pending request: its ``then`` and ``args``, deadline, release, and whether its timeout should close the channel.
_Entry = tuple[Then, tuple[Any, ...], float, Release | None, bool]

_log = Logger(namespace=__name__)


def call_then(result: Any, then: Then, args: tuple[Any, ...]) -> None:
    """``then(result, *args)``; an exception it raises is logged (it has no caller to go to)."""
    try:
        then(result, *args)
    except Exception:
        _log.failure("a request's outcome handler {then!r} failed", then=then)


class _Pending(Deferred[RemotingCommand]):
    """A request's Deferred from :meth:`ResponseTable.add`; cancelling it removes its entry."""

    __slots__ = ("table", "opaque")
    table: _Table
    opaque: int


def _cancel(d: Deferred[RemotingCommand]) -> None:
    assert isinstance(d, _Pending)
    d.table.discard(d.opaque)


class _TableBase:
    """The state of a :class:`ResponseTable` and its two per-request methods. ``rocketpy._speedups``
    has them in C (``TableBase``, rocketpy/_speedups_table.h); this is the reference."""

    _next: int
    _pending: dict[int, _Entry]

    def add_then(
        self, request: RemotingCommand, deadline: float, then: Then, args: tuple[Any, ...],
        release: Release | None = None, close_on_timeout: bool = False,
    ) -> int:
        """Register *request* under the next free opaque (set on it, and returned); its outcome
        goes to ``then(response_or_failure, *args)``, exactly once (an exception there is logged)."""
        pending = self._pending
        opaque = self._next
        while opaque in pending:  # ResponseTable.next_opaque, inlined: one call per request
            opaque = opaque + 1 if opaque < _INT32_MAX else _INT32_MIN
        self._next = opaque + 1 if opaque < _INT32_MAX else _INT32_MIN
        request.opaque = opaque
        pending[opaque] = (then, args, deadline, release, close_on_timeout)
        return opaque

    def resolve(self, response: RemotingCommand) -> bool:
        """Complete the request *response* answers; False when none is pending (a late reply)."""
        entry = self._pending.pop(response.opaque, None)
        if entry is None:
            return False
        then, args, _, release, _ = entry
        if release is not None:
            release()
        try:
            then(response, *args)
        except Exception as e:
            _outcome_failed(then, e)
        return True


def _outcome_failed(then: Then, error: BaseException) -> None:
    _log.failure("a request's outcome handler {then!r} failed", Failure(error), then=then)


if TYPE_CHECKING:  # for the checker, a _Table is a _TableBase; at run time its base comes last
    _Mixin = _TableBase
else:
    _Mixin = object


class _Table(_Mixin):
    """Pending requests of one connection, keyed by their 32-bit signed opaque: :class:`ResponseTable`
    on its base (C, or :class:`_TableBase`).

    Every entry leaves the table exactly once (response, timeout, cancel or
    :meth:`fail_all`), and its ``release`` is called exactly then, before its ``then``.
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
        d = _Pending(_cancel)
        d.table, d.opaque = self, opaque
        self._pending[opaque] = (d.callback, (), deadline, release, close_on_timeout)
        return d

    def add_request(
        self, request: RemotingCommand, deadline: float, release: Release | None = None, close_on_timeout: bool = False
    ) -> Deferred[RemotingCommand]:
        """:meth:`add` of *request* under the next free opaque (set on it)."""
        d = _Pending(_cancel)
        d.table = self
        d.opaque = self.add_then(request, deadline, d.callback, (), release, close_on_timeout)
        return d

    def fail(self, opaque: int, error: Exception) -> None:
        """Fail one pending request (e.g. its request could not be written)."""
        entry = self._pending.pop(opaque, None)
        if entry is not None:
            self._complete_with_error(entry, error)

    def discard(self, opaque: int) -> None:
        """Forget one pending request without completing it (its Deferred was cancelled); releases."""
        entry = self._pending.pop(opaque, None)
        if entry is not None and entry[3] is not None:
            entry[3]()

    def expire(self, now: float) -> tuple[int, bool]:
        """Fail every request whose deadline is at or before *now*.

        :return: how many, and whether one of them was added with ``close_on_timeout``.
        """
        expired = [(opaque, entry[4]) for opaque, entry in self._pending.items() if entry[2] <= now]
        for opaque, _ in expired:
            self.fail(opaque, RemotingTimeoutError(f"no response to request {opaque} in time"))
        return len(expired), any(close for _, close in expired)

    def fail_all(self, error: Exception) -> None:
        """Fail every pending request with *error* (the connection is gone)."""
        pending, self._pending = self._pending, {}  # swap first: errbacks may send again
        for entry in pending.values():
            self._complete_with_error(entry, error)

    @staticmethod
    def _complete_with_error(entry: _Entry, error: Exception) -> None:
        then, args, _, release, _ = entry
        if release is not None:
            release()
        call_then(Failure(error), then, args)


class PythonResponseTable(_Table, _TableBase):
    """:class:`ResponseTable` on the Python :class:`_TableBase` (the reference; tests check both)."""


#: ``rocketpy._speedups``' C base, or None (not built, or built before it had one)
_compiled_base: Any = (speedups.compiled.table_base(_outcome_failed)  # type: ignore[union-attr]
                       if hasattr(speedups.compiled, "table_base") else None)


if TYPE_CHECKING or _compiled_base is None:
    ResponseTable = PythonResponseTable
else:
    class ResponseTable(_Table, _compiled_base):
        """:class:`_Table` on the C base (``add_then`` and ``resolve`` in C)."""
