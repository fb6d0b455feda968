"""Tests for rocketpy.remoting.codec: JSON, ROCKETMQ binary and msgpack headers."""

from __future__ import annotations

import json
import struct
from typing import Any

import msgpack  # type: ignore[import-untyped]
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting.codec import (
    MAX_FRAME_LENGTH,
    _header_map,
    _json_encode,
    _json_header,
    decode,
    encode,
    string_fields,
)
from rocketpy.remoting.codes import RESPONSE_FLAG, ResponseCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import MalformedRequestError, ProtocolError

# A SEND_MESSAGE_V2 request produced by Java 4.9.4 (doc/wire.md §1),
# with the elided properties ("i") filled in with U+0001/U+0002 separators.
SPEC_V2_HEADER = (
    b'{"code":310,"extFields":{"a":"PG","b":"T","c":"TBW102","d":"4","e":"1","f":"0","g":"1700000000000",'
    b'"h":"0","i":"UNIQ_KEY\\u0001AC1100010000\\u0002WAIT\\u0001true\\u0002","j":"0","k":"false","m":"false"},'
    b'"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":401}'
)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """A frame without its length prefix, as stringReceived gets it."""
    return struct.pack(">I", (serialize_type << 24) | len(header)) + header + body


def round_trip(command: RemotingCommand) -> RemotingCommand:
    data = encode(command)
    (length,) = struct.unpack(">i", data[:4])
    assert length == len(data) - 4
    return decode(data[4:])


class JSONCodecTests(SynchronousTestCase):
    def test_spec_example_round_trips_byte_for_byte(self) -> None:
        """A Java 4.9.4 request header decodes to strings and re-encodes to the same bytes."""
        command = decode(frame(SPEC_V2_HEADER, b"payload"))
        self.assertEqual(
            (command.code, command.language, command.opaque, command.flag, command.version),
            (310, "JAVA", 7, 0, 401),
        )
        self.assertEqual(command.ext_fields["i"], "UNIQ_KEY\x01AC1100010000\x02WAIT\x01true\x02")
        self.assertEqual(command.body, b"payload")
        self.assertEqual(encode(command), struct.pack(">iI", 4 + len(SPEC_V2_HEADER) + 7, len(SPEC_V2_HEADER))
                         + SPEC_V2_HEADER + b"payload")

    def test_headers_the_fast_parser_refuses_still_decode(self) -> None:
        """Raw control characters and jsoncpp's trailing newline are accepted."""
        raw = b'{"code":310,"extFields":{"i":"KEYS\x01k\x02","r":"x"},"opaque":3}\n'
        command = decode(frame(raw))
        self.assertEqual(command.ext_fields, {"i": "KEYS\x01k\x02", "r": "x"})
        self.assertEqual((command.code, command.opaque), (310, 3))
        with self.assertRaises(ProtocolError):
            decode(frame(b'{"code":310} x'))

    def test_text_that_is_not_utf8_is_a_malformed_request(self) -> None:
        """A lone surrogate or a non-UTF-8 byte in a whole frame's header names its field and its request
        (JSON, msgpack and ROCKETMQ binary), so the request can be answered."""
        cases = [
            (frame(b'{"code":310,"extFields":{"i":"ok","topic":"\\ud800x"},"opaque":3}'), "'topic'"),
            (frame(b'{"code":310,"remark":"\xff","opaque":3}'), "'remark'"),
            (frame(b'{"code":"x","opaque":3}'), "header integers invalid"),
            (frame(msgpack.packb({"code": 310, "opaque": 3, "extFields": {"topic": "TT"}}).replace(b"\xa2TT",
                   b"\xa2\xff\xfe"), serialize_type=2), "'topic'"),
        ]
        for data, named in cases:
            with self.assertRaises(MalformedRequestError) as raised:
                decode(data)
            self.assertIn(named, str(raised.exception))
            self.assertEqual((raised.exception.command.opaque, raised.exception.command.flag), (3, 0))
        binary = encode(RemotingCommand(code=310, opaque=3, ext_fields={"topic": "\xe9"}, serialize_type=1))
        with self.assertRaises(MalformedRequestError) as raised:
            decode(binary[4:].replace("\xe9".encode(), b"\xff\xff"))
        self.assertIn("'topic'", str(raised.exception))
        with self.assertRaises(ProtocolError):  # no opaque to answer: not a MalformedRequestError
            try:
                decode(frame(b'["not an object"]'))
            except MalformedRequestError:
                self.fail("a header that is not an object names no request")

    def test_response_header_is_the_recommended_shape(self) -> None:
        """A response header is Java's: sorted keys, string extFields, remark only when set."""
        request = decode(frame(SPEC_V2_HEADER))
        response = request.make_response(0, ext_fields={"msgId": "AB", "queueId": 3})  # type: ignore[dict-item]
        self.assertEqual(
            encode(response)[8:],
            b'{"code":0,"extFields":{"msgId":"AB","queueId":"3"},"flag":1,"language":"JAVA","opaque":7,'
            b'"serializeTypeCurrentRPC":"JSON","version":401}',
        )
        failed = request.make_response(1, remark="boom")
        self.assertEqual(
            encode(failed)[8:],
            b'{"code":1,"flag":1,"language":"JAVA","opaque":7,"remark":"boom",'
            b'"serializeTypeCurrentRPC":"JSON","version":401}',
        )

    def test_cpp_mixed_type_ext_fields_become_strings(self) -> None:
        """Numbers, JSON booleans and nulls from C++/ali-ons clients decode to Java's strings."""
        header = json.dumps({
            "code": 11, "flag": 0, "language": "CPP", "opaque": 0, "remark": "", "version": 63,
            "extFields": {"queueId": 3, "sysFlag": 0, "queueOffset": "12", "unitMode": False, "k": True,
                          "bornTimestamp": 1700000000000, "ratio": 1.5, "whole": 2.0, "gone": None},
        }).encode()
        command = decode(frame(header))
        self.assertEqual(command.ext_fields, {
            "queueId": "3", "sysFlag": "0", "queueOffset": "12", "unitMode": "false", "k": "true",
            "bornTimestamp": "1700000000000", "ratio": "1.5", "whole": "2",
        })
        self.assertEqual((command.language, command.remark), ("CPP", ""))

    def test_ext_fields_are_encoded_as_strings(self) -> None:
        """Whatever a processor put in ext_fields, the wire carries only strings (CPP needs them)."""
        fields: Any = {"n": 5, "b": True, "f": False, "none": None}
        command = RemotingCommand(code=0, ext_fields=fields)
        header = json.loads(encode(command)[8:])
        self.assertEqual(header["extFields"], {"n": "5", "b": "true", "f": "false"})

    def test_language_as_number_or_unknown_name(self) -> None:
        """A numeric language maps to its name (unknown numbers to OTHER); unknown names are kept."""
        self.assertEqual(decode(frame(b'{"code":1,"language":1}')).language, "CPP")
        self.assertEqual(decode(frame(b'{"code":1,"language":99}')).language, "OTHER")
        self.assertEqual(decode(frame(b'{"code":1,"language":"KOTLIN"}')).language, "KOTLIN")

    def test_absent_fields_take_defaults(self) -> None:
        """Only ``code`` is required: ali-ons omits remark, extFields may be absent."""
        command = decode(frame(b'{"code":34}'))
        self.assertEqual((command.opaque, command.flag, command.remark, command.ext_fields), (0, 0, None, {}))

    def test_direct_header_equals_generic_encoder(self) -> None:
        """The JSON header (orjson) is byte-identical to the json module's compact output."""
        commands = [
            RemotingCommand(code=0),
            RemotingCommand(code=310, opaque=-1, flag=3, remark='q"uo\\te\x01', language="CPP",
                            ext_fields={"k\u00e9y": "v\n\x02", "n": 5, "b": False}),  # type: ignore[dict-item]
            RemotingCommand(code=ResponseCode.SUCCESS, remark=""),  # an IntEnum
            RemotingCommand(code=1, remark="\x7f\u2028\x00\x1f\t\b\f\r", ext_fields={"e": "\U0001f600"}),
        ]
        for command in commands:
            self.assertEqual(_json_header(command), _json_encode(_header_map(command, "JSON")).encode("utf-8"))
        # a lone surrogate has no UTF-8 form: '?' as Java's getBytes(UTF_8), so the reply still goes
        for serialize_type in (0, 1, 2):
            reply = decode(encode(RemotingCommand(code=1, remark="a\ud800", ext_fields={"k": "\udc80"},
                                                  serialize_type=serialize_type))[4:])
            self.assertEqual((reply.remark, reply.ext_fields), ("a?", {"k": "?"}))

    def test_negative_opaque_and_unicode_round_trip(self) -> None:
        """Negative opaques (Java's counter wraps) and non-ASCII text survive JSON."""
        command = RemotingCommand(code=10, opaque=-(2**31), remark="é", ext_fields={"topic": "主题"}, body=b"\x00")
        self.assertEqual(round_trip(command), command)


class BinaryAndMsgpackCodecTests(SynchronousTestCase):
    def test_binary_layout(self) -> None:
        """The ROCKETMQ header is §1.3: fixed fields, remark, then the extFields block."""
        command = RemotingCommand(code=310, language="JAVA", version=401, opaque=7, flag=RESPONSE_FLAG,
                                  remark="ok", ext_fields={"a": "PG"}, body=b"xy",
                                  serialize_type=SerializeType.ROCKETMQ)
        data = encode(command)
        expected_header = (struct.pack(">hBhii", 310, 0, 401, 7, 1) + struct.pack(">i", 2) + b"ok"
                           + struct.pack(">i", 2 + 1 + 4 + 2) + struct.pack(">h", 1) + b"a"
                           + struct.pack(">i", 2) + b"PG")
        self.assertEqual(len(expected_header), 21 + 2 + 9)
        self.assertEqual(data, struct.pack(">iI", 4 + len(expected_header) + 2, (1 << 24) | len(expected_header))
                         + expected_header + b"xy")

    def test_binary_round_trip(self) -> None:
        """Every field survives the binary codec; an empty remark is read back as None."""
        for remark in ("remark é", None):
            command = RemotingCommand(code=11, language="CPP", version=63, opaque=-5, flag=2, remark=remark,
                                      ext_fields={"k": "v", "empty": "", "ключ": "значение"}, body=b"body",
                                      serialize_type=SerializeType.ROCKETMQ)
            self.assertEqual(round_trip(command), command)

    def test_msgpack_round_trip(self) -> None:
        """The msgpack header carries the same fields; mixed ext values become strings."""
        command = RemotingCommand(code=310, opaque=2**31 - 1, remark=None, ext_fields={"a": "1", "b": "x"},
                                  body=b"z" * 10, serialize_type=SerializeType.MSGPACK)
        self.assertEqual(round_trip(command), command)
        header = msgpack.packb({"code": 1, "language": "GO", "extFields": {"n": 7, "t": True}})
        decoded = decode(frame(header, serialize_type=2))
        self.assertEqual((decoded.language, decoded.ext_fields), ("GO", {"n": "7", "t": "true"}))

    def test_serialize_type_in_high_byte(self) -> None:
        """The header-info word holds the type in its high byte and the length in the low 24 bits."""
        for serialize_type in SerializeType:
            data = encode(RemotingCommand(code=1, serialize_type=serialize_type))
            (info,) = struct.unpack(">I", data[4:8])
            self.assertEqual((info >> 24, info & 0xFFFFFF), (serialize_type, len(data) - 8))


class MalformedInputTests(SynchronousTestCase):
    def test_malformed_frames_raise_protocol_error(self) -> None:
        """Every kind of malformed frame raises ProtocolError, nothing else."""
        binary_fixed = struct.pack(">hBhii", 1, 0, 1, 1, 0)
        bad = {
            "empty": b"",
            "short": b"\x00\x00",
            "header overruns frame": struct.pack(">I", 100) + b"{}",
            "not json": frame(b"{nope"),
            "not utf-8": frame(b'{"code":1,"remark":"\xff"}'),
            "json array": frame(b"[1]"),
            "no code": frame(b'{"opaque":1}'),
            "string code": frame(b'{"code":"1"}'),
            "boolean flag": frame(b'{"code":1,"flag":true}'),
            "opaque too big": frame(b'{"code":1,"opaque":2147483648}'),
            "ext not object": frame(b'{"code":1,"extFields":[1]}'),
            "ext nested": frame(b'{"code":1,"extFields":{"a":{"b":1}}}'),
            "remark number": frame(b'{"code":1,"remark":5}'),
            "language list": frame(b'{"code":1,"language":[]}'),
            "unknown type": frame(b"{}", serialize_type=5),
            "binary truncated": frame(binary_fixed[:5], serialize_type=1),
            "binary remark overrun": frame(binary_fixed + struct.pack(">i", 50), serialize_type=1),
            "binary negative length": frame(binary_fixed + struct.pack(">i", -1), serialize_type=1),
            "binary trailing": frame(binary_fixed + struct.pack(">ii", 0, 0) + b"x", serialize_type=1),
            "binary entry overrun": frame(binary_fixed + struct.pack(">iih", 0, 2, 9), serialize_type=1),
            "msgpack garbage": frame(b"\xc1", serialize_type=2),
            "msgpack not map": frame(msgpack.packb([1]), serialize_type=2),
        }
        for name, data in bad.items():
            with self.subTest(name):
                self.assertRaises(ProtocolError, decode, data)

    def test_encode_rejects_what_it_cannot_send(self) -> None:
        """Unknown serialize types, unencodable values and frames over 16 MiB raise ProtocolError."""
        self.assertRaises(ProtocolError, encode, RemotingCommand(code=1, serialize_type=7))
        nested: Any = {"a": [1]}
        self.assertRaises(ProtocolError, encode, RemotingCommand(code=1, ext_fields=nested))
        self.assertRaises(ProtocolError, encode, RemotingCommand(code=1, remark=object()))  # type: ignore[arg-type]
        self.assertRaises(ProtocolError, encode, RemotingCommand(code=1, body=b"x" * MAX_FRAME_LENGTH))

    def test_string_fields_keeps_an_all_string_map(self) -> None:
        """The common case costs no copy: an all-string map is returned as is."""
        fields = {"a": "1"}
        self.assertIs(string_fields(fields), fields)
