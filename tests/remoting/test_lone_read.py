"""The reactor's C read of one whole frame (rocketpy/_speedups_loneread.h ``lone_read``) against
``RemotingProtocol.dataReceived`` (the reference): random streams of usual, damaged and hostile frames,
in random reads, each read given to ``lone_read`` first as the C turn does (``dataReceived`` when it
declines), must reach the processors as the same calls and write the same bytes, with the channel left
in the same state, as with ``dataReceived`` alone; with a processor's ``lone_request`` answering in
every way it may (answered, a frame, not its case, a Deferred, a command, raising), RPC hooks, responses
to pending requests and late ones."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import speedups
from rocketpy.remoting import codec
from rocketpy.remoting.codes import RESPONSE_FLAG
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectionLost
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import RecordingHook
from tests.remoting.test_read_frames import LIMIT, USUAL, frame, frames

_compiled: Any = speedups.compiled if hasattr(speedups.compiled, "lone_read") else None
C_SKIP = None if _compiled is not None else "no compiled accelerator (lone_read)"
LONE_CODE = USUAL["code"]


class LoneProcessor:
    """A processor with a ``lone_request`` (as the send processor's): by the request's opaque, it
    answers at once (``answer_now``: True), gives its answer's frame, declines (None: then
    ``process_request``), gives a Deferred, a command, or raises."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def reject_request(self) -> bool:
        return False

    def lone_request(self, channel: Any, request: RemotingCommand) -> Any:
        way = request.opaque % 6
        self.events.append(("lone", request.code, request.opaque, way, channel._unanswered, channel._reading))
        response = request.make_response(0, f"lone {way}")
        response.opaque, response.flag = request.opaque, RESPONSE_FLAG
        if way == 0:
            channel.answer_now(codec.encode(response))
            return True
        if way == 1:
            return codec.encode(response)
        if way == 2:
            return None
        if way == 3:
            return succeed(request.make_response(0, "later"))
        if way == 4:
            return request.make_response(0, "command")
        raise ValueError("lone boom")

    def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        self.events.append(("process", request.code, request.opaque))
        return request.make_response(0, "processed")


class Echo:
    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        self.events.append(("echo", request.code, request.opaque))
        return request.make_response(0, "echo")


class SendingTransport(StringTransport):
    """What write_now writes through at once (as a TCP connection with nothing queued)."""

    _tempDataBuffer: list[bytes] = []
    offset, dataBuffer, connected, disconnecting, _writeDisconnected, TLS = 0, b"", True, False, False, False

    def writeSomeData(self, data: bytes) -> int:
        self.io.write(b"now:" + data)
        return len(data)


def connected(hooks: bool, transport: StringTransport | None = None) -> tuple[RemotingProtocol, list[Any], StringTransport, list[Any]]:
    """A channel of a server with a lone processor (the usual code), an echo for the rest, and two
    pending requests of its own (opaques 0 and 1) whose outcomes are noted."""
    events: list[Any] = []
    server = RemotingServer(Clock(), rpc_hooks=[RecordingHook()] if hooks else ())
    server.register_processor(LONE_CODE, LoneProcessor(events))  # type: ignore[arg-type]
    server.register_default_processor(Echo(events))  # type: ignore[arg-type]
    channel = server.build_channel()
    channel.MAX_LENGTH = LIMIT
    if transport is None:
        transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", 4000))
    channel.makeConnection(transport)
    outcomes: list[Any] = []
    for _ in range(2):
        channel.invoke_sync(RemotingCommand(11), 5.0).addBoth(
            lambda r: outcomes.append(r.opaque if isinstance(r, RemotingCommand) else type(r.value)))
    transport.clear()
    return channel, events, transport, outcomes


def feed(reads: list[bytes], c: bool, hooks: bool) -> tuple[Any, ...]:
    channel, events, transport, outcomes = connected(hooks)
    taken = 0
    for data in reads:
        if c and _compiled.lone_read(channel, data) is True:
            taken += 1
        else:
            channel.dataReceived(data)
    channel.connectionLost()
    return (events, transport.value(), outcomes, channel._unanswered, channel._reading, channel._out,
            channel._unprocessed, channel._broken, channel._last_activity, transport.disconnecting,
            transport.producerState), taken


def reads_of(parts: list[bytes], cuts: list[int]) -> list[bytes]:
    data = b"".join(parts)
    bounds = [0] + sorted(set(c for c in cuts if 0 < c < len(data))) + [len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])] if data else []


def request(opaque: int, flag: int = 0, code: int = LONE_CODE) -> bytes:
    return frame(json.dumps(dict(USUAL, code=code, opaque=opaque, flag=flag)).encode(), b"body")


class LoneReadTests(SynchronousTestCase):
    skip = C_SKIP

    def same(self, reads: list[bytes], hooks: bool = False) -> int:
        """The same outcome through lone_read as through dataReceived; how many reads lone_read took."""
        with_c, taken = feed(reads, True, hooks)
        c_errors = len(self.flushLoggedErrors(ValueError, RemotingConnectionLost))
        reference, _ = feed(reads, False, hooks)
        self.assertEqual(with_c, reference)
        self.assertEqual(c_errors, len(self.flushLoggedErrors(ValueError, RemotingConnectionLost)))
        return taken

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(frames() | st.builds(request, st.integers(0, 11), st.sampled_from([0, 1, 2])), max_size=6),
           st.lists(st.integers(0, 400), max_size=4), st.booleans())
    def test_same_outcome(self, parts: list[bytes], cuts: list[int], hooks: bool) -> None:
        """Random streams in random reads, with and without hooks."""
        self.same(reads_of(parts, cuts), hooks)

    def test_every_way_of_a_lone_request(self) -> None:
        """One request per read, answered each way, then responses to the pending requests and a late one:
        every read taken by lone_read."""
        reads = [request(opaque) for opaque in range(2, 14)]
        reads += [request(0, RESPONSE_FLAG), request(1, RESPONSE_FLAG), request(1, RESPONSE_FLAG)]
        reads += [request(20, 2), request(21, code=11)]  # oneway; another processor
        self.assertEqual(self.same(reads), len(reads))
        self.assertEqual(self.same(reads, hooks=True), len(reads))

    def test_declined(self) -> None:
        """Two frames in a read, part of one, one too long, a malformed one, a broken or paused channel,
        a subclass: lone_read does nothing and says so."""
        whole = request(2)
        declined = [whole + whole, whole[:-1], frame(b"{", b""), b"\xff\xff\xff\xff" + b"x" * 8]
        channel, events, transport, _ = connected(False)
        for data in declined:
            self.assertIsNone(_compiled.lone_read(channel, data))
        self.assertEqual((events, transport.value(), channel._unprocessed), ([], b"", b""))
        channel._unprocessed = whole[:3]
        self.assertIsNone(_compiled.lone_read(channel, whole))
        channel._unprocessed = b""
        channel.pauseProducing()
        self.assertIsNone(_compiled.lone_read(channel, whole))
        channel.resumeProducing()
        channel._broken = True
        self.assertIsNone(_compiled.lone_read(channel, whole))
        channel._broken = False
        channel.dataReceived = lambda data: None  # type: ignore[method-assign]  # a read of its own
        self.assertIsNone(_compiled.lone_read(channel, whole))
        self.assertEqual(events, [])

        class Sub(RemotingProtocol):
            pass

        other = Sub(channel._owner, Clock())
        other.makeConnection(StringTransport())
        self.assertIsNone(_compiled.lone_read(other, whole))

    def test_answer_now(self) -> None:
        """The C answer_now (what a lone send's answer goes through) against the method: inside a read or
        not, with answers collected before it or not, a lost channel; an answer_now of the channel's own
        or its class's (patched) is called instead."""

        def state(c: bool, reading: bool, collected: bool, lost: bool) -> tuple[Any, ...]:
            channel, _, transport, _ = connected(False, SendingTransport())
            channel._reading, channel._unanswered = reading, 1
            channel._write_now = True
            if collected:
                channel._out.append(b"before")
            if lost:
                channel._lost = RemotingConnectionLost("peer", "gone")
            if c:
                _compiled.answer_now(channel, b"frame")
            else:
                channel.answer_now(b"frame")
            return transport.value(), channel._out, channel._unanswered, channel._reading

        for reading in (True, False):
            for collected in (True, False):
                for lost in (True, False):
                    self.assertEqual(state(True, reading, collected, lost), state(False, reading, collected, lost))
        self.assertEqual(state(True, True, False, False), (b"now:frame", [], 0, True), "sent at once, counted answered")
        channel, _, transport, _ = connected(False)
        written: list[bytes] = []
        channel.answer_now = written.append  # type: ignore[method-assign,assignment]
        _compiled.answer_now(channel, b"own")
        del channel.answer_now
        self.patch(RemotingProtocol, "answer_now", lambda self, frame: written.append(frame))
        _compiled.answer_now(channel, b"patched")
        self.assertEqual((written, transport.value()), ([b"own", b"patched"], b""))

    def test_other_owner_gets_the_list(self) -> None:
        """An owner whose requests_received is its own gets the one request in a list, as from dataReceived."""
        got: list[Any] = []

        class Owner(RemotingServer):
            def requests_received(self, channel: Any, requests: list[RemotingCommand]) -> None:
                got.append([r.opaque for r in requests])
                channel.answered(len(requests))

        channel = Owner(Clock()).build_channel()
        channel.makeConnection(StringTransport())
        self.assertIs(_compiled.lone_read(channel, request(5)), True)
        self.assertEqual((got, channel._unanswered, channel._reading), ([[5]], 0, False))

    def test_raising_owner(self) -> None:
        """What the owner raises comes out of lone_read, after the read's end (its answers written)."""

        class Owner(RemotingServer):
            def requests_received(self, channel: Any, requests: list[RemotingCommand]) -> None:
                channel.send_frames([b"answer"])
                raise ZeroDivisionError("owner")

        channel = Owner(Clock()).build_channel()
        transport = StringTransport()
        channel.makeConnection(transport)
        self.assertRaises(ZeroDivisionError, _compiled.lone_read, channel, request(5))
        self.assertEqual((transport.value(), channel._reading, channel._out), (b"answer", False, []))
