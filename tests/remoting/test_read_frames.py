"""The remoting path's C functions against the Python code (rocketpy/_speedups_remoting.h):
``read_frames`` (a read split into frames and decoded, inside ``RemotingProtocol.dataReceived``),
``response_frames`` (``RemotingNode._reply_run``'s answers as frames). Streams of random, damaged
and hostile frames, in random reads, must reach the owner as the same requests, refusals, late
responses and fatal errors, and write the same bytes, with and without the C functions."""

from __future__ import annotations

import json
import struct
from typing import Any

import msgpack  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting import codec, node, protocol
from rocketpy.remoting.codes import SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import ProtocolError
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.server import RemotingServer
from tests.remoting import test_batch, test_protocol
from tests.remoting.helpers import RecordingProcessor
from tests.remoting.test_json_frame import INT, TEXT

C_READ = codec.read_frames
C_RESPONSES = node._response_frames
C_SKIP = None if C_READ is not None else "no compiled accelerator (rocketpy.remoting.codec.read_frames is None)"
LIMIT = 4096  # a small MAX_LENGTH, so that oversize frames are cheap to generate


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0, length: int | None = None) -> bytes:
    """A frame with its length prefix; ``length`` overrides the prefix (oversize, truncated)."""
    whole = 4 + len(header) + len(body)
    return struct.pack(">iI", whole if length is None else length, serialize_type << 24 | len(header)) + header + body


HEADER_KEYS = st.sampled_from(["code", "version", "opaque", "flag", "language", "remark", "extFields"]) | TEXT
#: what JSON escapes or writes raw: every escape, control characters, non-ASCII, astral planes
TRICKY = st.lists(st.sampled_from(["\n", "\t", "\r", "\b", "\f", '"', "\\", "/", "\x00", "\x01", "\x1f", "\x7f",
                                   "\u00e9", "\u0800", "\u2028", "\uffff", "\U0001F600", "a", "KEYS"]),
                  max_size=6).map("".join)
HEADER_VALUES = (INT | TEXT | TRICKY | st.none() | st.dictionaries(TEXT | TRICKY, TRICKY, max_size=4)
                 | st.dictionaries(TEXT, TEXT | INT, max_size=3) | st.sampled_from([2.5, [1]]))
USUAL: dict[str, Any] = {"code": 310, "extFields": {"a": "PG", "b": "\u0001x\u0002"}, "flag": 0, "language": "JAVA", "opaque": 7,
         "serializeTypeCurrentRPC": "JSON", "version": 401}


@st.composite
def frames(draw: Any) -> bytes:
    """One frame, usual or damaged."""
    kind = draw(st.sampled_from(["usual", "fields", "text", "msgpack", "binary", "short", "oversize", "bytes"]))
    body = draw(st.binary(max_size=12))
    if kind == "usual":  # a plain request or response, as clients send them
        header = dict(USUAL, opaque=draw(st.integers(-(2**31), 2**31 - 1)), flag=draw(st.sampled_from([0, 1, 2, 3])))
        return frame(json.dumps(header).encode(), body)
    if kind == "fields":  # the usual keys with hostile values
        header = dict(USUAL, **draw(st.dictionaries(HEADER_KEYS, HEADER_VALUES, max_size=4)))
        return frame(json.dumps(header, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass"), body)
    if kind == "text":  # JSON-ish text: lenient JSON, trailing data, not an object, not UTF-8
        text = draw(st.sampled_from(['{"code":1,"opaque":2}\n', '{"code":1} x', "[1]", "{", "", '{"code":1e400}',
                                     '{"code":1,"opaque":2,"remark":"\x01"}', '{"code":NaN}', "\ud800"]))
        return frame(text.encode("utf-8", "surrogatepass") + draw(st.sampled_from([b"", b"\xff"])), body)
    if kind == "msgpack":
        return frame(msgpack.packb(dict(USUAL, opaque=3)), body, SerializeType.MSGPACK)
    if kind == "binary":
        return codec.encode(RemotingCommand(11, opaque=5, ext_fields={"k": "v"}, serialize_type=SerializeType.ROCKETMQ))
    if kind == "short":  # a header length beyond the frame, or no header length at all
        return draw(st.sampled_from([frame(b"{}", length=5), struct.pack(">i", 2) + b"ab", struct.pack(">i", 0)]))
    if kind == "oversize":
        return struct.pack(">I", draw(st.sampled_from([LIMIT + 1, 2**31, 2**32 - 1]))) + b"x" * 8
    return draw(st.binary(max_size=24))


class Owner(RemotingServer):
    """Records what the protocol hands over; answers nothing."""

    def __init__(self) -> None:
        super().__init__(Clock())
        self.events: list[tuple[Any, ...]] = []

    def requests_received(self, channel: Any, requests: list[RemotingCommand]) -> None:
        self.events.append(("requests", [_fields(r) for r in requests]))

    def request_refused(self, channel: Any, request: RemotingCommand, remark: str, code: int = 1) -> None:
        self.events.append(("refused", _fields(request), remark))

    def channel_exception(self, channel: Any, error: Exception) -> None:
        self.events.append(("fatal", type(error), str(error)))


def _fields(command: RemotingCommand) -> tuple[Any, ...]:
    return (command.code, command.language, command.version, command.opaque, command.flag, command.remark,
            command.ext_fields, list(command.ext_fields), command.body, int(command.serialize_type))


class Late(RemotingProtocol):
    def _late(self, command: RemotingCommand) -> None:
        self._owner.events.append(("late", _fields(command)))  # type: ignore[attr-defined]


def run(data: bytes, cuts: list[int]) -> tuple[Any, ...]:
    """Feed *data* to a fresh protocol in reads split at *cuts*; what the owner saw and what is left."""
    owner = Owner()
    channel = Late(owner, owner._reactor)
    channel.MAX_LENGTH = LIMIT
    channel.makeConnection(StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", 4000)))
    previous = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        channel.dataReceived(data[previous:cut])
        previous = cut
    return owner.events, channel._unprocessed, channel._broken


class ReadFramesTests(SynchronousTestCase):
    skip = C_SKIP

    def both(self, data: bytes, cuts: list[int]) -> None:
        with_c = run(data, cuts)
        self.patch(protocol, "read_frames", None)
        try:
            self.assertEqual(with_c, run(data, cuts))
        finally:
            protocol.read_frames = C_READ

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(frames(), max_size=8), st.lists(st.integers(0, 400), max_size=4))
    def test_same_events(self, parts: list[bytes], cuts: list[int]) -> None:
        """Random streams of usual, damaged and hostile frames, in random reads: the same events."""
        self.both(b"".join(parts), cuts)

    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(HEADER_KEYS | st.just("serializeTypeCurrentRPC"), HEADER_VALUES, max_size=5),
           st.booleans(), st.sampled_from([None, 0, 1]), st.sampled_from(["", " ", "\n", "\t\r "]),
           st.sampled_from(["", "x", ',"code":5', ',"extFields":null', ',"remark":null', ',"code":1.0']))
    def test_same_command_as_decode_frame(self, fields: dict[str, Any], ascii_only: bool, indent: int | None,
                                          space: str, extra: str) -> None:
        """JSON headers written in every way (escapes, non-ASCII, whitespace, indentation,
        repeated keys, nulls, floats, other keys): a command from the C parser equals the
        Python decoder's, or the frame is left to it."""
        assert C_READ is not None
        text = space + json.dumps(dict(USUAL, **fields), ensure_ascii=ascii_only, indent=indent)
        text = text[:-1] + extra + "}" + space if extra and text.rstrip().endswith("}") else text
        data = frame(text.encode("utf-8", "surrogatepass"), b"body")
        commands, position = C_READ(data, 0, LIMIT)
        try:
            expected: Any = codec.decode_frame(data, 4, len(data))
        except ProtocolError as e:
            expected = e
        if commands:
            self.assertEqual((_fields(commands[0]), position), (_fields(expected), len(data)))
        else:
            self.assertEqual(position, 0)

    def test_plain_frames_in_one_call(self) -> None:
        """The usual requests of a read come back together; the read stops after a response and
        before a frame the Python decoder must see (here msgpack), and at an incomplete frame."""
        assert C_READ is not None
        usual = frame(json.dumps(USUAL).encode(), b"body")
        response = frame(json.dumps(dict(USUAL, flag=1)).encode())
        packed = frame(msgpack.packb(USUAL), b"", SerializeType.MSGPACK)
        data = usual + usual + response + usual + packed + usual
        commands, position = C_READ(data, 0, LIMIT)
        self.assertEqual([c.flag for c in commands], [0, 0, 1])
        self.assertEqual(commands[0], RemotingCommand(310, "JAVA", 401, 7, 0, None, USUAL["extFields"], b"body"))
        self.assertEqual(position, 2 * len(usual) + len(response))
        commands, position = C_READ(data, position, LIMIT)
        self.assertEqual((len(commands), position), (1, 3 * len(usual) + len(response)))
        self.assertEqual(C_READ(data, position, LIMIT), ([], position))
        self.assertEqual(C_READ(usual[:-1], 0, LIMIT), ([], 0))
        self.assertEqual(C_READ(usual, 0, len(usual) - 5), ([], 0))  # over the limit: Python refuses it


class ResponseFramesTests(SynchronousTestCase):
    skip = C_SKIP

    def test_same_bytes(self) -> None:
        """Plain answers become the frames the Python loop writes; anything else is None."""
        assert C_RESPONSES is not None
        run = [RemotingCommand(310, opaque=i) for i in range(3)]
        answers = [r.make_response(0, None, {"msgId": "M", "queueId": "1"}) for r in run]
        for answer in answers:
            answer.opaque, answer.flag = 99, 4
        frames = C_RESPONSES(run, answers)
        self.assertEqual([codec.decode(f[4:]).opaque for f in frames or []], [0, 1, 2])
        self.assertEqual([a.flag for a in answers], [5, 5, 5])
        self.assertEqual(frames, [codec.encode(a) for a in answers])
        oneway = [RemotingCommand(310, flag=2)]
        self.assertIsNone(C_RESPONSES(oneway, [RemotingCommand(0)]))
        self.assertIsNone(C_RESPONSES(run[:1], [None]))
        self.assertIsNone(C_RESPONSES(run[:1], [RemotingCommand(0, remark="\u00e9")]))
        self.assertIsNone(C_RESPONSES([RemotingCommand(310, serialize_type=SerializeType.MSGPACK)], [RemotingCommand(0)]))
        self.assertIsNone(C_RESPONSES(run, answers[:1]))

    def test_frame_errors_are_protocol_errors(self) -> None:
        """What the C encoder refuses, the Python encoder refuses the same way."""
        self.assertRaises(ProtocolError, codec.encode, RemotingCommand(0, serialize_type=7))


class HooklessRunTests(SynchronousTestCase):
    """Runs answered through ``response_frames`` (no RPC hooks) and through the Python loop: the
    same bytes, in one write, every request counted as answered; a bad frame then closes."""

    def replies(self, c: bool, later: bool) -> tuple[bytes, int, int, bool]:
        self.patch(node, "_response_frames", C_RESPONSES if c else None)
        server = RemotingServer(Clock())
        runs = test_batch.RunProcessor()
        server.register_processor(10, runs)
        channel = server.build_channel()
        transport = test_batch.WriteCounter(peerAddress=IPv4Address("TCP", "10.0.0.1", 4000))
        channel.makeConnection(transport)
        request = RemotingCommand(code=10)
        answers = [request.make_response(0, None, {"queueId": "1"}, b"a"), request.make_response(1),
                   request.make_response(0, "done")]
        if later:
            runs.results = Deferred()
        else:
            runs.results = answers
        channel.dataReceived(test_batch.frames((10, 1), (10, 2), (10, 3)) + b"\0\0\0\1x")  # then a bad frame
        if later:
            self.assertFalse(transport.disconnecting)
            runs.results.callback(answers)
        return transport.value(), transport.writes, channel._unanswered, transport.disconnecting

    def test_same_replies(self) -> None:
        for later in (False, True):
            with_c = self.replies(True, later)
            self.assertEqual(with_c, self.replies(False, later))
            self.assertEqual([(c.opaque, c.code) for c in test_batch.read_commands(_Bytes(with_c[0]))],
                             [(1, 0), (2, 1), (3, 0)])
            self.assertEqual(with_c[1:], (1, 0, True))
        self.flushLoggedErrors()


class LoneReplyTests(SynchronousTestCase):
    """A lone request's answer (``RemotingNode.request_received``) through ``response_frames`` and
    through ``_respond``: the same bytes, one write, the request counted as answered; a oneway
    request gets nothing, an answer C leaves alone (non-ASCII remark) goes through Python."""

    skip = C_SKIP

    def reply(self, c: bool, flag: int, remark: str | None) -> tuple[bytes, int, int]:
        self.patch(node, "_response_frames", C_RESPONSES if c else None)
        server = RemotingServer(Clock())
        server.register_processor(10, RecordingProcessor(
            lambda channel, request: request.make_response(0, remark, {"queueId": "1"}, request.body)))
        channel = server.build_channel()
        transport = test_batch.WriteCounter(peerAddress=IPv4Address("TCP", "10.0.0.1", 4000))
        channel.makeConnection(transport)
        channel.dataReceived(codec.encode(RemotingCommand(10, opaque=7, flag=flag, body=b"lone")))
        return transport.value(), transport.writes, channel._unanswered

    def test_same_reply(self) -> None:
        for flag, remark in ((0, None), (0, "done"), (0, "\u00e9"), (2, None)):
            with_c = self.reply(True, flag, remark)
            self.assertEqual(with_c, self.reply(False, flag, remark))
            self.assertEqual(with_c[1:], (0 if flag else 1, 0))
            if not flag:
                [answer] = test_batch.read_commands(_Bytes(with_c[0]))
                self.assertEqual((answer.opaque, answer.flag, answer.remark, answer.body), (7, 1, remark, b"lone"))


class _Bytes(StringTransport):
    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.io.write(data)


class PythonFramingTests(test_protocol.FramingTests):
    """The protocol's framing tests with the Python frame loop and replies."""

    def setUp(self) -> None:
        self.patch(protocol, "read_frames", None)
        self.patch(node, "_response_frames", None)
        super().setUp()


class PythonRunTests(test_batch.RunTests):
    """The runs' tests (one reply per request, in order) with the Python replies."""

    def setUp(self) -> None:
        self.patch(protocol, "read_frames", None)
        self.patch(node, "_response_frames", None)
        super().setUp()
