"""Writing to a TCP transport at once instead of on the reactor's next turn.

Twisted's ``write`` only queues the bytes and asks the reactor for a writable event: two
``epoll_ctl`` calls and one more reactor turn per response before ``send`` runs. When nothing
is queued before them, :func:`write_now` hands the bytes to the socket straight away (what
Twisted's own ``doWrite`` would do a turn later) and queues only what the socket did not take.
On ``tcp.Server`` / ``tcp.Client`` it calls ``socket.send`` itself, as ``writeSomeData`` does.
"""

from __future__ import annotations

from errno import ENOBUFS, EWOULDBLOCK
from functools import partial
from typing import Any, Callable

from twisted.internet import tcp

from rocketpy.common import speedups

#: the connection classes whose ``writeSomeData`` is ``Connection``'s (a bounded ``socket.send``)
PLAIN_SEND = frozenset(cls for cls in (tcp.Server, tcp.Client) if cls.writeSomeData is tcp.Connection.writeSomeData)


def can_write_now(transport: Any) -> bool:
    """True for a plain TCP transport (a TLS wrapper or a test transport keeps ``write``)."""
    return isinstance(transport, tcp.Connection)


def _nothing_queued(transport: tcp.Connection) -> bool:
    """True when the transport is connected, writing, and holds nothing to send (so bytes may go at once)."""
    return bool(
        not transport._tempDataBuffer
        and transport.offset == len(transport.dataBuffer)
        and transport.connected
        and not transport.disconnecting
        and not transport._writeDisconnected
        and not transport.TLS
    )


def write_now(transport: tcp.Connection, data: bytes) -> None:
    """Send ``data`` now if the transport has nothing queued; the rest goes through ``write``."""
    if _nothing_queued(transport):
        sent: Any  # bytes taken, or why not (ConnectionLost / None)
        if type(transport) in PLAIN_SEND and len(data) <= transport.SEND_LIMIT:
            # Connection.writeSomeData inlined (socket.send retries EINTR itself, PEP 475)
            try:
                sent = transport.socket.send(data)
            except OSError as e:
                sent = 0 if e.args[0] in (EWOULDBLOCK, ENOBUFS) else None
        else:
            sent = transport.writeSomeData(data)
        if type(sent) is int:
            if sent == len(data):
                return
            data = data[sent:]
        # else the connection is failing: ``write`` queues it, and the reactor's next write reports the loss
    transport.write(data)


#: Frames at least this large are written as they are by :func:`write_all_now` rather than joined
#: (a batch request's ~32 KiB would be copied once more; small answers join cheaply).
LARGE_FRAME = 4096
#: Most buffers in one ``sendmsg`` (Linux's ``IOV_MAX``).
_IOV_MAX = 1024


def write_all_now(transport: tcp.Connection, frames: list[bytes]) -> None:
    """:func:`write_now` of several frames without joining them: one ``sendmsg`` when the transport
    has nothing queued, and what the socket did not take queued as it is (only the frame it took part
    of is cut), with ``writeSequence``."""
    if type(transport) in PLAIN_SEND and len(frames) <= _IOV_MAX and _nothing_queued(transport):
        sent: int | None
        try:
            sent = transport.socket.sendmsg(frames)
        except OSError as e:
            sent = 0 if e.args[0] in (EWOULDBLOCK, ENOBUFS) else None
        if sent is not None:
            for i, frame in enumerate(frames):
                if sent < len(frame):
                    frames = [frame[sent:] if sent else frame, *frames[i + 1:]]
                    break
                sent -= len(frame)
            else:
                return
        # else the connection is failing: ``writeSequence`` queues them, and the reactor's next write reports it
    transport.writeSequence(frames)


#: :func:`write_now` for the plain case (a type of ``PLAIN_SEND``, nothing queued, within ``SEND_LIMIT``)
#: in one C call (rocketpy/_speedups_request.h ``send_now``): ``send_now(transport, data)`` is True once
#: written, None having done nothing (then :func:`write_now` decides); None when not built.
send_now: Callable[[Any, bytes], bool | None] | None = (
    partial(speedups.compiled.send_now, PLAIN_SEND) if speedups.compiled is not None else None)
