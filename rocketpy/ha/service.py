"""``HAService``: the master side of replication (RocketMQ's ``HAService`` + ``HAConnection``).

The master listens on the HA port. Each slave link gets a :class:`SlaveSession` that streams
the commit log from the offset the slave first reports, in blocks of at most
``transfer_batch_size`` bytes that never cross a file, read in the store's read pool one
block at a time. New appends (the store's arrival listener) wake every idle session; an idle
link gets an empty frame every ``send_heartbeat_interval``. The slaves' acks raise
``push_to_slave_max_offset``, which serves the SYNC_MASTER waiters (one
:class:`~rocketpy.store.groupcommit.OffsetWaiters`, as the flush group commit).
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IPushProducer, IReactorTime
from twisted.internet.protocol import Factory
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.ha.config import HAConfig
from rocketpy.ha.protocol import MasterProtocol
from rocketpy.store.groupcommit import OffsetWaiters
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from rocketpy.util.service import ListeningService, OrderedMultiService, Steps


class MasterStore(Protocol):
    """What the master side needs of ``StoreService``."""

    @property
    def max_physical_offset(self) -> int: ...

    def get_commit_log_data(self, offset: int, size: int = -1) -> Deferred[bytes | None]: ...

    def add_arrival_listener(self, listener: Any) -> Any: ...

    def add_put_hook(self, hook: Any) -> None: ...


@implementer(IPushProducer)
class SlaveSession:
    """The transfer to one slave; the transport pauses it while its send buffer is full.

    :ivar ack_offset: the slave's last reported max offset (-1 before its first report).
    :ivar caught_up_at: when the slave last reported the master's whole commit log (or connected).
    """

    log = Logger()

    def __init__(self, service: HAService, link: MasterProtocol, clock: IReactorTime) -> None:
        self._service = service
        self._store = service.store
        self._link = link
        self._clock = clock
        self._interval = service.config.send_heartbeat_interval
        self.ack_offset = -1
        #: the slave's ``ip:port``, kept for the log line once the link is gone
        self.peer = link.peer_address()
        self.caught_up_at = clock.seconds()
        self._next = -1  # where the next block starts; -1 until the first report
        self._reading = False
        self._paused = False
        self._closed = False
        link.register_producer(self)
        self._idle: IDelayedCall = clock.callLater(self._interval, self._heartbeat)

    # -- from the link --

    def ack_received(self, offset: int) -> None:
        """A report: the first one is where the transfer starts; any one may serve waiters."""
        if self._next < 0:
            self._next = offset if offset else self._service.last_file_start()
            self.log.info("HA slave asks for {offset}; sending from {start}", offset=offset, start=self._next)
            if offset > self._store.max_physical_offset:  # kept, as RocketMQ: it waits for the master
                self.log.warn("HA slave is ahead of this master ({offset} > {end}): nothing to send",
                              offset=offset, end=self._store.max_physical_offset)
                return  # and its offset acknowledges nothing of ours
        elif offset > self._store.max_physical_offset:
            self.log.warn("HA slave reports {offset}, beyond the commit log: dropped", offset=offset)
            self._link.drop()
            return
        self.ack_offset = offset
        if offset >= self._store.max_physical_offset:
            self.caught_up_at = self._clock.seconds()
        self._service.slave_acked(offset)
        self.wake()

    def drop_link(self) -> None:
        """Close the link; :meth:`lost` follows."""
        self._link.drop()

    def lost(self) -> None:
        self._closed = True
        if self._idle.active():
            self._idle.cancel()
        self._service.slave_lost(self)

    # -- IPushProducer --

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        self.wake()

    def stopProducing(self) -> None:
        self._closed = True

    # -- transfer --

    def wake(self) -> None:
        """Read the next block if there is one and nothing holds the transfer back."""
        if self._next < 0 or self._reading or self._paused or self._closed:
            return
        size = self._service.block_size(self._next)
        if size <= 0:
            return
        self._reading = True
        offset = self._next
        d = self._store.get_commit_log_data(offset, size)
        d.addCallbacks(self._send, self._read_failed, (offset,))

    def _send(self, data: bytes | None, offset: int) -> None:
        self._reading = False
        if self._closed:
            return
        if data is None:
            self.log.warn("commit log at {offset} is not there (deleted?): HA slave dropped", offset=offset)
            self._link.drop()
            return
        self._link.write_frame(offset, data)
        self._next = offset + len(data)
        self._idle.reset(self._interval)
        self.wake()

    def _read_failed(self, failure: Failure) -> None:
        self._reading = False
        self.log.failure("HA read of the commit log failed", failure, level=LogLevel.error)
        self._link.drop()

    def _heartbeat(self) -> None:
        self._idle = self._clock.callLater(self._interval, self._heartbeat)
        if self._next >= 0 and not self._reading and not self._closed:
            self._link.write_frame(self._next, b"")
            self.wake()  # a safety net: nothing should be pending here


class HAService(OrderedMultiService):
    """Master side: the HA listener, the slave sessions and the SYNC_MASTER waiters.

    :param reactor: listens and keeps time.
    :param store: the ``StoreService``; this registers an arrival listener and, for a
        SYNC_MASTER, a put hook on it.
    :param config: HA settings.
    :param file_size: bytes per commit-log file (a block never crosses a file).
    :param listen: the HA server endpoint; None for no listener (unit tests).
    :param sync_master: make sends wait for a slave's ack (SYNC_MASTER).
    """

    log = Logger()

    def __init__(self, reactor: Any, store: MasterStore, config: HAConfig, file_size: int,
                 listen: str | None, sync_master: bool) -> None:
        super().__init__()
        self.store = store
        self.config = config
        self._reactor = reactor
        self._file_size = file_size
        self._waiters = OffsetWaiters(reactor)
        self._sessions: set[SlaveSession] = set()
        self._all_lost: Deferred[None] | None = None
        self._listener: ListeningService | None = None
        # start order (stopped in reverse): the slaves' sessions, then the HA port
        self.add("slaves", Steps(stop=self._drop_slaves))
        if listen is not None:
            endpoint = serverFromString(reactor, listen)
            self._listener = ListeningService(endpoint, Factory.forProtocol(self.build_protocol), "HA service")
            self.add("listener", self._listener)
        self._arrival = store.add_arrival_listener(self._arrived)
        self._arrival.wanted = False  # only while a slave is connected
        if sync_master:
            store.add_put_hook(self._wait_for_slave)

    @property
    def listening_port(self) -> IListeningPort | None:
        return self._listener.port if self._listener is not None else None

    @property
    def push_to_slave_max_offset(self) -> int:
        """The highest offset any slave has acknowledged."""
        return self._waiters.position

    @property
    def slave_count(self) -> int:
        return len(self._sessions)

    @property
    def slave_offsets(self) -> list[int]:
        """Each connected slave's last acknowledged offset, lowest first: -1 until its first
        report (where its transfer starts) is taken, and while it is ahead of this master."""
        return sorted(session.ack_offset for session in self._sessions)

    def slave_lags(self) -> list[tuple[str, int, float]]:
        """Per connected slave: its address, the bytes it lacks and for how many seconds it
        has lacked some (0 when it has everything)."""
        end, now = self.store.max_physical_offset, self._reactor.seconds()
        lags = []
        for session in self._sessions:
            behind = max(0, end - max(session.ack_offset, 0))
            lags.append((session.peer, behind, now - session.caught_up_at if behind else 0.0))
        return sorted(lags)

    # -- lifecycle --

    def _drop_slaves(self) -> Deferred[None]:
        """Drop every slave, then end the waiters (FLUSH_SLAVE_TIMEOUT)."""
        return Deferred.fromCoroutine(self._drop())

    async def _drop(self) -> None:
        if self._sessions:
            self._all_lost = Deferred()
            for session in list(self._sessions):
                session.drop_link()
            await self._all_lost
        self._waiters.expire(float("inf"))

    # -- sessions --

    def build_protocol(self) -> MasterProtocol:
        """The protocol of one new slave link."""
        return MasterProtocol(self._reactor, self.config.housekeeping_interval, self._connected)

    def _connected(self, link: MasterProtocol) -> SlaveSession:
        session = SlaveSession(self, link, self._reactor)
        self._sessions.add(session)
        self._arrival.wanted = True
        self.log.info("HA slave {peer} connected ({n} now)", peer=session.peer, n=len(self._sessions))
        return session

    def slave_lost(self, session: SlaveSession) -> None:
        self._sessions.discard(session)
        self._arrival.wanted = bool(self._sessions)
        self.log.info("HA slave {peer} lost, acknowledged up to {offset} ({n} left)", peer=session.peer,
                      offset=session.ack_offset, n=len(self._sessions))
        if not self._sessions and self._all_lost is not None:
            all_lost, self._all_lost = self._all_lost, None
            all_lost.callback(None)

    def slave_acked(self, offset: int) -> None:
        self._waiters.advance(offset)

    def last_file_start(self) -> int:
        """Where a slave with an empty store starts: the master's last commit-log file."""
        end = self.store.max_physical_offset
        return end - end % self._file_size

    def block_size(self, offset: int) -> int:
        """Bytes of the next block from ``offset``: up to the batch size, the log end, the file end."""
        file_end = offset - offset % self._file_size + self._file_size
        return min(self.config.transfer_batch_size, min(self.store.max_physical_offset, file_end) - offset)

    def _arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        for session in self._sessions:
            session.wake()

    # -- SYNC_MASTER --

    def is_slave_ok(self, master_put_where: int) -> bool:
        """A slave is connected and less than ``slave_fall_behind_max`` behind."""
        return bool(self._sessions) and (
            master_put_where - self.push_to_slave_max_offset < self.config.slave_fall_behind_max)

    def _wait_for_slave(self, result: PutMessageResult) -> Deferred[PutMessageStatus] | None:
        """The put hook: a status once a slave has the record or the slave timeout passed."""
        append = result.append
        if append is None:
            return None
        end = append.next_offset
        if not self.is_slave_ok(end):
            return succeed(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        deadline = self._reactor.seconds() + self.config.slave_timeout
        return self._waiters.add(end, deadline).addCallback(_replica_status)


def _replica_status(covered: bool) -> PutMessageStatus:
    return PutMessageStatus.PUT_OK if covered else PutMessageStatus.FLUSH_SLAVE_TIMEOUT
