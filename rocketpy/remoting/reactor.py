"""A leaner epoll reactor: Twisted's ``EPollReactor`` with less Python per wake-up.

Answering one request at a time costs a reactor turn per request, and on the stock reactor
that turn is mostly bookkeeping around its three system calls: ``runUntilCurrent`` and
``timeout`` with nothing due, then per event ``log.callWithLogger`` → ``log.callWithContext``
→ ``context.call`` → ``_doReadOrWrite`` → ``doRead`` → ``_dataReceived`` → ``dataReceived``.

:class:`LeanEPollReactor` does the same work with fewer Python calls:

- a turn with no thread call, no new or due timed call and no shutdown pending skips
  ``runUntilCurrent`` and computes the poll timeout inline (the value ``timeout()`` gives);
- a read event alone (``EPOLLIN``) on a TCP connection (``tcp.Server`` / ``tcp.Client``, not
  subclassed) is received and handed to the connection's protocol inline, as ``doRead`` does,
  inside the same log context (``system`` is the connection's log prefix) that
  ``log.callWithLogger`` would push; an exception is logged there and disconnects it, as
  ``_doReadOrWrite`` does (after ``startTLS`` the protocol is Twisted's TLS one, as for ``doRead``;
  a client endpoint's ``_WrappingProtocol``, whose ``dataReceived`` only forwards, is skipped);
- every other event (writes, hang-ups, listening ports, wakers, other transports) goes through
  Twisted's own path.

With the C module built, ``doPoll`` (``epoll_wait`` without the GIL, then the events as above) is
``ReactorTurn.poll`` of ``rocketpy/_speedups_reactor.h``, and ``mainLoop``'s loop is its ``run``: the
log context pushed for an event is prepared once per selectable (kept on it as
``_rocketpy_log_context`` while the reactor's outer context is the same object and its log prefix the
same string), every other event is ``log.callWithLogger``'s work done in C around a direct
``_doReadOrWrite`` call (its exceptions logged by ``_logged`` as ``callWithLogger`` logs them), and
the reactor's and the connection's plain attributes are read from their instance dicts. The Python methods here are the
reference and the fallback (``ROCKETPY_NO_SPEEDUPS=1``). The C turn also says when it sleeps in ``epoll_wait``
(:attr:`LeanEPollReactor.sleeping_turn`): the store's native sync thread then writes a lone SYNC_FLUSH answer
itself (rocketpy/_speedups_syncwrite.h; doc/store.md, "Group commit on the reactor").

rocketpy runs on any reactor; this one only makes it cheaper. ``twistd rocketpy`` installs it
unless ``--reactor`` names another (the ``rocketpy`` reactor plugin:
``python -m twisted --reactor rocketpy ...``).
"""

from __future__ import annotations

import errno
from typing import Any

from twisted.internet import epollreactor, main, tcp
from twisted.internet.endpoints import _WrappingProtocol
from twisted.internet.posixbase import _NO_FILEDESC
from twisted.logger import Logger
from twisted.python import context, log
from twisted.python.failure import Failure

from rocketpy.common import speedups

_EPOLLIN = epollreactor.EPOLLIN
_ILogContext = log.ILogContext
_THREADED_TRACKER = context.ThreadedContextTracker
_EWOULDBLOCK = errno.EWOULDBLOCK
_CONNECTION_DONE = main.CONNECTION_DONE
_CONNECTION_LOST = main.CONNECTION_LOST
#: epoll_wait's timeout is a C int of milliseconds (as in ``ReactorBase.timeout``)
_LONGEST = 2147483


def _plain_read_types() -> frozenset[type]:
    """The TCP connection classes whose read is ``Connection.doRead`` + ``_dataReceived`` and whose
    log prefix is ``Connection.logPrefix`` (its ``logstr``)."""
    return frozenset(
        cls
        for cls in (tcp.Server, tcp.Client)
        if cls.doRead is tcp.Connection.doRead and cls._dataReceived is tcp.Connection._dataReceived
        and cls.logPrefix is tcp.Connection.logPrefix
    )


class LeanEPollReactor(epollreactor.EPollReactor):
    """``EPollReactor`` with a cheaper idle turn and inline TCP reads (see the module docstring)."""

    _plain = _plain_read_types()
    _log = Logger()
    #: the C module whose ``reactor_turn`` runs the turn (rocketpy/_speedups_reactor.h); None: the Python here
    _compiled: Any = speedups.compiled if hasattr(speedups.compiled, "reactor_turn") else None
    _turn: Any = None

    def __init__(self) -> None:
        super().__init__()
        if self._compiled is not None:
            turn = self._compiled.reactor_turn(
                self._poller, self._selectables, self._plain, _WrappingProtocol, log.callWithLogger,
                self._doReadOrWrite, self._read_ended, self._logged, context, _THREADED_TRACKER, _ILogContext,
                _CONNECTION_DONE, _CONNECTION_LOST, _NO_FILEDESC)
            self._turn, self._poll = turn, turn.poll
            self.doPoll = self.doIteration = self._poll  # type: ignore[method-assign]  # the same, in C

    @property
    def sleeping_turn(self) -> Any:
        """The C turn, whose ``epoll_wait`` a native sync thread may write an answer during
        (rocketpy/_speedups_syncwrite.h); None with the Python turn."""
        return self._turn

    def mainLoop(self) -> None:
        # ReactorBase.mainLoop with runUntilCurrent and timeout skipped when nothing is due
        seconds, run_due, timeout = self.seconds, self.runUntilCurrent, self.timeout
        while self._started:
            try:
                if self._turn is not None:  # the loop below in C
                    self._turn.run(self, self._poll, seconds, run_due, timeout)
                while self._started:
                    pending = self._pendingTimedCalls
                    delay: float | None
                    if self.threadCallQueue or self._newTimedCalls or self._justStopped:
                        run_due()
                        delay = timeout()
                    elif pending:
                        delay = pending[0].time - seconds()
                        if delay <= 0:
                            run_due()
                            delay = timeout()
                        elif delay > _LONGEST:
                            delay = _LONGEST
                    else:
                        delay = None
                    self.doIteration(self.running and delay)
            except BaseException:
                self._log.failure("Unexpected error in main loop")
        self._log.info("Main loop terminated.")

    def doPoll(self, timeout: float | None) -> None:
        if timeout is None:
            timeout = -1
        try:
            events = self._poller.poll(timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        if not events:
            return
        selectables, plain = self._selectables, self._plain
        # this thread's stack of twisted.python.context dicts (None: a tracker of another kind,
        # then every event goes through log.callWithLogger)
        tracker = context.theContextTracker
        contexts: list[dict[Any, Any]] | None = None
        if type(tracker) is _THREADED_TRACKER:
            try:
                contexts = tracker.storage.ct.contexts
            except AttributeError:  # the thread's first use
                contexts = tracker.currentContext().contexts
        outer: dict[str, Any] = {}
        if contexts is not None:  # context.get(ILogContext) without its three calls
            for pushed in reversed(contexts):
                if _ILogContext in pushed:
                    outer = pushed[_ILogContext]
                    break
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            if event == _EPOLLIN and type(selectable) in plain and contexts is not None:
                # log.callWithLogger's context, pushed without its five calls
                log_context = outer.copy()
                log_context["system"] = selectable.logstr
                contexts.append({_ILogContext: log_context})
                try:
                    self._read(selectable)
                finally:
                    contexts.pop()
            else:
                log.callWithLogger(selectable, self._doReadOrWrite, selectable, fd, event)

    doIteration = doPoll

    def _read(self, connection: Any) -> None:
        """``_doReadOrWrite`` for a read event on a TCP connection, ``doRead`` inlined."""
        why: BaseException | None
        raised = False
        try:
            if connection.fileno() == -1:
                why = _NO_FILEDESC
            else:
                try:
                    data = connection.socket.recv(connection.bufferSize)
                except OSError as e:
                    why = None if e.args[0] == _EWOULDBLOCK else _CONNECTION_LOST
                else:
                    if data:
                        protocol = connection.protocol
                        if type(protocol) is _WrappingProtocol:  # a client endpoint's: it only forwards
                            protocol = protocol._wrappedProtocol
                        protocol.dataReceived(data)
                        return
                    why = _CONNECTION_DONE
        except BaseException as e:
            why, raised = e, True
        if why is not None:
            self._read_ended(connection, why, raised)

    def _read_ended(self, connection: Any, why: BaseException, raised: bool) -> None:
        """A read that disconnects ``connection``, as ``_doReadOrWrite`` inside ``log.callWithLogger`` does it:
        ``why`` was ``raised`` by the read (then logged here), or is why the connection ended; an exception
        from the disconnection is logged (KeyboardInterrupt goes on)."""
        if raised:
            log.err(Failure(why))
        try:
            self._disconnectSelectable(connection, why, True)
        except KeyboardInterrupt:
            raise
        except BaseException:
            log.err(system=connection.logstr)

    def _logged(self, raised: BaseException, system: Any) -> None:
        """An exception from an event's ``_doReadOrWrite``, logged as ``log.callWithLogger`` logs it (the C turn's
        own ``callWithLogger``)."""
        log.err(Failure(raised), system=system)


def install() -> LeanEPollReactor:
    """Install :class:`LeanEPollReactor` as the global reactor (the ``rocketpy`` reactor plugin)."""
    reactor = LeanEPollReactor()
    from twisted.internet.main import installReactor

    installReactor(reactor)
    return reactor
