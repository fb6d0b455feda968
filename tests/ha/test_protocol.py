"""The HA wire format and both ends' protocols, on StringTransport and a Clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.ha.protocol import ACK, FrameReader, MasterProtocol, SlaveProtocol, encode_frame, take_last_ack


class CodecTests(SynchronousTestCase):
    def test_frame_layout(self) -> None:
        """A frame is i64 offset, i32 size, then the bytes, big-endian."""
        self.assertEqual(encode_frame(0x0102, b"ab"), b"\0" * 6 + b"\x01\x02" + b"\0\0\0\x02ab")

    def test_last_whole_ack(self) -> None:
        """Only whole 8-byte values count; the last one wins and a partial one stays buffered."""
        buf = bytearray(ACK.pack(5) + ACK.pack(9) + b"\0\0")
        self.assertEqual(take_last_ack(buf), 9)
        self.assertEqual(buf, bytearray(b"\0\0"))
        self.assertIsNone(take_last_ack(buf))
        buf += ACK.pack(77)[2:] + ACK.pack(78)[:3]
        self.assertEqual(take_last_ack(buf), 77)
        self.assertEqual(len(buf), 3)

    def test_frames_split_anywhere(self) -> None:
        """Frames arrive whole whatever the read boundaries; a size-0 frame is a heartbeat."""
        stream = encode_frame(100, b"x" * 10) + encode_frame(110, b"") + encode_frame(110, b"yz")
        reader = FrameReader()
        frames = []
        for i in range(len(stream)):
            frames += reader.feed(stream[i:i + 1])
        self.assertEqual(frames, [(100, b"x" * 10), (110, b""), (110, b"yz")])

    def test_negative_size(self) -> None:
        """A negative size is a protocol error."""
        self.assertRaises(ValueError, FrameReader().feed, b"\0" * 8 + b"\xff\xff\xff\xff")


class RecordingSession:
    def __init__(self) -> None:
        self.acks: list[int] = []
        self.lost_count = 0

    def ack_received(self, offset: int) -> None:
        self.acks.append(offset)

    def lost(self) -> None:
        self.lost_count += 1


class MasterProtocolTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.session = RecordingSession()
        self.proto = MasterProtocol(self.clock, 20.0, lambda link: self.session)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def test_acks_reach_the_session(self) -> None:
        """Each read hands the newest whole ack to the session."""
        self.proto.dataReceived(ACK.pack(1) + ACK.pack(2)[:4])
        self.proto.dataReceived(ACK.pack(2)[4:] + ACK.pack(3))
        self.assertEqual(self.session.acks, [1, 3])

    def test_silent_slave_dropped(self) -> None:
        """20 s without a read aborts the link; every read restarts the count."""
        self.clock.advance(19)
        self.proto.dataReceived(ACK.pack(1))
        self.clock.advance(19)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(1.5)
        self.assertTrue(self.transport.disconnected)

    def test_lost_tells_session_and_clears_timer(self) -> None:
        """connectionLost reaches the session once and leaves no timer behind."""
        self.proto.connectionLost()
        self.assertEqual(self.session.lost_count, 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class RecordingClient:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def link_made(self, link: SlaveProtocol) -> None:
        self.events.append(("made", None))

    def frame_received(self, link: SlaveProtocol, offset: int, data: bytes) -> None:
        self.events.append(("frame", (offset, data)))

    def heartbeat_due(self, link: SlaveProtocol) -> None:
        self.events.append(("heartbeat", None))
        link.report(0)

    def link_lost(self, link: SlaveProtocol) -> None:
        self.events.append(("lost", None))


class SlaveProtocolTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.client = RecordingClient()
        self.proto = SlaveProtocol(self.client, self.clock, 5.0, 20.0)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def test_frames_and_reports(self) -> None:
        """Frames go to the client in order; a report is one 8-byte value."""
        self.proto.dataReceived(encode_frame(7, b"abc") + encode_frame(10, b""))
        self.assertEqual(self.client.events, [("made", None), ("frame", (7, b"abc")), ("frame", (10, b""))])
        self.proto.report(10)
        self.assertEqual(self.transport.value(), ACK.pack(10))

    def test_heartbeat_after_idle(self) -> None:
        """5 s after the last report the client is asked for a heartbeat; a new report postpones it."""
        self.proto.report(0)
        self.clock.advance(4)
        self.proto.report(0)
        self.clock.advance(4)
        self.assertNotIn(("heartbeat", None), self.client.events)
        self.clock.advance(1)
        self.assertEqual(self.client.events[-1], ("heartbeat", None))

    def test_silent_master_dropped(self) -> None:
        """20 s without a frame aborts the link, even though heartbeats were written."""
        self.proto.report(0)
        self.clock.advance(20)
        self.assertTrue(self.transport.disconnected)

    def test_bad_frame_drops_link(self) -> None:
        """A negative size aborts the link and nothing reaches the client."""
        self.proto.dataReceived(b"\0" * 8 + b"\xff\xff\xff\xff")
        self.assertTrue(self.transport.disconnected)
        self.assertEqual(self.client.events, [("made", None)])

    def test_lost_clears_timers(self) -> None:
        """After connectionLost no timer is left and the client hears of it."""
        self.proto.report(0)
        self.proto.connectionLost()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.client.events[-1], ("lost", None))
