"""``HAClient``: the slave side of replication (RocketMQ's ``HAService.HAClient``).

The slave dials its master's HA address (again every ``reconnect_interval`` while there is
no link; a dial not connected within ``connect_timeout`` is given up), reports its max
commit-log offset on connect, after every appended block and as a heartbeat, and appends
each received block byte for byte at the same offset through the store's writer pool
(which also dispatches it to the slave's consume queues and index).
Blocks are appended one at a time in arrival order; past ``read_buffer_size`` queued bytes
the link stops reading. A block whose offset is not the slave's max offset (unless the
slave is empty) drops the link: the next link restarts from the slave's own offset.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.error import ConnectingCancelledError, TimeoutError
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from rocketpy.ha.config import HAConfig
from rocketpy.ha.protocol import SlaveProtocol


class SlaveStore(Protocol):
    """What the slave side needs of ``StoreService``."""

    @property
    def max_physical_offset(self) -> int: ...

    def append_to_commit_log(self, offset: int, data: bytes) -> Deferred[bool]: ...


class HAClient(Service):
    """Keeps this slave's commit log a byte-identical copy of its master's.

    :param reactor: dials and keeps time.
    :param store: the slave's ``StoreService``.
    :param config: HA settings.
    :param master_address: the master's HA ``host:port``; None until known
        (:meth:`update_master_address`, e.g. from the name server's answer).
    """

    log = Logger()

    def __init__(self, reactor: Any, store: SlaveStore, config: HAConfig, master_address: str | None = None) -> None:
        self._reactor = reactor
        self.store = store
        self.config = config
        self._master = master_address
        self._link: SlaveProtocol | None = None
        self._dialing: Deferred[SlaveProtocol] | None = None
        self._loop = LoopingCall(self._dial)
        self._loop.clock = reactor
        self._loop_done: Deferred[Any] | None = None
        self._frames: deque[tuple[int, bytes]] = deque()
        self._buffered = 0
        self._paused = False
        self._appending = False
        self._reported = -1
        self._append_observers: list[Deferred[None]] = []
        self._lost_observers: list[Deferred[None]] = []

    @property
    def master_address(self) -> str | None:
        return self._master

    @property
    def connected(self) -> bool:
        return self._link is not None

    def update_master_address(self, address: str | None) -> None:
        """Follow a new master HA address: a link to the old one is dropped, the new one dialled."""
        if address == self._master:
            return
        self.log.info("HA master address {old} -> {new}", old=self._master, new=address)
        self._master = address
        if self._link is not None:
            self._link.drop()  # the next redial goes to the new address
            return
        if self._dialing is not None:
            self._dialing.cancel()  # a dial to the old address (maybe black-holed) waits no longer
        if self.running:
            self._dial()

    # -- lifecycle --

    def startService(self) -> None:
        super().startService()
        self._loop_done = self._loop.start(self.config.reconnect_interval, now=True)

    def stopService(self) -> Deferred[None]:
        """Stop redialling, close the link and wait for the block being appended."""
        super().stopService()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        if self._loop.running:
            self._loop.stop()
        if self._loop_done is not None:
            await self._loop_done
            self._loop_done = None
        if self._dialing is not None:
            self._dialing.cancel()
        if self._link is not None:
            gone: Deferred[None] = Deferred()
            self._lost_observers.append(gone)
            self._link.drop()
            await gone
        if self._appending:
            done: Deferred[None] = Deferred()
            self._append_observers.append(done)
            await done

    def _dial(self) -> None:
        # Not while a block of the last link is being appended: the new link's first report
        # must be the end of the log after it.
        if self._link is not None or self._dialing is not None or self._appending or not self._master:
            return
        host, _, port = self._master.rpartition(":")
        endpoint = TCP4ClientEndpoint(self._reactor, host, int(port))
        link = SlaveProtocol(self, self._reactor, self.config.send_heartbeat_interval,
                             self.config.housekeeping_interval)
        self._dialing = d = connectProtocol(endpoint, link)
        # timed on the injected clock: a dial that never completes is cancelled (stops connecting)
        d.addTimeout(self.config.connect_timeout, self._reactor, onTimeoutCancel=_no_connection)
        d.addCallbacks(self._dialed, self._dial_failed)

    def _dialed(self, link: SlaveProtocol) -> None:
        self._dialing = None

    def _dial_failed(self, failure: Failure) -> None:
        self._dialing = None
        if not failure.check(CancelledError, ConnectingCancelledError):  # not our own cancel
            self.log.info("HA master {addr} unreachable: {error}", addr=self._master, error=failure.getErrorMessage())

    # -- from the link --

    def link_made(self, link: SlaveProtocol) -> None:
        self._link = link
        self._frames.clear()
        self._buffered = 0
        self._paused = False
        self._reported = self.store.max_physical_offset
        self.log.info("HA link to {addr} up; reporting {offset}", addr=self._master, offset=self._reported)
        link.report(self._reported)

    def link_lost(self, link: SlaveProtocol) -> None:
        if link is not self._link:
            return
        self._link = None
        self._frames.clear()
        self._buffered = 0
        self.log.info("HA link to {addr} down", addr=self._master)
        observers, self._lost_observers = self._lost_observers, []
        for d in observers:
            d.callback(None)

    def heartbeat_due(self, link: SlaveProtocol) -> None:
        if link is self._link:
            self._reported = self.store.max_physical_offset
            link.report(self._reported)

    def frame_received(self, link: SlaveProtocol, offset: int, data: bytes) -> None:
        if link is not self._link:
            return
        self._frames.append((offset, data))
        self._buffered += len(data)
        if self._buffered > self.config.read_buffer_size and not self._paused:
            self._paused = True
            link.pause_reading()
        self._drain()

    # -- appends --

    def _drain(self) -> None:
        """Start appending the next queued block unless one is being appended."""
        link = self._link
        while self._frames and not self._appending and link is not None:
            offset, data = self._frames.popleft()
            self._buffered -= len(data)
            if self._paused and self._buffered <= self.config.read_buffer_size // 2:
                self._paused = False
                link.resume_reading()
            expected = self.store.max_physical_offset
            if expected != 0 and offset != expected:
                self.log.error("HA master sent offset {offset}, this slave is at {expected}: link dropped",
                               offset=offset, expected=expected)
                link.drop()
                return
            if not data:  # a heartbeat
                continue
            self._appending = True
            d = self.store.append_to_commit_log(offset, data)
            d.addCallbacks(self._appended, self._append_failed, callbackArgs=(link, offset), errbackArgs=(link,))

    def _append_done(self) -> None:
        self._appending = False
        observers, self._append_observers = self._append_observers, []
        for d in observers:
            d.callback(None)

    def _appended(self, ok: bool, link: SlaveProtocol, offset: int) -> None:
        self._append_done()
        if link is not self._link:
            return
        if not ok:
            self.log.error("HA append at {offset} refused by the store: link dropped", offset=offset)
            link.drop()
            return
        end = self.store.max_physical_offset
        if end > self._reported:
            self._reported = end
            link.report(end)
        self._drain()

    def _append_failed(self, failure: Failure, link: SlaveProtocol) -> None:
        self._append_done()
        self.log.failure("HA append failed", failure, level=LogLevel.error)
        if link is self._link:
            link.drop()


def _no_connection(result: object, timeout: float) -> Failure:
    """A dial cancelled by its timeout fails with this (a cancelled TCP connect says only its address)."""
    return Failure(TimeoutError(f"no connection within {timeout} s"))
