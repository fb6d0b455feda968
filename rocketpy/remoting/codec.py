"""Bytes <-> :class:`RemotingCommand`: pure functions, no Twisted import.

Frame layout (doc/wire.md §1)::

    int32 length (= 4 + headerLen + bodyLen) | int32 (serializeType << 24 | headerLen) | header | body

:func:`encode` returns the **whole frame, length prefix included**, ready for
``transport.write``; :func:`decode` takes the frame **without** its length
prefix, which is what ``Int32StringReceiver.stringReceived`` hands over.

Serialize types: JSON (0), ROCKETMQ binary (1) and MSGPACK (2, a rocketpy
extension whose header is a msgpack map with the JSON header's keys).
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import struct
from typing import Any, Callable

import msgpack  # type: ignore[import-untyped]
import orjson

from rocketpy.common import speedups
from rocketpy.remoting.codes import ROCKETPY_VERSION, LanguageCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import MalformedRequestError, ProtocolError

__all__ = ["MAX_FRAME_LENGTH", "MalformedRequestError", "ProtocolError", "decode", "decode_frame", "encode", "plain_frame",
           "read_frames"]

#: Largest value of the length field (16 MiB), as Java's ``frameMaxLength``.
MAX_FRAME_LENGTH = 16 * 1024 * 1024

_PREFIX = struct.Struct(">iI")  # length, header info
_HEADER_INFO_FROM = struct.Struct(">I").unpack_from
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_LANGUAGE_CODES = {lang.name: lang.value for lang in LanguageCode}
_LANGUAGE_NAMES = {lang.value: lang.name for lang in LanguageCode}
_OTHER = LanguageCode.OTHER
_JSON, _MSGPACK, _ROCKETMQ = SerializeType.JSON, SerializeType.MSGPACK, SerializeType.ROCKETMQ



def _unencodable(value: object) -> None:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _make_json_encoder() -> Callable[[object], str]:
    """A compact JSON encoder built once: ``json.dumps`` rebuilds its C encoder per call."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (e.g. PyPy)
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    chunks = make(None, _unencodable, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    return lambda obj: "".join(chunks(obj, 0))


_json_encode = _make_json_encoder()
# strict=False: accept raw control characters (U+0001/U+0002 in properties) as well as escaped ones.
_json_decoder = json.JSONDecoder(strict=False)
_json_scan = json.scanner.make_scanner(_json_decoder)  # type: ignore[arg-type]
_orjson_loads, _orjson_dumps = orjson.loads, orjson.dumps
#: :func:`encode` of a JSON command with a plain header, in C (rocketpy/_speedups.c ``json_frame``;
#: None when not built). It answers None for anything else, which the Python code below encodes.
_json_frame: Callable[[RemotingCommand], bytes | None] | None = (
    speedups.compiled.json_frame if speedups.compiled is not None else None)
#: For callers that skip :func:`encode`'s call when they can: the whole frame of a JSON command in
#: C, or None (then, or when it answers None, :func:`encode` does the rest).
plain_frame = _json_frame
#: :func:`_from_map` of a header whose fields have their usual types, in C (``command_from_map``;
#: None when not built). It answers None for anything else, which :func:`_from_map` checks.
_command_from_map: Callable[[Any, bytes, int], RemotingCommand | None] | None = None
#: The whole frames of ``data`` from ``position`` on, decoded in one C call (``read_frames``; None
#: when not built): ``(commands, position)``, up to the first frame that is incomplete, over
#: ``limit`` or not the plain case (JSON that orjson reads, fields of the usual types), which
#: :func:`decode_frame` then decodes; a response ends the list.
read_frames: Callable[[bytes, int, int], tuple[list[RemotingCommand], int]] | None = None
if speedups.compiled is not None:
    speedups.compiled.set_command_type(RemotingCommand)
    speedups.compiled.set_remoting(_orjson_loads, _JSON, ROCKETPY_VERSION)
    _command_from_map = speedups.compiled.command_from_map
    read_frames = speedups.compiled.read_frames


def _parse_lenient_json(raw: bytes) -> Any:
    """One JSON value from bytes orjson refused: the stdlib's lenient parser, which accepts raw
    control characters (U+0001/U+0002 in properties), lone surrogates and NaN. Bytes that are not
    UTF-8 become lone surrogates too (``surrogateescape``), so :func:`_check_text` names their field.
    """
    text = raw.decode("utf-8", "surrogateescape")
    try:
        value, end = _json_scan(text, 0)
    except StopIteration:  # leading whitespace or invalid: let the decoder tell which
        return _json_decoder.decode(text)
    if end != len(text) and text[end:].strip():  # jsoncpp ends its header with a newline
        raise ProtocolError(f"trailing data after the JSON header at {end}")
    return value


def encode(cmd: RemotingCommand) -> bytes:
    """Encode *cmd* as a complete frame, length prefix included.

    ``ext_fields`` values go out as strings: numbers become decimal text,
    booleans ``"true"``/``"false"``, ``None`` values are left out.

    :raises ProtocolError: unknown serialize type, unencodable field, or a frame
        larger than :data:`MAX_FRAME_LENGTH`.
    """
    serialize_type = cmd.serialize_type
    if serialize_type == 0 and _json_frame is not None:  # the plain case in one C call
        frame = _json_frame(cmd)
        if frame is not None:
            return frame
    try:
        if serialize_type == 0:
            header = _json_header(cmd)
        elif serialize_type == 2:
            header = _msgpack_header(cmd)
        elif serialize_type == 1:
            header = _encode_binary(cmd)
        else:
            raise ProtocolError(f"unknown serialize type {serialize_type!r}")
    except ProtocolError:
        raise
    except Exception as e:
        raise ProtocolError(f"cannot encode command: {e}") from e
    body = cmd.body
    header_length = len(header)
    length = 4 + header_length + len(body)
    if length > MAX_FRAME_LENGTH or header_length > 0xFFFFFF:
        raise ProtocolError(f"frame of {length} bytes is too large")
    return b"".join((_PREFIX.pack(length, (serialize_type << 24) | header_length), header, body))


def decode(frame: bytes) -> RemotingCommand:
    """Decode one frame, given without its 4-byte length prefix.

    :raises ProtocolError: for any malformed input.
    """
    return decode_frame(frame, 0, len(frame))


def decode_frame(data: bytes, start: int, end: int) -> RemotingCommand:
    """Decode the frame at ``data[start:end]`` (no length prefix) without slicing it out first.

    :raises ProtocolError: for any malformed input.
    """
    try:
        if end - start < 4:
            raise ProtocolError(f"frame of {end - start} bytes has no header length")
        (info,) = _HEADER_INFO_FROM(data, start)
        header_end = start + 4 + (info & 0xFFFFFF)
        if header_end > end:
            raise ProtocolError(f"header length {info & 0xFFFFFF} exceeds frame of {end - start} bytes")
        serialize_type = info >> 24
        raw, body = data[start + 4 : header_end], data[header_end:end]
        if serialize_type == 0:
            try:
                header = _orjson_loads(raw)
            except orjson.JSONDecodeError:
                return _checked(_parse_lenient_json(raw), body, _JSON)
            return _request(header, body, _JSON)
        if serialize_type == 2:
            try:
                header = msgpack.unpackb(raw, raw=False)
            except UnicodeDecodeError:
                return _checked(msgpack.unpackb(raw, raw=False, unicode_errors="surrogateescape"), body, _MSGPACK)
            return _request(header, body, _MSGPACK)
        if serialize_type == 1:
            try:
                return _decode_binary(raw, body, "strict")
            except UnicodeDecodeError:
                return _check_text(_decode_binary(raw, body, "surrogateescape"))
        raise ProtocolError(f"unknown serialize type {serialize_type}")
    except ProtocolError:
        raise
    except Exception as e:
        raise ProtocolError(f"malformed frame: {e!r}") from e


def _request(header: Any, body: bytes, serialize_type: SerializeType) -> RemotingCommand:
    """:func:`_from_map`; a header that names its request (int ``opaque`` and ``flag``) but is
    otherwise invalid raises :class:`MalformedRequestError`, so that request can be answered."""
    if _command_from_map is not None:  # the usual header in one C call
        command = _command_from_map(header, body, serialize_type)
        if command is not None:
            return command
    try:
        return _from_map(header, body, serialize_type)
    except ProtocolError as e:
        if type(header) is not dict:
            raise
        code, opaque, flag = header.get("code"), header.get("opaque", 0), header.get("flag", 0)
        if not (type(opaque) is int and _INT32_MIN <= opaque <= _INT32_MAX and type(flag) is int):
            raise
        stub = RemotingCommand(code if type(code) is int else 0, _OTHER.name, 0, opaque, flag, None, {}, b"",
                               serialize_type)
        raise MalformedRequestError(stub, str(e)) from None


def _checked(header: Any, body: bytes, serialize_type: SerializeType) -> RemotingCommand:
    """:func:`_request` for a header read leniently: its text is checked too."""
    return _check_text(_request(header, body, serialize_type))


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_text(command: RemotingCommand) -> RemotingCommand:
    """*command*, unless a header string cannot be UTF-8 (a lone surrogate, or bytes that were not
    UTF-8): then :class:`MalformedRequestError` naming the field."""
    bad = None
    if command.remark is not None and _not_utf8(command.remark):
        bad = "header 'remark'"
    for key, value in command.ext_fields.items():
        if bad is None and (_not_utf8(key) or _not_utf8(value)):
            bad = f"header field {key.encode('utf-8', 'replace').decode()!r}"
    if bad is None:
        return command
    stub = RemotingCommand(command.code, command.language, command.version, command.opaque, command.flag, None, {},
                           b"", command.serialize_type)
    raise MalformedRequestError(stub, f"{bad} is not valid UTF-8 text (a lone surrogate or a non-UTF-8 byte)")


def _msgpack_header(cmd: RemotingCommand) -> bytes:
    header = _header_map(cmd, None)
    try:
        return msgpack.packb(header)
    except UnicodeEncodeError:  # a lone surrogate: '?' as in Java's getBytes(UTF_8)
        return msgpack.packb(header, unicode_errors="replace")


def string_fields(fields: Any) -> dict[str, str]:
    """*fields* with every value as text, the way Java's ``HashMap<String,String>`` holds them.

    Numbers become decimal text, booleans ``"true"``/``"false"``, ``None`` is dropped.

    :raises ProtocolError: *fields* is not a map of strings to scalars.
    """
    if type(fields) is not dict:
        raise ProtocolError(f"extFields is not an object: {fields!r}")
    for value in fields.values():
        if type(value) is not str:
            break
    else:
        return fields  # the usual case: already all strings
    out: dict[str, str] = {}
    for key, value in fields.items():
        if type(key) is not str:
            raise ProtocolError(f"extFields key is not a string: {key!r}")
        if value is None:
            continue
        kind = type(value)
        if kind is str:
            out[key] = value
        elif kind is bool:
            out[key] = "true" if value else "false"
        elif kind is int:
            out[key] = str(value)
        elif kind is float:
            out[key] = str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
        else:
            raise ProtocolError(f"extFields value of {key!r} is not a scalar: {value!r}")
    return out


def _json_header(cmd: RemotingCommand) -> bytes:
    """Java's JSON header in UTF-8: orjson (≈ 0.8 µs, half the stdlib's time); the stdlib's
    encoder for what orjson refuses, such as a lone surrogate, which becomes ``?`` as in Java's
    ``String.getBytes(UTF_8)`` (so every reply can be sent).

    Byte-identical to the stdlib's compact ``ensure_ascii=False`` output.
    """
    header = _header_map(cmd, "JSON")
    try:
        return _orjson_dumps(header)
    except orjson.JSONEncodeError:
        return _json_encode(header).encode("utf-8", "replace")


def _header_map(cmd: RemotingCommand, rpc_type: str | None) -> dict[str, Any]:
    """The JSON/msgpack header, keys in Java's (alphabetical) order."""
    header: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = string_fields(cmd.ext_fields)
    header["flag"] = cmd.flag
    header["language"] = cmd.language
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if rpc_type is not None:
        header["serializeTypeCurrentRPC"] = rpc_type
    header["version"] = cmd.version
    return header


def _from_map(header: Any, body: bytes, serialize_type: SerializeType) -> RemotingCommand:
    if type(header) is not dict:
        raise ProtocolError("header is not an object")
    get = header.get
    code, version, opaque, flag = get("code"), get("version", 0), get("opaque", 0), get("flag", 0)
    if not (type(code) is int and type(version) is int and type(opaque) is int and type(flag) is int):
        raise ProtocolError(f"header integers invalid: code={code!r} version={version!r} opaque={opaque!r} "
                            f"flag={flag!r}")
    if not _INT32_MIN <= opaque <= _INT32_MAX:
        raise ProtocolError(f"opaque {opaque} is not a 32-bit integer")
    language = get("language", "JAVA")
    if type(language) is not str:
        if type(language) is not int:
            raise ProtocolError(f"header 'language' is invalid: {language!r}")
        language = _LANGUAGE_NAMES.get(language, _OTHER.name)
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        raise ProtocolError(f"header 'remark' is not a string: {remark!r}")
    ext = get("extFields")
    # positional: twice as fast as keywords for the slotted dataclass
    return RemotingCommand(code, language, version, opaque, flag, remark,
                           {} if ext is None else string_fields(ext), body, serialize_type)


def _encode_binary(cmd: RemotingCommand) -> bytes:
    parts = [
        _BINARY_FIXED.pack(
            cmd.code, _LANGUAGE_CODES.get(cmd.language, _OTHER.value), cmd.version, cmd.opaque, cmd.flag
        )
    ]
    remark = cmd.remark.encode("utf-8", "replace") if cmd.remark else b""
    parts += (_INT32.pack(len(remark)), remark)
    entries: list[bytes] = []
    for key, value in string_fields(cmd.ext_fields).items():
        k, v = key.encode("utf-8", "replace"), value.encode("utf-8", "replace")
        entries += (_INT16.pack(len(k)), k, _INT32.pack(len(v)), v)
    block = b"".join(entries)
    parts += (_INT32.pack(len(block)), block)
    return b"".join(parts)


def _take(header: bytes, offset: int, size: int) -> tuple[bytes, int]:
    end = offset + size
    if size < 0 or end > len(header):
        raise ProtocolError(f"binary header field of {size} bytes overruns the header")
    return header[offset:end], end


def _decode_binary(header: bytes, body: bytes, errors: str) -> RemotingCommand:
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header)
    offset = _BINARY_FIXED.size
    (remark_length,) = _INT32.unpack_from(header, offset)
    remark, offset = _take(header, offset + 4, remark_length)
    (block_length,) = _INT32.unpack_from(header, offset)
    block, offset = _take(header, offset + 4, block_length)
    if offset != len(header):
        raise ProtocolError("trailing bytes after the binary header")
    ext: dict[str, str] = {}
    position = 0
    while position < len(block):
        (key_length,) = _INT16.unpack_from(block, position)
        key, position = _take(block, position + 2, key_length)
        (value_length,) = _INT32.unpack_from(block, position)
        value, position = _take(block, position + 4, value_length)
        ext[key.decode("utf-8", errors)] = value.decode("utf-8", errors)
    remark_text = remark.decode("utf-8", errors) if remark_length else None
    return RemotingCommand(code, _LANGUAGE_NAMES.get(language, _OTHER.name), version, opaque, flag, remark_text,
                           ext, body, _ROCKETMQ)
