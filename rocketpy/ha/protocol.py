"""The HA wire format and both ends' Twisted protocols (doc/wire.md §12, doc/ha.md).

Slave → master: bare big-endian ``i64`` offsets (the slave's max commit-log offset).
Master → slave: frames of ``i64 offset ‖ i32 size ‖ size bytes`` of commit log; size 0 is a
heartbeat. The protocols only move bytes and run the idle timers; what to send and what to
do with a frame is decided by their session (master) or client (slave).
"""

from __future__ import annotations

import struct
from typing import Callable, Protocol as TypingProtocol

from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure

ACK = struct.Struct(">q")
HEADER = struct.Struct(">qi")


def encode_frame(offset: int, data: bytes) -> bytes:
    """One master → slave frame: header and commit-log bytes."""
    return HEADER.pack(offset, len(data)) + data


def take_last_ack(buffer: bytearray) -> int | None:
    """Consume every whole 8-byte ack of ``buffer``; the last one, or None when there is none.

    Like RocketMQ's master, only the newest report matters; a partial value stays buffered.
    """
    whole = len(buffer) - len(buffer) % ACK.size
    if not whole:
        return None
    (offset,) = ACK.unpack_from(buffer, whole - ACK.size)
    del buffer[:whole]
    return int(offset)


class FrameReader:
    """Splits a byte stream into ``(offset, data)`` frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add received bytes; the frames they complete, in order."""
        buf = self._buffer
        buf += data
        frames = []
        start = 0
        while len(buf) - start >= HEADER.size:
            offset, size = HEADER.unpack_from(buf, start)
            end = start + HEADER.size + size
            if size < 0:
                raise ValueError(f"negative HA frame size {size}")
            if end > len(buf):
                break
            frames.append((int(offset), bytes(buf[start + HEADER.size:end])))
            start = end
        del buf[:start]
        return frames


class MasterSession(TypingProtocol):
    """What :class:`MasterProtocol` drives: the transfer state of one slave (``ha.service``)."""

    def ack_received(self, offset: int) -> None: ...

    def lost(self) -> None: ...


class MasterProtocol(Protocol, TimeoutMixin):
    """The master's end of one slave link: reads acks, writes frames.

    :param clock: runs the housekeeping timeout.
    :param housekeeping: seconds without a read before the link is dropped.
    :param on_connect: builds the session of a new link.
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, housekeeping: float,
                 on_connect: Callable[[MasterProtocol], MasterSession]) -> None:
        self.callLater = clock.callLater  # type: ignore[method-assign,assignment]  # TimeoutMixin: our clock
        self._housekeeping = housekeeping
        self._on_connect = on_connect
        self._acks = bytearray()
        self.session: MasterSession | None = None

    def connectionMade(self) -> None:
        self.setTimeout(self._housekeeping)
        self.session = self._on_connect(self)

    def dataReceived(self, data: bytes) -> None:
        self.resetTimeout()
        self._acks += data
        offset = take_last_ack(self._acks)
        if offset is not None and self.session is not None:
            self.session.ack_received(offset)

    def write_frame(self, offset: int, data: bytes) -> None:
        """Send one frame to the slave (header and data without joining them)."""
        assert self.transport is not None
        self.transport.writeSequence([HEADER.pack(offset, len(data)), data])

    def register_producer(self, producer: IPushProducer) -> None:
        """Let the transport pause ``producer`` while its send buffer is full."""
        assert self.transport is not None
        self.transport.registerProducer(producer, True)  # type: ignore[attr-defined]

    def drop(self) -> None:
        """Close the link at once (nothing of value is buffered on it)."""
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def timeoutConnection(self) -> None:
        self.log.warn("HA slave {peer} silent for {s} s: dropped", peer=self._peer(), s=self._housekeeping)
        self.drop()

    def _peer(self) -> str:
        return self.peer_address()

    def peer_address(self) -> str:
        """The slave's ``ip:port`` (``?`` once the transport is gone)."""
        if self.transport is None:
            return "?"
        peer = self.transport.getPeer()
        return f"{getattr(peer, 'host', peer)}:{getattr(peer, 'port', '')}"

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.setTimeout(None)
        if self.session is not None:
            self.session.lost()
            self.session = None


class SlaveClient(TypingProtocol):
    """What :class:`SlaveProtocol` drives (``ha.client.HAClient``)."""

    def link_made(self, link: SlaveProtocol) -> None: ...

    def frame_received(self, link: SlaveProtocol, offset: int, data: bytes) -> None: ...

    def heartbeat_due(self, link: SlaveProtocol) -> None: ...

    def link_lost(self, link: SlaveProtocol) -> None: ...


class SlaveProtocol(Protocol, TimeoutMixin):
    """The slave's end: writes offset reports, reads frames.

    A report not followed by another within ``heartbeat`` seconds asks the client for a
    heartbeat report; ``housekeeping`` seconds without a read drop the link.
    """

    log = Logger()

    def __init__(self, client: SlaveClient, clock: IReactorTime, heartbeat: float, housekeeping: float) -> None:
        self.callLater = clock.callLater  # type: ignore[method-assign,assignment]  # TimeoutMixin: our clock
        self._client = client
        self._clock = clock
        self._heartbeat = heartbeat
        self._housekeeping = housekeeping
        self._reader = FrameReader()
        self._heartbeat_call: IDelayedCall | None = None
        self.connected_link = False

    def connectionMade(self) -> None:
        self.connected_link = True
        self.setTimeout(self._housekeeping)
        self._client.link_made(self)

    def dataReceived(self, data: bytes) -> None:
        self.resetTimeout()
        try:
            frames = self._reader.feed(data)
        except ValueError as e:
            self.log.error("bad HA frame from the master: {error}", error=e)
            self.drop()
            return
        for offset, body in frames:
            if not self.connected_link:
                return
            self._client.frame_received(self, offset, body)

    def report(self, offset: int) -> None:
        """Tell the master our max offset; re-arms the heartbeat."""
        assert self.transport is not None
        self.transport.write(ACK.pack(offset))
        if self._heartbeat_call is not None and self._heartbeat_call.active():
            self._heartbeat_call.reset(self._heartbeat)
        else:
            self._heartbeat_call = self._clock.callLater(self._heartbeat, self._client.heartbeat_due, self)

    def pause_reading(self) -> None:
        """Stop reading while the client's append backlog is full."""
        if self.transport is not None:
            self.transport.pauseProducing()  # type: ignore[attr-defined]

    def resume_reading(self) -> None:
        if self.transport is not None and self.connected_link:
            self.transport.resumeProducing()  # type: ignore[attr-defined]

    def drop(self) -> None:
        """Close the link now."""
        self.connected_link = False
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def timeoutConnection(self) -> None:
        self.log.warn("HA master silent for {s} s: link dropped", s=self._housekeeping)
        self.drop()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.connected_link = False
        self.setTimeout(None)
        if self._heartbeat_call is not None and self._heartbeat_call.active():
            self._heartbeat_call.cancel()
        self._heartbeat_call = None
        self._client.link_lost(self)
