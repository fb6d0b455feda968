"""Tests for rocketpy.remoting.protocol over a StringTransport: framing, errors, idle timeout."""

from __future__ import annotations

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.interfaces import IChannel, IChannelEventListener, IRequestProcessor, IRPCHook
from rocketpy.remoting.codec import MAX_FRAME_LENGTH, decode, encode
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectionLost, RemotingSendRequestError
from rocketpy.remoting.protocol import RemotingProtocol, format_address
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import RecordingHook, RecordingListener, RecordingProcessor, echo

PEER = "10.0.0.1:4000"


class NoDelayRecorder(StringTransport):
    """Remembers the last setTcpNoDelay call."""

    no_delay = False

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.no_delay = enabled


def read_commands(transport: StringTransport) -> list[RemotingCommand]:
    """Decode and clear every frame written to *transport*."""
    data, commands = transport.value(), []
    transport.clear()
    while data:
        (length,) = struct.unpack(">i", data[:4])
        commands.append(decode(data[4 : 4 + length]))
        data = data[4 + length :]
    return commands


class ProtocolTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.listener = RecordingListener()
        self.server = RemotingServer(self.clock, listeners=[self.listener])
        self.processor = RecordingProcessor()
        self.server.register_processor(10, self.processor)
        self.protocol = self.server.build_channel()
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", 4000))
        self.protocol.makeConnection(self.transport)

    def lose(self) -> None:
        self.protocol.connectionLost(Failure(ConnectionDone("closed")))


class FramingTests(ProtocolTestCase):
    def test_helpers_provide_interfaces(self) -> None:
        """The protocol is an IChannel and the test doubles provide their interfaces."""
        self.assertTrue(verifyObject(IChannel, self.protocol))
        self.assertTrue(verifyObject(IRequestProcessor, RecordingProcessor()))
        self.assertTrue(verifyObject(IRPCHook, RecordingHook()))
        self.assertTrue(verifyObject(IChannelEventListener, self.listener))
        self.assertEqual(self.protocol.remote_address, PEER)
        self.assertEqual(format_address("unix-socket"), "unix-socket")

    def test_nagle_disabled(self) -> None:
        """TCP_NODELAY is switched on at connect, as RocketMQ's Netty transports do."""
        transport = NoDelayRecorder()
        self.server.build_channel().makeConnection(transport)
        self.assertTrue(transport.no_delay)

    def test_request_split_across_reads(self) -> None:
        """A frame delivered a byte at a time is answered once, with the request's opaque."""
        data = encode(RemotingCommand(code=10, opaque=42, body=b"hello"))
        for i in range(len(data)):
            self.protocol.dataReceived(data[i : i + 1])
        (response,) = read_commands(self.transport)
        self.assertEqual((response.code, response.opaque, response.body, response.is_response), (0, 42, b"hello", True))

    def test_many_frames_and_a_partial_one_in_one_read(self) -> None:
        """Every whole frame of a read is answered (in order); a partial tail waits for its rest."""
        data = b"".join(encode(RemotingCommand(code=10, opaque=i, body=b"%d" % i)) for i in range(4))
        cut = len(data) - 5
        self.protocol.dataReceived(data[:cut])
        self.assertEqual([(c.opaque, c.body) for c in read_commands(self.transport)],
                         [(0, b"0"), (1, b"1"), (2, b"2")])
        self.protocol.dataReceived(data[cut:])
        self.assertEqual([(c.opaque, c.body) for c in read_commands(self.transport)], [(3, b"3")])

    def test_frame_too_short_for_its_header_length_closes(self) -> None:
        """A frame shorter than the 4-byte header-length word is malformed: close, one warning."""
        with capturedLogs() as events:
            self.protocol.dataReceived(struct.pack(">I", 2) + b"ab" + encode(RemotingCommand(code=10, opaque=1)))
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual([e["log_level"] for e in events], [LogLevel.warn])
        self.assertEqual(self.transport.value(), b"")

    def test_paused_protocol_keeps_frames_until_resumed(self) -> None:
        """As with Int32StringReceiver: while paused, buffered frames wait; resuming handles them."""
        self.protocol.pauseProducing()
        self.protocol.dataReceived(encode(RemotingCommand(code=10, opaque=1)) * 2)
        self.assertEqual(self.transport.value(), b"")
        self.protocol.resumeProducing()
        self.assertEqual([c.opaque for c in read_commands(self.transport)], [1, 1])

    def test_string_received_takes_one_unprefixed_frame(self) -> None:
        """stringReceived (Int32StringReceiver's hook) still handles one frame without its prefix."""
        self.protocol.stringReceived(encode(RemotingCommand(code=10, opaque=8, body=b"b"))[4:])
        (response,) = read_commands(self.transport)
        self.assertEqual((response.opaque, response.body), (8, b"b"))

    def test_oversize_frame_closes_with_one_log_line(self) -> None:
        """A length over 16 MiB closes the connection, logs one warning and fires EXCEPTION."""
        with capturedLogs() as events:
            self.protocol.dataReceived(struct.pack(">i", MAX_FRAME_LENGTH + 1) + b"x" * 10)
            self.protocol.dataReceived(b"more")
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.transport.producerState, "paused")  # reads no more
        self.assertEqual([e["log_level"] for e in events], [LogLevel.warn])
        self.assertEqual(self.listener.events, [("connect", PEER), ("exception", PEER)])

    def test_frame_of_exactly_the_limit_is_accepted(self) -> None:
        """A 16 MiB length is within the limit: the connection waits for the rest."""
        self.protocol.dataReceived(struct.pack(">i", MAX_FRAME_LENGTH))
        self.assertFalse(self.transport.disconnecting)

    def test_undecodable_frame_closes_and_ignores_the_rest(self) -> None:
        """A bad header closes this connection once; frames after it in the same read are ignored."""
        bad = struct.pack(">iI", 6, 2) + b"{x"
        good = encode(RemotingCommand(code=10, opaque=1))
        with capturedLogs() as events:
            self.protocol.dataReceived(bad + good + bad)
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(len(events), 1)
        self.assertEqual(self.transport.value(), b"")

    def test_requests_before_a_bad_frame_are_answered_then_closed(self) -> None:
        """Requests that arrived whole before a bad frame are answered; only then does the connection
        close, and it is aborted if an answer takes longer than the grace period."""
        later: Deferred[RemotingCommand] = Deferred()
        self.processor.respond = lambda channel, request: later if request.opaque == 2 else echo(channel, request)
        good = encode(RemotingCommand(code=10, opaque=1)) + encode(RemotingCommand(code=10, opaque=2))
        self.protocol.dataReceived(good + b"\0\0\0\0")
        self.assertEqual([c.opaque for c in read_commands(self.transport)], [1])
        self.assertFalse(self.transport.disconnecting)  # request 2 still owes its answer
        later.callback(RemotingCommand(code=0))
        self.assertEqual([c.opaque for c in read_commands(self.transport)], [2])
        self.assertTrue(self.transport.disconnecting)

    def test_a_request_never_answered_after_a_bad_frame_aborts_after_the_grace(self) -> None:
        """The close does not wait for ever on a request still pending after a bad frame."""
        self.processor.respond = lambda channel, request: Deferred()
        self.protocol.dataReceived(encode(RemotingCommand(code=10, opaque=1)) + b"\0\0\0\0")
        self.assertFalse(self.transport.disconnected)
        self.clock.advance(self.protocol.abort_grace)
        self.assertTrue(self.transport.disconnected)

    def test_a_whole_frame_with_a_bad_field_is_answered_and_the_connection_serves_on(self) -> None:
        """A header field that is not UTF-8 text: SYSTEM_ERROR naming it, one warning, next request served."""
        header = b'{"code":10,"extFields":{"topic":"\\ud800"},"opaque":5}'
        bad = struct.pack(">iI", 4 + len(header), len(header)) + header
        with capturedLogs() as events:
            self.protocol.dataReceived(bad + encode(RemotingCommand(code=10, opaque=6)))
        first, second = read_commands(self.transport)
        self.assertEqual((first.opaque, first.code), (5, ResponseCode.SYSTEM_ERROR))
        self.assertIn("'topic'", first.remark)
        self.assertEqual((second.opaque, second.code), (6, 0))
        self.assertFalse(self.transport.disconnecting)
        self.assertEqual([e["log_level"] for e in events], [LogLevel.warn])

    def test_late_response_is_dropped(self) -> None:
        """A response nobody waits for is logged at debug level and changes nothing."""
        with capturedLogs() as events:
            self.protocol.dataReceived(encode(RemotingCommand(code=0, opaque=99, flag=1)))
        self.assertEqual([e["log_level"] for e in events], [LogLevel.debug])
        self.assertFalse(self.transport.disconnecting)

    def test_connection_lost_fails_pending_and_later_requests(self) -> None:
        """Losing the connection fails pending requests at once; later ones fail fast."""
        pending = [self.protocol.invoke_sync(RemotingCommand(code=40), 3.0) for _ in range(3)]
        self.lose()
        errors = {id(self.failureResultOf(d, RemotingConnectionLost).value) for d in pending}
        self.assertEqual(len(errors), 1)
        self.failureResultOf(self.protocol.invoke_sync(RemotingCommand(code=40), 3.0), RemotingConnectionLost)
        self.failureResultOf(self.protocol.invoke_oneway(RemotingCommand(code=40)), RemotingConnectionLost)
        self.successResultOf(self.protocol.when_closed())
        self.assertEqual(self.listener.events[-1], ("close", PEER))

    def test_unencodable_request_fails_with_send_error(self) -> None:
        """A request the codec rejects fails with RemotingSendRequestError and leaves no entry."""
        bad = RemotingCommand(code=40, ext_fields={"a": [1]})  # type: ignore[dict-item]
        self.failureResultOf(self.protocol.invoke_sync(bad, 3.0), RemotingSendRequestError)
        self.failureResultOf(self.protocol.invoke_oneway(bad), RemotingSendRequestError)
        self.assertEqual(self.protocol.pending_count, 0)
        self.assertEqual(self.transport.value(), b"")

    def test_send_after_loss_is_dropped(self) -> None:
        """A response for a closed channel is dropped, not written."""
        self.lose()
        self.protocol.send_command(RemotingCommand(code=0, flag=1))
        self.assertEqual(self.transport.value(), b"")


class IdleTimeoutTests(ProtocolTestCase):
    def test_idle_closes_then_aborts(self) -> None:
        """After 120 s without traffic: IDLE event, graceful close, abort 15 s later, no timers left."""
        self.clock.advance(119)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(1)
        self.assertTrue(self.transport.disconnecting)
        self.assertFalse(self.transport.disconnected)
        self.assertIn(("idle", PEER), self.listener.events)
        self.clock.advance(RemotingProtocol.abort_grace)
        self.assertTrue(self.transport.disconnected)
        self.lose()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_reads_reset_the_timer(self) -> None:
        """A frame received at 100 s postpones the idle close to 220 s."""
        self.clock.advance(100)
        self.protocol.dataReceived(encode(RemotingCommand(code=0, opaque=5, flag=1)))
        self.clock.advance(119)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(1)
        self.assertTrue(self.transport.disconnecting)

    def test_writes_reset_the_timer(self) -> None:
        """Sending a request at 100 s also postpones the idle close (both directions count)."""
        self.clock.advance(100)
        self.protocol.invoke_oneway(RemotingCommand(code=40))
        self.clock.advance(119)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(1)
        self.assertTrue(self.transport.disconnecting)

    def test_close_cancels_abort_when_peer_goes(self) -> None:
        """close() then a prompt connectionLost leaves no DelayedCall behind."""
        self.protocol.close()
        self.protocol.close()
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertFalse(self.transport.disconnected)

    def test_idle_timeout_none_disables(self) -> None:
        """A protocol built with idle_timeout=None never times out."""
        protocol = RemotingServer(self.clock, idle_timeout=None).build_channel()
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.clock.advance(10_000)
        self.assertFalse(transport.disconnecting)
