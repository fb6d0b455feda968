"""The commit log's ``fdatasync`` completed on the reactor's own epoll, without a Python thread.

Linux AIO ``IOCB_CMD_FDSYNC`` (the compiled ``aio_*`` functions of ``rocketpy/_speedups_aio.h``):
the reactor submits the sync (a few µs), the kernel runs it on a worker of its own and signals an
eventfd the reactor watches. A SYNC_FLUSH put appended on the reactor then costs no thread hand-off
at all, as Redis's ``write`` + ``fdatasync`` before its reply (doc/store.md, "Group commit on the
reactor"). Without the compiled module, a reactor without file descriptors or a kernel without
AIO, :meth:`AioFdSync.open` answers None and the store keeps its flush thread.
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


@implementer(IReadDescriptor)
class AioFdSync:
    """An AIO context and its eventfd, registered with the reactor while open.

    :meth:`fdsync` returns a Deferred that fires (on the reactor) once the file's data is durable,
    or fails with the sync's ``OSError`` (``EINVAL`` where the kernel or file refuses FDSYNC).
    """

    def __init__(self, reactor: IReactorFDSet, compiled: Any, context: int, eventfd: int) -> None:
        self._reactor = reactor
        self._c = compiled
        self._context = context
        self._eventfd = eventfd
        self._waiting: deque[Deferred[None]] = deque()
        reactor.addReader(self)

    @classmethod
    def open(cls, reactor: object) -> AioFdSync | None:
        """A new one on ``reactor``, or None where AIO cannot be used (see the module)."""
        compiled = speedups.compiled
        if compiled is None or not hasattr(compiled, "aio_setup") or not IReactorFDSet.providedBy(reactor):
            return None
        try:
            context = compiled.aio_setup(_DEPTH)
        except OSError:
            return None
        try:
            eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            compiled.aio_destroy(context)
            return None
        return cls(reactor, compiled, context, eventfd)

    def fdsync(self, fd: int) -> Deferred[None]:
        """Start an ``fdatasync(fd)``; the Deferred fires when it has ended."""
        try:
            self._c.aio_fdsync(self._context, fd, self._eventfd)
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
        self._c.aio_destroy(self._context)
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
        for res in self._c.aio_reap(self._context, False):
            d = self._waiting.popleft()  # one sync in flight at a time: completion order is submission order
            if res < 0:
                d.errback(Failure(OSError(-res, os.strerror(-res))))
            else:
                d.callback(None)

    def connectionLost(self, reason: Failure) -> None:
        pass

    def logPrefix(self) -> str:
        return "AioFdSync"
