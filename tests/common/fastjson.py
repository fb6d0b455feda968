"""A reader for fastjson output in tests: standard JSON plus maps whose keys are objects."""

from __future__ import annotations

import json
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


def fastjson_loads(text: str | bytes) -> Any:
    """Parse ``text``; an object used as a map key becomes a tuple of its sorted ``(key, value)`` items.

    :raises ValueError: for text that is neither JSON nor fastjson's object-keyed form.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    value, end = _value(text, 0)
    if text[_skip(text, end):]:
        raise ValueError(f"extra data at {end}")
    return value


def mq_key(topic: str, broker_name: str, queue_id: int) -> tuple[tuple[str, Any], ...]:
    """The key :func:`fastjson_loads` gives a ``MessageQueue`` object key."""
    return (("brokerName", broker_name), ("queueId", queue_id), ("topic", topic))


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _expect(text: str, i: int, chars: str) -> int:
    i = _skip(text, i)
    if i >= len(text) or text[i] not in chars:
        raise ValueError(f"expected one of {chars!r} at {i}")
    return i


def _value(text: str, i: int) -> tuple[Any, int]:
    i = _skip(text, i)
    if text.startswith("{", i):
        return _object(text, i + 1)
    if text.startswith("[", i):
        return _array(text, i + 1)
    return _DECODER.raw_decode(text, i)


def _object(text: str, i: int) -> tuple[dict[Any, Any], int]:
    result: dict[Any, Any] = {}
    if text.startswith("}", _skip(text, i)):
        return result, _skip(text, i) + 1
    while True:
        key, i = _value(text, i)
        if isinstance(key, dict):
            key = tuple(sorted(key.items()))
        i = _expect(text, i, ":")
        result[key], i = _value(text, i + 1)
        i = _expect(text, i, ",}")
        if text[i] == "}":
            return result, i + 1
        i += 1


def _array(text: str, i: int) -> tuple[list[Any], int]:
    result: list[Any] = []
    if text.startswith("]", _skip(text, i)):
        return result, _skip(text, i) + 1
    while True:
        item, i = _value(text, i)
        result.append(item)
        i = _expect(text, i, ",]")
        if text[i] == "]":
            return result, i + 1
        i += 1
