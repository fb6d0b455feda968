"""Reading and writing the custom header (``extFields``) of remoting commands.

Codecs already turn every value into a string; these helpers parse them per
field type and raise one :class:`HeaderError` naming the field, which
processors turn into a SYSTEM_ERROR response.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rocketpy.common.errors import RequestError

_MISSING = object()
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SHORT = 9  # digits that fit a Java int (and so a long)


class HeaderError(RequestError):
    """A required header field is missing or does not parse."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"header field '{name}' {problem}")
        self.field_name = name


def get_str(fields: Mapping[str, str], name: str, default: object = _MISSING) -> str:
    """A string field; required unless ``default`` is given."""
    value = fields.get(name)
    if value is None:
        if default is _MISSING:
            raise HeaderError(name, "is missing")
        return default  # type: ignore[return-value]
    return value


def get_int(fields: Mapping[str, str], name: str, default: object = _MISSING, bits: int = 64) -> int:
    """An integer field; required unless ``default`` is given.

    :param bits: the field's Java type: 64 for a ``Long``, 32 for an ``Integer``; a value out of
        its range is refused here, as Java's ``parseLong``/``parseInt`` refuse it.
    """
    value = fields.get(name)
    if value is None or value == "":
        if default is _MISSING:
            raise HeaderError(name, "is missing")
        return default  # type: ignore[return-value]
    return parse_int(name, value, bits)


def parse_int(name: str, value: str, bits: int = 64) -> int:
    """``value`` of header field ``name`` as a signed integer of ``bits`` bits (:class:`HeaderError` if not)."""
    if len(value) <= _SHORT and value.isascii() and value.isdigit():  # the usual case: fits every Java type
        return int(value)
    if not _INTEGER.fullmatch(value):  # what Java's parseLong accepts, no "1_000" or spaces
        raise HeaderError(name, f"is not a number: {value[:32]!r}")
    limit = 1 << (bits - 1)
    if len(value) > 20 or not -limit <= int(value) < limit:  # 20 characters hold every 64-bit value
        raise HeaderError(name, f"is out of range of a {bits}-bit integer: {value[:32]!r}")
    return int(value)


def get_bool(fields: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean field: ``true`` in any case and ``1`` (the C++ client's form) are true."""
    value = fields.get(name)
    if value is None or value == "":
        return default
    return value.lower() in ("true", "1")


def to_fields(**values: object) -> dict[str, str]:
    """Build an ``extFields`` dict: every value as a string, booleans as ``true``/``false``, None left out."""
    out = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        else:
            out[name] = str(value)
    return out


#: SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE one-letter keys → SEND_MESSAGE names.
SEND_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
SEND_V1_NAMES = {v: k for k, v in SEND_V2_NAMES.items()}


def expand_send_v2(fields: Mapping[str, str]) -> dict[str, str]:
    """The long-name view of a SEND_MESSAGE_V2 header (unknown keys are kept as they are)."""
    return {SEND_V2_NAMES.get(k, k): v for k, v in fields.items()}


def compact_send_v1(fields: Mapping[str, str]) -> dict[str, str]:
    """The one-letter SEND_MESSAGE_V2 form of a long-name send header."""
    return {SEND_V1_NAMES.get(k, k): v for k, v in fields.items()}
