"""The commit log's ``fdatasync`` completed on the reactor's own epoll, without a Python thread.

Two ways (the compiled functions of ``rocketpy/_speedups_aio.h``), both signalling an eventfd the
reactor watches when a sync ends: ``"aio"``, Linux AIO ``IOCB_CMD_FDSYNC`` (the reactor submits in
a few µs, the kernel runs the sync on a worker of its own), and ``"native"``, a C thread of the
process that runs ``fdatasync`` without the GIL. A SYNC_FLUSH put appended on the reactor then
crosses no Python thread (doc/store.md, "Group commit on the reactor"). Without the compiled
module, on a reactor without file descriptors or a kernel without AIO, :meth:`AioFdSync.open`
answers None and the store keeps its Python flush thread.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorFDSet, IReadDescriptor
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.common import speedups

#: requests one context holds in flight (the store runs one sync at a time)
_DEPTH = 4
#: the ways :meth:`AioFdSync.open` knows
KINDS = ("native", "aio")


@implementer(IReadDescriptor)
class AioFdSync:
    """An AIO context and its eventfd, registered with the reactor while open.

    :meth:`fdsync` returns a Deferred that fires (on the reactor) once the file's data is durable,
    or fails with the sync's ``OSError`` (``EINVAL`` where the kernel or file refuses FDSYNC).
    """

    def __init__(self, reactor: IReactorFDSet, compiled: Any, eventfd: int, context: int | None,
                 syncer: object = None) -> None:
        self._reactor = reactor
        self._c = compiled
        self._eventfd = eventfd
        self._context = context  # "aio": the io_setup context
        self._syncer = syncer  # "native": the C thread
        self.kind = "aio" if context is not None else "native"
        self._waiting: deque[Deferred[None]] = deque()
        reactor.addReader(self)

    @classmethod
    def open(cls, reactor: object, kind: str = "native") -> AioFdSync | None:
        """A new one of ``kind`` (:data:`KINDS`) on ``reactor``, or None where it cannot be used."""
        compiled = speedups.compiled
        if compiled is None or not hasattr(compiled, "aio_setup") or not IReactorFDSet.providedBy(reactor):
            return None
        try:
            eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            return None
        try:
            if kind == "aio":
                return cls(reactor, compiled, eventfd, compiled.aio_setup(_DEPTH))
            return cls(reactor, compiled, eventfd, None, compiled.syncer_start(eventfd))
        except OSError:
            os.close(eventfd)
            return None

    def fdsync(self, fd: int) -> Deferred[None]:
        """Start an ``fdatasync(fd)``; the Deferred fires when it has ended."""
        try:
            if self._context is not None:
                self._c.aio_fdsync(self._context, fd, self._eventfd)
            else:
                self._c.syncer_submit(self._syncer, fd)
        except OSError:
            return fail()
        d: Deferred[None] = Deferred()
        self._waiting.append(d)
        return d

    def close(self) -> None:
        """Unregister and free the context (waiting for a sync still in flight, if any)."""
        if self._eventfd < 0:
            return
        self._reactor.removeReader(self)
        if self._context is not None:
            self._c.aio_destroy(self._context)
        else:
            self._c.syncer_stop(self._syncer)
        os.close(self._eventfd)
        self._eventfd = -1
        waiting, self._waiting = self._waiting, deque()
        for d in waiting:
            d.errback(Failure(OSError("the AIO context was closed")))

    # -- IReadDescriptor --

    def fileno(self) -> int:
        return self._eventfd

    def doRead(self) -> None:
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return
        reaped = self._c.aio_reap(self._context) if self._context is not None else self._c.syncer_reap(self._syncer)
        for res in reaped:
            d = self._waiting.popleft()  # one sync in flight at a time: completion order is submission order
            if res < 0:
                d.errback(Failure(OSError(-res, os.strerror(-res))))
            else:
                d.callback(None)

    def connectionLost(self, reason: Failure) -> None:
        pass

    def logPrefix(self) -> str:
        return "AioFdSync"
