"""The codec's C functions against its Python code: ``encode`` of JSON commands (``json_frame``,
byte-identical frames) and decoded headers to commands (``command_from_map``); for anything but
the usual shapes they answer None and the Python code answers, errors included."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting import codec
from rocketpy.remoting.codes import SerializeType
from rocketpy.remoting.command import RemotingCommand
from tests.remoting import test_codec

C_FRAME = codec._json_frame
C_FROM_MAP = codec._command_from_map
C_SKIP = None if C_FRAME is not None else "no compiled accelerator (rocketpy.remoting.codec._json_frame is None)"

INT = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1, 401, 2**31, 2**63, -(2**63) - 1, True])
TEXT = st.sampled_from(["", "JAVA", "ok", 'say "hi"', "back\\slash", "\x01\x02", "\x7f", "\u00e9", "\ud800",
                        "\U0001F600", "a b"]) | st.text(max_size=8)
VALUE = TEXT | st.sampled_from([None, 1, True, 2.5, [1]])
FIELDS: Any = st.dictionaries(TEXT, TEXT, max_size=5) | st.dictionaries(TEXT, VALUE, max_size=3) | st.sampled_from(
    [None, [1]])


def outcome(command: RemotingCommand) -> tuple[Any, ...]:
    try:
        return "ok", codec.encode(command)
    except Exception as e:  # both implementations must raise the same
        return "raised", type(e), str(e)


class JSONFrameTests(SynchronousTestCase):
    skip = C_SKIP

    def python(self, command: RemotingCommand) -> tuple[Any, ...]:
        self.patch(codec, "_json_frame", None)
        try:
            return outcome(command)
        finally:
            codec._json_frame = C_FRAME

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(INT, TEXT, INT, INT, st.none() | TEXT, FIELDS, INT, st.binary(max_size=16))
    def test_same_frame(self, code: int, language: str, opaque: int, flag: int, remark: str | None,
                        fields: dict[str, str], version: int, body: bytes) -> None:
        """Random commands, hostile values included: the same frame or the same error."""
        command = RemotingCommand(code, language, version, opaque, flag, remark, fields, body)
        self.assertEqual(outcome(command), self.python(command))

    def test_long_texts(self) -> None:
        """Texts longer than a word (the C scan takes eight characters a step), with each character that
        needs an escape at every position, in the remark, a name and a value: the same frame."""
        for length in (7, 8, 9, 16, 23, 40):
            for position in range(length):
                for char in ("\x00", "\x01", "\x1f", "\n", '"', "\\", "\x7f", "\u00e9", " ", "~"):
                    text = "a" * position + char + "b" * (length - position - 1)
                    command = RemotingCommand(0, "JAVA", 1, 2, 1, text, {text: text, "msgId": ",".join([text] * 3)},
                                              b"")
                    self.assertEqual(outcome(command), self.python(command), repr(text))

    def test_plain_response_in_c(self) -> None:
        """A send response is encoded by the C function; a non-ASCII remark is left to Python."""
        assert C_FRAME is not None
        response = RemotingCommand.request(310, {"a": "b"}).make_response(0, None, {"msgId": "X", "queueId": "1"})
        frame = C_FRAME(response)
        self.assertEqual(frame, self.python(response)[1])
        self.assertIsNone(C_FRAME(RemotingCommand(1, remark="\u00e9")))
        self.assertIsNone(C_FRAME(RemotingCommand(1, body=bytearray(b"x"))))  # type: ignore[arg-type]


class CommandFromMapTests(SynchronousTestCase):
    skip = C_SKIP

    def decoded(self, header: Any, c: bool) -> tuple[Any, ...]:
        self.patch(codec, "_command_from_map", C_FROM_MAP if c else None)
        try:
            return "ok", codec._request(header, b"body", SerializeType.JSON)
        except Exception as e:  # both implementations must raise the same
            return "raised", type(e), str(e)
        finally:
            codec._command_from_map = C_FROM_MAP

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(st.sampled_from(["code", "version", "opaque", "flag", "language", "remark", "extFields",
                                            "serializeTypeCurrentRPC"]) | TEXT, INT | VALUE | FIELDS, max_size=9),
           st.booleans())
    def test_same_command_or_error(self, fields: dict[str, Any], base: bool) -> None:
        """Random header maps, over a usual one or alone: the same command or the same error."""
        header = dict(USUAL, **fields) if base else fields
        self.assertEqual(self.decoded(header, True), self.decoded(header, False))

    def test_usual_header_in_c(self) -> None:
        """A usual request header becomes a command in C; a numeric language is left to Python."""
        assert C_FROM_MAP is not None
        command = C_FROM_MAP(dict(USUAL), b"x", SerializeType.JSON)
        self.assertEqual(command, RemotingCommand(310, "JAVA", 401, 7, 0, None, {"a": "PG"}, b"x"))
        self.assertIsNone(C_FROM_MAP(dict(USUAL, language=0), b"x", SerializeType.JSON))
        self.assertIsNone(C_FROM_MAP(dict(USUAL, opaque=2**31), b"x", SerializeType.JSON))


USUAL = {"code": 310, "extFields": {"a": "PG"}, "flag": 0, "language": "JAVA", "opaque": 7, "version": 401}


class PythonJSONCodecTests(test_codec.JSONCodecTests):
    """The JSON codec's tests with the Python code (JSONCodecTests use the active one)."""

    def setUp(self) -> None:
        self.patch(codec, "_json_frame", None)
        self.patch(codec, "_command_from_map", None)


class PythonMalformedInputTests(test_codec.MalformedInputTests):
    def setUp(self) -> None:
        self.patch(codec, "_json_frame", None)
        self.patch(codec, "_command_from_map", None)
