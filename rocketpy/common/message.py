"""Messages as RocketMQ lays them out: properties, stored records, batch bodies, message ids.

Everything here is pure and byte-compatible with Apache RocketMQ 4.x (doc/wire.md
§10).
"""

from __future__ import annotations

import functools
import mmap
import operator
import socket
import struct
import sys
import zlib
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Union

from rocketpy.common import speedups
from rocketpy.common.topic import TOPIC_MAX_LENGTH

MAGIC_CODE = -626843481  # 0xDAA320A7, v1 record
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end-of-file filler
MAX_PROPERTIES_LENGTH = 32767

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class MessageSysFlag:
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


class MessageConst:
    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    CLUSTER = "CLUSTER"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    # request/reply (4.6+)
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    MESSAGE_TYPE = "MSG_TYPE"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    # timer messages (RocketMQ 5)
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"


_POW31 = [pow(31, i, 1 << 32) for i in range(256)]  # grown on demand by _powers
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _powers(n: int) -> list[int]:
    """The power table with at least ``n`` entries; a new list is bound, so threads never see it half-built."""
    global _POW31
    table = _POW31
    if n > len(table):
        table = table + [pow(31, i, 1 << 32) for i in range(len(table), n)]
        _POW31 = table
    return table


def java_hash(text: str) -> int:
    """Java's ``String.hashCode()``: 31-polynomial over UTF-16 code units, signed 32-bit."""
    if text.isascii():
        units: bytes | memoryview = text.encode()
    else:
        units = memoryview(text.encode(_UTF16)).cast("H")
    powers = _POW31 if len(units) <= len(_POW31) else _powers(len(units))
    h = sum(map(operator.mul, reversed(units), powers)) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


_java_hash = java_hash  # the Python functions call each other, not the compiled ones (they are the reference)


def tags_code(tags: str | None) -> int:
    """The consume-queue tag code of a ``TAGS`` value (0 when absent)."""
    return _java_hash(tags) if tags else 0


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """CRC-32 of a body masked to 31 bits, as RocketMQ stores it and checks registration bodies (``UtilAll.crc32``)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def properties_to_string(properties: dict[str, str]) -> str:
    """``k\\x01v\\x02k\\x01v`` with no trailing separator (Java's form)."""
    return PROPERTY_SEPARATOR.join([k + NAME_VALUE_SEPARATOR + v for k, v in properties.items()])


def properties_length_bound(properties: dict[str, str]) -> int:
    """An upper bound (by one) of ``len(properties_to_string(properties))`` without building it."""
    return sum(map(len, properties)) + sum(map(len, properties.values())) + 2 * len(properties)


def string_to_properties(text: str | None) -> dict[str, str]:
    """Parse a properties string; tolerates the trailing separator C++ and ali-ons add."""
    result: dict[str, str] = {}
    if not text:
        return result
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


_string_to_properties, _properties_to_string = string_to_properties, properties_to_string


def _pack_host(host: tuple[str, int]) -> tuple[bytes, int]:
    """4-byte IPv4 address and port; IPv4-mapped IPv6 addresses are folded to IPv4."""
    ip, port = host
    if ip.startswith("::ffff:"):
        ip = ip[7:]
    try:
        return socket.inet_aton(ip), port
    except OSError:
        return socket.inet_aton("127.0.0.1") if ip == "localhost" else b"\0\0\0\0", port


def parse_address(address: str) -> tuple[str, int]:
    """``"ip:port"`` → ``(ip, port)``."""
    ip, _, port = address.rpartition(":")
    return ip, int(port)


def format_address(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def offset_msg_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """The broker's message id: hex of store IP ‖ port ‖ commit-log offset (32 chars)."""
    ip, port = _pack_host(store_host)
    return (ip + struct.pack(">iq", port, commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """``((ip, port), commit_log_offset)`` of an offset message id (32 or 56 hex chars)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) == 16:
        ip = socket.inet_ntoa(raw[:4])
        port, offset = struct.unpack(">iq", raw[4:])
    elif len(raw) == 28:
        ip = socket.inet_ntop(socket.AF_INET6, raw[:16])
        port, offset = struct.unpack(">iq", raw[16:])
    else:
        raise ValueError(f"not an offset message id: {msg_id!r}")
    return (ip, port), offset


@dataclass(slots=True)
class Message:
    """What a producer sends, and what a stored record decodes to."""

    topic: str
    body: bytes = b""
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)


@dataclass(slots=True)
class MessageExt(Message):
    """A message with its store metadata, as put into or read from the commit log."""

    queue_id: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    store_size: int = 0
    body_crc: int = 0

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + commit-log offset)."""
        return offset_msg_id(self.store_host, self.commit_log_offset)


# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTS
_HEAD = struct.Struct(">iiiiiqqiq")
_HOST_V4 = struct.Struct(">4si")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_H16 = struct.Struct(">h")
RECORD_FIXED_SIZE = 91  # IPv4 hosts; + body + topic + properties
# Everything before the body (88 bytes, IPv4 hosts), packed in one call.
_FIXED = struct.Struct(">iiiiiqqiq4siq4siiqi")
_TOPIC_LEN = [bytes((n,)) for n in range(TOPIC_MAX_LENGTH + 1)]


def _pack_host_cached(host: tuple[str, int]) -> tuple[bytes, int]:
    # Broker hosts repeat: the store host always, born hosts per producer connection.
    return _pack_host_lru(tuple(host))


_pack_host_lru = functools.lru_cache(maxsize=4096)(_pack_host)


def encode_record(msg: MessageExt) -> bytearray:
    """Serialise a message into the v1 commit-log layout.

    QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are written as they are in
    ``msg``; a store patches them under its lock with :func:`patch_record`.
    Raises ``ValueError`` for a topic over 127 bytes or properties over 32767 bytes.
    """
    topic = _TOPIC_FIELDS.get(msg.topic)
    if topic is None:
        topic = _topic_field(msg.topic)
    props = _properties_to_string(msg.properties).encode()
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties longer than {MAX_PROPERTIES_LENGTH} bytes")
    body = msg.body
    size = RECORD_FIXED_SIZE - 1 + len(body) + len(topic) + len(props)
    sys_flag = msg.sys_flag & ~(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
    born_ip, born_port = _pack_host_cached(msg.born_host)
    store_ip, store_port = _pack_host_cached(msg.store_host)
    head = _FIXED.pack(
        size, MAGIC_CODE, body_crc(body), msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset,
        sys_flag, msg.born_timestamp, born_ip, born_port, msg.store_timestamp, store_ip, store_port,
        msg.reconsume_times, msg.prepared_transaction_offset, len(body),
    )
    # One allocation: bytearray.join sizes the result once.
    buf = bytearray().join((head, body, topic, _H16.pack(len(props)), props))
    return buf


#: topic → its record field (length byte + UTF-8 bytes); topics repeat on every put.
_TOPIC_FIELDS: dict[str, bytes] = {}


def _topic_field(topic: str) -> bytes:
    data = topic.encode()
    if len(data) > TOPIC_MAX_LENGTH:
        raise ValueError(f"topic longer than {TOPIC_MAX_LENGTH} bytes")
    encoded = _TOPIC_LEN[len(data)] + data
    if len(_TOPIC_FIELDS) >= 4096:
        _TOPIC_FIELDS.clear()
    _TOPIC_FIELDS[topic] = encoded
    return encoded


def patch_record(buf: bytearray, queue_offset: int, commit_log_offset: int, store_timestamp: int) -> None:
    """Write the fields a store assigns under its lock into an encoded record."""
    struct.pack_into(">qq", buf, 20, queue_offset, commit_log_offset)
    _I64.pack_into(buf, 56, store_timestamp)


class RecordError(ValueError):
    """The bytes are not a valid stored record."""


def _read_host(data: bytes | memoryview, pos: int, v6: bool) -> tuple[tuple[str, int], int]:
    if v6:
        ip = socket.inet_ntop(socket.AF_INET6, bytes(data[pos : pos + 16]))
        return (ip, _I32.unpack_from(data, pos + 16)[0]), pos + 20
    raw, port = _HOST_V4.unpack_from(data, pos)
    return (socket.inet_ntoa(raw), port), pos + 8


def decode_record(data: bytes | memoryview, offset: int = 0, check_crc: bool = False) -> MessageExt:
    """Decode one stored record starting at ``offset`` of ``data``.

    Raises :class:`RecordError` for a wrong magic code, a size that does not
    match the fields, a truncated record or (with ``check_crc``) a body CRC mismatch.
    """
    try:
        if not _host_flags(data, offset):  # IPv4 hosts: everything before the body in one call
            (size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port, store_ts,
             store_ip, store_port, reconsume, prepared, body_len) = _FIXED.unpack_from(data, offset)
            born_host, store_host = _host_v4(born_ip, born_port), _host_v4(store_ip, store_port)
            pos = offset + 88
        else:
            size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = _HEAD.unpack_from(data, offset)
            born_host, pos = _read_host(data, offset + 48, bool(sys_flag & MessageSysFlag.BORNHOST_V6))
            store_ts = _I64.unpack_from(data, pos)[0]
            store_host, pos = _read_host(data, pos + 8, bool(sys_flag & MessageSysFlag.STOREHOST_V6))
            reconsume, prepared, body_len = struct.unpack_from(">iqi", data, pos)
            pos += 16
        if magic != MAGIC_CODE:
            raise RecordError(f"bad magic code {magic:#x} at {offset}")
        body = bytes(data[pos : pos + body_len])
        pos += body_len
        topic_len = data[pos]
        topic = bytes(data[pos + 1 : pos + 1 + topic_len]).decode()
        pos += 1 + topic_len
        props_len = _H16.unpack_from(data, pos)[0]
        raw_props = bytes(data[pos + 2 : pos + 2 + props_len])
        if props_len < 0 or len(raw_props) != props_len:
            raise RecordError(f"record at {offset} has {props_len} bytes of properties, {len(raw_props)} present")
        props = raw_props.decode()
        pos += 2 + props_len
    except (struct.error, IndexError, UnicodeDecodeError, OSError) as e:
        raise RecordError(f"unreadable record at {offset}: {e}") from e
    if pos - offset != size or len(body) != body_len:
        raise RecordError(f"record at {offset} declares {size} bytes, fields span {pos - offset}")
    if check_crc and body_crc(body) != crc:
        raise RecordError(f"body CRC mismatch at {offset}")
    # positional: about twice as fast as keywords for the slotted dataclass
    return MessageExt(
        topic, body, flag, _string_to_properties(props), queue_id, sys_flag, born_ts, born_host, store_ts,
        store_host, reconsume, prepared, queue_offset, phys, size, crc,
    )


_decode_record = decode_record


def _host_flags(data: bytes | memoryview, offset: int) -> int:
    """The record's IPv6 host bits of SYSFLAG (a short record raises ``struct.error``)."""
    return int(_I32.unpack_from(data, offset + 36)[0]) & _HOSTS_V6


@functools.lru_cache(maxsize=4096)
def _host_v4(raw: bytes, port: int) -> tuple[str, int]:
    # Hosts repeat: the broker's own, and one per producer connection.
    return socket.inet_ntoa(raw), port


def record_properties(data: bytes | memoryview) -> dict[str, str]:
    """The properties of the stored record at the start of ``data``, without decoding the rest.

    :raises RecordError: when the record is truncated or its properties are not UTF-8.
    """
    try:
        sys_flag = _I32.unpack_from(data, 36)[0]
        pos = 48 + (20 if sys_flag & MessageSysFlag.BORNHOST_V6 else 8) + 8
        pos += (20 if sys_flag & MessageSysFlag.STOREHOST_V6 else 8) + 12
        pos += 4 + _I32.unpack_from(data, pos)[0]
        pos += 1 + data[pos]
        props_len = _H16.unpack_from(data, pos)[0]
        return string_to_properties(bytes(data[pos + 2 : pos + 2 + props_len]).decode())
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise RecordError(f"unreadable record properties: {e}") from e


_I32X3 = struct.Struct(">iii")
Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]
_HOSTS_V6 = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6


def check_record(data: Buffer, offset: int, limit: int, check_crc: bool = False) -> int:
    """Validate the stored record at ``offset`` without decoding it (recovery's fast walk).

    Checks the magic code, that the declared size matches the body, topic and properties
    lengths and stays within ``limit``, and (with ``check_crc``) the body CRC.

    :returns: the record size; 0 for a blank (end-of-file) filler; -1 for anything invalid.
    """
    if offset + 12 > limit:
        return 0 if offset + 8 <= limit and _I32.unpack_from(data, offset + 4)[0] == BLANK_MAGIC_CODE else -1
    size, magic, crc = _I32X3.unpack_from(data, offset)
    if magic != MAGIC_CODE:
        return 0 if magic == BLANK_MAGIC_CODE else -1
    end = offset + size
    if size < RECORD_FIXED_SIZE or end > limit:
        return -1
    flags = _I32.unpack_from(data, offset + 36)[0] & _HOSTS_V6
    body = offset + 88 + (12 if flags & MessageSysFlag.BORNHOST_V6 else 0) + (12 if flags & MessageSysFlag.STOREHOST_V6 else 0)
    body_len = _I32.unpack_from(data, body - 4)[0]
    topic = body + body_len
    if body_len < 0 or topic + 3 > end:
        return -1
    props = topic + 1 + data[topic]
    if props + 2 > end or props + 2 + _H16.unpack_from(data, props)[0] != end:
        return -1
    if check_crc and body_crc(data[body:topic]) != crc:
        return -1
    return size


def decode_records(data: bytes | memoryview, extra: dict[str, str] | None = None) -> list[MessageExt]:
    """Decode back-to-back stored records (a PULL_MESSAGE body), ``extra``'s items added to each
    one's properties."""
    out = []
    pos = 0
    while pos < len(data):
        msg = _decode_record(data, pos)
        if extra:
            msg.properties.update(extra)
        out.append(msg)
        pos += msg.store_size
    return out


def encode_batch(messages: list[Message]) -> bytes:
    """The SEND_BATCH_MESSAGE body: per message size, magic 0, crc 0, flag, body, properties."""
    parts: list[bytes] = []
    pack_head, pack_short = _BATCH_HEAD.pack, _H16.pack
    for m in messages:
        props = _properties_to_string(m.properties).encode()
        body = m.body
        parts += (pack_head(22 + len(body) + len(props), 0, 0, m.flag, len(body)), body, pack_short(len(props)), props)
    return b"".join(parts)


_BATCH_HEAD = struct.Struct(">iiiii")


def batch_entries(data: bytes) -> list[tuple[int, bytes, str]]:
    """A batch body's entries as ``(flag, body, properties text)``; raises :class:`RecordError` if malformed."""
    out = []
    pos, end = 0, len(data)
    unpack_head, unpack_short = _BATCH_HEAD.unpack_from, _H16.unpack_from
    try:
        while pos < end:
            size, _magic, _crc, flag, body_len = unpack_head(data, pos)
            body_end = pos + 20 + body_len
            body = data[pos + 20 : body_end]
            props_len = unpack_short(data, body_end)[0]
            start = body_end + 2
            # props_len < 0 would make size 0 (an endless loop) or step back
            if size != 22 + body_len + props_len or len(body) != body_len or not 0 <= props_len <= end - start:
                raise RecordError(f"batch entry at {pos} is inconsistent")
            out.append((flag, body, data[start : start + props_len].decode()))
            pos += size
    except (struct.error, UnicodeDecodeError) as e:
        raise RecordError(f"malformed batch body at {pos}: {e}") from e
    return out


def decode_batch(data: bytes, topic: str) -> list[Message]:
    """Split a batch body into messages of ``topic``; raises :class:`RecordError` if malformed."""
    return [Message(topic, body, flag, string_to_properties(props)) for flag, body, props in batch_entries(data)]


class Implementation(NamedTuple):
    """One implementation of this module's hot pure functions (the tests run each)."""

    name: str
    java_hash: Callable[[str], int]
    tags_code: Callable[[str | None], int]
    string_to_properties: Callable[[str | None], dict[str, str]]
    properties_to_string: Callable[[dict[str, str]], str]
    batch_entries: Callable[[bytes], list[tuple[int, bytes, str]]]
    encode_batch: Callable[[list[Message]], bytes]
    encode_record: Callable[[MessageExt], bytearray]
    patch_record: Callable[[bytearray, int, int, int], None]
    decode_record: Callable[..., MessageExt]
    decode_records: Callable[..., list[MessageExt]]


#: The Python reference: the fallback of the compiled functions on unusual input and errors.
PYTHON = Implementation("Python", java_hash, tags_code, string_to_properties, properties_to_string, batch_entries,
                        encode_batch, encode_record, patch_record, decode_record, decode_records)
#: ``rocketpy._speedups`` when built (and ROCKETPY_NO_SPEEDUPS is unset), else None.
COMPILED: Implementation | None = None

if speedups.compiled is not None:
    _c = speedups.compiled
    _c.setup(record_error=RecordError, message_ext=MessageExt,
             **{name: f for name, f in PYTHON._asdict().items() if name != "name"})
    COMPILED = Implementation("C", _c.java_hash, _c.tags_code, _c.string_to_properties, _c.properties_to_string,
                              _c.batch_entries, _c.encode_batch, _c.encode_record, _c.patch_record, _c.decode_record,
                              _c.decode_records)
    java_hash, tags_code, decode_record, decode_records = _c.java_hash, _c.tags_code, _c.decode_record, _c.decode_records
    string_to_properties, properties_to_string = _c.string_to_properties, _c.properties_to_string
    batch_entries, encode_record, patch_record = _c.batch_entries, _c.encode_record, _c.patch_record
    encode_batch = _c.encode_batch
