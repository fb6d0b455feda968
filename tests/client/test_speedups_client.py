"""The client's part of the C accelerator (rocketpy/_speedups_client.h) against its Python
reference: send requests, whose properties hold \\x01 and \\x02, encode to the same frame in C
(``json_frame`` with ``\\u00XX`` escapes) as through orjson (``codec._json_header``)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import autobatch
from rocketpy.client.api import send_header
from rocketpy.common.message import Message
from rocketpy.remoting import codec
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

from .test_autobatch import BODIES, LIMITS, PROPERTIES, TOPICS, valid_names

C_FRAME = codec._json_frame
NAMES = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "WAIT", "a\x1fb", "é"]) | st.text(max_size=6)
VALUES = st.sampled_from(["k", "TagA", "C00002022E87C0D51D4147B76000107C", "\x00\x1f", "\t\n", 'q"', "\\", "\x7f",
                          "\ud800", "ü"]) | st.text(max_size=10)


def request(properties: dict[str, str], body: bytes = b"x") -> RemotingCommand:
    fields = send_header("PG", Message("T", body, 0, properties), 3, 0, 1_700_000_000_000, 4)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


class SendRequestFrameTests(SynchronousTestCase):
    skip = None if C_FRAME is not None else "no compiled accelerator (rocketpy.remoting.codec._json_frame is None)"

    def python(self, command: RemotingCommand) -> bytes:
        self.patch(codec, "_json_frame", None)
        try:
            return codec.encode(command)
        finally:
            codec._json_frame = C_FRAME

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(NAMES, VALUES, max_size=5), st.binary(max_size=8))
    def test_same_frame(self, properties: dict[str, str], body: bytes) -> None:
        """Random properties, control characters, quotes and non-ASCII text included: the same bytes."""
        command = request(properties, body)
        self.assertEqual(codec.encode(command), self.python(command))

    def test_send_request_in_c(self) -> None:
        """A usual send request is encoded in C; one whose properties need other escapes is left to Python."""
        assert C_FRAME is not None
        command = request({"KEYS": "k", "TAGS": "TagA", "UNIQ_KEY": "C00002022E87C0D51D4147B76000107C"})
        frame = C_FRAME(command)
        self.assertEqual(frame, self.python(command))
        assert frame is not None
        self.assertIn(b'"KEYS\\u0001k\\u0002TAGS\\u0001TagA', frame)
        self.assertIsNone(C_FRAME(request({"KEYS": "a\nb"})))
        self.assertIsNone(C_FRAME(request({"KEYS": "ü"})))


class PlainEntrySizeTests(SynchronousTestCase):
    skip = None if autobatch.plain_entry_size is not autobatch.PYTHON_PLAIN_ENTRY_SIZE else "no compiled accelerator"

    @settings(max_examples=200, deadline=None)
    @given(TOPICS, BODIES, PROPERTIES)
    def test_same_answer(self, topic: str, body: bytes, properties: dict[str, str]) -> None:
        msg = Message(topic, body, 0, properties)
        valid = valid_names(topic)
        self.assertEqual(autobatch.plain_entry_size(msg, valid, *LIMITS),
                         autobatch.PYTHON_PLAIN_ENTRY_SIZE(msg, valid, *LIMITS))

    def test_unusual_input(self) -> None:
        """Not bytes, properties not all str: -1; bad arguments raise as Python would."""
        for msg in (Message("T", bytearray(b"x")),  # type: ignore[arg-type]
                    Message("T", b"x", 0, {"K": 1}),  # type: ignore[dict-item]
                    Message("T", b"x", 0, {1: "v"})):  # type: ignore[dict-item]
            self.assertEqual(autobatch.plain_entry_size(msg, {"T"}, *LIMITS), -1)
        self.assertRaises(TypeError, autobatch.plain_entry_size, Message("T", b"x"), None, *LIMITS)
        self.assertRaises(TypeError, autobatch.plain_entry_size, Message("T", b"x"), {"T"}, "40", 30, 60)
        self.assertRaises(AttributeError, autobatch.plain_entry_size, object(), {"T"}, *LIMITS)
