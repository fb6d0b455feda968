"""The commit log's ``fdatasync`` completed on the reactor's own epoll, without a Python thread.

Two ways (compiled functions), both signalling an eventfd the reactor watches when a sync ends:
``"native"``, a C thread of the process that runs ``fdatasync`` without the GIL
(``rocketpy/_speedups_aio.h``), and ``"uring"``, an ``IORING_OP_FSYNC`` submitted to an io_uring
(``rocketpy/_speedups_uring.h``; the kernel runs it on an io-wq worker of the process). A SYNC_FLUSH
put appended on the reactor then crosses no Python thread (doc/store.md, "Group commit on the
reactor"). Without the compiled module, on a reactor without file descriptors or a kernel without
io_uring (``ENOSYS``, or ``EPERM`` where it is turned off), :meth:`AioFdSync.open` answers None and
the store keeps its Python flush thread.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFDSet, IReadDescriptor
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.common import speedups

#: the ways :meth:`AioFdSync.open` knows, and their compiled (start, submit, reap, stop) functions
KINDS = {
    "native": ("syncer_start", "syncer_submit", "syncer_reap", "syncer_stop"),
    "uring": ("uring_setup", "uring_fdsync", "uring_reap", "uring_close"),
}


@implementer(IReadDescriptor)
class AioFdSync:
    """A sync thread or ring and its eventfd, registered with the reactor while open.

    :meth:`fdsync` returns a Deferred that fires (on the reactor) once the file's data is durable,
    or fails with the sync's ``OSError``; :meth:`fdsync_then` calls back instead (no Deferred).
    """

    log = Logger()

    #: False: the sync thread never writes an answer itself (``ROCKETPY_NO_SYNC_WRITE=1`` for a process)
    direct_answers = os.environ.get("ROCKETPY_NO_SYNC_WRITE", "") in ("", "0")

    def __init__(self, reactor: IReactorFDSet, compiled: Any, kind: str, eventfd: int) -> None:
        start, submit, reap, stop = (getattr(compiled, name) for name in KINDS[kind])
        self.kind = kind
        self._handle = start(eventfd)  # the C thread, or the ring; OSError where it cannot start
        self._submit, self._reap, self._stop = submit, reap, stop
        self._reactor = reactor
        self._eventfd = eventfd
        #: ``(done, failed, args)`` per sync in flight, in order: ``done(*args)`` or ``failed(failure, *args)``
        self._waiting: deque[tuple[Callable[..., object], Callable[..., object], tuple[Any, ...]]] = deque()
        self._covers: list[int] = []  # the log offset each sync in flight covers, in order
        #: answers written as soon as a sync covering them ends, before its Deferred fires: entries
        #: ``[next_offset, transport, frame]`` in offset order (the broker's lone SYNC_FLUSH send, rocketpy/
        #: _speedups_syncanswer.h; doc/store.md, "Group commit on the reactor"); None where not compiled (uring)
        self.answers: list[list[Any]] | None = None
        self._reap_answers = getattr(compiled, "sync_answer_reap", None) if kind == "native" else None
        #: the descriptor of a sync already submitted by the lone put's C call, which :meth:`fdsync` claims
        #: instead of submitting; :meth:`settle` drops one left unclaimed
        self.started: list[int] = []
        #: ``MessageStore.put_lone``'s ``sync`` argument, None where not compiled (uring)
        self.presync: tuple[Any, ...] | None = None
        #: ``(thread, covers)`` when the sync thread writes a lone answer itself as its sync ends, while the
        #: reactor sleeps (a :class:`~rocketpy.remoting.reactor.LeanEPollReactor` with its C turn;
        #: rocketpy/_speedups_syncwrite.h): the broker's lone send arms its queued answer with it; else None
        self.direct: tuple[Any, list[int]] | None = None
        self._written: Any = None  # compiled.syncer_written with direct
        if self._reap_answers is not None:
            self.answers = []
            self.presync = (compiled.sync_lone_put, self._handle, self.started)
            turn = getattr(reactor, "sleeping_turn", None)
            if self.direct_answers and turn is not None and compiled.syncer_direct(self._handle, turn):
                self.direct = (self._handle, self._covers)
                self._written = compiled.syncer_written
        reactor.addReader(self)

    @classmethod
    def open(cls, reactor: object, kind: str = "native") -> AioFdSync | None:
        """A new one of ``kind`` (:data:`KINDS`) on ``reactor``, or None where it cannot be used;
        ``"uring"`` where io_uring cannot be set up gives a ``"native"`` one."""
        opened = cls._open(reactor, kind)
        if opened is None and kind == "uring":
            return cls._open(reactor, "native")
        return opened

    @classmethod
    def _open(cls, reactor: object, kind: str) -> AioFdSync | None:
        compiled = speedups.compiled
        if (compiled is None or kind not in KINDS or not hasattr(compiled, KINDS[kind][0])
                or not IReactorFDSet.providedBy(reactor)):
            return None
        try:
            eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            return None
        try:
            return cls(reactor, compiled, kind, eventfd)
        except OSError:
            os.close(eventfd)
            return None

    def fdsync(self, fd: int, covers: int = 0) -> Deferred[None]:
        """Start an ``fdatasync(fd)``; the Deferred fires when it has ended. ``covers``: the log offset
        durable once it succeeded (the :attr:`answers` up to it are written first)."""
        d: Deferred[None] = Deferred()
        self.fdsync_then(fd, covers, _synced, _failed, d)
        return d

    def fdsync_then(self, fd: int, covers: int, done: Callable[..., object], failed: Callable[..., object],
                    *args: Any) -> None:
        """:meth:`fdsync` without a Deferred: ``done(*args)`` once the sync succeeded, ``failed(failure,
        *args)`` once it failed (at once when it cannot be submitted); both on the reactor."""
        if self.started:  # running already: the lone put's C call submitted it right after the append
            self.started.clear()
        else:
            try:
                self._submit(self._handle, fd)
            except OSError:
                failed(Failure(), *args)
                return
        self._waiting.append((done, failed, args))
        self._covers.append(covers)

    @property
    def written_by_thread(self) -> int:
        """How many answers the sync thread wrote itself (:attr:`direct`)."""
        return self._written(self._handle) if self.direct is not None else 0

    def settle(self) -> None:
        """A sync submitted by the lone put's C call that no :meth:`fdsync` claimed (the flush went to the
        flush thread): its end is awaited and ignored."""
        if self.started:
            self.started.clear()
            self._waiting.append((_ignored, _ignored, ()))
            self._covers.append(0)

    def close(self) -> None:
        """Unregister and stop (waiting for a sync still in flight, if any)."""
        if self._eventfd < 0:
            return
        self._reactor.removeReader(self)
        self._stop(self._handle)
        os.close(self._eventfd)
        self._eventfd = -1
        waiting, self._waiting = self._waiting, deque()
        self._covers.clear()  # the list direct holds
        self.started.clear()
        if self.answers is not None:
            self.answers.clear()  # their puts are answered by their Deferreds (a timeout, a later flush)
        for _, failed, args in waiting:
            failed(Failure(OSError(f"the {self.kind} fdatasync was closed")), *args)

    # -- IReadDescriptor --

    def fileno(self) -> int:
        return self._eventfd

    def doRead(self) -> None:
        if self._reap_answers is not None:  # the covered answers written first, in the same C call
            results = self._reap_answers(self._handle, self._eventfd, self._covers, self.answers)
        else:
            try:
                os.eventfd_read(self._eventfd)
            except BlockingIOError:
                return
            results = self._reap(self._handle)
        for res in results:
            if self._eventfd < 0:  # a failed sync's errback closed this (the store's fallback): close() failed the rest
                return
            done, failed, args = self._waiting.popleft()  # one sync in flight at a time: completion order is submission order
            del self._covers[0]
            try:
                if res < 0:
                    failed(Failure(OSError(-res, os.strerror(-res))), *args)
                else:
                    done(*args)
            except Exception:  # what a Deferred would have kept: the next results still go out
                self.log.failure("fdatasync completion failed")

    def connectionLost(self, reason: Failure) -> None:
        pass

    def logPrefix(self) -> str:
        return "AioFdSync"


def _synced(d: Deferred[None]) -> None:
    d.callback(None)


def _failed(failure: Failure, d: Deferred[None]) -> None:
    d.errback(failure)


def _ignored(*_: object) -> None:
    """The end of a sync nobody waits for (:meth:`AioFdSync.settle`)."""
