"""One remoting connection: framing, its response table and the idle timeout.

The protocol is the channel (:class:`~rocketpy.interfaces.IChannel`) that
processors and listeners see. What to do with a request is its owner's
business (:class:`~rocketpy.remoting.node.RemotingNode`).
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.protocols.basic import Int32StringReceiver
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.interfaces import IChannel
from rocketpy.remoting.codec import MAX_FRAME_LENGTH, decode, decode_frame, encode, plain_frame, read_frames
from rocketpy.remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import (
    MalformedRequestError,
    ProtocolError,
    RemotingConnectionLost,
    RemotingSendRequestError,
)
from rocketpy.remoting.pending import Release, ResponseTable, Then, call_then
from rocketpy.remoting.writenow import LARGE_FRAME, can_write_now, write_all_now, write_now
from rocketpy.remoting.writenow import send_now  # write_now's usual case in C (None when not built)

if TYPE_CHECKING:
    from rocketpy.remoting.node import RemotingNode

_LENGTH_FROM = struct.Struct(">I").unpack_from  # Int32StringReceiver's "!I"


def format_address(address: Any) -> str:
    """``"ip:port"`` for an IPv4/IPv6 address object, ``str(address)`` otherwise."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    return f"{host}:{port}" if host is not None and port is not None else str(address)


@implementer(IChannel)
class RemotingProtocol(Int32StringReceiver, TimeoutMixin):
    """Frames of at most 16 MiB, each decoded to a :class:`RemotingCommand`.

    Responses resolve this connection's :class:`ResponseTable`; requests go to
    the owner. A whole frame whose header is invalid but names its request is answered
    SYSTEM_ERROR (:class:`MalformedRequestError`) and the connection goes on. A malformed or
    oversize frame logs once and stops reading: the requests before it are answered, then the
    connection closes (aborted if they take longer than :attr:`abort_grace`). Idle for
    ``idle_timeout`` seconds (reads and writes both count): ``loseConnection``, then
    ``abortConnection`` after :attr:`abort_grace`.
    """

    MAX_LENGTH = MAX_FRAME_LENGTH
    transport: Any  # an ITCPTransport (abortConnection) once connected
    #: Seconds between a graceful close and the abort that forces it.
    abort_grace = 15.0
    log = Logger()

    def __init__(
        self, owner: RemotingNode, clock: IReactorTime, idle_timeout: float | None = 120.0, first_opaque: int = 0
    ) -> None:
        """
        :param owner: gets requests and channel events.
        :param clock: for deadlines and the idle timer.
        :param idle_timeout: seconds without traffic before closing; None disables.
        :param first_opaque: the first opaque of requests sent on this channel.
        """
        self._owner = owner
        self._clock = clock
        self._seconds = clock.seconds
        self.callLater = clock.callLater  # type: ignore[method-assign,assignment]  # TimeoutMixin: our clock
        self._idle_timeout = idle_timeout
        self._last_activity = clock.seconds()
        self._table = ResponseTable(first_opaque)
        self._lost: RemotingConnectionLost | None = None
        self._broken = False  # a fatal framing error: ignore whatever follows
        self._unanswered = 0  # requests handed to the owner and not answered yet
        self._reading = False  # inside dataReceived: writes are collected in _out
        self._out: list[bytes] = []
        self._abort_call: IDelayedCall | None = None
        self._close_waiters: list[Deferred[None]] = []
        self.remote_address = "unconnected"
        #: True once closing has begun (close, idle, protocol error or loss): send elsewhere.
        self.closing = False
        #: writes go to the socket at once when nothing is queued (plain TCP transports; see writenow.py)
        self._write_now = False

    @property
    def pending_count(self) -> int:
        """How many requests sent on this channel still wait for a response."""
        return len(self._table)

    # Twisted hooks

    def connectionMade(self) -> None:
        self.remote_address = format_address(self.transport.getPeer())
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:  # as Netty in RocketMQ: no Nagle delay on replies written later
            set_no_delay(True)
        self._last_activity = self._clock.seconds()
        self._write_now = can_write_now(self.transport)
        self.setTimeout(self._idle_timeout)
        self._owner.channel_connected(self)

    def dataReceived(self, data: bytes) -> None:
        # Int32StringReceiver's framing, inlined: frames are decoded in place (no slice per
        # frame), the idle clock is noted once per read, the requests of this read go to the
        # owner together (a batch processor takes a run of them in one call) and the
        # responses they produced leave in one writeSequence.
        if self._broken:
            return
        self._last_activity = self._seconds()
        if self._unprocessed:
            data = self._unprocessed + data
        size, position, limit = len(data), 0, self.MAX_LENGTH
        resolve = self._table.resolve
        requests: list[RemotingCommand] = []
        self._reading = True
        try:
            while size - position >= 4 and not self.paused:  # paused: _PauseableMixin, as Twisted's loop
                if read_frames is not None:  # the plain frames in one C call; the others below
                    commands, position = read_frames(data, position, limit)
                    if commands:
                        last = commands[-1]
                        if last.flag & RESPONSE_FLAG:  # only ever the last one
                            commands.pop()
                            requests += commands
                            if not resolve(last):
                                self._late(last)
                        else:
                            requests += commands
                        continue
                (length,) = _LENGTH_FROM(data, position)
                if length > limit:
                    self._unprocessed = b""
                    self.lengthLimitExceeded(length)
                    return
                start = position + 4
                position = start + length
                if position > size:
                    position = start - 4
                    break
                try:
                    command = decode_frame(data, start, position)
                except MalformedRequestError as e:
                    self._malformed(e)
                    continue
                except ProtocolError as e:
                    self._unprocessed = b""
                    self._fatal(e)
                    return
                if command.flag & RESPONSE_FLAG:  # _command_received, inlined
                    if not resolve(command):
                        self._late(command)
                else:
                    requests.append(command)
            self._unprocessed = data[position:] if position else data
        finally:
            try:
                if requests:  # also those before a bad frame: they arrived whole
                    self._unanswered += len(requests)
                    self._owner.requests_received(self, requests)
            finally:
                if self._out:
                    self._write_collected()
                else:  # nothing to write (a client reading responses): no call
                    self._reading = False
                if self._broken:
                    self._close_when_answered()

    def stringReceived(self, frame: bytes) -> None:
        """One frame without its length prefix (``dataReceived`` does not call this)."""
        if self._broken:
            return
        try:
            command = decode(frame)
        except MalformedRequestError as e:
            self._malformed(e)
            return
        except ProtocolError as e:
            self._fatal(e)
            self._close_when_answered()
            return
        self._command_received(command)

    def _command_received(self, command: RemotingCommand) -> None:
        if command.flag & RESPONSE_FLAG:
            if not self._table.resolve(command):
                self._late(command)
        else:
            self._unanswered += 1
            self._owner.request_received(self, command)

    def _malformed(self, error: MalformedRequestError) -> None:
        """A whole frame with an invalid header: answer its request SYSTEM_ERROR (drop a response)."""
        command = error.command
        if command.flag & RESPONSE_FLAG:
            self.log.warn("malformed response {opaque} from {peer} dropped: {error}", opaque=command.opaque,
                          peer=self.remote_address, error=error)
        else:
            self._unanswered += 1
            self._owner.request_refused(self, command, str(error))

    def _late(self, command: RemotingCommand) -> None:
        self.log.debug("late response {opaque} from {peer} dropped", opaque=command.opaque, peer=self.remote_address)

    def lengthLimitExceeded(self, length: int) -> None:
        self._fatal(ProtocolError(f"frame of {length} bytes exceeds {self.MAX_LENGTH}"))

    def resetTimeout(self) -> None:
        """Note activity (a read or a write) now.

        Cheaper than moving the timer on every frame: when the timer fires,
        :meth:`timeoutConnection` re-arms it for the rest of the idle period.
        """
        self._last_activity = self._seconds()

    def timeoutConnection(self) -> None:
        assert self._idle_timeout is not None  # the timer only runs with a timeout
        idle_for = self._clock.seconds() - self._last_activity
        if idle_for < self._idle_timeout:
            self.setTimeout(self._idle_timeout - idle_for)
            return
        self.log.info("closing idle channel {peer}", peer=self.remote_address)
        self._owner.channel_idle(self)
        self.close()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.setTimeout(None)
        if self._abort_call is not None and self._abort_call.active():
            self._abort_call.cancel()
        self.closing = True
        self._lost = RemotingConnectionLost(self.remote_address, reason.getErrorMessage())
        self._owner.channel_closed(self)  # evict first: errbacks below may send again
        self._table.fail_all(self._lost)
        waiters, self._close_waiters = self._close_waiters, []
        for d in waiters:
            d.callback(None)

    # IChannel

    def invoke_sync(
        self, request: RemotingCommand, timeout: float, release: Release | None = None, close_on_timeout: bool = False
    ) -> Deferred[RemotingCommand]:
        """Send *request* (its ``opaque`` is assigned here); fires with the response.

        Fails with :class:`RemotingTimeoutError` when the owner's scan finds it
        older than *timeout* seconds, with :class:`RemotingConnectionLost` when
        the connection closes first.

        :param release: called exactly once when the request completes in any way.
        :param close_on_timeout: if it times out, close this channel (after failing it).
        """
        table = self._table
        hooks = self._owner.hooks_on_send and self._owner.rpc_hooks
        if self._lost is not None or self._broken or hooks:
            try:
                data = self._prepare(request)
            except Exception:
                if release is not None:
                    release()
                return fail()
            d = table.add(request.opaque, self._seconds() + timeout, release, close_on_timeout)
            self._write(data)
            if hooks:
                d.addCallback(self._owner.run_after_hooks, self.remote_address, request)
            return d
        d = table.add_request(request, self._seconds() + timeout, release, close_on_timeout)
        self._send_request(request)
        return d

    def invoke_then(
        self, request: RemotingCommand, timeout: float, then: Then, args: tuple[Any, ...] = (),
        release: Release | None = None, close_on_timeout: bool = False,
    ) -> None:
        """:meth:`invoke_sync` without a Deferred: ``then(response_or_failure, *args)`` is called
        exactly once (at once when the request cannot be sent; an exception it raises is logged)."""
        if self._lost is not None or self._broken or self._owner.hooks_on_send and self._owner.rpc_hooks:
            self.invoke_sync(request, timeout, release, close_on_timeout).addBoth(call_then, then, args)
            return
        self._table.add_then(request, self._seconds() + timeout, then, args, release, close_on_timeout)
        self._send_request(request)

    def _send_request(self, request: RemotingCommand) -> None:
        """Encode and write a request just registered; its entry fails if it cannot be encoded."""
        try:
            data = plain_frame(request) if plain_frame is not None and request.serialize_type == 0 else None
            if data is None:
                data = encode(request)
        except ProtocolError as e:
            self._table.fail(request.opaque, RemotingSendRequestError(f"cannot send to {self.remote_address}: {e}"))
            return
        except Exception as e:
            self._table.fail(request.opaque, e)
            return
        if self._reading:  # the usual case (a request sent from a response's callback): no call
            self._out.append(data)
        else:
            self._write(data)

    def invoke_oneway(self, request: RemotingCommand) -> Deferred[None]:
        """Send *request* with the oneway flag set; fires once written."""
        request.flag |= ONEWAY_FLAG
        try:
            data = self._prepare(request)
        except Exception:
            return fail()
        self._write(data)
        return succeed(None)

    def close(self) -> None:
        """Close gracefully (now, even while answers after a bad frame are due); abort if the
        peer has not gone after :attr:`abort_grace`."""
        if self._lost is not None:
            return
        self.closing = True
        self.transport.loseConnection()
        if self._abort_call is None:
            self._abort_call = self._clock.callLater(self.abort_grace, self.transport.abortConnection)

    # for the owner

    def when_closed(self) -> Deferred[None]:
        """A new Deferred that fires once the connection is closed."""
        if self._lost is not None:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._close_waiters.append(d)
        return d

    def send_command(self, command: RemotingCommand) -> None:
        """Write a response (or any ready command); dropped if the connection is gone.

        :raises ProtocolError: the command cannot be encoded.
        """
        data = encode(command)
        if self._lost is not None:
            self.log.debug("channel {peer} closed; {code} dropped", peer=self.remote_address, code=command.code)
        elif self._reading:  # the usual case: a response written while reading
            self._out.append(data)
        else:
            self._write(data)

    def send_frames(self, frames: list[bytes]) -> None:
        """Write encoded responses, in order, as :meth:`send_command` would write their commands."""
        if self._lost is not None:
            self.log.debug("channel {peer} closed; {count} responses dropped", peer=self.remote_address,
                           count=len(frames))
        else:  # while reading, with the read's other responses; else now, as writes_together
            self._out += frames
            if not self._reading and self._write_collected():
                self.resetTimeout()

    def reply_frame(self, frame: bytes) -> None:
        """Write one request's encoded answer and count the request answered (``send_frames`` +
        ``answered``; inside a read, where the usual answer is written, without their calls)."""
        if self._reading and self._lost is None:
            self._out.append(frame)  # written at the read's end, with the read's other answers
            self._unanswered -= 1  # a broken channel closes at the read's end too
            return
        try:
            self.send_frames([frame])
        finally:
            self.answered()

    def answer_now(self, frame: bytes) -> None:
        """:meth:`reply_frame` for the answer of a request that came alone in its read, written at
        once when nothing was collected before it (the read's end would write it alone): the work
        that may follow an answer (the store's arrival notices) then runs after it is sent."""
        if self._reading and self._write_now and not self._out and self._lost is None:
            self._unanswered -= 1
            if send_now is None or send_now(self.transport, frame) is None:
                write_now(self.transport, frame)
            return
        self.reply_frame(frame)

    @contextmanager
    def writes_together(self) -> Iterator[None]:
        """Within this block what the channel writes leaves in one ``writeSequence`` at its end
        (as the responses written while reading do): for many responses ready at once."""
        if self._reading:
            yield
            return
        self._reading = True
        try:
            yield
        finally:
            if self._write_collected():
                self.resetTimeout()
            if self._broken:
                self._close_when_answered()

    def _write_collected(self) -> bool:
        """End collecting writes; send what was collected in one ``writeSequence`` (True if any)."""
        self._reading = False
        if not self._out:
            return False
        out, self._out = self._out, []
        if self._write_now and len(out) > 1 and len(out[0]) >= LARGE_FRAME:  # batch requests: not joined
            write_all_now(self.transport, out)
        elif self._write_now:
            data = out[0] if len(out) == 1 else b"".join(out)
            if send_now is None or send_now(self.transport, data) is None:  # the usual case in C
                write_now(self.transport, data)
        else:
            self.transport.writeSequence(out)
        return True

    def expire_requests(self, now: float) -> int:
        """Fail the requests whose deadline passed; return how many.

        Closes the channel if one of them was sent with ``close_on_timeout``.
        """
        expired, close = self._table.expire(now)
        if close and not self.closing:
            self.log.warn("closing channel {peer}: a request timed out", peer=self.remote_address)
            self.close()
        return expired

    # internals

    def _prepare(self, request: RemotingCommand) -> bytes:
        if self._lost is not None or self._broken:
            raise self._lost or RemotingConnectionLost(self.remote_address, "protocol error")
        if self._owner.hooks_on_send:
            for hook in self._owner.rpc_hooks:
                hook.before_request(self.remote_address, request)
        request.opaque = self._table.next_opaque()
        try:
            return encode(request)
        except ProtocolError as e:
            raise RemotingSendRequestError(f"cannot send to {self.remote_address}: {e}") from e

    def _write(self, data: bytes) -> None:
        if self._reading:  # flushed at the end of dataReceived, which reset the timer
            self._out.append(data)
        else:
            if self._write_now:
                write_now(self.transport, data)
            else:
                self.transport.write(data)
            self._last_activity = self._seconds()  # resetTimeout, inlined: once per request sent

    def answered(self, count: int = 1) -> None:
        """The owner is done with *count* requests this channel handed it (answered, or oneway)."""
        self._unanswered -= count
        if self._broken:
            self._close_when_answered()

    def _fatal(self, error: ProtocolError) -> None:
        """Stop reading; the requests already handed over are answered, then the connection closes."""
        if self._broken:
            return
        self._broken = self.closing = True
        self.log.warn("closing channel {peer}: {error}", peer=self.remote_address, error=error)
        self._owner.channel_exception(self, error)
        self.transport.pauseProducing()
        if self._abort_call is None:
            self._abort_call = self._clock.callLater(self.abort_grace, self.transport.abortConnection)

    def _close_when_answered(self) -> None:
        if self._unanswered <= 0 and not self._reading and self._lost is None:
            self.transport.loseConnection()
