"""The header of a send request (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE), parsed once.

V2 requests carry one-letter names (``a``…``m``), the others the long names; the C++ client
sends ``"1"`` for booleans. Integer fields follow :func:`rocketpy.common.headers.get_int`'s rules,
each within its Java type (``Integer``, or ``Long`` for ``bornTimestamp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from rocketpy.common import speedups
from rocketpy.common.headers import SEND_V1_NAMES, HeaderError, parse_int
from rocketpy.remoting.command import RemotingCommand

_REQUIRED: Any = object()
#: The one-letter SEND_MESSAGE_V2 keys of the fields read here (:data:`~rocketpy.common.headers.SEND_V2_NAMES`).
_GROUP = SEND_V1_NAMES["producerGroup"]
_TOPIC = SEND_V1_NAMES["topic"]
_DEFAULT_TOPIC = SEND_V1_NAMES["defaultTopic"]
_QUEUE_NUMS = SEND_V1_NAMES["defaultTopicQueueNums"]
_QUEUE_ID = SEND_V1_NAMES["queueId"]
_SYS_FLAG = SEND_V1_NAMES["sysFlag"]
_BORN = SEND_V1_NAMES["bornTimestamp"]
_FLAG = SEND_V1_NAMES["flag"]
_PROPERTIES = SEND_V1_NAMES["properties"]
_RECONSUME = SEND_V1_NAMES["reconsumeTimes"]
_MAX_RECONSUME = SEND_V1_NAMES["maxReconsumeTimes"]
_BATCH = SEND_V1_NAMES["batch"]


@dataclass(slots=True)
class SendHeader:
    """A send request header, whichever of the three codes and name shapes carried it."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool

    @classmethod
    def parse(cls, request: RemotingCommand) -> SendHeader:
        """Read the header; V2 one-letter keys are read first, then the long names.

        :raises HeaderError: naming the missing or unparsable field.
        """
        return _parse_fields(request.ext_fields)


def parse_fields(f: dict[str, str]) -> SendHeader:
    """:meth:`SendHeader.parse` of an ``extFields`` dict: the reference of the C ``send_header``."""
    get = f.get
    # One lookup per field instead of a long-name copy of the dict and twelve generic
    # getters: this runs once per message (about 1.5 µs instead of 4).
    group, topic, default_topic, properties = get(_GROUP), get(_TOPIC), get(_DEFAULT_TOPIC), get(_PROPERTIES)
    if group is None:
        group = get("producerGroup")
    if topic is None:
        topic = get("topic")
    if default_topic is None:
        default_topic = get("defaultTopic")
    if properties is None:
        properties = get("properties", "")
    if group is None:
        raise HeaderError("producerGroup", "is missing")
    if topic is None:
        raise HeaderError("topic", "is missing")
    if default_topic is None:
        raise HeaderError("defaultTopic", "is missing")
    return SendHeader(
        group,
        topic,
        default_topic,
        _int(f, _QUEUE_NUMS, "defaultTopicQueueNums"),
        _int(f, _QUEUE_ID, "queueId"),
        _int(f, _SYS_FLAG, "sysFlag"),
        _int(f, _BORN, "bornTimestamp", bits=64),
        _int(f, _FLAG, "flag"),
        properties,
        _int(f, _RECONSUME, "reconsumeTimes", 0),
        _int(f, _MAX_RECONSUME, "maxReconsumeTimes", None),
        _bool(f, _BATCH, "batch"),
    )


def _raw(fields: dict[str, str], short: str, name: str) -> str | None:
    value = fields.get(short)
    return fields.get(name) if value is None else value


def _int(fields: dict[str, str], short: str, name: str, default: Any = _REQUIRED, bits: int = 32) -> Any:
    """An integer header field under its one-letter or long name (the rules of :func:`get_int`)."""
    value = fields.get(short)
    if value is None:
        value = fields.get(name)
    if not value:
        if default is _REQUIRED:
            raise HeaderError(name, "is missing")
        return default
    if len(value) < 10 and value.isdigit() and value.isascii():  # the common case: small, unsigned
        return int(value)
    return parse_int(name, value, bits)


def _bool(fields: dict[str, str], short: str, name: str) -> bool:
    """``true`` in any case or ``1`` (the rules of :func:`get_bool`)."""
    value = _raw(fields, short, name)
    return value is not None and value.lower() in ("true", "1")


#: The fields' (one-letter, long) keys in :class:`SendHeader`'s order, for the C ``send_header``.
_KEYS = [(SEND_V1_NAMES[name], name) for name in (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "maxReconsumeTimes", "batch")]

#: :func:`parse_fields` or, when built, its C version (rocketpy/_speedups.c ``send_header``), which
#: parses the well-formed header and hands anything else to :func:`parse_fields`.
_parse_fields: Callable[[dict[str, str]], SendHeader] = parse_fields
if speedups.compiled is not None:
    speedups.compiled.set_send_header(SendHeader, parse_fields, _KEYS)
    _parse_fields = speedups.compiled.send_header
